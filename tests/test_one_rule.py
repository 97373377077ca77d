"""One rule decides whether a finding came back, on every path that asks.

- On recorded histories: the standalone repro_full.py (standard library only) and
  `oracles.judge.reproduction` give the same runs and the same diverged requests, for any
  histories hypothesis makes (alone references or none, cache-state probes, failures).
- On the reference engine: a corruption finding and a cache-state finding get the same verdict
  and the same rate from the campaign's confirmation, `servefuzz replay`, shrink's first
  reproduction and repro_full.py; a replayed finding file is held to its campaign's noise model.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zoo_cases import REFERENCE_SHAPE, page_boundary_scenario

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.api import replay
from servefuzz.campaign import CampaignConfig, run_campaign
from servefuzz.finding import Confirmation, Finding, load_finding, write_finding
from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
from servefuzz.launcher import Launch, ServerProcess
from servefuzz.oracles.judge import Expectation, reproduction
from servefuzz.oracles.noise import MIN_SAMPLES, NOISE_FILE, CampaignNoise, Shift
from servefuzz.reports import write_report
from servefuzz.reports.repro import repro_script
from servefuzz.runner import RunConfig, Runner
from servefuzz.server_facts import TargetInfo
from servefuzz.servers import Replayer
from servefuzz.store import finding_noise, write_noise
from servefuzz.strategies import Draft, RandomLoad
from servefuzz.targets import make_target
from servefuzz.workload import RequestSpec, Scenario

IDS = ("r01", "r02", "r03")


def script_module(finding: Finding) -> types.ModuleType:
    """repro_full.py of `finding`, loaded as a module (its main() is not run)."""
    module = types.ModuleType("repro_under_test")
    exec(compile(repro_script(finding), "repro_full.py", "exec"), module.__dict__)
    return module


def outcome(repro: types.ModuleType, r: RequestRecord) -> object:
    choices = {c.index: (tuple(c.token_ids), c.text) for c in r.choices}
    return repro.Outcome(r.request_id, r.status.value, choices, r.error or "", r.http_status, r.end_ms or 0.0)


def finding_of(oracle: Oracle, verdict: Verdict, flagged: str) -> Finding:
    specs = tuple(RequestSpec(rid, 0.0, (5, 6, 7, 8), 3, "p" if rid == "r02" else None, 2 if rid == "r02" else 0)
                  for rid in IDS)
    return Finding(1, 1, Scenario(1, specs), TargetInfo("sglang", "http://127.0.0.1:1"),
                   (Anomaly(oracle, verdict, flagged, f"{flagged} flagged"),))


answers = st.sampled_from([(5, 6), (5, 7), (9,)])
statuses = st.sampled_from([Status.OK, Status.OK, Status.OK, Status.TIMEOUT, Status.HTTP_ERROR, Status.CONNECTION_ERROR])


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[RunHistory], dict[str, list[RequestRecord]], list[RequestRecord]]:
    n = draw(st.integers(1, 2))  # two choices: a seeded draw's differ, each held to its own reference

    def record(rid: str, run: int, label: str) -> RequestRecord:
        status = draw(statuses)
        choices = tuple(ChoiceRecord(i, draw(answers)) for i in range(n)) if status is Status.OK else ()
        return RequestRecord(rid, run, label, status, 0.0, choices=choices, end_ms=float(draw(st.integers(0, 9))),
                             http_status=500 if status is Status.HTTP_ERROR else None)

    runs = [RunHistory(k, "load", tuple(record(rid, k, "load") for rid in IDS)) for k in range(draw(st.integers(1, 5)))]
    alone = {rid: [record(rid, 0, "alone")] for rid in IDS if draw(st.booleans())}
    probes = [record("r02", k, label) for k in range(len(runs)) for label in ("warm", "primed") if draw(st.booleans())]
    return runs, alone, probes


@pytest.mark.parametrize(
    "oracle, verdict, flagged",
    [
        (Oracle.ISOLATION, Verdict.CORRUPTION, "r01"),
        (Oracle.CACHE_STATE, Verdict.CORRUPTION, "r02"),
        (Oracle.LIVENESS, Verdict.HANG, "r03"),
        (Oracle.LIVENESS, Verdict.SERVER_ERROR, "r01"),
    ],
)
@settings(max_examples=150, deadline=None)
@given(data=histories())
def test_repro_py_and_servefuzz_judge_recorded_histories_alike(
    oracle: Oracle, verdict: Verdict, flagged: str,
    data: tuple[list[RunHistory], dict[str, list[RequestRecord]], list[RequestRecord]],
) -> None:
    runs, alone, probes = data
    finding = finding_of(oracle, verdict, flagged)
    ours = reproduction(Expectation.of(finding), runs, alone, cache=probes)
    repro = script_module(finding)
    theirs_runs, theirs_diverged = repro.reproduction(
        [[outcome(repro, r) for r in h.records] for h in runs],
        {rid: outcome(repro, recs[0]) for rid, recs in alone.items()},
        [(r.run, outcome(repro, r)) for r in probes],
    )
    assert len(theirs_runs) == ours.reproduced
    if ours.reproduced and not Expectation.of(finding).about_failure:
        assert tuple(theirs_diverged) == ours.expected


def test_each_choice_of_a_seeded_draw_is_held_to_its_own_reference() -> None:
    def rec(run: int, label: str, *choices: tuple[int, ...]) -> RequestRecord:
        return RequestRecord("r01", run, label, Status.OK, 0.0,
                             choices=tuple(ChoiceRecord(i, ids) for i, ids in enumerate(choices)))

    finding = finding_of(Oracle.ISOLATION, Verdict.CORRUPTION, "r01")
    alone = {"r01": [rec(0, "alone", (5, 6), (9,))]}
    same = [RunHistory(k, "load", (rec(k, "load", (5, 6), (9,)),)) for k in range(3)]
    moved = [*same[:2], RunHistory(2, "load", (rec(2, "load", (5, 6), (5, 7)),))]
    repro = script_module(finding)
    for runs, expected in ((same, 0), (moved, 1)):
        assert reproduction(Expectation.of(finding), runs, alone).reproduced == expected
        theirs, _ = repro.reproduction([[outcome(repro, r) for r in h.records] for h in runs],
                                       {"r01": outcome(repro, alone["r01"][0])})
        assert len(theirs) == expected


# -- on the reference engine --------------------------------------------------------------


SHAPE = REFERENCE_SHAPE


def abort_reuse_scenario() -> Scenario:
    """abort-reuse seen by the cache-state probes: r01 caches a one-page prefix and finishes;
    r02 shares it and is cut after its prefill (the fault frees the shared pages); r03 then
    takes those pages. The loaded run is right; the warm probe of r01 hits the stale prefix.
    The cut lands 400 ms in, mid-decode (r02's prefill takes about 40 ms on a quiet machine and
    its 1,500 tokens about a second): at 60 ms, two busy cores once delayed the prefill past
    the cut, and that replay could not show the fault; at 250 ms the whole suite's load did it
    for two runs of the campaign's five (2026-12-07)."""
    d = Draft(11, SHAPE)
    d.add(0.0, 64 + 8, 2, prefix="p0", prefix_len=64)
    d.add(60.0, 64 + 30, 1500, prefix="p0", prefix_len=64, cancel_after_ms=400.0)
    d.add(900.0, 600, 4)
    return d.scenario("hand")


def campaign_finding(fault: str, scenario: Scenario, out: Path) -> Finding:
    config = CampaignConfig(out_dir=out, request_budget=1, stop_at_first=True, confirm_runs=5)

    async def go() -> Finding:
        with ServerProcess.reference(["--fault", fault]) as server:
            async with Runner(make_target("reference", server.base_url), RunConfig()) as runner:
                result = await run_campaign(runner, [RandomLoad()], config, seeds=[scenario])
        assert result.findings, f"{fault}: the campaign found nothing in the hand-made scenario"
        return result.findings[0][1]

    return asyncio.run(go())


def repro_rate(finding: Finding, out: Path) -> tuple[int, int]:
    paths = write_report(finding, out)
    with Replayer(Launch.reference(finding.target)) as bench:  # a fresh server, as issue.md starts it
        p = subprocess.run([sys.executable, str(paths.repro), "--base-url", str(bench.url), "--runs", "5"],
                           capture_output=True, text=True, timeout=300)
    m = re.search(r"RESULT: (?:CONFIRMED|NOT REPRODUCED)\s+\(in (\d+)/(\d+) replays", p.stdout)
    assert m, (p.stdout, p.stderr)
    return int(m.group(1)), int(m.group(2))


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault, scenario, oracle",
    [
        ("page-boundary-prefix", page_boundary_scenario(), Oracle.ISOLATION),
        ("abort-reuse", abort_reuse_scenario(), Oracle.CACHE_STATE),
    ],
)
def test_every_path_gives_one_answer_on_the_reference_engine(
    tmp_path: Path, fault: str, scenario: Scenario, oracle: Oracle
) -> None:
    found = campaign_finding(fault, scenario, tmp_path / "c")
    assert oracle in {a.oracle for a in found.anomalies}, [a.summary for a in found.anomalies]
    assert found.confirmation is not None
    campaign = (found.confirmation.reproduced, found.confirmation.attempts)

    replayed = replay(found, launch="reference", runs=5)
    with Replayer(Launch.reference(found.target)) as bench:  # what shrink asks first
        first = bench.reproduce(found.scenario, Expectation.of(found), 5)
    script = repro_rate(found, tmp_path / "report")

    rates = {"campaign": campaign, "replay": (replayed.confirmation.reproduced, replayed.confirmation.attempts),
             "shrink": (first.reproduced, first.attempts), "repro_full.py": script}
    # One rule on every path: each reproduces the finding, at rates at most one replay of five
    # apart. A path judging by another rule gives 0/5 beside 5/5; one replay that the box's load
    # kept out of the batch the fault needs (4/5 beside 5/5, seen twice in loaded suites) is the
    # scenario's timing, not the rule.
    counts = [k for k, _ in rates.values()]
    assert {n for _, n in rates.values()} == {5} and min(counts) > 0 and max(counts) - min(counts) <= 1, rates
    # Replays alone cannot back a flip (only a control can): they show the finding's verdict unbacked.
    assert first.verdict_of(Expectation.of(found)) is found.verdict.unbacked
    assert replayed.confirmed and {d.verdict for d in replayed.diverged if d.expected} == {found.verdict.unbacked}


def test_finding_files_round_trip_through_the_rule(tmp_path: Path) -> None:
    # A confirmation read back from a file judges like the one written (the rule reads no state).
    f = finding_of(Oracle.REPLAY, Verdict.CORRUPTION, "r01")
    confirmed = Finding(f.iteration, f.seed, f.scenario, f.target, f.anomalies,
                        confirmation=Confirmation(3, 5, {}, ("r01",), ("r02", "r03")))
    from servefuzz.finding import write_finding

    again = load_finding(write_finding(tmp_path, confirmed))
    assert Expectation.of(again) == Expectation.of(confirmed)


def test_replay_judges_a_campaign_finding_against_the_campaign_noise(
    tmp_path: Path, reference_server: Callable[..., str]
) -> None:
    # The campaign's benign gap shifts reach 5 nats (threshold 10): a flip whose margin sits
    # below that (page-boundary-prefix's are 1.6-2.1, bounds) is excused by the campaign, and a
    # replay of its finding file must hold it to the same bar, not to its scenario's 0.001.
    url = reference_server("--fault", "page-boundary-prefix")
    scenario = page_boundary_scenario()
    finding = Finding(1, 1, scenario, TargetInfo("reference", url), tuple(
        Anomaly(Oracle.ISOLATION, Verdict.SUSPECTED_CORRUPTION, r.id, f"{r.id} flipped") for r in scenario.requests[1:]))
    campaign = tmp_path / "c"
    path = write_finding(campaign / "findings", finding)
    write_noise(campaign, CampaignNoise.empty().with_shifts([Shift(0, 5.0, 5.0)] * MIN_SAMPLES, cached=False))

    def verdicts(given: Finding | Path) -> tuple[set[Verdict], str]:
        result = replay(given, url=url, runs=2)
        assert result.confirmed  # the rate does not depend on the noise; the verdict does
        return {d.verdict for d in result.diverged if d.expected}, result.rate

    with_noise, rate = verdicts(path)
    assert with_noise and with_noise <= {Verdict.NUMERIC_DRIFT, Verdict.UNCLASSIFIED}, with_noise
    # A Finding object has no path, so no campaign: the scenario's own noise decides alone.
    assert verdicts(finding) == ({Verdict.SUSPECTED_CORRUPTION}, rate)
    (campaign / NOISE_FILE).unlink()
    assert finding_noise(path) is None
    assert verdicts(path) == ({Verdict.SUSPECTED_CORRUPTION}, rate)
