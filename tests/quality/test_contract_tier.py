"""The contract-violation tier on the real reference engine over HTTP (issue 40).

Three campaigns, each against its own server with one planted fault, exactly as a user fuzzes a
running server (`servefuzz fuzz --url URL --engine reference --stop-at-first`):

- deterministic-decode-drift under --enable-deterministic-inference: the mode promises
  batch-invariant answers and leaks batch dependence in decode, at near-tie scale. Found, and
  judged `contract-violation`, citing the promise; the campaign exits 1.
- batch-variant-numerics in default mode (the control): the same scale of drift where nothing
  was promised stays `numeric-drift`, exit 0.
- deterministic-decode-drift with the mode off: the same fault, the same numbers, no promise:
  `numeric-drift`, never a contract violation, exit 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servefuzz.finding import Finding, load_finding
from servefuzz.launcher import ServerProcess

pytestmark = pytest.mark.slow

CAP_S = 120  # the contract fault was confirmed after 222 requests, 38 s, on 2 shared cores


def _campaign(flags: list[str], out: Path) -> tuple[int, dict[str, object], list[Finding]]:
    with ServerProcess.reference(flags) as srv:
        p = subprocess.run(
            [sys.executable, "-m", "servefuzz", "fuzz", "--url", srv.base_url, "--engine", "reference",
             "--stop-at-first", "--time", str(CAP_S), "--json", "--out", str(out)],
            capture_output=True, text=True, timeout=CAP_S + 90, check=False,
        )
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    return p.returncode, json.loads(p.stdout), [load_finding(f) for f in sorted((out / "findings").glob("finding_*.json"))]


@pytest.mark.timeout(CAP_S + 120)
def test_the_contract_fault_under_the_deterministic_mode_is_a_contract_violation(tmp_path: Path) -> None:
    rc, summary, found = _campaign(["--fault", "deterministic-decode-drift", "--enable-deterministic-inference"],
                                   tmp_path / "contract")
    assert "contract-violation" in summary["first_confirmed"], summary
    verdicts = {f.verdict.value for f in found}
    assert verdicts == {"contract-violation"}, verdicts  # near-ties: never corruption, never drift here
    f = next(f for f in found if f.confirmation is not None and f.confirmation.reproduced)
    promise = f.headline.promise
    assert promise is not None and promise.mode == "--enable-deterministic-inference"
    assert f.target.deterministic == "--enable-deterministic-inference"
    assert "which promises" in f.why and f.why.endswith("-> contract-violation")
    assert rc == 1  # a broken promise is a finding


@pytest.mark.timeout(CAP_S + 120)
def test_the_benign_batch_numerics_in_default_mode_stay_numeric_drift(tmp_path: Path) -> None:
    rc, summary, found = _campaign(["--fault", "batch-variant-numerics"], tmp_path / "benign")
    assert found, summary
    assert {f.verdict.value for f in found} == {"numeric-drift"}
    assert all(f.headline.promise is None for f in found)
    assert rc == 0


@pytest.mark.timeout(CAP_S + 120)
def test_the_contract_fault_with_the_mode_off_is_no_contract_violation(tmp_path: Path) -> None:
    rc, summary, found = _campaign(["--fault", "deterministic-decode-drift"], tmp_path / "mode-off")
    assert found, summary
    assert {f.verdict.value for f in found} == {"numeric-drift"}
    assert all(f.target.deterministic is None and f.headline.promise is None for f in found)
    assert rc == 0
