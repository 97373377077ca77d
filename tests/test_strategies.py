"""Strategies: aimed, reproducible workloads."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from servefuzz.strategies import PageBoundaryBursts, RandomLoad, TargetShape


@given(seed=st.integers(0, 2**31))
@settings(max_examples=50)
def test_page_boundary_bursts_aim_at_page_multiples_and_neighbours(seed: int) -> None:
    s = PageBoundaryBursts().generate(random.Random(seed), TargetShape(page_size=64), seed=seed)
    shared = [r for r in s.requests if r.prefix_len]
    assert len(shared) >= 2, "a prefix must be reused inside the scenario"
    assert all(r.prefix_len % 64 in (0, 1, 63) for r in shared)
    assert all(r.prompt_len + r.max_tokens <= 4096 for r in s.requests)
    first_wave = [r for r in shared if r.offset_ms <= 63]
    assert len(first_wave) >= 2, "the prefix is allocated and reused within one burst"


def test_the_one_page_prefix_is_the_most_common_aim() -> None:
    counts = {1: 0, 2: 0, 3: 0}
    for seed in range(300):
        s = PageBoundaryBursts().generate(random.Random(seed), TargetShape(page_size=64), seed=seed)
        for r in s.requests:
            if r.prefix_len:
                counts[(r.prefix_len + 1) // 64] += 1
    assert counts[1] > counts[2] > counts[3] > 0


def test_same_seed_same_scenario_and_unknown_page_sizes_are_swept() -> None:
    make = lambda: PageBoundaryBursts().generate(random.Random(5), TargetShape(), seed=5)
    assert make() == make()
    pages = {
        PageBoundaryBursts().generate(random.Random(s), TargetShape(), seed=s).meta["page_size"] for s in range(60)
    }
    assert pages == {16, 32, 64, 128, 256}


def test_random_load_respects_the_context() -> None:
    shape = TargetShape(context_length=300)
    for seed in range(20):
        s = RandomLoad().generate(random.Random(seed), shape, seed=seed)
        assert all(r.prompt_len + r.max_tokens < 300 for r in s.requests)
