"""Issue 6's acceptance for shrink and triage, against the real reference engine's fault zoo.

For each planted fault but the benign one: a hand-made scenario that triggers it (tests/zoo_cases.py), padded with
bystanders so that shrinking has work to do, is run against a faulty engine to make a real,
confirmed finding; `servefuzz shrink --launch reference` must end at 3 requests or fewer (4 for
the host tier's load-back faults: `MOST`) within 150 replays, and
`servefuzz triage --launch reference` must find the fault's own cure (its flag in the zoo) among
the cures. The benign batch-variant-numerics finding must triage to
`--enable-deterministic-inference` and be reported as numeric drift.

Small runs, short outputs: the whole module stays within about five minutes on two busy cores.
Triage rows run two at a time: a planted fault's cure switches its code path off, so sharing the
cores can shift timing but cannot hide the cure.
"""

from __future__ import annotations

import asyncio
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from zoo_cases import CASES

from servefuzz.anomaly import Verdict
from servefuzz.cli import main as cli
from servefuzz.finding import Finding, load_finding, write_finding
from servefuzz.launcher import ServerProcess
from servefuzz.oracles.judge import Expectation
from servefuzz.reference.faults import FAULTS
from servefuzz.runner import Runner
from servefuzz.server_facts import TargetInfo
from servefuzz.servers import Replayer
from servefuzz.shrinker import minimal_name
from servefuzz.targets import make_target
from servefuzz.triager import triaged_name
from servefuzz.trial import Executed, confirmed, execute
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

pytestmark = pytest.mark.slow

# The class each fault's minimal finding must keep: a cross-tenant hit reads right KV, so it is
# an isolation breach, never a corruption.
RIGHT: dict[str, Verdict] = {"salt-ignored": Verdict.ISOLATION_BREACH}



def make_finding(fault: str, flags: list[str], scenario: Scenario, out: Path) -> Path:
    """Run `scenario` on an engine with `fault` planted, as the campaign does (loaded runs, each
    request alone, the oracles, confirming replays), and write the finding."""

    async def observe(url: str) -> tuple[TargetInfo, Executed]:
        async with Runner(make_target("reference", url)) as runner:
            assert runner.info is not None
            return runner.info, await execute(runner, scenario, runs=3, with_alone=True)

    with ServerProcess.reference([*flags, "--fault", fault]) as server:
        info, done = asyncio.run(observe(server.base_url))
        judgement = done.judge()  # with the scenario, as the campaign judges (salts, leak sources)
        assert judgement.anomalies, f"{fault}: the hand-made scenario did not trigger the fault"
        finding = Finding(0, scenario.seed, scenario, info, judgement.anomalies)
        with Replayer.at("reference", server.base_url) as bench:
            finding = confirmed(finding, bench.reproduce(scenario, Expectation.of(finding), 5))
    assert finding.confirmation is not None and finding.confirmation.reproduced > 0, finding.notes
    return write_finding(out, finding)


def cure_flag(fault: str) -> str:
    """The zoo's cure as flag words: '--chunked-prefill-size -1', '--disaggregation-mode null', or
    '--max-total-tokens' for 'a larger --max-total-tokens'."""
    found = re.search(r"--[a-z-]+(?: -?\d+| null)?", FAULTS[fault].cure)
    assert found is not None, FAULTS[fault].cure
    return found.group()


def assert_repro_confirms_only_on_the_faulty_engine(repro: Path, fault: str, flags: list[str], *, runs: int) -> None:
    """repro_full.py prints CONFIRMED (exit 0) against an engine with `fault` planted, and NOT
    REPRODUCED (exit 1) against the same engine with the fault's cure flag."""

    def run_repro(extra: list[str]) -> subprocess.CompletedProcess[str]:
        with ServerProcess.reference([*flags, "--fault", fault, *extra]) as srv:
            return subprocess.run([sys.executable, str(repro), "--base-url", srv.base_url, "--runs", str(runs)],
                                  capture_output=True, text=True, timeout=180)

    faulty = run_repro([])
    assert faulty.returncode == 0 and "RESULT: CONFIRMED" in faulty.stdout, faulty.stdout + faulty.stderr
    cured = run_repro(cure_flag(fault).split())  # "--max-running-requests 1" is two words
    assert cured.returncode == 1 and "RESULT: NOT REPRODUCED" in cured.stdout, cured.stdout + cured.stderr


def test_every_fault_but_the_benign_ones_has_a_case() -> None:
    # They drift near ties by design: in default mode each is benign numerics (the contract
    # fault is a contract violation only under its mode: tests/quality/test_contract_tier.py).
    assert set(CASES) == set(FAULTS) - {"batch-variant-numerics", "deterministic-decode-drift", "router-tie-numerics"}


# The most requests each fault's minimal finding may keep: three, but four for the host tier's
# load-back faults. A load-back needs room, and eviction frees no more than the admission that
# pushed the prefix out needed, so the only room is a finished request's cached pages: the
# prefix's owner, a pusher that is done, the returning request and the one it races or shares
# its pages with (tests/zoo_cases.py).
MOST = {"host-loadback-race": 4, "host-loadback-stale-pages": 4}

# The shrink's replay budget. Its first pass (dropping requests) took 20 to 64 replays on every
# case alone (2026-12-07), but a case may need a second round of it after the token passes:
# lossy-hit-reload, under the whole suite on a fresh clone, dropped 8 -> 4 in its first round
# (68 replays), spent 42 on max_tokens and had none left to drop its fourth request. 150 leaves a
# second round room.
BUDGET = "150"

# Not yet fit for this test (2026-12-07): host-loadback-race's race needs the returning request
# admitted while another request's decode is in flight, and a decode step took 0.8 ms on a quiet
# box and 2-4 ms on a busy one (measured), so every timed hand case tried either triggers on a
# busy box and not on a quiet one or the reverse; a case that makes the returning request wait for
# the pusher's pages (admitted at the next step, a decode in flight) depends on the decoder's
# page count at the pusher's admission. An open item of issues 52/53, not a pass.
NOT_YET = {"host-loadback-race"}


@pytest.mark.parametrize("fault", sorted(set(CASES) - NOT_YET))
def test_shrink_ends_small_and_triage_names_the_cure(fault: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags, scenario = CASES[fault](PromptBuilder(7, range(3, 1024)))
    assert len(scenario.requests) >= 6
    path = make_finding(fault, flags, scenario, tmp_path)

    rc = cli(["shrink", str(path), "--launch", "reference", "--budget", BUDGET, "--confirm-runs", "5"])
    out = capsys.readouterr().out
    assert rc == 0, out
    minimal = load_finding(tmp_path / minimal_name(path))
    assert len(minimal.scenario.requests) <= MOST.get(fault, 3), out
    # A confident flip, backed by the content-swap control where the corruption follows the
    # neighbours' content, else honestly "suspected" (docs/verdicts.md): never drift.
    assert minimal.verdict.backed is RIGHT.get(fault, Verdict.CORRUPTION) and minimal.target.faults == (fault,)

    min_path = tmp_path / minimal_name(path)
    rc = cli(["triage", str(min_path), "--launch", "reference", "--runs", "3", "--parallel", "2"])
    out = capsys.readouterr().out
    assert rc == 0, out  # the baseline reproduced
    triaged = load_finding(tmp_path / triaged_name(min_path))
    assert triaged.triage is not None
    cures = [" ".join(v.flags) for v in triaged.triage.cures]
    assert any(c.startswith(cure_flag(fault)) for c in cures), out
    assert "cured by:" in out


def drift_scenario(seed: int) -> Scenario:
    # Near-ties are rare in random prompts: many requests, each with enough tokens to hit one,
    # arriving staggered so that batch sizes (and so the drift) vary from run to run.
    rng = random.Random(seed)
    b = PromptBuilder(seed, range(3, 1024))
    return Scenario(seed, tuple(
        RequestSpec(f"r{i + 1:02d}", round(rng.uniform(0, 40), 1), b.prompt(None, 0, rng.randint(8, 60)), 32)
        for i in range(10)
    ))


def drift_finding(out: Path) -> Path:
    """A numeric-drift finding: the first of a few seeded scenarios whose near-ties flip."""
    for seed in range(1, 7):
        try:
            path = make_finding("batch-variant-numerics", [], drift_scenario(seed), out)
        except AssertionError:
            continue  # no near-tie flipped under this one
        if load_finding(path).verdict is Verdict.NUMERIC_DRIFT:
            return path
    raise AssertionError("no seeded scenario showed the benign drift")


def test_benign_numerics_triage_to_deterministic_inference_as_numeric_drift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = drift_finding(tmp_path)
    rc = cli(["triage", str(path), "--launch", "reference", "--runs", "3", "--parallel", "2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    triaged = load_finding(tmp_path / triaged_name(path))
    assert triaged.triage is not None and triaged.verdict is Verdict.NUMERIC_DRIFT
    assert "--enable-deterministic-inference" in [v.name for v in triaged.triage.cures], out
    assert "verdict: numeric drift" in out


def test_repro_py_of_a_shrunk_finding_confirms_on_the_faulty_engine_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 6: the standalone repro_full.py written for a *shrunk* finding prints CONFIRMED against
    the faulty engine and NOT REPRODUCED against the one its cure flag cures."""
    from servefuzz.reports import write_report

    fault = "page-boundary-prefix"
    flags, scenario = CASES[fault](PromptBuilder(7, range(3, 1024)))
    path = make_finding(fault, flags, scenario, tmp_path)
    assert cli(["shrink", str(path), "--launch", "reference", "--budget", "150"]) == 0
    capsys.readouterr()
    min_path = tmp_path / minimal_name(path)
    minimal = load_finding(min_path)
    assert len(minimal.scenario.requests) <= 3
    repro = write_report(minimal, tmp_path / "report").repro

    # Shrunk again, the minimal finding is written beside itself, never over itself: the
    # finding a shrink starts from is never lost, even when the new one's evidence is weaker.
    kept = min_path.read_bytes()
    assert cli(["shrink", str(min_path), "--launch", "reference", "--budget", "20"]) == 0
    capsys.readouterr()
    assert min_path.read_bytes() == kept and load_finding(tmp_path / minimal_name(min_path)).scenario.requests
    assert minimal_name(min_path).endswith("_min2.json")

    assert_repro_confirms_only_on_the_faulty_engine(repro, fault, flags, runs=10)


def test_repro_py_confirms_an_isolation_breach_by_the_cached_tokens_it_reads(tmp_path: Path) -> None:
    """A cross-tenant hit leaves every answer right: repro_full.py finds it again by the cached
    tokens the server reports (the rule of oracles.tenancy.breached_in), CONFIRMED on the faulty
    engine and NOT REPRODUCED under the cure."""
    from servefuzz.reports import write_report

    fault = "salt-ignored"
    flags, scenario = CASES[fault](PromptBuilder(7, range(3, 1024)))
    finding = load_finding(make_finding(fault, flags, scenario, tmp_path))
    assert finding.verdict is Verdict.ISOLATION_BREACH
    repro = write_report(finding, tmp_path / "report").repro

    # Eight clean runs decide "not reproduced".
    assert_repro_confirms_only_on_the_faulty_engine(repro, fault, flags, runs=8)


def test_repro_py_sends_the_constraint_and_names_the_answers_that_break_it(tmp_path: Path) -> None:
    """A bitmask-row-skip finding: repro_full.py sends each request's choices in the engine's own
    field (the reference engine would answer unconstrained without them, and never reproduce),
    is CONFIRMED on the faulty engine and NOT REPRODUCED under the cure, and on the faulty one
    lists the answers outside their own choices."""
    from servefuzz.reports import write_report
    from servefuzz.reports.repro import replay_plan

    fault = "bitmask-row-skip"
    flags, scenario = CASES[fault](PromptBuilder(7, range(3, 1024)))
    finding = load_finding(make_finding(fault, flags, scenario, tmp_path))
    repro = write_report(finding, tmp_path / "report").repro
    plan = replay_plan(finding)
    sent = {r["id"]: r["body"]["sampling_params"].get("regex") for r in plan["requests"]}
    assert sent["r01"] == "( w5 w7| w9| w11 w12)" and plan["choices"]["r01"] == [" w5 w7", " w9", " w11 w12"]

    assert_repro_confirms_only_on_the_faulty_engine(repro, fault, flags, runs=8)
    with ServerProcess.reference([*flags, "--fault", fault]) as srv:
        out = subprocess.run([sys.executable, str(repro), "--base-url", srv.base_url, "--runs", "3"],
                             capture_output=True, text=True, timeout=180).stdout
    assert "answers outside their own choices]" in out and "is none of its choices" in out, out
