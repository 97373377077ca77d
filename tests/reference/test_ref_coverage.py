"""Engine coverage (`--coverage`, GET /coverage): the reference engine's own edges in the context
of the requests in flight at each step, request by request, over real HTTP on 127.0.0.1; and the
tracer itself, in-process."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import numpy as np
import pytest
from refclient import Answer, burst, flush, generate_body, get, post, wrong_answers

from servefuzz.reference.model import TinyModel
from servefuzz.reference.tracer import CONTEXT_BITS, EDGE_BITS, REQUEST_FEATURES, Tracer, describe

PROMPT = [int(t) for t in np.random.default_rng(21).integers(3, 1024, 150)]


def points(url: str) -> dict[int, int]:
    status, text = get(url, "/coverage")
    assert status == 200, text
    return {int(p): n for p, n in json.loads(text)["points"].items()}


def reached(url: str, send: Callable[[], object]) -> dict[int, int]:
    """The points `send` moved, and by how many hits, on a flushed server."""
    flush(url)
    before = points(url)
    send()
    after = points(url)
    return {p: n - before.get(p, 0) for p, n in after.items() if n > before.get(p, 0)}


def context(point: int) -> int:
    return point & ((1 << CONTEXT_BITS) - 1)


def names(url: str) -> dict[int, str]:
    """What each step context the engine entered holds (`tracer.describe`), from /coverage."""
    status, text = get(url, "/coverage")
    assert status == 200, text
    return {int(k): v for k, v in json.loads(text)["contexts"].items()}


def contexts(url: str, delta: dict[int, int]) -> set[str]:
    table = names(url)
    return {table[context(p)] for p in delta}


def held(described: str) -> set[str]:
    """Every feature of a described step context, step's and requests' alike: what one bit per
    feature in flight (the run context's kind of key) would have kept of it."""
    step, _, reqs = described.partition("|")
    return {f for part in [step, *reqs.split(";")] for f in part.replace(",", "+").split("+") if f not in ("", "-")}


@pytest.fixture(scope="module")
def url(reference_server: Callable[..., str]) -> str:
    return reference_server("--coverage")


def test_without_the_flag_there_is_no_coverage(reference_server: Callable[..., str]) -> None:
    status, text = get(reference_server(), "/coverage")
    assert status == 404 and "--coverage" in text


def test_a_request_moves_the_map_and_its_answer_stays_exact(url: str, model: TinyModel) -> None:
    answers: list[Answer] = []
    delta = reached(url, lambda: answers.extend(burst(url, [("a", 0, generate_body(PROMPT, 6))])))
    assert wrong_answers(model, answers) == {}
    assert len(delta) > 50  # scheduler, pool, radix and sampler lines of one request
    assert all(0 <= p < 1 << (EDGE_BITS + CONTEXT_BITS) for p in delta)
    assert contexts(url, delta) == {"|-"}  # one greedy request alone: no feature in flight


def test_an_idle_engine_counts_nothing(url: str) -> None:
    """Flushes, idle steps and reads of the map count nothing: deltas are the requests' own."""
    post(url, "/generate", generate_body(PROMPT, 2))
    before = points(url)
    flush(url)
    flush(url)
    assert points(url) == before


def test_n_over_1_reaches_points_in_its_own_context_and_n_1_does_not(url: str) -> None:
    one = reached(url, lambda: post(url, "/generate", generate_body(PROMPT, 6, n=1)))
    two = reached(url, lambda: post(url, "/generate", generate_body(PROMPT, 6, n=2)))
    assert not any("n" in held(c) for c in contexts(url, one))
    assert "|n" in contexts(url, two)
    # The same edges run under the n context are new points: context-sensitive coverage.
    edges_one = {p >> CONTEXT_BITS for p in one}
    assert any(p >> CONTEXT_BITS in edges_one for p in two if p not in one)


def test_a_burst_is_in_the_multi_context_and_a_cached_prefix_in_the_hit_one(url: str) -> None:
    both = reached(url, lambda: burst(url, [("a", 0, generate_body(PROMPT, 4)),
                                            ("b", 0, generate_body(PROMPT[:140] + [7, 8, 9], 4))]))
    assert any(c.startswith("multi|") for c in contexts(url, both))
    again = reached(url, lambda: (post(url, "/generate", generate_body(PROMPT, 2)),
                                  post(url, "/generate", generate_body(PROMPT, 2))))
    assert "|hit" in contexts(url, again)  # the second request hit the first one's pages


def test_points_mean_the_same_in_another_process(reference_server: Callable[..., str]) -> None:
    """A campaign's restarted server numbers the points as its first one did (no hash seed).
    Two fresh processes of the same engine (a flag at its default keeps them apart): a fresh
    engine runs a few first-time lines a flushed one does not, so both start fresh."""
    first, second = (reference_server("--coverage", *flags) for flags in (("--model-seed", "0"), ("--page-size", "64")))

    def send(u: str) -> Callable[[], object]:
        return lambda: post(u, "/generate", generate_body(PROMPT, 3))

    assert set(reached(first, send(first))) == set(reached(second, send(second)))


def test_the_tracer_follows_only_its_files_and_only_in_a_context() -> None:
    def traced() -> int:
        total = 0
        for i in range(3):
            total += i
        return total

    tracer = Tracer([__file__])
    outside = Tracer(["/nowhere.py"])

    def run(t: Tracer, ctx: int | None) -> None:
        t.install()
        t.context = ctx
        traced()

    for t, ctx in ((tracer, None), (outside, 0)):
        th = threading.Thread(target=run, args=(t, ctx))
        th.start()
        th.join()
        assert t.counts == {}
    key = tracer.enter(frozenset(), frozenset({frozenset({"seed", "chunk"})}))
    th = threading.Thread(target=run, args=(tracer, key))
    th.start()
    th.join()
    assert tracer.counts and {tracer.names()[context(p)] for p in tracer.counts} == {"|chunk+seed"}
    assert max(tracer.counts.values()) >= 3  # the loop's back edge, once per turn
    assert set(REQUEST_FEATURES) >= {"n", "seed", "adapter", "choice", "salt", "chunk", "hit", "retracted"}


# Two requests on prompts that share no page (no cache hit), long enough to be in flight together.
_OTHER = [int(t) for t in np.random.default_rng(22).integers(3, 1024, 150)]


def _mix(url: str, forked_seeded: bool) -> dict[int, int]:
    """Two requests at once holding n > 1 and a seed between them: both in the forked request
    (beside a plain one), or one each."""
    if forked_seeded:
        bodies = [generate_body(PROMPT, 12, n=2, temperature=0.8, seed=5), generate_body(_OTHER, 12)]
    else:
        bodies = [generate_body(PROMPT, 12, n=2), generate_body(_OTHER, 12, temperature=0.8, seed=5)]
    return reached(url, lambda: burst(url, [("a", 0, bodies[0]), ("b", 0, bodies[1])]))


def _together(url: str, delta: dict[int, int]) -> dict[int, set[int]]:
    """Each edge reached while both requests were in flight -> the context keys it ran under."""
    table = names(url)
    out: dict[int, set[int]] = {}
    for p in delta:
        if table[context(p)].startswith("multi|"):
            out.setdefault(p >> CONTEXT_BITS, set()).add(context(p))
    return out


def test_the_same_edge_under_another_mix_of_requests_in_flight_is_another_point(url: str) -> None:
    """A step context is each request's features, not the features held in flight: a seeded fork
    beside a plain request, and a fork beside a seeded request, hold the same features (one bit per
    feature, a run context, could not tell them apart) and run the same scheduler edges, each
    under its own context. Control: the same mix again runs them under the same contexts."""
    first, other, again = _mix(url, True), _mix(url, False), _mix(url, True)
    table = names(url)
    ctx_first, ctx_other, ctx_again = ({table[c] for e in _together(url, d).values() for c in e}
                                       for d in (first, other, again))
    assert ctx_first == {"multi|-;n+seed"} and ctx_other == {"multi|n;seed"}
    assert {f for c in ctx_first for f in held(c)} == {f for c in ctx_other for f in held(c)} == {"multi", "n", "seed"}
    shared = set(_together(url, first)) & set(_together(url, other))
    assert len(shared) > 20  # the same edges of the batch's steps, reached by both mixes
    assert all(_together(url, first)[e].isdisjoint(_together(url, other)[e]) for e in shared)
    # Control: the same mix, the same context for each edge both runs reached together.
    assert ctx_again == ctx_first
    both = set(_together(url, first)) & set(_together(url, again))
    assert len(both) > 20 and all(_together(url, first)[e] == _together(url, again)[e] for e in both)


def test_a_step_context_is_its_mix_whatever_the_order() -> None:
    # The key is a frozenset's: the same requests in another order are the same context, a set
    # of requests that differs in one request's features is another, in every process alike.
    assert describe({"multi"}, [{"seed"}, {"n"}]) == describe({"multi"}, [{"n"}, {"seed"}]) == "multi|n;seed"
    tracer = Tracer(files=())
    same = tracer.enter(frozenset({"multi"}), frozenset({frozenset({"n"}), frozenset({"seed"})}))
    other = tracer.enter(frozenset({"multi"}), frozenset({frozenset({"n", "seed"}), frozenset()}))
    assert same != other and tracer.names() == {same: "multi|n;seed", other: "multi|-;n+seed"}
