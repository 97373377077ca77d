"""A sliding-window model on the serving core: exact whatever the schedule, its window KV given
back as the window moves, and a prefix hit that reaches across the window's edge served only
from window KV that is still there (else recomputed). Then its two planted faults, at their edge.
"""

from __future__ import annotations

import dataclasses
import doctest

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ref_core import LORAS, Outcome, assert_exact, assert_no_leaks, run, tokens

from servefuzz.reference import window as window_module
from servefuzz.reference.architectures import REFERENCE_ARCHS
from servefuzz.reference.model import TinyModel
from servefuzz.reference.scheduler import Engine, Request, RequestError
from servefuzz.reference.server_args import ServerArgs
from servefuzz.reference.window import WindowRadixCache, first_needed

GEMMA3 = REFERENCE_ARCHS["gemma3"]
W = GEMMA3.window
_RNG = np.random.default_rng(78)
PREFIXES = [[int(t) for t in _RNG.integers(3, 1024, 300)] for _ in range(2)]


def test_docstring_examples_hold() -> None:
    result = doctest.testmod(window_module)
    assert result.attempted > 0 and result.failed == 0


def test_the_windowed_model_sees_only_its_window_in_the_sliding_layers(windowed: TinyModel) -> None:
    """Changing a token far behind the window changes the answer only through the global layer:
    the same model with every layer windowed forgets it (six windows of 64 reach 378 tokens
    back), the real one does not."""
    prompt = tokens(1, 450)
    other = list(prompt)
    other[10] = 3 + (other[10] + 7) % 1000
    assert windowed.generate(prompt, 16).token_ids != windowed.generate(other, 16).token_ids
    forgetful = TinyModel(dataclasses.replace(GEMMA3, layer_types=("sliding_attention",) * 6))
    assert np.array_equal(forgetful.forward(prompt)[-1], forgetful.forward(other)[-1])  # 439 behind
    assert not np.array_equal(forgetful.forward(prompt[:70])[-1], forgetful.forward(other[:70])[-1])  # 59 behind


@st.composite
def engine_args(draw: st.DrawFn) -> ServerArgs:
    page = draw(st.sampled_from([1, 3, 16, 64]))
    # Small pools (and window pools) force eviction, window eviction (tombstones) and retraction.
    pool = max(draw(st.sampled_from([600, 1000, 50_000])), 16 * page)
    return ServerArgs(
        page_size=page,
        chunked_prefill_size=draw(st.sampled_from([-1, 7, 64, 300])),
        max_running_requests=draw(st.integers(1, 8)),
        max_total_tokens=pool,
        swa_full_tokens_ratio=draw(st.sampled_from([0.3, 0.5, 1.0])),
        disable_radix_cache=draw(st.booleans()),
        disable_overlap_schedule=draw(st.booleans()),
        disable_cuda_graph=draw(st.booleans()),
        lora=LORAS,
    )


@st.composite
def workloads(draw: st.DrawFn) -> list[tuple[int, Request, int | None]]:
    plan = []
    spacing = draw(st.sampled_from([0, 4, 12]))  # steps between arrivals: later ones hit what earlier ones cached
    for i in range(draw(st.integers(1, 8))):
        # Prompts are beginnings of two long sequences, some with a tail of their own: any two of
        # one sequence share a prefix as long as the shorter, so hits land at every length, across
        # the window's edge, and on prefixes whose early windows slid out before they were cached.
        length = draw(st.sampled_from([1, 20, 63, 64, 65, 100, 128, 129, 191, 200, 257, 300]))
        tail = [int(t) for t in np.random.default_rng(i).integers(3, 1024, draw(st.sampled_from([0, 0, 1, 9])))]
        req = Request(
            f"r{i}", tuple(PREFIXES[draw(st.integers(0, 1))][:length] + tail),
            max_new_tokens=draw(st.sampled_from([0, 1, 5, 24, 80])),  # 80: the window slides in decode
            n=draw(st.integers(1, 3)),
            ignore_eos=draw(st.booleans()),
            top_logprobs_num=2,
            adapter=draw(st.sampled_from([None, None, "lora-a"])),
        )
        plan.append((i * spacing + draw(st.integers(0, 6)), req, draw(st.one_of(st.none(), st.integers(0, 12)))))
    return plan


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=engine_args(), plan=workloads())
def test_windowed_engine_is_bit_exact_under_any_schedule(windowed: TinyModel, args: ServerArgs, plan: list) -> None:
    engine = Engine(args, model=windowed)
    servable = []
    for item in plan:
        try:
            engine.check(item[1])
        except RequestError:
            continue
        servable.append(item)
    outcomes = run(engine, servable)
    assert_exact(windowed, outcomes, aborted={r.rid for _, r, a in servable if a is not None})
    assert_no_leaks(engine)


# -- mechanisms -------------------------------------------------------------------------------


def test_window_pages_are_given_back_as_the_window_moves(windowed: TinyModel) -> None:
    engine = Engine(ServerArgs(page_size=16, disable_radix_cache=True, disable_overlap_schedule=True), model=windowed)
    assert engine.window is not None
    outcome = Outcome(Request("long", tuple(tokens(3, 40)), 200))
    outcome.req.sink = outcome.sink
    engine.add_request(outcome.req)
    held = []
    while engine.busy:
        engine.step()
        held.append(engine.window.usable_pages - engine.window.free_pages)
    # The window spans 64 tokens: at most 5 pages of 16 at once (4 whole, and the one being
    # written), while the global layer's pages grow to 15.
    assert max(held) <= 5 and held[-1] == 0
    assert engine.pool.free_pages == engine.pool.usable_pages
    assert_exact(windowed, {"long": outcome})


def test_a_hit_across_the_window_edge_reuses_only_windows_still_held(windowed: TinyModel) -> None:
    """A 300-token prompt is cached with its windows slid out of all but its last pages (the
    tree holds the early pages as tombstones). A request extending all of it hits 288 tokens (18
    pages: the windows of pages 14-17 are there); one sharing its first 128 tokens could match 8
    pages, but their windows are gone: it recomputes from the start. Both exact."""
    engine = Engine(ServerArgs(page_size=16), model=windowed)
    prompt = PREFIXES[0]
    first = run(engine, [(0, Request("A", tuple(prompt), 4), None)])
    assert isinstance(engine.tree, WindowRadixCache) and engine.tree.cached_pages == 18
    assert len(engine.tree.held) == 18 - first_needed(300, W, 16)  # pages 14..17: 4 windows
    longer = run(engine, [(0, Request("B", tuple(prompt + tokens(4, 10)), 8), None)])
    early = run(engine, [(0, Request("C", tuple(prompt[:128] + tokens(5, 10)), 8), None)])
    assert longer["B"].req.cached_tokens == 288
    assert early["C"].req.cached_tokens == 0
    assert_exact(windowed, {**first, **longer, **early})
    assert_no_leaks(engine)


def test_window_pressure_turns_cached_windows_into_tombstones_first(windowed: TinyModel) -> None:
    """A window pool of 8 pages of 16: the tree's cached windows are given back, least recently
    used first, before anything else, and what was cached stays exact."""
    engine = Engine(ServerArgs(page_size=16, max_total_tokens=1024, swa_full_tokens_ratio=0.14), model=windowed)
    assert engine.window is not None and engine.window.usable_pages == 7
    plan = [(4 * i, Request(f"q{i}", tuple(tokens(20 + i, 90)), 6), None) for i in range(4)]
    outcomes = run(engine, plan)
    assert isinstance(engine.tree, WindowRadixCache)
    assert engine.tree.cached_pages == 4 * 5 and len(engine.tree.held) < 4 * 3  # tombstoned, not evicted
    assert engine.stats.swa_evicted_tokens > 0 and engine.stats.evicted_tokens == 0
    again = run(engine, [(0, Request("again", tuple(tokens(20, 90) + tokens(9, 5)), 6), None)])
    assert_exact(windowed, {**outcomes, **again})
    assert_no_leaks(engine)


def test_a_request_the_window_pool_cannot_hold_is_refused(windowed: TinyModel) -> None:
    engine = Engine(ServerArgs(page_size=16, max_total_tokens=1024, swa_full_tokens_ratio=0.5), model=windowed)
    with pytest.raises(RequestError, match="max_total_tokens"):
        engine.check(Request("big", tuple(tokens(6, 600)), 8))
