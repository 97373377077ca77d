"""The host-tier strategy (`strategies.tiers`): sized from the server's own facts, offered only
where a host tier is on, and, against a real reference engine with its tier on, the workload that
makes the tier's read path run where the rest of the mix does not, as the engine's meter says."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest

from servefuzz.campaign.choose import shape_of
from servefuzz.engines.spec import Feature
from servefuzz.exercise import Exercise, observe
from servefuzz.runner import Runner
from servefuzz.server_facts import TargetInfo
from servefuzz.strategies import STRATEGIES, HostTierReturn, RandomLoad, TargetShape, offered, shape_aims
from servefuzz.targets import make_target
from servefuzz.trial import execute
from servefuzz.workload import Scenario

SHAPE = TargetShape(page_size=64, max_total_tokens=4096, chunked_prefill_size=2048, host_tier=True,
                    host_tier_tokens=8192, salts=True, adapters=("lora-a", "lora-b"))


def scenario(seed: int, shape: TargetShape = SHAPE) -> Scenario:
    return HostTierReturn().generate(random.Random(seed), shape, seed=seed)


@pytest.mark.parametrize("seed", range(12))
def test_a_prefix_then_pushers_past_the_device_but_not_past_the_host_then_the_prefix_again(seed: int) -> None:
    s = scenario(seed)
    prefixed = [r for r in s.requests if r.prefix_name == "p0"]
    others = sorted((r for r in s.requests if r.prefix_name is None), key=lambda r: r.offset_ms)
    pushers, companions = others[: s.meta["pushers"]], others[s.meta["pushers"]:]
    holders = [r for r in prefixed if r.offset_ms < pushers[0].offset_ms]
    later = sorted((r for r in prefixed if r not in holders), key=lambda r: r.offset_ms)
    first = holders[0]
    assert 1 <= len(holders) <= 2
    pushed = sum(r.prompt_len + r.max_tokens for r in pushers)
    assert pushed == s.meta["load_tokens"] and 4096 < pushed < 8192 - first.prefix_len
    # Every return leaves after the last pusher: queued behind them, it is admitted once they are.
    assert later and all(r.offset_ms > pushers[-1].offset_ms for r in later)
    # Busy: each return rides right behind a fresh companion; quiet: seconds after, alone.
    returns = [r for r in later if r.offset_ms < later[-1].offset_ms] or later[:1]
    if s.meta["returned"] == "busy":
        assert len(companions) == len(later) - 1 and all(
            any(0 < r.offset_ms - c.offset_ms <= 1.0 for c in companions) for r in returns)
    else:
        assert not companions and later[0].offset_ms > pushers[-1].offset_ms + 1500
    assert all(r.offset_ms > first.offset_ms + 100 for r in pushers)  # the prefix is cached first
    assert s.meta["returned"] in ("busy", "quiet")


def test_busy_and_quiet_returns_and_tenants_each_come_up() -> None:
    seen = [scenario(seed) for seed in range(40)]
    assert {s.meta["returned"] for s in seen} == {"busy", "quiet"}
    tenants = {(r.cache_salt is not None, r.adapter) for s in seen for r in s.requests if r.prefix_name == "p0"}
    assert {(False, None), (True, None), (False, "lora-a"), (False, "lora-b")} <= tenants
    # A return from another tenant than the prefix's owner: what the host's keys must keep apart.
    assert any(len({(r.cache_salt, r.adapter) for r in s.requests if r.prefix_name == "p0"}) > 1 for s in seen)
    # Without salts or adapters every request is the base model's.
    plain = TargetShape(page_size=16, max_total_tokens=2048, host_tier=True)
    assert all(r.cache_salt is None and r.adapter is None for seed in range(10) for r in scenario(seed, plain).requests)


def test_a_host_tier_sized_in_gigabytes_is_taken_as_twice_the_pool() -> None:
    s = scenario(3, TargetShape(page_size=16, max_total_tokens=2048, host_tier=True))
    assert (s.meta["device"], s.meta["host"]) == (2048, 4096)


def test_offered_and_aimed_at_only_where_the_server_has_a_host_tier() -> None:
    assert HostTierReturn.name in STRATEGIES
    assert offered([HostTierReturn()], TargetShape(max_total_tokens=4096)) == ()
    assert offered([HostTierReturn()], SHAPE) == (HostTierReturn(),)
    assert shape_aims(SHAPE)[0] == HostTierReturn.name
    # From the server's facts: the reference engine's own flag, SGLang's HiCache args.
    ref = shape_of(TargetInfo("reference", "http://127.0.0.1:1", server_args={"host_tier_tokens": 8192}))
    sgl = shape_of(TargetInfo("sglang", "http://127.0.0.1:1", server_args={
        "enable_hierarchical_cache": True, "hicache_ratio": 2.0, "hicache_size": 0, "max_total_num_tokens": 4096}))
    off = shape_of(TargetInfo("reference", "http://127.0.0.1:1", server_args={"host_tier_tokens": 0}))
    assert (ref.host_tier, ref.host_tier_tokens) == (True, 8192) and (sgl.host_tier, sgl.host_tier_tokens) == (True, 8192)
    assert "host_tier" in ref.capabilities and "host_tier" not in off.capabilities


def test_on_a_real_tiered_engine_it_loads_back_where_unaimed_load_does_not(reference_server: Callable[..., str]) -> None:
    """The meter decides: a host-tier-return scenario makes the engine load pages back from its
    host tier (`sglang:load_back_tokens_total`, read around each loaded run), and the summary line
    says the tier was exercised; unaimed load on the same server leaves the read path untested."""
    url = reference_server("--max-total-tokens", "2048", "--host-tier-tokens", "4096")

    async def go(pick: Callable[[TargetShape], Scenario]) -> Exercise:
        async with Runner(make_target("reference", url)) as runner:
            assert runner.info is not None
            sc = pick(shape_of(runner.info))
            done = await execute(runner, sc, runs=2, with_alone=False)
            return observe(runner.info, sc, done.loaded)

    aimed = asyncio.run(go(lambda shape: scenario(1, shape)))
    unaimed = asyncio.run(go(lambda shape: RandomLoad().generate(random.Random(1), shape, seed=1)))
    assert aimed.exercised(Feature.HOST_CACHE), aimed.lines()
    line = next(line for line in aimed.lines() if line.startswith("host-tier cache:"))
    assert "tokens loaded back from the host tier (sglang:load_back_tokens_total" in line
    assert not unaimed.exercised(Feature.HOST_CACHE)
    assert any(line.startswith("host-tier cache: 0 ") and "nothing about it was tested" in line for line in unaimed.lines())
