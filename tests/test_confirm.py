"""Confirm: replaying findings on real servers: the rate, variants, flaky, failures, restarts."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from servefuzz.anomaly import Anomaly, Divergence, FlipSide, Oracle, Verdict
from servefuzz.finding import Confirmation, Finding
from servefuzz.launcher import Launch, ServerProcess
from servefuzz.oracles.judge import Expectation
from servefuzz.replay_report import render_confirmation
from servefuzz.runner import RunConfig
from servefuzz.server_facts import TargetInfo
from servefuzz.servers import Replayer
from servefuzz.triager import run_row
from servefuzz.trial import confirmed
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

STUB = Path(__file__).parent / "targets" / "stub_server.py"


def finding(verdict: Verdict, rid: str = "r02", *, target: TargetInfo | None = None) -> Finding:
    b = PromptBuilder(5, range(3, 1000))
    sc = Scenario(5, (RequestSpec("r01", 0.0, b.prompt(None, 0, 20), 4), RequestSpec("r02", 1.0, b.prompt(None, 0, 9), 4)))
    oracle = Oracle.ISOLATION if verdict.is_divergence else Oracle.LIVENESS
    target = target or TargetInfo("reference", "http://127.0.0.1:1")
    return Finding(1, 5, sc, target, (Anomaly(oracle, verdict, rid, f"{rid}: {verdict.value}"),))


def test_a_divergence_that_does_not_come_back_is_marked_flaky_and_kept(reference_server: Callable[..., str]) -> None:
    f = finding(Verdict.CORRUPTION)
    with Replayer.at("reference", reference_server()) as bench:  # a clean engine never diverges
        rep = bench.reproduce(f.scenario, Expectation.of(f), 3)
    assert (rep.rate, rep.flaky, rep.confirmation.expected) == ("0/3", True, ("r02",))
    # One variant, seen in the 3 loaded runs and alone: the counts say so.
    assert [v.count for v in rep.confirmation.variants["r02"]] == [4]
    kept = confirmed(f, rep)
    assert kept.confirmation == rep.confirmation and "flaky: reproduced in 0/3 replays" in kept.notes
    assert render_confirmation(rep.confirmation)[0] == "reproduced 0/3 (0%, 95% CI 0-56%): undecided  (flaky: it did not come back)"


def test_a_server_error_comes_back_as_the_same_failure(stub_server: Callable[[str], ServerProcess]) -> None:
    f = finding(Verdict.SERVER_ERROR, "r01")
    with Replayer.at("sglang", stub_server("http500").base_url) as bench:
        rep = bench.reproduce(f.scenario, Expectation.of(f), 2)
    assert (rep.rate, rep.verdict_of(Expectation.of(f))) == ("2/2", Verdict.SERVER_ERROR)


def test_early_stop_spends_only_the_replays_it_needs(reference_server: Callable[..., str]) -> None:
    f = finding(Verdict.CORRUPTION)
    with Replayer.at("reference", reference_server()) as bench:
        rep = bench.reproduce(f.scenario, Expectation.of(f), 10, stop=lambda seen, done: done >= 2)
    assert rep.attempts == 2


def test_a_launched_server_that_dies_is_started_again() -> None:
    f = finding(Verdict.CORRUPTION)
    with Replayer(Launch.reference(f.target)) as bench:
        assert bench.server is not None
        first = bench.server.pid
        bench.server.kill()  # as a crash would
        lost = bench.reproduce(f.scenario, Expectation.of(f), 2)
        assert lost.lost is not None and bench.server.pid != first and bench.server.alive
        again = bench.reproduce(f.scenario, Expectation.of(f), 2)
        assert (again.lost, again.rate) == (None, "0/2")


def test_a_crash_comes_back_on_a_fresh_server_each_run_until_the_runs_are_spent(tmp_path: Path) -> None:
    """A crash ends the server it comes back on: the replays go on, each on a fresh server, so
    3 runs are 3 attempts (3/3), not the one a dead server allows; a triage row gets the same.
    A divergence finding is not carried past a crash: its one replay ends there."""
    launch = Launch("sglang", (sys.executable, str(STUB), "--mode", "crash", "--port", "{port}"))
    crash = finding(Verdict.CRASH, "r01", target=TargetInfo("sglang", "http://127.0.0.1:1"))
    with Replayer(launch) as bench:
        assert bench.server is not None
        rep = bench.reproduce(crash.scenario, Expectation.of(crash), 3)
        assert (rep.rate, len(rep.loaded), rep.verdict_of(Expectation.of(crash))) == ("3/3", 3, Verdict.CRASH)
        assert bench.server.alive  # started again after the last crash, for whatever comes next
        wrong = finding(Verdict.CORRUPTION, "r01", target=crash.target)
        once = bench.reproduce(wrong.scenario, Expectation.of(wrong), 3)
        assert once.lost is not None and once.attempts <= 1
    row = run_row(crash, launch, None, runs=3, log_dir=tmp_path)
    assert (row.reproduced, row.attempts, row.error) == (3, 3, None)


def test_a_wedged_server_is_started_again_so_that_each_hang_replay_is_its_own(tmp_path: Path) -> None:
    """The stub's `hang` mode answers nothing once asked anything: on one server every replay
    after the first would hang because the first did. A run whose requests hang is followed by a
    lone 1-token request; unanswered too, the server is lost, so each replay runs on a fresh one
    and 3 runs are 3 independent attempts; a server that still answers it is kept (the control)."""
    hang = finding(Verdict.HANG, "r01", target=TargetInfo("sglang", "http://127.0.0.1:1"))
    config = RunConfig(request_timeout_s=2.0)
    def starts(log: Path) -> int:  # one header line per start of the server
        return log.read_text().count("--- servefuzz")

    wedged, control = tmp_path / "hang.log", tmp_path / "hang-long.log"
    with Replayer(Launch("sglang", (sys.executable, str(STUB), "--mode", "hang", "--port", "{port}")),
                  config=config, log_path=wedged) as bench:
        rep = bench.reproduce(hang.scenario, Expectation.of(hang), 3)
        assert (rep.rate, len(rep.loaded)) == ("3/3", 3) and rep.verdict_of(Expectation.of(hang)) is Verdict.HANG
    assert starts(wedged) == 4  # the first, and one after each wedge (the last: for whatever comes next)
    with Replayer(Launch("sglang", (sys.executable, str(STUB), "--mode", "hang-long", "--port", "{port}")),
                  config=config, log_path=control) as bench:
        rep = bench.reproduce(hang.scenario, Expectation.of(hang), 3)
        assert (rep.rate, rep.lost) == ("3/3", None)
    assert starts(control) == 1


def test_expectation_follows_the_confirmed_requests() -> None:
    f = finding(Verdict.CORRUPTION, "r01")
    both = Finding(f.iteration, f.seed, f.scenario, f.target,
                   (*f.anomalies, Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r02", "r02 diverged")),
                   confirmation=Confirmation(3, 5, {}, expected=("r02",), stable=("r01",)))
    assert Expectation.of(both).flagged == ("r02",)
    assert Expectation.of(both).within(f.scenario.subset(["r01"])).flagged == ()
    assert Expectation.of(both).renamed({"r02": "r02_st"}).flagged == ("r02_st",)


def _ladder(reproduced: int, *, launch: Launch | None, truth: Path | None) -> list[str]:
    """The names of the steps whose guards hold for replays that reproduced `reproduced` of 5,
    over one suspected corruption, on a runner without a deadline."""
    from servefuzz.confirm import LADDER, ConfirmConfig, _Ladder
    from servefuzz.oracles.judge import Judgement
    from servefuzz.runner import Runner
    from servefuzz.targets import make_target
    from servefuzz.trial import Executed, Reproduction

    side = FlipSide(0, "alone", 0, 7, -0.01, -5.0)
    d = Divergence("r01", 1, side, FlipSide(1, "load", 0, 9, -0.02, -4.0), Verdict.SUSPECTED_CORRUPTION,
                   "flip at token 1: ...; margin 4.9900 > threshold 0.0010 -> suspected-corruption", 4.99, False, 0.001)
    a = Anomaly(Oracle.ISOLATION, Verdict.SUSPECTED_CORRUPTION, "r01", "r01: suspected-corruption", divergences=(d,))
    rep = Reproduction(Confirmation(reproduced, 5, {}, ("r01",), ()), Judgement((a,), ()), (), {})
    runner = Runner(make_target("reference", "http://127.0.0.1:9"))  # never entered: the guards send nothing
    state = _Ladder(runner, Scenario(0, ()), 0, Executed(), ConfirmConfig(5, truth_model=truth, launch=launch),
                    None, lambda what: None, rep, Expectation(Verdict.SUSPECTED_CORRUPTION, (a,)), (a,))
    return [step.name for step in LADDER if step.guard(state)]


def test_each_confirmation_step_runs_where_its_guard_holds() -> None:
    ref = Launch("reference", ("python", "-m", "servefuzz.reference", "--port", "{port}"))
    # A flip that came back: the votes, the leaks and every control the campaign has.
    assert _ladder(3, launch=ref, truth=Path("model.gguf")) == ["votes", "leaks", "content swap", "deterministic",
                                                                 "truth"]
    # Without a launch (a server at a URL) no deterministic control; without a built model no truth.
    assert _ladder(3, launch=None, truth=None) == ["votes", "leaks", "content swap"]
    # A flip that did not come back: no replayed step, but the truth reads the runs already made.
    assert _ladder(0, launch=ref, truth=Path("model.gguf")) == ["votes", "truth"]
