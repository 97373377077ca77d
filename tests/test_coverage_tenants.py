"""The covering arrays' other-tenant primers (issue 41): a row aimed at a cache hit is primed by
another tenant first (another adapter, the base model or another salt) on the same tokens, then
by its own. A correct engine serves the row from its own pages; one whose cache key leaves the
adapter out (the zoo's lora-prefix-shared, vLLM #38606) serves it another adapter's KV."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable

import pytest

from servefuzz.coverage import Coverage, FeatureSpace, points
from servefuzz.covering import PairwiseCover
from servefuzz.oracles.tenancy import tenant_isolation
from servefuzz.runner import Runner
from servefuzz.strategies import CACHED_BY_MS, TargetShape
from servefuzz.targets import make_target
from servefuzz.workload import RequestSpec, Scenario

SMALL = TargetShape(page_size=16, chunked_prefill_size=128, max_total_tokens=2048, context_length=1024)
TENANTS = dataclasses.replace(SMALL, salts=True, adapters=("lora-a", "lora-b"))
FLAGS = ("--page-size", "16", "--chunked-prefill-size", "128", "--max-total-tokens", "2048", "--context-length", "1024",
         "--lora", "lora-a=1", "--lora", "lora-b=2")


def _reported(shape: TargetShape) -> Coverage:
    """A coverage whose target has reported cached tokens: the arrays aim at hits from then on."""
    return Coverage.empty(FeatureSpace.for_shape(shape)).observe([{"n": "1", "prefix": "none", "cache": "miss"}])


def _primed(s: Scenario) -> list[tuple[list[RequestSpec], RequestSpec]]:
    """Each row aimed at a cache hit, with the primers on its prefix (sent before it), in send order."""
    out = []
    for name in sorted({r.prefix_name for r in s.requests if r.prefix_name and r.prefix_name.startswith("c")}):
        *primers, row = sorted((r for r in s.requests if r.prefix_name == name), key=lambda r: r.offset_ms)
        out.append((primers, row))
    return out


def _key(r: RequestSpec) -> tuple[str | None, str | None]:
    return r.adapter, r.cache_salt


def test_a_row_aimed_at_a_hit_is_primed_by_another_tenant_first_then_by_its_own_or_is_a_probe() -> None:
    rows = probes = 0
    changed = set()
    for seed in range(12):
        for primers, row in _primed(PairwiseCover(coverage=_reported(TENANTS)).generate(random.Random(seed), TENANTS,
                                                                                          seed=seed)):
            foreign, *own = primers
            assert len(own) <= 1
            for mine in own:
                assert foreign.offset_ms < mine.offset_ms < row.offset_ms
                assert foreign.prefix_len == mine.prefix_len
                assert foreign.prompt_ids[:mine.prefix_len] == mine.prompt_ids[:mine.prefix_len]
                assert _key(mine) == _key(row)
            assert foreign.offset_ms < row.offset_ms and row.prompt_ids[:foreign.prefix_len] == foreign.prompt_ids[:foreign.prefix_len]
            assert _key(foreign) != _key(row)
            # Exactly one part of the key differs: the salt, or the adapter (or the base model).
            assert (foreign.adapter == row.adapter) != (foreign.cache_salt == row.cache_salt)
            changed.add("adapter" if foreign.adapter != row.adapter else "salt")
            rows += 1
            probes += not own  # a cross-tenant probe: only the other tenant held its prefix before it
            # ...and only a row whose hit the oracles can read: one sequence, not cut.
            assert own or (row.n == 1 and not row.cancelled), row
    assert rows >= 6 and changed == {"adapter", "salt"}
    assert 0 < probes < rows
    # The control: a target that keys its cache on tokens alone has no other tenant to be.
    for seed in range(12):
        for primers, _ in _primed(PairwiseCover(coverage=_reported(SMALL)).generate(random.Random(seed), SMALL, seed=seed)):
            assert len(primers) == 1


def test_another_tenants_primer_is_done_before_the_rows_own_primer_and_row_come() -> None:
    """Sent together, the two primers land in two slots (llama.cpp) and the row's tenant never
    reuses the other's finished work: llama.cpp's base-after-adapter slot (issue 41) went unseen
    without its strategy. A keyed engine's scenarios keep their timing (the control)."""
    for seed in range(12):
        s = PairwiseCover(coverage=_reported(TENANTS)).generate(random.Random(seed), TENANTS, seed=seed)
        for (foreign, *own), row in _primed(s):
            assert row.offset_ms - foreign.offset_ms >= CACHED_BY_MS[0] - 1
            for mine in own:
                assert mine.offset_ms - foreign.offset_ms >= CACHED_BY_MS[0] - 1
                assert row.offset_ms > mine.offset_ms
    for seed in range(12):
        s = PairwiseCover(coverage=_reported(SMALL)).generate(random.Random(seed), SMALL, seed=seed)
        assert all(primers[0].offset_ms < CACHED_BY_MS[0] for primers, _ in _primed(s))


def _adapter_rows(seeds: range) -> list[tuple[Scenario, RequestSpec]]:
    """Scenarios with a greedy, unconstrained, uncancelled row of n = 1 behind another adapter's primer."""
    out = []
    for seed in seeds:
        s = PairwiseCover(coverage=_reported(TENANTS)).generate(random.Random(seed), TENANTS, seed=seed)
        for (foreign, *_), row in _primed(s):
            if foreign.adapter != row.adapter and row.n == 1 and not row.cancelled and not row.seeded \
                    and row.choices is None and row.temperature == 0:
                out.append((s, row))
    return out


@pytest.mark.timeout(600)
def test_another_adapters_primer_leaves_a_correct_engine_s_row_exact_and_its_hit_planned_and_breaks_one_keyed_on_tokens(
    reference_server: Callable[..., str]
) -> None:
    chosen = _adapter_rows(range(40))[:3]
    assert len(chosen) == 3

    async def go(url: str) -> list[tuple[bool, str | None]]:
        """Per chosen row: whether its answer under the scenario's load equals its answer alone
        on a flushed server, and the cache bucket it was read in."""
        seen = []
        async with Runner(make_target("reference", url)) as runner:
            for s, row in chosen:
                await runner.flush()
                loaded = await runner.run(s, run=0)
                got = points(s, TENANTS, [loaded])[row.id].get("cache")
                await runner.flush()
                alone = await runner.run(Scenario(s.seed, (dataclasses.replace(row, offset_ms=0.0),)), run=0)
                tokens = {r.request_id: [c.token_ids for c in r.choices] for r in (*loaded.records, *alone.records)}
                [under_load] = [r for r in loaded.records if r.request_id == row.id]
                [by_itself] = [r for r in alone.records if r.request_id == row.id]
                assert under_load.ok and by_itself.ok, tokens
                seen.append(([c.token_ids for c in under_load.choices] == [c.token_ids for c in by_itself.choices], got))
        return seen

    clean = asyncio.run(go(reference_server(*FLAGS)))
    assert all(same for same, _ in clean), clean
    assert sum(got in ("full", "partial") for _, got in clean) >= 2, clean  # the planned hit, from its own primer
    faulty = asyncio.run(go(reference_server(*FLAGS, "--fault", "lora-prefix-shared")))
    assert not all(same for same, _ in faulty), faulty


def _salt_probes(seeds: range) -> list[tuple[Scenario, RequestSpec]]:
    """Scenarios with a cross-tenant probe under another salt: a greedy row of n = 1, not cut,
    whose prefix only another salt's primer held before it."""
    out = []
    for seed in seeds:
        s = PairwiseCover(coverage=_reported(SALTED)).generate(random.Random(seed), SALTED, seed=seed)
        for (foreign, *own), row in _primed(s):
            if not own and foreign.cache_salt != row.cache_salt:
                out.append((s, row))
    return out


SALTED = dataclasses.replace(SMALL, salts=True)


@pytest.mark.timeout(600)
def test_a_cross_tenant_probe_is_a_breach_on_an_engine_that_drops_the_salt_and_isolated_on_a_correct_one(
    reference_server: Callable[..., str]
) -> None:
    """The arrays alone (no tenant-salt strategy) show a salt the engine leaves out of its cache
    key: the zoo's salt-ignored, as SGLang 0.5.10.post1 did (docs/findings/sglang-cpu-salt-dropped).
    The control: the same scenarios on the correct engine, isolated."""
    chosen = _salt_probes(range(40))[:3]
    assert len(chosen) == 3

    async def go(url: str) -> list[str]:
        """Per chosen scenario, the tenant oracle's status over one loaded run on a flushed server."""
        seen = []
        async with Runner(make_target("reference", url)) as runner:
            for s, _ in chosen:
                await runner.flush()
                loaded = await runner.run(s, run=0)
                check = tenant_isolation(s, [loaded])
                seen.append(check.status + "".join(f" [{a.request_id}]" for a in check.anomalies))
        return seen

    flags = FLAGS[:8]  # no adapters: the salt is the only key
    clean = asyncio.run(go(reference_server(*flags)))
    assert not any(status.startswith("breach") for status in clean), clean
    faulty = asyncio.run(go(reference_server(*flags, "--fault", "salt-ignored")))
    hit = [status for status, (_, row) in zip(faulty, chosen, strict=True) if f"[{row.id}]" in status]
    assert len(hit) >= 2, faulty
