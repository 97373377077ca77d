"""The replay report: diverged requests with variants and counts, stable ones, the result line."""

from __future__ import annotations

import doctest

from servefuzz import replay_report
from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.finding import Finding
from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
from servefuzz.oracles.judge import Expectation, judge, reproduction
from servefuzz.replay_report import ReplayResult, render_replay_report
from servefuzz.replay_report import replay_result as report_of
from servefuzz.server_facts import TargetInfo
from servefuzz.workload import RequestSpec, Scenario

# The seed report's finding_03330: eleven requests, r02 (prefix_len 64) the one that diverges.
IDS = ["r01", "r02", "r03", "r04_s_b_s_s_s", "r02_b_s_b_s_s_s", "r03_s_s_s_s", "r01_b_s_s_s_s",
       "r03_b_s_s_s_s", "r04_s_s_s_s", "r04_b_s_s_s_s", "r02_b_s_s_s_s"]  # fmt: skip
TEXTS = [
    " u7892_1146 u7892_1086 u7892_108 u7892_1",
    " u7892_1446 u7892_144  u7892_144  u7892_1",
    " u7892_1446 u7892_1144 u7892_1142 u7892_1",
]
R02_RUNS = [0, 0, 0, 0, 1, 1, 1, 2, 2, 0]  # which text r02 gives in each of 10 runs: 5 / 3 / 2


def output(tokens: tuple[int, ...], text: str = "") -> ChoiceRecord:
    lps = tuple(-0.05 for _ in tokens)
    top = tuple(((t, -0.05), (t + 1000, -3.0)) for t in tokens)
    return ChoiceRecord(0, tokens, lps, top, text=text, finish_reason="length")


def variant_tokens(v: int) -> tuple[int, ...]:
    return (7, 100 + v, 200 + v)  # every variant flips at token 1


def finding(anomaly: Anomaly | None = None) -> Finding:
    specs = tuple(
        RequestSpec(rid, 10.0 * i, tuple(range(1, 80)), 32, prefix_name="p" if rid.startswith("r02") else None,
                    prefix_len=64 if rid.startswith("r02") else 0)
        for i, rid in enumerate(IDS)
    )  # fmt: skip
    anomaly = anomaly or Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r02", "r02: 3 variants")
    target = TargetInfo("sglang", "http://127.0.0.1:30000", "0.5.10.post1", {"page_size": 64})
    return Finding(3330, 2142180798, Scenario(2142180798, specs), target, (anomaly,))


def replay(r02_variant: list[int] | None) -> list[RunHistory]:
    histories = []
    for run in range(10):
        records = []
        for rid in IDS:
            v = r02_variant[run] if rid == "r02" and r02_variant else 0
            choice = output(variant_tokens(v), TEXTS[v] if rid == "r02" else f"stable {rid}")
            records.append(RequestRecord(rid, run, "load", Status.OK, 0.0, choices=(choice,)))
        histories.append(RunHistory(run, "load", tuple(records)))
    return histories


def replay_result(f: Finding, histories: list[RunHistory]) -> ReplayResult:
    """The report of replays judged the one way every command judges them (no alone references
    here: each request's reference is its most frequent answer)."""
    return report_of(f, reproduction(Expectation.of(f), histories, {}), judge(histories, {}))


def test_confirmed_report_matches_the_seed_block() -> None:
    result = replay_result(finding(), replay(R02_RUNS))
    assert result.confirmed and result.reproduced == ("r02",)
    text = render_replay_report(result)
    expected = """\
============================================================
  Finding  : finding_03330_2142180798.json
  Bug      : corruption (sglang:replay:corruption:prefix=page-aligned)
  Expect   : ['r02'] to diverge
  Runs     : 10
============================================================

  [DIVERGED — 1/11 requests non-deterministic]

    r02  ✓ (expected)
      variant 1: ' u7892_1146 u7892_1086 u7892_108 u78...'  (5/10)
      variant 2: ' u7892_1446 u7892_144  u7892_144  u7...'  (3/10)
      variant 3: ' u7892_1446 u7892_1144 u7892_1142 u7...'  (2/10)
      verdict: suspected-corruption (flip at token 1, margin at least 2.9500 > threshold 0.0010)

  [STABLE — 10 requests consistent across all runs]
    r01, r01_b_s_s_s_s, r02_b_s_b_s_s_s, r02_b_s_s_s_s, r03, r03_b_s_s_s_s,
    r03_s_s_s_s, r04_b_s_s_s_s, r04_s_b_s_s_s, r04_s_s_s_s

  RESULT: CONFIRMED  (in 5/10 replays; 1/1 expected divergences reproduced)
  RATE   : reproduced: 5/10 (50%, 95% CI 24-76%) (sequential test, each error <= 1%)
============================================================
"""
    assert text == expected


def test_not_reproduced_report() -> None:
    result = replay_result(finding(), replay(None))
    assert not result.confirmed and result.diverged == ()
    text = render_replay_report(result)
    assert "[DIVERGED — 0/11 requests non-deterministic]" in text
    assert "[STABLE — 11 requests consistent across all runs]" in text
    assert "RESULT: NOT REPRODUCED  (in 0/10 replays; 0/1 expected divergences reproduced)" in text


def test_unexpected_divergence_is_marked_and_does_not_confirm() -> None:
    f = finding(Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r03", "r03 diverged"))
    result = replay_result(f, replay(R02_RUNS))
    assert not result.confirmed
    assert "    r02  (unexpected)" in render_replay_report(result)


def test_indeterminate_requests_are_listed_apart() -> None:
    histories = replay(R02_RUNS)
    histories = [
        RunHistory(h.run, h.label, tuple(
            RequestRecord(r.request_id, r.run, r.label, Status.TIMEOUT, 0.0) if r.request_id == "r03" else r for r in h.records
        )) for h in histories
    ]  # fmt: skip
    result = replay_result(finding(), histories)
    assert result.undetermined == ("r03",) and "r03" not in result.stable
    text = render_replay_report(result)
    assert "[UNDETERMINED — 1 requests without two determinate answers]" in text
    assert "[FAILURES — 1]" in text and "hang: r03: no answer in time in 10/10 runs" in text


def test_crash_finding_confirms_on_a_crash() -> None:
    f = finding(Anomaly(Oracle.LIVENESS, Verdict.CRASH, "r04_s_b_s_s_s", "server went away"))
    dead = [
        RunHistory(h.run, h.label, tuple(
            RequestRecord(r.request_id, r.run, r.label, Status.CONNECTION_ERROR, 0.0, end_ms=50.0) if i >= 3 else r
            for i, r in enumerate(h.records)
        )) for h in replay(None)
    ]  # fmt: skip
    result = replay_result(f, dead)
    assert result.confirmed
    assert "RESULT: CONFIRMED  (in 10/10 replays; crash seen again)" in render_replay_report(result)
    assert not replay_result(f, replay(None)).confirmed


def test_docstring_examples() -> None:
    result = doctest.testmod(replay_report)
    assert result.attempted > 0 and result.failed == 0
