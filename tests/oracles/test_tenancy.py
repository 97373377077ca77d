"""The tenant-isolation oracle: the paired assertion (same salt reuses, another salt never does)
and the timing channel, in the one judging function and the one reproduction rule.

Constructed histories pin each branch; then the oracle over real HTTP on the reference engine,
through `trial.execute`: it fires on `--fault salt-ignored`, says "isolated" on the clean
engine and "caching off, isolation untested" (never "isolated") under the cure."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from servefuzz.anomaly import Oracle, Verdict
from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
from servefuzz.oracles.judge import Expectation, judge, reproduction
from servefuzz.oracles.tenancy import TTFT_FLOOR_MS, tenant_isolation
from servefuzz.runner import RunConfig, Runner
from servefuzz.strategies import TargetShape, TenantSalt
from servefuzz.targets import make_target
from servefuzz.trial import execute
from servefuzz.workload import RequestSpec, Scenario

PREFIX = tuple(range(100, 228))  # two 64-token pages
SCENARIO = Scenario(1, (
    RequestSpec("a1", 0.0, PREFIX + (5,), 4, "t", 128, cache_salt="A"),
    RequestSpec("bg", 10.0, tuple(range(300, 340)), 4),
    RequestSpec("a2", 200.0, PREFIX + (6,), 4, "t", 128, stream=True, cache_salt="A"),
    RequestSpec("c1", 250.0, tuple(range(400, 529)), 4, "c", 128, stream=True, cache_salt="C"),
    RequestSpec("b1", 300.0, PREFIX + (7,), 4, "t", 128, stream=True, cache_salt="B"),
), meta={"page_size": 64, "twins": {"b1": "c1"}})
SENT = {"a1": 0.0, "bg": 10.0, "a2": 200.0, "c1": 250.0, "b1": 300.0}


def run(i: int, cached: dict[str, int | None], ttft: dict[str, float] | None = None) -> RunHistory:
    ttft = ttft or {}
    recs = []
    for rid, sent in SENT.items():
        first = sent + ttft.get(rid, 20.0)
        recs.append(RequestRecord(rid, i, "load", Status.OK, sent, sent, first, first + 10.0,
                                  (ChoiceRecord(0, (7, 8, 9, 10)),), cached_tokens=cached.get(rid, 0)))
    return RunHistory(i, "load", tuple(recs))


def alone() -> dict[str, list[RequestRecord]]:
    return {rid: [RequestRecord(rid, 0, "alone", Status.OK, 0.0, 0.0, 20.0, 30.0, (ChoiceRecord(0, (7, 8, 9, 10)),),
                                cached_tokens=0)] for rid in SENT}


def test_the_paired_assertion_fires_on_a_cross_salt_hit_and_holds_on_a_reuse() -> None:
    clean = [run(i, {"a2": 128}) for i in range(2)]
    check = tenant_isolation(SCENARIO, clean)
    assert check.anomalies == () and check.status == "isolated: 2 same-salt reuses, 2 cross-salt probes with no hit"
    assert judge(clean, alone(), scenario=SCENARIO).tenancy == check.status
    breached = [run(i, {"a2": 128, "b1": 128}) for i in range(2)]
    j = judge(breached, alone(), scenario=SCENARIO)
    [a] = j.anomalies
    assert (a.oracle, a.verdict, a.request_id) == (Oracle.TENANT_ISOLATION, Verdict.ISOLATION_BREACH, "b1")
    assert a.evidence["salt"] == "B" and a.evidence["allowed"] == 0 and a.evidence["runs"] == [0, 1]
    hit = a.evidence["hits"][0]
    assert (hit["source"], hit["source_salt"], hit["cached_tokens"], hit["ttft_ms"]) == ("a1", "A", 128, 20.0)
    assert "a hit on another tenant's prefix (a1, salt 'A')" in a.summary and j.tenancy.startswith("breach: b1")
    # The one reproduction rule: a replay shows it again where b1 again reports the hit.
    expect = Expectation.of_judgement(j)
    again = reproduction(expect, [run(5, {"a2": 128, "b1": 64}), run(6, {"a2": 128})], alone())
    assert (again.reproduced, again.attempts, again.expected) == (1, 2, ("b1",))


def test_no_reuse_means_untested_never_isolated() -> None:
    # A cache that is off passes the negative half trivially (vLLM PR #53347): that is no pass.
    off = tenant_isolation(SCENARIO, [run(i, {}) for i in range(2)])
    assert off.anomalies == () and off.status == "untested: caching off (no same-salt request reused a cached prefix)"
    silent = tenant_isolation(SCENARIO, [run(i, dict.fromkeys(SENT)) for i in range(2)])
    assert silent.status == "untested: the server reports no cached tokens"
    unsalted = Scenario(1, tuple(RequestSpec(r.id, r.offset_ms, r.prompt_ids, 4) for r in SCENARIO.requests))
    assert tenant_isolation(unsalted, [run(0, {"b1": 128})]).status == ""
    # A hit the own salt explains (the probe's own prompt, sent before: a warm cache probe).
    warm = RequestRecord("b1", 0, "warm", Status.OK, 0.0, 0.0, 5.0, 9.0, (ChoiceRecord(0, (7,)),), cached_tokens=128)
    assert tenant_isolation(SCENARIO, [run(0, {"a2": 128})], cache=[warm]).anomalies == ()


def test_timing_alone_is_at_most_suspected_and_needs_every_run_above_the_threshold() -> None:
    fast = {"b1": 20.0, "c1": 20.0 + TTFT_FLOOR_MS + 40}
    runs = [run(i, {"a2": 128}, fast) for i in range(2)]
    [a] = tenant_isolation(SCENARIO, runs).anomalies
    assert a.verdict is Verdict.SUSPECTED_ISOLATION_BREACH and a.evidence["twin"] == "c1"
    assert a.evidence["threshold_ms"] == TTFT_FLOOR_MS and "timing only" in a.summary
    assert not Verdict.SUSPECTED_ISOLATION_BREACH.is_divergence
    assert Verdict.SUSPECTED_ISOLATION_BREACH.rank > Verdict.SUSPECTED_CORRUPTION.rank
    # One run within the threshold, or jitter that large, and there is nothing to say.
    near = [run(0, {"a2": 128}, fast), run(1, {"a2": 128}, {"b1": 20.0, "c1": 20.0 + TTFT_FLOOR_MS - 1})]
    assert tenant_isolation(SCENARIO, near).anomalies == ()
    noisy = [run(0, {"a2": 128}, {**fast, "bg": 20.0}), run(1, {"a2": 128}, {**fast, "bg": 120.0})]
    check = tenant_isolation(SCENARIO, noisy)
    assert check.anomalies == () and check.threshold_ms == 300.0  # 3 x the 100 ms jitter of bg


def execution(url: str, seed: int) -> tuple[Scenario, RunHistory, str, list[str]]:
    async def go() -> tuple[Scenario, RunHistory, str, list[str]]:
        async with Runner(make_target("reference", url), RunConfig()) as r:
            sc = TenantSalt().generate(random.Random(seed), TargetShape(page_size=64, salts=True), seed=seed)
            done = await execute(r, sc, runs=2, with_alone=True)
            j = done.judge()
            return sc, done.loaded[0], j.tenancy, [f"{a.verdict.value}:{a.request_id}" for a in j.anomalies]
    return asyncio.run(go())


def test_the_oracle_fires_on_salt_ignored_and_stays_quiet_clean_and_cured(reference_server: Callable[..., str]) -> None:
    sc, first, status, found = execution(reference_server("--fault", "salt-ignored"), 3)
    probe = next(iter(sc.meta["twins"]))
    assert f"isolation-breach:{probe}" in found and status.startswith(f"breach: {probe}"), (status, found)
    assert next(r for r in first.records if r.request_id == probe).cached_tokens
    _, _, status, found = execution(reference_server(), 3)
    assert found == [] and status.startswith("isolated: "), (status, found)
    # The cure turns the cache off: nothing crosses, and nothing is reused either, which the
    # oracle says rather than calling it isolated.
    _, _, status, found = execution(reference_server("--fault", "salt-ignored", "--disable-radix-cache"), 3)
    assert found == [] and status.startswith("untested: caching off"), (status, found)
