"""The terminal's closing summary: one line a finding, inside 80 columns."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from servefuzz.campaign import CampaignResult
from servefuzz.finding import load_finding
from servefuzz.progress import print_summary

FINDINGS = Path(__file__).parents[1] / "docs/findings"


def test_the_findings_table_fits_80_columns_one_line_a_finding() -> None:
    found = [load_finding(FINDINGS / name / "finding.json")
             for name in ("sglang-cpu-salt-dropped", "vllm-cpu-lora-base-rows", "vllm-cpu-seed-chunked-crash")]
    result = CampaignResult(10, 100, 12.0, tuple((Path("findings") / f.filename, f) for f in found), "time budget spent",
                            seen={found[0].signature: 37})
    out = io.StringIO()
    print_summary(Console(file=out, width=80), result)
    lines = out.getvalue().splitlines()
    hint = next(line for line in lines if line.startswith("Replay one with:"))
    assert hint.endswith(f"servefuzz replay findings/{found[0].filename} --base-url URL --runs 10")  # never cut
    table = [line for line in lines if line is not hint]
    assert max(len(line) for line in table) <= 80
    rows = [line for line in table if line.startswith("finding_")]
    assert [row.split()[0] for row in rows] == [f.filename for f in found]
    assert rows[0].split()[1:4] == ["isolation-breach", "5/5", "37"]
    assert all(row.endswith("…") for row in rows)  # the reason is cut to the room left, not wrapped


def test_drift_says_benign_except_on_a_server_in_its_deterministic_mode(tmp_path: Path) -> None:
    import dataclasses

    from servefuzz.anomaly import Anomaly, Oracle, Verdict

    base = load_finding(FINDINGS / "vllm-cpu-lora-base-rows" / "finding.json")
    drift = dataclasses.replace(base, anomalies=(Anomaly(Oracle.REPLAY, Verdict.NUMERIC_DRIFT, "r01", "a near-tie"),))
    promised = dataclasses.replace(drift, target=dataclasses.replace(drift.target, env={"VLLM_BATCH_INVARIANT": "1"}))

    def said(f: object) -> str:
        out = io.StringIO()
        print_summary(Console(file=out, width=200), CampaignResult(1, 10, 1.0, ((Path("findings") / "f.json", f),), "time"))
        return out.getvalue()

    assert "Benign numerics only" in said(drift) and "deterministic mode" not in said(drift)
    text = said(promised)
    assert "Benign numerics only" not in text
    assert "The server ran with VLLM_BATCH_INVARIANT=1, its deterministic mode" in text and "exit 1" in text
