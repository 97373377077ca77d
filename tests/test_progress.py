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
