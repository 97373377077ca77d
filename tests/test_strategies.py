"""Strategies: aimed, reproducible workloads that fit the target they are aimed at."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servefuzz.errors import UsageError
from servefuzz.strategies import (
    DEFAULT_MIX,
    STRATEGIES,
    BatchSweep,
    CancellationStorm,
    ChunkBoundary,
    EvictionPressure,
    LongDecodes,
    LoraAlternation,
    PageBoundaryBursts,
    RandomLoad,
    RetractionPressure,
    SeededSampling,
    TargetShape,
    get_strategies,
    left_out,
    offered,
)
from servefuzz.workload import Scenario

SHAPES = [
    TargetShape(page_size=64, max_total_tokens=131072, chunked_prefill_size=2048, adapters=("lora-a", "lora-b")),
    TargetShape(page_size=16, context_length=2048, max_total_tokens=4096, chunked_prefill_size=512, host_tier=True),
    TargetShape(),  # a server that says nothing about itself
    # SGLang's default: pages of one token, a small prefill budget, salts (eviction, cancel-storm
    # and pairwise raised on it in a campaign, 2026-12-02).
    TargetShape(page_size=1, max_total_tokens=8192, chunked_prefill_size=64, salts=True),
]


def _shared(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@given(seed=st.integers(0, 2**31 - 1), shape=st.sampled_from(SHAPES), name=st.sampled_from(sorted(STRATEGIES)))
@settings(max_examples=150, deadline=None)
def test_every_strategy_makes_valid_reproducible_scenarios_that_fit_the_target(seed: int, shape: TargetShape, name: str) -> None:
    def make() -> Scenario:
        return STRATEGIES[name].generate(random.Random(seed), shape, seed=seed)

    s = make()
    assert s == make() and s.meta == make().meta, "same seed, same scenario"
    assert s.meta["strategy"] == name and len(s.requests) >= 2
    for r in s.requests:
        assert r.prompt_len + r.max_tokens * r.n <= shape.pool_tokens, (r.id, r.prompt_len, r.max_tokens)
        assert all(t in shape.vocab for t in r.prompt_ids)
    # Requests naming one prefix share exactly the shorter prefix (or are the same prompt: a retry).
    for a in s.requests:
        for b in s.requests:
            if a.id < b.id and a.prefix_name and a.prefix_name == b.prefix_name and a.prompt_ids != b.prompt_ids:
                assert _shared(a.prompt_ids, b.prompt_ids) == min(a.prefix_len, b.prefix_len), (a.id, b.id)


@given(seed=st.integers(0, 2**31 - 1))
@settings(max_examples=60)
def test_page_boundary_always_bursts_a_one_page_prefix_behind_a_blocker(seed: int) -> None:
    s = PageBoundaryBursts().generate(random.Random(seed), TargetShape(page_size=64), seed=seed)
    p0 = [r for r in s.requests if r.prefix_name == "p0" and r.offset_ms < 250]
    assert len(p0) >= 2 and all(r.prefix_len == 64 for r in p0)
    blocker = s.by_id()["r01"]  # written first, just before the burst
    assert blocker.prefix_len == 0 and blocker.prompt_len >= 256
    # offsets are rounded to 0.1 ms, so allow for the float error of the difference
    assert all(6.2 - 1e-9 <= r.offset_ms - blocker.offset_ms <= 14 + 1e-9 for r in p0), "the burst lands while the blocker prefills"
    offsets = [r.offset_ms for r in p0]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), "the burst leaves in order"
    assert all(r.prefix_len % 64 in (0, 1, 63) for r in s.requests if r.prefix_len)


def test_other_multiples_and_neighbours_are_aimed_at_too_smaller_ones_more_often() -> None:
    aims: Counter[int] = Counter()
    for seed in range(400):
        s = PageBoundaryBursts().generate(random.Random(seed), TargetShape(page_size=64), seed=seed)
        aims.update(s.meta["aims"][1:])
    assert {63, 64, 65, 127, 128, 129} <= set(aims)
    by_multiple = Counter((a + 1) // 64 for a in aims.elements())
    assert by_multiple[1] > by_multiple[3] > 0


def test_unknown_page_sizes_are_swept() -> None:
    pages = {PageBoundaryBursts().generate(random.Random(s), TargetShape(), seed=s).meta["page_size"] for s in range(80)}
    assert pages == {16, 32, 64, 128, 256}


@given(seed=st.integers(0, 2**31 - 1))
@settings(max_examples=60)
def test_batch_sweep_starts_just_above_a_padded_size_and_shrinks_one_request_at_a_time(seed: int) -> None:
    s = BatchSweep().generate(random.Random(seed), TargetShape(), seed=seed)
    first = [r for r in s.requests if r.offset_ms <= min(x.offset_ms for x in s.requests) + 3]
    assert len(first) == s.meta["batch"] and s.meta["bucket"] < len(first) <= s.meta["bucket"] + 2
    ends = [r.max_tokens for r in first]
    assert len(set(ends)) == len(ends), "staggered max_tokens: the batch shrinks one by one"


@given(seed=st.integers(0, 2**31 - 1))
@settings(max_examples=60)
def test_chunk_boundary_puts_a_short_prompt_then_one_that_crosses_the_budget_by_at_most_a_little(seed: int) -> None:
    s = ChunkBoundary().generate(random.Random(seed), SHAPES[0], seed=seed)
    assert s.meta["chunk"] == 2048
    assert -1 <= s.meta["batch_total"] - 2048 <= 64
    ordered = sorted(s.requests, key=lambda r: r.offset_ms)
    decoders = [r for r in ordered if r.max_tokens >= 64]
    assert decoders and ordered[0] in decoders, "decodes are running when the prompts arrive"


def test_eviction_pressure_is_sized_from_the_pool() -> None:
    shape = TargetShape(page_size=64, max_total_tokens=4096)
    for seed in range(30):
        s = EvictionPressure().generate(random.Random(seed), shape, seed=seed)
        load = sum(r.prompt_len + r.max_tokens for r in s.requests)
        assert load >= 1.1 * 4096
        holders = [r for r in s.requests if r.prefix_name == "p0" and r.offset_ms < 5]
        assert len(holders) >= 2 and all(r.max_tokens >= 64 for r in holders)
    huge = EvictionPressure().generate(random.Random(1), TargetShape(page_size=64, max_total_tokens=10**6), seed=1)
    assert sum(r.prompt_len + r.max_tokens for r in huge.requests) <= EvictionPressure().cap_tokens + 2048


def test_cancellation_storm_retries_each_cancelled_prompt_after_its_cut() -> None:
    for seed in range(30):
        s = CancellationStorm().generate(random.Random(seed), TargetShape(page_size=64), seed=seed)
        cancelled = [r for r in s.requests if r.cancelled]
        assert cancelled and len(cancelled) == s.meta["cancelled"]
        for c in cancelled:
            retries = [r for r in s.requests if r.prompt_ids == c.prompt_ids and not r.cancelled]
            assert retries and all(r.offset_ms > c.offset_ms + c.cancel_after_ms for r in retries)


def test_long_decodes_have_newcomers_arriving_while_they_run() -> None:
    s = LongDecodes().generate(random.Random(3), TargetShape(), seed=3)
    long = [r for r in s.requests if r.max_tokens >= 48]
    short = [r for r in s.requests if r.max_tokens <= 16]
    assert len(long) >= 2 and len(short) >= 6
    assert min(r.offset_ms for r in short) >= 10 > max(r.offset_ms for r in long)


@pytest.mark.parametrize("limit", [1, 4, 128])
def test_long_decodes_fill_a_known_concurrency_limit_but_one_row(limit: int) -> None:
    for seed in range(20):
        s = LongDecodes().generate(random.Random(seed), TargetShape(page_size=64, max_running_requests=limit), seed=seed)
        assert s.meta["saturated"] == limit
        *fillers, victim, newcomer = s.requests
        assert sum(r.n for r in fillers) == limit - 1 and victim.n == newcomer.n == 1
        # The victim finishes first; the newcomer waits for its row and covers its whole context.
        assert all(f.max_tokens > victim.max_tokens for f in fillers)
        assert newcomer.prompt_len > victim.prompt_len + victim.max_tokens
        assert [r.offset_ms for r in s.requests] == sorted(r.offset_ms for r in s.requests)
        assert newcomer.offset_ms - victim.offset_ms >= 1 and all(victim.offset_ms > f.offset_ms for f in fillers)
        if fillers:  # the newcomer's row starts with the fillers' cached page
            assert newcomer.prefix_name == fillers[0].prefix_name == "p0" and newcomer.prefix_len == 64
            assert newcomer.prompt_ids[:64] == fillers[0].prompt_ids[:64]


def test_long_decodes_trickle_when_the_limit_is_too_large_to_fill() -> None:
    s = LongDecodes().generate(random.Random(3), TargetShape(page_size=64, max_running_requests=256), seed=3)
    assert "gap_ms" in s.meta and "saturated" not in s.meta
    small_pool = TargetShape(page_size=64, max_running_requests=128, max_total_tokens=4096)
    assert "saturated" not in LongDecodes().generate(random.Random(3), small_pool, seed=3).meta


def test_random_load_respects_the_context() -> None:
    for seed in range(20):
        s = RandomLoad().generate(random.Random(seed), TargetShape(context_length=300), seed=seed)
        assert all(r.prompt_len + r.max_tokens < 300 for r in s.requests)


def test_the_mix_starts_with_the_seed_bug_class_and_names_resolve() -> None:
    assert DEFAULT_MIX[0] == "page-boundary" and set(DEFAULT_MIX) == set(STRATEGIES)
    assert [s.name for s in get_strategies("mix")] == list(DEFAULT_MIX)
    assert [s.name for s in get_strategies("random, batch-sweep")] == ["random", "batch-sweep"]
    with pytest.raises(UsageError, match="unknown strategy 'nope'"):
        get_strategies("random,nope")


def test_seeded_sampling_sends_seeded_draws_together_and_only_where_seeds_are_promised() -> None:
    for seed in range(20):
        s = SeededSampling().generate(random.Random(seed), TargetShape(page_size=16), seed=seed)
        seeded = [r for r in s.requests if r.seeded]
        assert len(seeded) >= 3 and len({r.seed for r in seeded}) == len(seeded)  # own seeds
        assert max(r.offset_ms for r in seeded) <= 8 and min(r.max_tokens for r in seeded) >= 8  # they decode together
        assert all(0 < r.temperature <= 1 for r in seeded)
    assert offered([SeededSampling()], TargetShape()) == ()
    assert offered([SeededSampling()], TargetShape(seeded_sampling=True)) == (SeededSampling(),)
    shapes = [SeededSampling().generate(random.Random(i), TargetShape(page_size=16), seed=i) for i in range(20)]
    assert {r.n for s in shapes for r in s.requests} >= {1, 2, 3}
    assert any(r.prefix_len for s in shapes for r in s.requests)


def test_only_engines_that_promise_seeds_get_sampled_traffic() -> None:
    from servefuzz.campaign import shape_of
    from servefuzz.server_facts import TargetInfo

    promised = {e: shape_of(TargetInfo(e, "http://127.0.0.1:1")).seeded_sampling
                for e in ("reference", "vllm", "llamacpp", "sglang", "openai")}
    assert promised == {"reference": True, "vllm": True, "llamacpp": False, "sglang": False, "openai": False}


def test_lora_alternation_alternates_adapters_over_shared_prefixes_only_where_adapters_are_served() -> None:
    from servefuzz.campaign import shape_of
    from servefuzz.server_facts import TargetInfo

    shape = TargetShape(page_size=16, adapters=("lora-a", "lora-b", "lora-c"))
    for seed in range(20):
        s = LoraAlternation().generate(random.Random(seed), shape, seed=seed)
        assert all(r.prefix_len > 0 for r in s.requests)
        by_prefix: dict[str | None, set[str | None]] = {}
        for r in s.requests:
            by_prefix.setdefault(r.prefix_name, set()).add(r.adapter)
        # Some prefix is sent under more than one adapter (or an adapter and the base model),
        # and at most two adapters take part, plus the base model.
        assert any(len(adapters) > 1 for adapters in by_prefix.values()), seed
        assert len({r.adapter for r in s.requests} - {None}) <= 2
    assert offered([LoraAlternation()], TargetShape()) == ()
    assert offered([LoraAlternation()], shape) == (LoraAlternation(),)
    # Adapters come from what the server lists, and only where the dialect names them.
    served = {e: shape_of(TargetInfo(e, "http://127.0.0.1:1", adapters=("lora-a",))).adapters
              for e in ("reference", "vllm", "openai", "llamacpp")}
    assert served == {"reference": ("lora-a",), "vllm": ("lora-a",), "openai": (), "llamacpp": ("lora-a",)}


def test_the_package_table_names_every_strategy_once() -> None:
    # The table in the package's docstring is what a newcomer reads first: it must not drift from
    # the registry (a strategy added without its row, or a row left behind by a rename).
    import servefuzz.strategies as package

    rows = [line.split("|")[1].strip() for line in (package.__doc__ or "").splitlines() if line.startswith("| ")]
    assert sorted(rows[1:]) == sorted(STRATEGIES), rows  # rows[0] is the header


@pytest.mark.parametrize("seed", range(20))
def test_retraction_outgrows_the_pool_by_decoding_and_carries_each_stateful_feature(seed: int) -> None:
    shape = TargetShape(page_size=16, max_total_tokens=4096, seeded_sampling=True, adapters=("lora-a",))
    s = RetractionPressure().generate(random.Random(seed), shape, seed=seed)
    wave = [r for r in s.requests if r.offset_ms < 10]
    # The prompts fit the pool with room to spare (admitted together); the outputs do not.
    assert sum(r.prompt_len for r in wave) <= 4096 // 4 + 16 * len(wave)
    assert sum(r.prompt_len + r.max_tokens * r.n for r in wave) >= 1.1 * 4096
    kinds = {"seeded" if r.seed is not None else "adapter" if r.adapter else "forks" if r.n > 1 else "greedy" for r in wave}
    assert len(kinds) >= min(3, len(wave) - 1), kinds


def test_retraction_needs_a_pool_a_scenario_can_fill_and_says_why_elsewhere() -> None:
    small, large = TargetShape(max_total_tokens=4096), TargetShape(max_total_tokens=131072)
    assert [s.name for s in offered([RetractionPressure()], small)] == ["retraction"]
    assert offered([RetractionPressure()], large) == () and offered([RetractionPressure()], TargetShape()) == ()
    assert left_out([RetractionPressure()], large) == {
        "retraction": "needs a KV pool one scenario can fill past (at most 10,240 tokens): the server states 131,072"}
