"""minimal_repro.py (issue 54, item 1): some fifty lines of the standard library a maintainer reads,
derived from the finding, REPRODUCED on the faulty reference engine and NOT REPRODUCED on the clean
one; a finding that needs repro_full.py's machinery gets none, with the reason; what a finding file says
stays data.

The finding is made by servefuzz's own pipeline from the page-boundary scenario repro_full.py's tests
replay too (report_findings.page_boundary, r02 streamed): a long prompt keeps the engine busy while three requests sharing
exactly one page arrive together, and the later ones read the first's page before it is written."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from report_findings import PAGE_BOUNDARY_FAULT, found_on, page_boundary

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.finding import Finding
from servefuzz.launcher import ServerProcess
from servefuzz.reports import write_report
from servefuzz.reports.minimal import MAX_LINES, minimal_repro
from servefuzz.server_facts import TargetInfo

FAULT = PAGE_BOUNDARY_FAULT


@pytest.fixture(scope="module")
def finding() -> Finding:
    with ServerProcess.reference(FAULT) as srv:
        return asyncio.run(found_on(srv.base_url, page_boundary(streamed=("r02",))))


def run_script(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -I -S: the standard library only.
    return subprocess.run([sys.executable, "-I", "-S", str(path), *args], capture_output=True, text=True,
                          timeout=180, check=False)


def test_it_reproduces_on_the_faulty_engine_and_not_on_the_clean_one(finding: Finding, tmp_path: Path) -> None:
    paths = write_report(finding, tmp_path)
    assert paths.minimal is not None and paths.no_minimal is None
    text = paths.minimal.read_text(encoding="utf-8")
    # What a maintainer reads in one screen: the whole script, the request bodies one a line.
    assert len(text.splitlines()) <= MAX_LINES, len(text.splitlines())
    assert "servefuzz serve-reference" in text and "--fault page-boundary-prefix" in text  # the server, as a comment
    assert "r02: streamed by servefuzz, whole here." in text  # the streamed request, said so
    with ServerProcess.reference(FAULT) as faulty:
        p = run_script(paths.minimal, faulty.base_url, "5")
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^[345]/5 runs answered otherwise than alone: REPRODUCED$", p.stdout, re.M), p.stdout
    with ServerProcess.reference([]) as clean:
        p = run_script(paths.minimal, clean.base_url, "5")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "0/5 runs answered otherwise than alone: NOT REPRODUCED" in p.stdout


def test_it_imports_only_the_standard_library_and_holds_the_finding_as_data(finding: Finding) -> None:
    hostile = dataclasses.replace(finding, target=dataclasses.replace(
        finding.target, base_url='http://127.0.0.1:1/"""\nimport os\nos.system("x")#'))
    text, why = minimal_repro(hostile)
    assert text is not None and why is None
    tree = ast.parse(text)
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported == {"json", "sys", "time", "urllib.error", "urllib.request", "concurrent.futures"}
    assert not any(isinstance(n, ast.Call) and ast.unparse(n.func) == "os.system" for n in ast.walk(tree))


def test_a_finding_that_needs_repro_py_gets_no_minimal_form_and_says_why(finding: Finding, tmp_path: Path) -> None:
    crash = dataclasses.replace(finding, anomalies=(Anomaly(Oracle.LIVENESS, Verdict.CRASH, "r01", "died"),))
    paths = write_report(crash, tmp_path)
    assert paths.minimal is None and not (tmp_path / "minimal_repro.py").exists()
    assert paths.no_minimal is not None and "crash" in paths.no_minimal
    cut = dataclasses.replace(finding, scenario=dataclasses.replace(finding.scenario, requests=tuple(
        dataclasses.replace(r, cancel_after_ms=50.0, stream=True) if r.id == "r00" else r
        for r in finding.scenario.requests)))
    assert minimal_repro(cut) == (None, "r00 is a stream cut on purpose: only repro_full.py cuts streams")
    assert minimal_repro(dataclasses.replace(finding, target=TargetInfo("openai", "http://127.0.0.1:1")))[1] \
        == "no cache flush the minimal form knows for the 'openai' dialect"
    # More requests than one screen holds: the long replayer's, said with the count.
    many = dataclasses.replace(finding, scenario=dataclasses.replace(finding.scenario, requests=tuple(
        dataclasses.replace(r, id=f"{r.id}_{i}") if r.id not in finding.expected_diverging else r
        for i in range(8) for r in finding.scenario.requests if i == 0 or r.id not in finding.expected_diverging)))
    text, why = minimal_repro(many)
    assert text is None and why is not None and re.fullmatch(r"\d+ requests make \d+ lines, more than the 60 of a minimal form", why)
