"""Issue 5's acceptance: a campaign killed with SIGKILL mid-run and resumed loses nothing.

Every finding written before the kill is still there (or replaced by a smaller example of the
same signature), none is written twice, the corpus and the iteration count continue from where
they were, and the resumed campaign keeps fuzzing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servefuzz.finding import load_finding
from servefuzz.launcher import ServerProcess

pytestmark = pytest.mark.slow


def fuzz(url: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "servefuzz", "fuzz", "--url", url, "--engine", "reference", "--keep-going",
            "--json", "--out", str(out), "--confirm-runs", "2", *extra]


def snapshot(out: Path) -> dict[str, dict[str, bytes]]:
    return {kind: {p.name: p.read_bytes() for p in sorted((out / kind).glob("*.json"))} for kind in ("findings", "corpus")}


@pytest.mark.timeout(420)
def test_sigkill_mid_campaign_then_resume_loses_nothing_and_duplicates_nothing(tmp_path: Path) -> None:
    out = tmp_path / "campaign"
    with ServerProcess.reference(["--fault", "page-boundary-prefix"]) as srv:
        proc = subprocess.Popen(fuzz(srv.base_url, out, "--time", "600", "--seed", "7"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                seen = snapshot(out) if (out / "corpus").exists() else {"findings": {}, "corpus": {}}
                if len(seen["findings"]) >= 1 and len(seen["corpus"]) >= 3 and (out / "progress.json").exists():
                    break
                time.sleep(0.3)
            # Let the next iteration get under way, then kill it in the middle.
            time.sleep(1.0)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
        assert proc.returncode == -signal.SIGKILL
        before = snapshot(out)
        progress = json.loads((out / "progress.json").read_text())
        assert before["findings"], "the campaign found the planted bug before the kill"
        signatures = {load_finding(out / "findings" / n).signature: n for n in before["findings"]}

        refused = subprocess.run(fuzz(srv.base_url, out, "--time", "5"), capture_output=True, text=True, timeout=60, check=False)
        assert refused.returncode == 2 and "--resume" in refused.stderr and "Traceback" not in refused.stderr

        budget = progress["elapsed_s"] + 20  # budgets count the whole campaign
        resumed = subprocess.run(fuzz(srv.base_url, out, "--resume", "--time", f"{budget:.0f}"),
                                 capture_output=True, text=True, timeout=300, check=False)
    assert "Traceback" not in resumed.stderr, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout)
    assert summary["stopped_because"].startswith("time budget"), summary
    after = snapshot(out)

    kept = {f.signature: (p.name, f) for p in sorted((out / "findings").glob("finding_*.json")) for f in [load_finding(p)]}
    assert len(kept) == len(after["findings"]), "one file per signature: nothing written twice"
    for sig, name in signatures.items():
        assert sig in kept, f"{name} ({sig}) was lost"
        new_name, f = kept[sig]
        if new_name == name:
            assert after["findings"][name] == before["findings"][name], f"{name} changed"
        else:  # replaced by a smaller example, never just dropped
            old = load_finding_bytes(before["findings"][name])
            assert len(f.scenario.requests) <= len(old["scenario"]["requests"])

    assert all(after["corpus"].get(n) == data for n, data in before["corpus"].items()), "the corpus is kept"
    ids = [json.loads(data)["id"] for data in after["corpus"].values()]
    assert ids == list(range(len(ids))), "entry ids continue without gaps or reuse"
    new_progress = json.loads((out / "progress.json").read_text())
    assert new_progress["next_iteration"] > progress["next_iteration"], "the campaign went on fuzzing"
    # progress.json is written after each iteration, so its clock can stop just short of the budget
    assert new_progress["requests"] > progress["requests"] and new_progress["elapsed_s"] >= budget - 10
    iterations = [json.loads(data)["iteration"] for data in after["corpus"].values()]
    assert len(iterations) == len(set(iterations)), "no iteration was run twice into the corpus"


def load_finding_bytes(data: bytes) -> dict[str, object]:
    return json.loads(data)  # type: ignore[no-any-return]
