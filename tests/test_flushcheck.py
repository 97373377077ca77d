"""A flush proven by its meter (issue 53, item 6), against real reference engines: with its host
tier on, a flush that empties the device alone (`--flush-device-only`, vLLM's /reset_prefix_cache
without reset_external) is caught by the campaign's probe and by its cold references, said first
in the summary and in --json; a flush that empties every tier is proven; a server that caches
nothing leaves it untested, never "proven"."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from servefuzz.campaign import CampaignConfig, CampaignResult, run_campaign
from servefuzz.flushcheck import FlushCheck, probe_scenario
from servefuzz.progress import print_summary
from servefuzz.runner import Runner
from servefuzz.strategies import RandomLoad
from servefuzz.targets import make_target
from servefuzz.trial import execute
from servefuzz.workload import RequestSpec, Scenario

TIER = ("--max-total-tokens", "4096", "--host-tier-tokens", "8192")


def campaign(url: str, out: Path) -> CampaignResult:
    async def go() -> CampaignResult:
        async with Runner(make_target("reference", url)) as runner:
            return await run_campaign(runner, [RandomLoad()], CampaignConfig(out, seed=2, request_budget=12, confirm_runs=2))

    return asyncio.run(go())


def summary(result: CampaignResult) -> list[str]:
    text = io.StringIO()
    print_summary(Console(file=text, width=200), result)
    return text.getvalue().splitlines()


@pytest.mark.timeout(240)
def test_a_flush_that_leaves_the_host_tier_full_is_caught_and_said_first(
    tmp_path: Path, reference_server: Callable[..., str]
) -> None:
    result = campaign(reference_server(*TIER, "--flush-device-only"), tmp_path / "kept")
    assert result.flush is not None and result.flush.state == "failed" and not result.flush.trusted
    assert "the probe ~flush reported" in result.flush.why and "sglang:load_back_tokens_total" in result.flush.why
    # Every cold reference after it came back from the host too: the references say it themselves.
    assert result.flush.references > 0 and result.flush.warm == result.flush.references
    first = summary(result)[0]
    assert first.startswith("FLUSH NOT PROVEN") and first.endswith("cold references in this campaign are untrusted")
    assert result.to_json()["flush_check"]["trusted"] is False


@pytest.mark.timeout(240)
def test_a_flush_that_empties_every_tier_is_proven_and_stays_quiet(tmp_path: Path, reference_server: Callable[..., str]) -> None:
    result = campaign(reference_server(*TIER), tmp_path / "flushed")
    assert result.flush is not None and result.flush.state == "proven" and result.flush.trusted
    assert result.flush.references > 0 and result.flush.warm == 0
    assert "sglang:load_back_tokens_total" in result.flush.why
    assert not any("FLUSH NOT PROVEN" in line for line in summary(result))
    assert result.to_json()["flush_check"]["trusted"] is True


def test_a_server_that_caches_nothing_leaves_the_flush_untested(reference_server: Callable[..., str]) -> None:
    from servefuzz.flushcheck import probed

    url = reference_server("--disable-radix-cache")

    async def go() -> FlushCheck:
        async with Runner(make_target("reference", url)) as runner:
            assert runner.info is not None
            probe = probe_scenario(64, range(3, 1024))
            return probed(runner.info, probe, (await execute(runner, probe, runs=2, with_alone=False)).loaded)

    check = asyncio.run(go())
    assert check.state == "untested" and check.trusted and "never served from the cache" in check.why


def test_cold_references_are_read_one_choice_and_sent_ones_only() -> None:
    from servefuzz.history import RequestRecord, Status

    sc = Scenario(1, (RequestSpec("r01", 0.0, (5, 6, 7), 2), RequestSpec("r02", 0.0, (5, 6, 8), 2, n=3),
                      RequestSpec("r03", 0.0, (5, 6, 9), 2)))

    def alone(rid: str, cached: int) -> tuple[RequestRecord, ...]:
        return (RequestRecord(rid, 0, "alone", Status.OK, 0.0, cached_tokens=cached),)

    check = FlushCheck("proven", "the probe").seen(sc, {"r01": alone("r01", 64), "r02": alone("r02", 64),
                                                         "r03": alone("r03", 64)}, reused=("r03",))
    # r02's n choices may hit each other's pages; r03's answer was an earlier one reused: r01 alone counts.
    assert (check.references, check.warm, check.examples, check.trusted) == (1, 1, ("r01",), False)
    assert FlushCheck.from_json(json.loads(json.dumps(check.to_json()))) == check
