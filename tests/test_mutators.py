"""Mutators: lineage in the ids, exact prefix sharing kept, scenarios that still fit the target."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

import servefuzz.mutators as mutators_module
from servefuzz.coverage import SURFACE, points
from servefuzz.mutators import MUTATORS, cross, lineage_of, mutate
from servefuzz.strategies import STRATEGIES, TargetShape
from servefuzz.workload import Scenario

SHAPE = TargetShape(page_size=64, max_total_tokens=16384, chunked_prefill_size=512, context_length=2048)


def _parent(seed: int, name: str) -> Scenario:
    return STRATEGIES[name].generate(random.Random(seed), SHAPE, seed=seed)


def _shared(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@given(seed=st.integers(0, 2**31 - 1), name=st.sampled_from(sorted(STRATEGIES)), rounds=st.integers(1, 6))
@settings(max_examples=120, deadline=None)
def test_mutation_chains_keep_scenarios_valid_exact_and_traceable(seed: int, name: str, rounds: int) -> None:
    rng = random.Random(seed)
    s = _parent(seed, name)
    for i in range(rounds):
        parent, s = s, mutate(s, rng, SHAPE, seed=i)
        assert s != parent, "a mutation never hands its parent back"
        assert s.seed == i and s.meta["strategy"] == name
    assert len(s.meta["lineage"]) >= rounds
    for r in s.requests:
        assert r.prompt_len + r.max_tokens * r.n <= SHAPE.pool_tokens
        assert set(lineage_of(r.id)) <= {m.suffix for m in MUTATORS.values()}
    for a in s.requests:
        for b in s.requests:
            if a.id < b.id and a.prefix_name and a.prefix_name == b.prefix_name and a.prompt_ids != b.prompt_ids:
                assert _shared(a.prompt_ids, b.prompt_ids) == min(a.prefix_len, b.prefix_len), (a.id, b.id)


def test_each_mutator_appends_its_documented_suffix_to_what_it_touched() -> None:
    parent = _parent(11, "page-boundary")
    doc = mutators_module.__doc__ or ""
    for m in MUTATORS.values():
        assert f"`_{m.suffix}`" in doc and m.name in doc
        out = None
        for seed in range(50):  # some mutators do not apply to every pick
            out = m.apply(parent, random.Random(seed), SHAPE)
            if out is not None:
                break
        assert out is not None, m.name
        assert out.meta["lineage"] == [m.name]
        new_ids = {r.id for r in out.requests} - {r.id for r in parent.requests}
        if m.name == "drop":
            assert not new_ids and len(out.requests) == len(parent.requests) - 1
        else:
            assert new_ids and all(rid.split("_")[-1].rstrip("0123456789") == m.suffix for rid in new_ids), new_ids


def test_a_burst_copies_a_request_to_the_same_moment_with_the_same_prefix_and_a_fresh_suffix() -> None:
    parent = _parent(5, "page-boundary")
    out = MUTATORS["burst"].apply(parent, random.Random(2), SHAPE)
    assert out is not None
    copies = [r for r in out.requests if r.id.endswith(("_b", "_b2", "_b3"))]
    src = parent.by_id()[copies[0].id.split("_")[0]]
    for c in copies:
        assert abs(c.offset_ms - src.offset_ms) <= 2 and c.prefix_len == src.prefix_len
        assert c.prompt_len == src.prompt_len and c.prompt_ids != src.prompt_ids
    assert len({c.id for c in copies}) == len(copies), "copies of one burst get distinct ids (b, b2, ...)"


def test_snap_lands_prefixes_on_boundaries_or_their_neighbours() -> None:
    parent = _parent(9, "burst-reuse")
    snapped = []
    for seed in range(200):
        out = MUTATORS["snap"].apply(parent, random.Random(seed), SHAPE)
        if out is not None:
            snapped += [r for r in out.requests if r.id.endswith("_k") and r.prefix_len != parent.by_id()[r.id[:-2]].prefix_len]
    assert snapped
    units = (16, 32, 64, 128, 256, 512)
    assert all(any(min(r.prefix_len % u, u - r.prefix_len % u) <= 1 for u in units) for r in snapped)


def test_lineage_reads_oldest_first() -> None:
    assert lineage_of("r02_b_s_b_s_s_s") == ("b", "s", "b", "s", "s", "s")
    assert lineage_of("r04") == ()


# A target that offers every capability (the reference engine with adapters served).
SURFACE_SHAPE = TargetShape(page_size=64, max_total_tokens=16384, chunked_prefill_size=512, context_length=2048,
                            salts=True, seeded_sampling=True, choices=True, adapters=("lora-a", "lora-b"))


@given(seed=st.integers(0, 2**31 - 1), name=st.sampled_from(sorted(STRATEGIES)), rounds=st.integers(1, 6))
@settings(max_examples=120, deadline=None)
def test_capability_crossings_keep_scenarios_valid_exact_and_traceable(seed: int, name: str, rounds: int) -> None:
    rng = random.Random(seed)
    s = STRATEGIES[name].generate(random.Random(seed), SURFACE_SHAPE, seed=seed)
    for _ in range(rounds):
        parent = s
        # A capability added to or removed from one request: `cross` held to the surface.
        got = cross(parent, rng, SURFACE_SHAPE, dims=SURFACE)
        assert got is not None  # a capability move always exists: each has two buckets
        s = got
        moved = [r for r in s.requests if r.id not in parent.by_id()]
        assert len(moved) == 1 and lineage_of(moved[0].id)[-1] == "x" and s.meta["lineage"][-1] == "cross"
        assert len(s.requests) == len(parent.requests)
        old = parent.by_id()[moved[0].id.rsplit("_", 1)[0]]
        before, after = points(parent, SURFACE_SHAPE)[old.id], points(s, SURFACE_SHAPE)[moved[0].id]
        changed = {d for d in before if before[d] != after[d]}
        assert changed & set(SURFACE) and changed <= {*SURFACE, "sampling"}, changed
        assert old.prompt_ids == moved[0].prompt_ids and old.offset_ms == moved[0].offset_ms
    # Scenario and RequestSpec validate themselves: reaching here with a rebuilt scenario is the
    # validity half; its JSON reads back as the same scenario.
    assert Scenario.from_json(s.to_json()) == s
    for r in s.requests:
        assert r.prompt_len + r.max_tokens * r.n <= SURFACE_SHAPE.pool_tokens
        assert r.adapter in (None, *SURFACE_SHAPE.adapters)
        assert r.choices is None or not r.ignore_eos
    salts = {r.cache_salt for r in s.requests if r.cache_salt is not None}
    assert len(salts) <= 3  # the strategy's own tenants, or the two drawn for the scenario
    for a in s.requests:
        for b in s.requests:
            if a.id < b.id and a.prefix_name and a.prefix_name == b.prefix_name and a.prompt_ids != b.prompt_ids:
                assert _shared(a.prompt_ids, b.prompt_ids) == min(a.prefix_len, b.prefix_len), (a.id, b.id)
