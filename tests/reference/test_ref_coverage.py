"""Engine coverage (`--coverage`, GET /coverage): the reference engine's own edges in the context
of the requests in flight, over real HTTP on 127.0.0.1; and the tracer itself, in-process."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import numpy as np
import pytest
from refclient import Answer, burst, flush, generate_body, get, post, wrong_answers

from servefuzz.reference.model import TinyModel
from servefuzz.reference.tracer import CONTEXT_BITS, CONTEXTS, EDGE_BITS, Tracer, context_names, context_of

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


def contexts(delta: dict[int, int]) -> set[tuple[str, ...]]:
    return {context_names(p & ((1 << CONTEXT_BITS) - 1)) for p in delta}


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
    assert contexts(delta) == {()}  # one greedy request alone: no feature in flight


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
    assert not any("n" in c for c in contexts(one))
    assert ("n",) in contexts(two)
    # The same edges run under the n context are new points: context-sensitive coverage.
    edges_one = {p >> CONTEXT_BITS for p in one}
    assert any(p >> CONTEXT_BITS in edges_one for p in two if p not in one)


def test_a_burst_is_in_the_multi_context_and_a_cached_prefix_in_the_hit_one(url: str) -> None:
    both = reached(url, lambda: burst(url, [("a", 0, generate_body(PROMPT, 4)),
                                            ("b", 0, generate_body(PROMPT[:140] + [7, 8, 9], 4))]))
    assert any("multi" in c for c in contexts(both))
    again = reached(url, lambda: (post(url, "/generate", generate_body(PROMPT, 2)),
                                  post(url, "/generate", generate_body(PROMPT, 2))))
    assert ("hit",) in contexts(again)  # the second request hit the first one's pages


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
    th = threading.Thread(target=run, args=(tracer, context_of({"seed", "chunk"})))
    th.start()
    th.join()
    assert tracer.counts and {context_names(p & ((1 << CONTEXT_BITS) - 1)) for p in tracer.counts} == {("seed", "chunk")}
    assert max(tracer.counts.values()) >= 3  # the loop's back edge, once per turn
    assert set(CONTEXTS) >= {"n", "seed", "adapter", "choice", "salt", "abort", "chunk", "hit"}
