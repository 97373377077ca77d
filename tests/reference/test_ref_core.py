"""The serving core in-process: pool, radix cache, scheduler. The headline is the property test:
whatever the batch composition, arrival timing, cache state, chunking, padding, overlap, pool
pressure or aborts, every token and logprob is bit-identical to the plain single-sequence
forward. Unit tests pin the mechanisms the fault zoo builds on."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servefuzz.reference.kvpool import KVPool, ReqToTokenPool
from servefuzz.reference.model import EOS_ID, TinyModel
from servefuzz.reference.radix import RadixCache
from servefuzz.reference.scheduler import (
    Engine,
    Event,
    FinishEvent,
    FinishReason,
    Request,
    RequestError,
    TokenEvent,
)
from servefuzz.reference.server_args import ServerArgs

_RNG = np.random.default_rng(77)
PREFIXES = [[int(t) for t in _RNG.integers(3, 1024, 140)] for _ in range(2)]


@dataclass
class Outcome:
    req: Request
    steps: dict[int, list] = field(default_factory=dict)
    finish: dict[int, FinishReason] = field(default_factory=dict)

    def sink(self, events: Sequence[Event]) -> None:
        for e in events:
            if isinstance(e, TokenEvent):
                self.steps.setdefault(e.index, []).append(e.step)
            elif isinstance(e, FinishEvent):
                assert e.index not in self.finish, "a choice finished twice"
                self.finish[e.index] = e.reason


def run(engine: Engine, plan: Sequence[tuple[int, Request, int | None]]) -> dict[str, Outcome]:
    """Drive the engine step by step: (arrival step, request, abort after k steps or None)."""
    out: dict[str, Outcome] = {}
    aborts: dict[int, list[str]] = {}
    step = 0
    pending = sorted(plan, key=lambda p: p[0])
    while pending or engine.busy or aborts:
        while pending and pending[0][0] <= step:
            _, req, abort_after = pending.pop(0)
            out[req.rid] = Outcome(req)
            req.sink = out[req.rid].sink
            engine.add_request(req)
            if abort_after is not None:
                aborts.setdefault(step + abort_after, []).append(req.rid)
        for rid in aborts.pop(step, []):
            engine.abort_now(rid)
        engine.step()
        step += 1
        assert step < 20_000, "engine made no progress"
    return out


# Adapters every engine of the property test serves; requests run under one of them or the base.
LORAS = (("lora-a", 1), ("lora-b", 2))


def assert_exact(model: TinyModel, outcomes: dict[str, Outcome], aborted: set[str] = frozenset()) -> None:
    adapted = {name: model.with_lora(seed) for name, seed in LORAS}
    for rid, o in outcomes.items():
        assert set(o.finish) == set(range(o.req.n)), f"{rid}: every choice must finish"
        m = model if o.req.adapter is None else adapted[o.req.adapter]
        for i in range(o.req.n):
            steps = o.steps.get(i, [])
            tokens = [s.token_id for s in steps]
            ref = m.score(o.req.prompt, tokens, top_k=o.req.top_logprobs_num)
            assert list(ref.steps) == steps, f"{rid}#{i} differs from the single-sequence forward"
            reason = o.finish[i]
            if reason.kind == "abort":
                assert rid in aborted
            elif reason.kind == "stop":
                assert tokens[-1] == EOS_ID and not o.req.ignore_eos
            else:
                assert len(tokens) == o.req.max_new_tokens
                assert o.req.ignore_eos or EOS_ID not in tokens[:-1]  # length wins a tie, as in SGLang


def assert_no_leaks(engine: Engine) -> None:
    """Idle engine: every row free, every page either free or held once by the cache, no locks;
    every state slot free or holding a checkpoint of the cache."""
    assert not engine.busy and not engine.requests
    assert engine.rows.free_rows == engine.args.max_running_requests
    if engine.states is not None:
        assert engine.states.free_slots + engine.states.kept == engine.states.slots
        assert engine.tree is not None or engine.states.kept == 0
    cached = engine.tree.cached_pages if engine.tree else 0
    assert engine.pool.free_pages + cached == engine.pool.usable_pages
    if engine.tree is not None:
        for node in engine.tree._nodes()[1:]:
            assert node.lock_ref == 0 and engine.pool.refcount(node.page) == 1
    if engine.window is not None:  # window pages: free, or held once by the tree for a cached page
        held = getattr(engine.tree, "held", set())
        assert engine.window.free_pages + len(held) == engine.window.usable_pages
        assert all(engine.window.pool.refcount(int(engine.window.of_full[p])) == 1 for p in held)
        assert np.count_nonzero(engine.window.of_full) == len(held)


@st.composite
def engine_args(draw: st.DrawFn) -> ServerArgs:
    page = draw(st.sampled_from([1, 3, 16, 64]))
    # Small pools force eviction and retraction; 14 pages still hold any one request below.
    pool = max(draw(st.sampled_from([700, 1200, 50_000])), 14 * page)
    return ServerArgs(
        page_size=page,
        chunked_prefill_size=draw(st.sampled_from([-1, 5, 64, 300])),
        max_running_requests=draw(st.integers(1, 8)),
        max_total_tokens=pool,
        disable_radix_cache=draw(st.booleans()),
        disable_overlap_schedule=draw(st.booleans()),
        disable_cuda_graph=draw(st.booleans()),
        lora=LORAS,
        # The host tier: what small pools evict is loaded back on a later hit, and must change
        # no answer either (a host smaller than the pool drops pages of its own).
        host_tier_tokens=max(draw(st.sampled_from([0, 0, 500, 5000])), page) if draw(st.booleans()) else 0,
    )


@st.composite
def workloads(draw: st.DrawFn) -> list[tuple[int, Request, int | None]]:
    plan = []
    for i in range(draw(st.integers(1, 10))):
        prefix = PREFIXES[draw(st.integers(0, 1))][: draw(st.integers(0, 140))]
        # Few suffix seeds: identical prompts (full cache hits) happen often.
        suffix_rng = np.random.default_rng(draw(st.integers(0, 4)))
        suffix = [int(t) for t in suffix_rng.integers(3, 1024, draw(st.integers(1, 40)))]
        req = Request(
            f"r{i}",
            tuple(prefix + suffix),
            max_new_tokens=draw(st.integers(0, 24)),
            n=draw(st.integers(1, 3)),
            ignore_eos=draw(st.booleans()),
            top_logprobs_num=2,
            # Tenants: a salt keys the first cached page, and must change no answer.
            cache_salt=draw(st.sampled_from([None, None, "tenant-a", "tenant-b"])),
            # Adapters: mixed in one batch and over shared prefixes, and each answer must be its
            # own adapter's plain forward.
            adapter=draw(st.sampled_from([None, None, "lora-a", "lora-b"])),
        )
        plan.append((draw(st.integers(0, 25)), req, draw(st.one_of(st.none(), st.integers(0, 12)))))
    return plan


@settings(max_examples=45, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=engine_args(), plan=workloads())
def test_clean_engine_is_bit_exact_under_any_schedule(model: TinyModel, args: ServerArgs, plan: list) -> None:
    engine = Engine(args, model=model)
    servable = []
    for item in plan:
        try:
            engine.check(item[1])
        except RequestError:
            continue  # the HTTP layer answers these with a 400
        servable.append(item)
    outcomes = run(engine, servable)
    assert_exact(model, outcomes, aborted={r.rid for _, r, a in servable if a is not None})
    assert_no_leaks(engine)


@st.composite
def hybrid_args(draw: st.DrawFn) -> ServerArgs:
    """The same engine settings with the hybrid model: its checkpoint interval one to four pages
    (one to sixteen tokens on one-token pages), its state slots plenty or barely enough."""
    args = draw(engine_args())
    unit = args.page_size if args.page_size > 1 else 4
    slots = draw(st.sampled_from([0, args.max_running_requests + 2]))
    return replace(args, model_arch="qwen3-next", mamba_track_interval=unit * draw(st.sampled_from([1, 2, 4])),
                   max_mamba_cache_size=slots)


@st.composite
def prefix_heavy_workloads(draw: st.DrawFn) -> list[tuple[int, Request, int | None]]:
    """`workloads`, with what a state cache is for made likely: several requests, most of them
    on one of the two long prefixes (often all of it, so that the whole prompt is cached), the
    later ones after the earlier ones' pages are cached."""
    plan = draw(workloads())
    more = []
    for i in range(draw(st.integers(2, 5))):
        prefix = PREFIXES[draw(st.integers(0, 1))][: draw(st.sampled_from([16, 47, 64, 65, 100, 128, 129, 140]))]
        suffix = tokens(draw(st.integers(0, 2)), draw(st.sampled_from([0, 0, 1, 5, 30])))
        req = Request(f"h{i}", tuple(prefix + suffix) or (5,), max_new_tokens=draw(st.integers(1, 20)),
                      n=draw(st.integers(1, 3)), top_logprobs_num=2,
                      adapter=draw(st.sampled_from([None, None, None, "lora-a"])))
        more.append((draw(st.integers(0, 60)), req, draw(st.one_of(st.none(), st.none(), st.integers(0, 12)))))
    return plan + more


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=hybrid_args(), plan=prefix_heavy_workloads())
def test_the_hybrid_model_is_bit_exact_under_any_schedule(hybrid: TinyModel, args: ServerArgs, plan: list) -> None:
    """The property test on qwen3-next: the recurrent state carried across chunks, checkpointed
    and restored on prefix hits (cut back to a checkpoint), forked to n > 1 choices, evicted
    under slot pressure, dropped on aborts and retractions: every token and logprob is still
    the lone forward's."""
    engine = Engine(args, model=hybrid)
    servable = []
    for item in plan:
        try:
            engine.check(item[1])
        except RequestError:
            continue
        servable.append(item)
    outcomes = run(engine, servable)
    assert_exact(hybrid, outcomes, aborted={r.rid for _, r, a in servable if a is not None})
    assert_no_leaks(engine)


# -- mechanisms -------------------------------------------------------------------------------


def tokens(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 1024, n)]


def test_pool_allocates_lowest_pages_first_and_counts_references() -> None:
    pool = KVPool(n_layers=1, n_heads=1, head_dim=2, total_tokens=40, page_size=8)
    assert pool.usable_pages == 4
    a = pool.alloc(3)
    assert a == [1, 2, 3] and pool.alloc(2) is None and pool.free_pages == 1  # nothing taken
    pool.retain([2])
    pool.release(a)
    assert pool.free_pages == 3 and pool.refcount(2) == 1
    assert pool.alloc(1) == [1]  # lowest first: a freed page is reused at once
    assert list(pool.slots([3, 1], 6, 10)) == [30, 31, 8, 9]


def test_req_to_token_rows_are_reused_most_recent_first() -> None:
    rows = ReqToTokenPool(rows=3, context_length=8)
    a, b = rows.alloc(), rows.alloc()
    rows.free(a)
    assert rows.alloc() == a and rows.free_rows == 1 and b != a
    assert not rows.table[rows.padding_row].any()


def test_radix_eviction_is_lru_over_unlocked_leaves() -> None:
    pool = KVPool(n_layers=1, n_heads=1, head_dim=2, total_tokens=64, page_size=4)
    tree = RadixCache(pool)
    old, new, held = ([k] * 8 for k in (5, 6, 7))
    for toks in (old, new, held):
        pages = pool.alloc(2)
        tree.insert(toks, pages)
        pool.release(pages)  # the tree is now the only holder
    locked = tree.match_prefix(held + [1], max_pages=2)
    tree.lock(locked.node)
    assert tree.evict(3) == 3  # both pages of `old`, then the leaf of `new`
    assert tree.match_prefix(old + [1], 2).pages == []
    assert len(tree.match_prefix(new + [1], 2).pages) == 1
    assert tree.match_prefix(held + [1], 2).pages == locked.pages
    assert tree.evict(10) == 1 and tree.cached_pages == 2  # the locked path stays
    tree.unlock(locked.node)
    assert tree.evict(10) == 2 and pool.free_pages == pool.usable_pages


def test_match_never_returns_unwritten_pages_unless_the_boundary_fault_is_on() -> None:
    pool = KVPool(n_layers=1, n_heads=1, head_dim=2, total_tokens=64, page_size=4)
    tree = RadixCache(pool)
    a = [1, 2, 3, 4, 5, 6, 7, 8]
    tree.insert(a, pool.alloc(2), ready=False)  # as the fault inserts at schedule time
    diverging = a[:4] + [9, 9, 9, 9, 9]  # shares exactly one page, next token differs
    continuing = a[:5] + [9, 9, 9, 9]  # shares 5 tokens: the next token starts a child
    assert tree.match_prefix(diverging, 2).pages == []
    assert len(tree.match_prefix(diverging, 2, boundary_fast_path=True).pages) == 1
    assert tree.match_prefix(continuing, 2, boundary_fast_path=True).pages == []


def test_second_identical_request_is_served_from_whole_cached_pages(model: TinyModel) -> None:
    engine = Engine(ServerArgs(page_size=16), model=model)
    prompt = tuple(tokens(1, 50))
    first = run(engine, [(0, Request("a", prompt, 4, top_logprobs_num=2), None)])
    second = run(engine, [(0, Request("b", prompt, 4, top_logprobs_num=2), None)])
    assert first["a"].req.cached_tokens == 0
    assert second["b"].req.cached_tokens == 48  # 3 full pages; the last token is recomputed
    assert_exact(model, {**first, **second})
    assert engine.stats.cache_hit_tokens == 48 and engine.stats.cache_query_tokens == 100
    assert engine.flush_now() and engine.tree is not None and engine.tree.cached_pages == 0
    assert engine.pool.free_pages == engine.pool.usable_pages


def test_choices_share_the_prompt_pages_and_decode_in_lockstep(model: TinyModel) -> None:
    engine = Engine(ServerArgs(page_size=16, disable_overlap_schedule=True), model=model)
    req = Request("n", tuple(tokens(2, 40)), 6, n=4, top_logprobs_num=2)
    engine.add_request(req)
    engine.step()  # prefill of choice 0, then the fork
    seqs = req.seqs
    assert all(s.kv_len == 40 for s in seqs)
    shared = seqs[0].pages[0]
    assert all(s.pages[0] == shared for s in seqs)  # full pages shared
    assert len({s.pages[2] for s in seqs}) == 4  # the partial page is each choice's own copy
    assert engine.pool.refcount(shared) == 4 + 1  # four choices and the cache
    engine.step()
    assert engine.graph is not None and engine.graph.last_bs == 4
    outcome = Outcome(req)
    req.sink = outcome.sink
    engine.run_until_idle()
    assert_no_leaks(engine)


def test_decode_batches_are_padded_to_capture_sizes(model: TinyModel) -> None:
    engine = Engine(ServerArgs(), model=model)
    for i in range(5):
        engine.add_request(Request(f"p{i}", tuple(tokens(10 + i, 20)), 8))
    assert engine.graph is not None
    while engine.graph.last_bs == 0:
        engine.step()
    assert engine.graph.last_bs == 8  # the first decode batch: 5 rows padded to 8
    engine.run_until_idle()


def test_pool_pressure_evicts_and_retracts_yet_stays_exact(model: TinyModel) -> None:
    engine = Engine(ServerArgs(page_size=16, max_total_tokens=640), model=model)
    plan = [
        (0, Request(f"q{i}", tuple(PREFIXES[0][:48] + tokens(i, 60)), 40, top_logprobs_num=2), None) for i in range(6)
    ]
    outcomes = run(engine, plan)
    assert engine.stats.retracted_reqs > 0 and engine.stats.evicted_tokens > 0
    assert_exact(model, outcomes)
    assert_no_leaks(engine)


def test_sampling_with_a_seed_does_not_depend_on_the_batch(model: TinyModel) -> None:
    prompt = tuple(tokens(3, 30))

    def sampled(others: int) -> list[int]:
        engine = Engine(ServerArgs(page_size=8), model=model)
        plan = [(0, Request(f"o{i}", tuple(tokens(50 + i, 25)), 10), None) for i in range(others)]
        plan.append((0, Request("s", prompt, 10, n=2, temperature=0.8, seed=11), None))
        o = run(engine, plan)["s"]
        return [s.token_id for i in (0, 1) for s in o.steps[i]]

    alone = sampled(0)
    assert alone == sampled(5)
    assert alone[:10] != alone[10:]  # the two choices draw differently


def test_flush_is_refused_while_busy(model: TinyModel) -> None:
    engine = Engine(ServerArgs(), model=model)
    engine.add_request(Request("f", (5, 6, 7), 3))
    assert engine.flush_now() is False
    engine.run_until_idle()
    assert engine.flush_now() is True


@pytest.mark.parametrize(
    "bad, message",
    [
        (Request("x", (), 4), "at least one token"),
        (Request("x", (5, 1024), 4), "outside the vocabulary"),
        (Request("x", (5,) * 4000, 200), "exceeds the context length"),
        (Request("x", (5,), 4, n=0), "n must be in"),
        (Request("x", (5,), 4, temperature=float("nan")), "temperature"),
        (Request("x", (5,) * 100, 100, n=8), "max_total_tokens"),
    ],
)
def test_requests_that_can_never_be_served_are_refused(model: TinyModel, bad: Request, message: str) -> None:
    engine = Engine(ServerArgs(max_total_tokens=1024), model=model)
    with pytest.raises(RequestError, match=message):
        engine.check(bad)


# -- faults, in-process: the mechanism exactly at its edge ------------------------------------


def fault_run(model: TinyModel, plan: list, **flags: object) -> set[str]:
    """Wrong (request, choice) names of a run; the run itself must stay well-formed."""
    engine = Engine(ServerArgs(**flags), model=model)  # type: ignore[arg-type]
    outcomes = run(engine, plan)
    wrong = set()
    for rid, o in outcomes.items():
        for steps in o.steps.values():
            if model.score(o.req.prompt, [s.token_id for s in steps]).token_ids != tuple(s.token_id for s in steps):
                wrong.add(rid)
    return wrong


@pytest.mark.parametrize("shared, diverges", [(64, True), (128, True), (65, False), (100, False)])
def test_page_boundary_fault_fires_only_at_a_page_multiple(model: TinyModel, shared: int, diverges: bool) -> None:
    prefix = tokens(4, shared)
    plan = [(0, Request(name, tuple(prefix + tokens(5 + i, 192 - shared)), 8), None) for i, name in enumerate("AB")]
    wrong = fault_run(model, plan, faults=("page-boundary-prefix",))
    assert wrong == ({"B"} if diverges else set())
    # The same two requests in successive batches: the page is written by then.
    later = [(0, plan[0][1]), (3, plan[1][1])]
    assert (
        fault_run(model, [(at, Request(r.rid, r.prompt, 8), None) for at, r in later], faults=("page-boundary-prefix",))
        == set()
    )


def test_a_flushed_engine_is_a_fresh_engine_kv_included(model: TinyModel) -> None:
    engine = Engine(ServerArgs(page_size=16, max_total_tokens=2048), model=model)
    assert_exact(model, run(engine, [(0, Request("a", tuple(tokens(9, 150)), 20), None)]))
    assert any(kv.any() for kv in engine.pool.kv), "the run wrote KV"
    assert engine.flush_now()
    fresh = Engine(ServerArgs(page_size=16, max_total_tokens=2048), model=model)
    assert all(np.array_equal(a, b) for a, b in zip(engine.pool.kv, fresh.pool.kv, strict=True))
    assert engine.pool.alloc(3) == fresh.pool.alloc(3) == [1, 2, 3]


def test_page_boundary_fault_comes_back_after_every_flush(model: TinyModel) -> None:
    """An identical replay after a flush reads the same unwritten page as the first run did:
    zeros, not the right KV the first run left there (which healed every replay but the first)."""
    prefix = tokens(4, 64)
    engine = Engine(ServerArgs(faults=("page-boundary-prefix",)), model=model)
    outputs = []
    for _ in range(3):
        plan = [(0, Request(name, tuple(prefix + tokens(5 + i, 100)), 8), None) for i, name in enumerate("AB")]
        got = run(engine, plan)
        outputs.append(tuple(s.token_id for s in got["B"].steps[0]))
        assert engine.flush_now()
    assert outputs[0] != tuple(model.generate(prefix + tokens(6, 100), 8).token_ids)
    assert len(set(outputs)) == 1, "every replay from the flushed state gives the same wrong answer"


def test_overlap_fault_needs_an_admission_in_the_finishing_step(model: TinyModel) -> None:
    a, b = tokens(6, 100), tokens(7, 300)
    hits = [
        k
        for k in range(14)
        if fault_run(
            model, [(0, Request("A", tuple(a), 8), None), (k, Request("B", tuple(b), 8), None)], faults=("overlap-war",)
        )
    ]
    assert len(hits) == 1  # exactly one arrival step lines B's admission up with A's last step
    cured = [(0, Request("A", tuple(a), 8), None), (hits[0], Request("B", tuple(b), 8), None)]
    assert fault_run(model, cured, faults=("overlap-war",), disable_overlap_schedule=True) == set()


def test_overlap_fault_fires_whatever_the_timing_at_the_concurrency_limit(model: TinyModel) -> None:
    """A server at --max-running-requests admits a waiting request the moment a row frees, so
    the early hand-back is always taken: the victim is hit at every arrival step tried."""
    filler, victim, newcomer = tokens(10, 8), tokens(11, 20), tokens(12, 40)

    def plan(at_victim: int, at_newcomer: int) -> list:
        return [
            (0, Request("F", tuple(filler), 8, n=7), None),
            (at_victim, Request("A", tuple(victim), 3), None),
            (at_newcomer, Request("B", tuple(newcomer), 4), None),
        ]

    timings = [(a, a + b) for a in range(3) for b in range(3)]
    hit = [fault_run(model, plan(*t), faults=("overlap-war",), max_running_requests=8) for t in timings]
    assert hit == [{"A"}] * len(timings)
    cured = fault_run(model, plan(1, 2), faults=("overlap-war",), max_running_requests=8, disable_overlap_schedule=True)
    assert cured == set()


CHUNK = 128


@pytest.mark.parametrize("short", [1, 3, 40, 64, 100, 127])  # cut chunks of 127 down to 1 token
def test_chunk_boundary_fault_changes_every_split_beside_another_request(model: TinyModel, short: int) -> None:
    a, b = tokens(20 + short, short), tokens(21, 300)
    together = [(0, Request("A", tuple(a), 8), None), (0, Request("B", tuple(b), 8), None)]
    faulty = {"faults": ("chunk-boundary",), "chunked_prefill_size": CHUNK}
    assert fault_run(model, together, **faulty) == {"B"}  # B is cut at the budget beside A
    assert fault_run(model, together[1:], **faulty) == set()  # B alone: split, but alone
    assert fault_run(model, together, faults=("chunk-boundary",), chunked_prefill_size=-1) == set()
    # A clean run that leaves B's right KV in the very pages the split gives it must not hide it
    # (the fault's first form, one entry written one slot off, showed nothing after one).
    engine = Engine(ServerArgs(**faulty), model=model)  # type: ignore[arg-type]
    assert_exact(model, run(engine, [(0, Request("A", tuple(a), 8), None), (2, Request("B", tuple(b), 8), None)]))
    assert engine.flush_now()
    split = run(engine, together)["B"]
    assert [s.token_id for s in split.steps[0]] != list(model.generate(b, 8).token_ids)


def test_an_engine_failure_ends_every_request_instead_of_hanging_it(model: TinyModel) -> None:
    engine = Engine(ServerArgs(), model=model)
    victim = Outcome(Request("victim", tuple(tokens(8, 20)), 1000))
    done = threading.Event()

    def broken_sink(events: Sequence[Event]) -> None:
        raise RuntimeError("boom")

    def watching_sink(events: Sequence[Event]) -> None:
        victim.sink(events)
        if any(isinstance(e, FinishEvent) for e in events):
            done.set()

    victim.req.sink = watching_sink
    engine.start()
    engine.submit(victim.req)
    engine.submit(Request("culprit", (5, 6, 7), 4, sink=broken_sink))
    assert done.wait(timeout=30)
    assert engine.error is not None and "RuntimeError: boom" in engine.error
    assert victim.finish[0] == FinishReason("abort", message="internal engine error")
    engine.stop()


def test_retractions_are_counted_by_the_state_they_carry_and_each_resumes_as_alone(model: TinyModel) -> None:
    # Four long decoders fill a 39-page pool beside a seeded draw, an adapter's request, two
    # choices of one request and a long constrained one: each of those is retracted at least once
    # (counted under its feature, /metrics' num_retracted_requests_by_feature_total) and, prefilled
    # again, answers exactly as it does alone on an idle engine: draws, grammar and siblings resumed.
    def stateful_plan() -> list[tuple[int, Request, int | None]]:
        plan: list[tuple[int, Request, int | None]] = [
            (0, Request(f"q{i}", tuple(tokens(i, 60)), 40, top_logprobs_num=2), None) for i in range(4)]
        return plan + [
            (0, Request("s", tuple(tokens(20, 60)), 40, temperature=0.8, seed=3, top_logprobs_num=2), None),
            (0, Request("a", tuple(tokens(21, 60)), 40, adapter="lora-a", top_logprobs_num=2), None),
            (0, Request("n", tuple(tokens(22, 60)), 40, n=2, top_logprobs_num=2), None),
            (0, Request("c", tuple(tokens(23, 60)), 45, choices=(tuple(range(5, 45)), (11, 12)), ignore_eos=False,
                        top_logprobs_num=2), None),
        ]

    engine = Engine(ServerArgs(page_size=16, max_total_tokens=640, lora=LORAS), model=model)
    loaded = run(engine, stateful_plan())
    assert all(engine.stats.retracted_by[f] > 0 for f in ("seeded", "choices", "adapter", "n")), engine.stats.retracted_by
    assert_no_leaks(engine)
    for _, req, _ in stateful_plan():
        alone = run(Engine(ServerArgs(page_size=16, max_total_tokens=640, lora=LORAS), model=model), [(0, req, None)])
        assert loaded[req.rid].steps == alone[req.rid].steps, req.rid
