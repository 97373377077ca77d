"""The terminal's closing summary: one line a finding, inside 80 columns."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from servefuzz.campaign import CampaignResult, Stop, StopReason
from servefuzz.finding import load_finding
from servefuzz.progress import print_summary

FINDINGS = Path(__file__).parents[1] / "docs/findings"


def test_the_findings_table_fits_80_columns_one_line_a_finding() -> None:
    found = [load_finding(FINDINGS / name / "finding.json")
             for name in ("sglang-cpu-salt-dropped", "vllm-cpu-lora-base-rows", "vllm-cpu-seed-chunked-crash")]
    deep = Path("campaigns/a-campaign-directory-with-a-long-name/run-2026-12-03/findings")
    result = CampaignResult(10, 100, 12.0, tuple((deep / f.filename, f) for f in found),
                            Stop(StopReason.TIME_BUDGET, "time budget spent"),
                            seen={found[0].signature: 37})
    out = io.StringIO()
    print_summary(Console(file=out, width=80), result)
    lines = out.getvalue().splitlines()
    hint = next(line for line in lines if line.startswith("Replay one with:"))
    assert hint.endswith(f"servefuzz replay {deep}/{found[0].filename} --base-url URL --runs 10")  # never cut
    table = [line for line in lines if line is not hint]
    assert max(len(line) for line in table) <= 80
    rows = [line for line in table if line.startswith("cam")]
    assert len(rows) == len(found)  # one line a finding, never wrapped
    # the path shortened in its middle, the file name whole
    assert [row.split()[0].rsplit("…/", 1)[1] for row in rows] == [f.filename for f in found]
    assert rows[0].split()[1:] == ["isolation-breach", "5/5", "-", "37", found[0].headline.request_id]
    assert rows[1].split()[1:] == ["corruption", "5/5", "3/3", "1", "r02"]  # the alone references' vote
    assert all(f.why[:20] not in out.getvalue() for f in found)  # the reason stays in the file and in replay


def test_a_wide_console_still_gets_80_columns() -> None:
    found = load_finding(FINDINGS / "vllm-cpu-seed-chunked-crash" / "finding.json")
    out = io.StringIO()
    print_summary(Console(file=out, width=200), CampaignResult(1, 10, 1.0, ((Path("x" * 150) / found.filename, found),),
                                                              Stop(StopReason.TIME_BUDGET, "t")))
    assert max(len(line) for line in out.getvalue().splitlines() if not line.startswith("Replay")) <= 80


def test_replay_prints_the_whole_reason() -> None:
    from servefuzz.finding import Confirmation
    from servefuzz.oracles.judge import Judgement
    from servefuzz.replay_report import render_replay_report, replay_result

    f = load_finding(FINDINGS / "vllm-cpu-seed-chunked-crash" / "finding.json")
    text = render_replay_report(replay_result(f, Confirmation(0, 3, {}, (), ()), Judgement(anomalies=(), stable=())))
    assert f"Reason   : {' '.join(f.why.split())}" in text


def test_drift_says_benign_and_a_contract_violation_names_the_broken_promise(tmp_path: Path) -> None:
    import dataclasses

    from servefuzz.anomaly import Anomaly, Oracle, Verdict

    base = load_finding(FINDINGS / "vllm-cpu-lora-base-rows" / "finding.json")
    drift = dataclasses.replace(base, anomalies=(Anomaly(Oracle.REPLAY, Verdict.NUMERIC_DRIFT, "r01", "a near-tie"),))
    promised = dataclasses.replace(drift, target=dataclasses.replace(drift.target, env={"VLLM_BATCH_INVARIANT": "1"}))

    def said(f: object) -> str:
        out = io.StringIO()
        print_summary(Console(file=out, width=200), CampaignResult(1, 10, 1.0, ((Path("findings") / "f.json", f),),
                                                                  Stop(StopReason.TIME_BUDGET, "time")))
        return out.getvalue()

    assert "Benign numerics only" in said(drift) and "Contract violation" not in said(drift)
    assert promised.verdict is Verdict.CONTRACT_VIOLATION
    text = " ".join(said(promised).split())
    assert "Benign numerics only" not in text and "contract-violation" in text
    assert "Contract violation: the server ran with VLLM_BATCH_INVARIANT=1, which promises" in text
    assert "vllm-project/vllm/pull/48694" in text and "exit 1" in text


def test_a_log_hears_each_kept_finding_once_and_no_other_event() -> None:
    # A console that is no terminal (CI's log) gets no live panel: it is told the findings, by
    # their event's type, and nothing of the iterations around them.
    from servefuzz.campaign import CampaignState, Chose, Confirming, FindingKept
    from servefuzz.progress import LiveProgress

    log = io.StringIO()
    state = CampaignState()
    with LiveProgress(Console(file=log, force_terminal=False, width=200), "fuzzing") as live:
        for event in (Chose(1, "page-boundary", 6), Confirming(1, 2),
                      FindingKept("finding_00001_1.json", "new", "corruption", "r02 diverged at token 4"),
                      Chose(2, "random", 5)):
            state.last = event
            live.update(state)
    assert log.getvalue().splitlines() == ["finding finding_00001_1.json (new): corruption, r02 diverged at token 4"]
