"""Scenarios and token-level prompts: the properties page-boundary fuzzing depends on."""

from __future__ import annotations

import hashlib
import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servefuzz.terms import common_prefix
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario, TextSource


@given(seed=st.integers(0, 2**31), page=st.sampled_from([16, 32, 64]), k=st.integers(2, 8))
def test_requests_sharing_a_prefix_share_exactly_prefix_len_tokens(seed: int, page: int, k: int) -> None:
    b = PromptBuilder(seed, range(3, 1024))
    prompts = [b.prompt("p0", page, page + 1 + i) for i in range(k)]
    for i, a in enumerate(prompts):
        for c in prompts[i + 1 :]:
            assert a[:page] == c[:page]
            assert a[page] != c[page], "suffixes must diverge right at the prefix boundary"


def test_a_prefix_one_past_the_page_keeps_the_named_prefix_continuation_out() -> None:
    b = PromptBuilder(1, range(3, 40))
    full = b.prefix_tokens("p0", 65)
    for _ in range(20):
        assert b.prompt("p0", 64, 80)[64] != full[64]


def test_prompts_are_reproducible_from_the_seed() -> None:
    def make() -> list[tuple[int, ...]]:
        return [PromptBuilder(9, range(3, 500)).prompt("p", 10, 30) for _ in range(1)]

    assert make() == make()


def test_scenario_round_trips_through_json_and_sorts_by_offset() -> None:
    b = PromptBuilder(3, range(3, 100))
    s = Scenario(
        seed=3,
        requests=(
            RequestSpec("r02", 45.0, b.prompt("p", 4, 9), 8, "p", 4, n=2),
            RequestSpec("r01", 0.0, b.prompt(None, 0, 5), 8, cancel_after_ms=12.5),
        ),
        meta={"strategy": "x"},
    )
    assert [r.id for r in s.requests] == ["r01", "r02"]
    back = Scenario.from_json(json.loads(json.dumps(s.to_json())))
    assert back == s and back.meta == {"strategy": "x"}
    assert back.by_id()["r02"].suffix_len == 5


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"n": 0}, "n must be"),
        ({"offset_ms": -1.0}, "offset_ms"),
        ({"prefix_len": 3}, "prefix_name"),
        ({"prompt_ids": ()}, "at least one token"),
    ],
)
def test_bad_request_specs_are_refused(kw: dict, message: str) -> None:
    base = {"id": "r", "offset_ms": 0.0, "prompt_ids": (5, 6, 7), "max_tokens": 4}
    with pytest.raises(ValueError, match=message):
        RequestSpec(**{**base, **kw})


def test_unknown_request_fields_in_json_are_refused() -> None:
    d = RequestSpec("r", 0.0, (5,), 1).to_json() | {"top_p": 0.7}
    with pytest.raises(ValueError, match="unknown request fields"):
        RequestSpec.from_json(d)


def test_duplicate_request_ids_are_refused() -> None:
    r = RequestSpec("r", 0.0, (5,), 1)
    with pytest.raises(ValueError, match="unique"):
        Scenario(0, (r, r))


def test_sampling_fields_round_trip_and_greedy_specs_keep_their_old_shape() -> None:
    seeded = RequestSpec("r", 0.0, (5, 6), 4, n=3, temperature=0.8, seed=1234)
    d = seeded.to_json()
    assert (d["temperature"], d["seed"]) == (0.8, 1234)
    assert RequestSpec.from_json(json.loads(json.dumps(d))) == seeded
    assert seeded.seeded and seeded.sampled
    # A greedy spec is written as before the fields existed, and such a file still loads.
    greedy = RequestSpec("g", 0.0, (5,), 1).to_json()
    assert "temperature" not in greedy and "seed" not in greedy
    assert RequestSpec.from_json(greedy) == RequestSpec("g", 0.0, (5,), 1)
    unseeded = RequestSpec("u", 0.0, (5,), 1, temperature=1)
    assert unseeded.sampled and not unseeded.seeded and "seed" not in unseeded.to_json()
    sc = Scenario(0, (seeded, unseeded, RequestSpec("g", 0.0, (5,), 1)))
    assert (sc.seeded, sc.unseeded) == (frozenset({"r"}), frozenset({"u"}))


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": float("inf")}, "temperature"),
        ({"temperature": 11.0}, "temperature"),
        ({"temperature": 1.0, "seed": -1}, "seed"),
        ({"temperature": 1.0, "seed": 2**31}, "seed"),
    ],
)
def test_sampling_fields_are_range_checked(kw: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RequestSpec("r", 0.0, (5,), 1, **kw)  # type: ignore[arg-type]


def test_a_choice_constraint_round_trips_and_an_unconstrained_spec_keeps_its_old_shape() -> None:
    bound = RequestSpec("c", 0.0, (5, 6), 8, ignore_eos=False, choices=(" w5 w7", "yes"))
    d = bound.to_json()
    assert d["choices"] == [" w5 w7", "yes"]
    assert RequestSpec.from_json(json.loads(json.dumps(d))) == bound
    assert Scenario(0, (bound, RequestSpec("f", 1.0, (5,), 1))).constrained == {"c": (" w5 w7", "yes")}
    assert "choices" not in RequestSpec("f", 0.0, (5,), 1).to_json()


def test_a_cut_in_the_prefill_round_trips_and_a_clock_cut_keeps_its_old_shape() -> None:
    cut = RequestSpec("v", 0.0, (5,) * 300, 8, stream=True, cancel_after_ms=40.0, cancel_at_prefill=128)
    d = cut.to_json()
    assert d["cancel_at_prefill"] == 128
    assert RequestSpec.from_json(json.loads(json.dumps(d))) == cut
    assert cut.answer_key == RequestSpec("w", 0.0, (5,) * 300, 8, stream=True).answer_key  # alone it is uncut
    assert "cancel_at_prefill" not in RequestSpec("v", 0.0, (5,), 1, stream=True, cancel_after_ms=40.0).to_json()
    with pytest.raises(ValueError, match="cancel_at_prefill must be >= 1"):
        RequestSpec("v", 0.0, (5,) * 3, 8, stream=True, cancel_after_ms=40.0, cancel_at_prefill=0)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"choices": ()}, "1..16 distinct"),
        ({"choices": tuple(f"c{i}" for i in range(17))}, "1..16 distinct"),
        ({"choices": ("a", "a")}, "1..16 distinct"),
        ({"choices": ('say "x"',)}, "letters, digits or spaces"),
        ({"choices": ("a\nb",)}, "letters, digits or spaces"),
        ({"choices": ("x" * 65,)}, "letters, digits or spaces"),
        ({"choices": ("",)}, "letters, digits or spaces"),
        ({"choices": ("ok",), "ignore_eos": True}, "ignore_eos False"),
    ],
)
def test_bad_choice_constraints_are_refused(kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RequestSpec("c", 0.0, (5,), 4, **({"ignore_eos": False} | kw))


def test_choices_in_json_must_be_a_list() -> None:
    d = RequestSpec("c", 0.0, (5,), 4, ignore_eos=False, choices=("ab",)).to_json() | {"choices": "ab"}
    with pytest.raises(ValueError, match="list of strings"):
        RequestSpec.from_json(d)


def _text() -> TextSource:
    """A text with repeated words, as natural text has (each word a token of ids 100..139)."""
    rng = random.Random(5)
    return TextSource(tokens=tuple(100 + min(int(rng.expovariate(0.15)), 39) for _ in range(3000)), tail=(7, 8, 9))


@pytest.mark.parametrize("text", [None, _text()], ids=["random", "natural"])
def test_prompts_sharing_a_prefix_share_exactly_it(text: TextSource | None) -> None:
    """Requests of one named prefix share exactly `prefix_len` tokens; with text (whose words
    repeat, where random ids of a large vocabulary do not) every other two share none."""
    b = PromptBuilder(seed=3, vocab=range(100, 140), text=text)
    shapes = [(name, pl, pl + extra) for name in ("a", "b", "c") for pl in (0, 16, 32) for extra in (0, 1, 5, 40)]
    prompts = [(name if pl else None, pl, b.prompt(name if pl else None, pl, n)) for name, pl, n in shapes if n]
    for i, (na, pa, a) in enumerate(prompts):
        for nb, pb, c in prompts[i + 1:]:
            if na is not None and na == nb:
                assert common_prefix(a, c) == min(pa, pb), (a, c)
            elif text is not None:
                assert common_prefix(a, c) == 0, (na, nb, a, c)


def test_natural_prompts_are_runs_of_the_text_ended_by_the_chat_tail() -> None:
    text = _text()
    b = PromptBuilder(seed=3, vocab=range(100, 140), text=text)
    p = b.prompt(None, 0, 50)
    assert p[-3:] == text.tail
    body = p[:-3]
    start = next(i for i in range(len(text.tokens)) if text.run(i, len(body)) == body)
    assert text.run(start, len(body)) == body
    assert b.prompt(None, 0, 3)[-3:] != text.tail  # no room for text before the tail: text alone


def test_random_prompts_are_what_they_were_before_text() -> None:
    """The random models' prompts are byte for byte what the builder made before it knew text
    (the digest was taken with main at be17f79), so their campaigns do not change."""
    b = PromptBuilder(seed=9, vocab=range(3, 1000))
    ps = [b.prompt("p", 8, 20) for _ in range(3)] + [b.prompt(None, 0, 12) for _ in range(3)] + [b.prompt("q", 30, 31)]
    assert hashlib.sha256(repr(ps).encode()).hexdigest()[:16] == "4ab446ce1f768b48"
