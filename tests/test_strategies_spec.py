"""spec-echo: long greedy decodes of prompts that repeat a motif, together, sharing a head; offered
and aimed at only where the server speculates (its switches or its profile)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from servefuzz.campaign.choose import shape_of
from servefuzz.engines.spec import Feature
from servefuzz.goals import AIMED_AT
from servefuzz.server_facts import TargetInfo
from servefuzz.strategies import DEFAULT_MIX, STRATEGIES, SpecEcho, TargetShape, offered, shape_aims
from servefuzz.strategies.speculative import MOTIF_LENGTHS
from servefuzz.workload import TokenIds

SPECULATIVE = TargetShape(page_size=32, context_length=2048, vocab=range(3, 2048), speculative=True, seeded_sampling=True)


def _period(tail: TokenIds) -> int:
    """The shortest period `tail` repeats with (its length where none)."""
    return next(p for p in range(1, len(tail) + 1) if all(tail[i] == tail[i - p] for i in range(p, len(tail))))


@given(seed=st.integers(0, 2**31 - 1))
@settings(max_examples=80, deadline=None)
def test_it_sends_long_greedy_decodes_of_repeated_motifs_together_behind_one_shared_repeated_head(seed: int) -> None:
    s = SpecEcho().generate(random.Random(seed), SPECULATIVE, seed=seed)
    head = s.meta["head"]
    assert all(r.prefix_name == "s0" and r.prefix_len == head for r in s.requests)
    first = s.requests[0].prompt_ids[:head]
    assert _period(first) == s.meta["head_motif"] in MOTIF_LENGTHS, "the head is one motif, repeated"
    greedy = [r for r in s.requests if r.temperature == 0]
    together = [r for r in greedy if r.offset_ms < 30]
    assert len(together) >= 3, "several decode at once"
    assert all(r.max_tokens >= 160 for r in together), "long decodes: most tokens are drafted"
    for r in greedy:
        assert r.prompt_ids[:head] == first
        tail = r.prompt_ids[head:]
        # The tail is its own motif said at least four times over: the text lookup finds again.
        assert _period(tail) in MOTIF_LENGTHS and len(tail) >= 4 * _period(tail), (r.id, tail)
    # Sampled requests, where any, are short: their drafts are rejected, and must stay few.
    assert all(r.max_tokens <= 48 and r.seed is not None for r in s.requests if r.temperature > 0)


def test_over_many_seeds_it_mixes_in_copies_forks_late_joiners_and_seeded_draws() -> None:
    seen = {"copy": 0, "fork": 0, "late": 0, "seeded": 0, "stream": 0}
    for seed in range(60):
        s = SpecEcho().generate(random.Random(seed), SPECULATIVE, seed=seed)
        prompts = [r.prompt_ids for r in s.requests]
        seen["copy"] += len(prompts) > len(set(prompts))
        seen["fork"] += any(r.n == 2 and r.temperature == 0 for r in s.requests)
        seen["late"] += max(r.offset_ms for r in s.requests) >= 150
        seen["seeded"] += any(r.temperature > 0 for r in s.requests)
        seen["stream"] += any(r.stream for r in s.requests)
    assert all(v >= 10 for v in seen.values()), seen
    # No seeded draw where the engine promises none: it would prove nothing there.
    plain = TargetShape(speculative=True)
    assert not any(r.temperature > 0 for seed in range(40) for r in SpecEcho().generate(random.Random(seed), plain, seed=seed).requests)


def test_it_is_offered_aimed_at_and_pursued_only_where_the_server_speculates() -> None:
    assert "spec-echo" in STRATEGIES and "spec-echo" in DEFAULT_MIX
    assert SpecEcho.needs == frozenset({"speculative"})
    assert [s.name for s in offered([SpecEcho()], TargetShape())] == []
    assert [s.name for s in offered([SpecEcho()], SPECULATIVE)] == ["spec-echo"]
    assert shape_aims(SPECULATIVE)[0] == "spec-echo" and "spec-echo" not in shape_aims(TargetShape())
    assert AIMED_AT[Feature.SPECULATIVE][0] == "spec-echo"
    # What the campaign reads: a profile aiming at speculation, or a switch of the server's args.
    ngram = TargetInfo("vllm", "http://127.0.0.1:1", profile="spec-ngram", device="cpu")
    assert shape_of(ngram).speculative and not shape_of(TargetInfo("vllm", "http://127.0.0.1:1", device="cpu")).speculative
    sglang = TargetInfo("sglang", "http://127.0.0.1:1", server_args={"speculative_algorithm": "NGRAM"})
    assert shape_of(sglang).speculative
    assert not shape_of(TargetInfo("sglang", "http://127.0.0.1:1", server_args={"speculative_algorithm": None})).speculative
