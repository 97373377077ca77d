"""`servefuzz fuzz --junit FILE`, the CI gate (issue 55): read back by a JUnit consumer (junitparser,
as CI systems parse the format), it fails on a planted fault exactly where the exit code does, and
passes on the clean engine, and both documents validate against the JUnit schema CI tools check
reports with (Jenkins xUnit's junit-10.xsd, vendored beside this file with its origin); a bad path
is one line before anything starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import xmlschema
from junitparser import JUnitXml, TestCase

from servefuzz.errors import Exit

pytestmark = pytest.mark.slow

SCHEMA = xmlschema.XMLSchema(Path(__file__).with_name("junit-10.xsd"))


def servefuzz(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servefuzz", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def cases(path: Path) -> list[TestCase]:
    """The test cases of a `--junit` file, once it has validated against the schema."""
    SCHEMA.validate(str(path))
    [suite] = list(JUnitXml.fromfile(str(path)))
    return list(suite)


@pytest.mark.timeout(300)
def test_the_gate_fails_on_a_zoo_fault_where_the_exit_code_does(tmp_path: Path) -> None:
    xml = tmp_path / "servefuzz.xml"
    p = servefuzz("fuzz", "--fault", "page-boundary-prefix", "--time", "120", "--json", "--junit", str(xml),
                  "--out", str(tmp_path / "c"))
    assert p.returncode == Exit.FOUND, p.stderr[-2000:]
    summary = json.loads(p.stdout)
    claimed = [f for f in summary["findings"] if f["verdict"] != "numeric-drift"]
    got = cases(xml)
    failed = [c for c in got if c.is_failure]
    assert len(failed) == len(claimed) >= 1
    assert {c.classname for c in failed} == {"servefuzz.finding"}
    assert any("corruption" in c.name for c in failed)
    assert all(c.result[0].type in {f["verdict"] for f in claimed} for c in failed)
    # The campaign's own case passes and carries its numbers; the mechanisms it exercised pass.
    [campaign] = [c for c in got if c.classname == "servefuzz.campaign"]
    assert campaign.is_passed and f"{summary['requests']:,} requests" in (campaign.system_out or "")
    assert any(c.classname == "servefuzz.exercise" and c.is_passed for c in got)


@pytest.mark.timeout(300)
def test_the_gate_passes_on_the_clean_engine(tmp_path: Path) -> None:
    xml = tmp_path / "servefuzz.xml"
    p = servefuzz("fuzz", "--fault", "none", "--requests", "150", "--junit", str(xml), "--out", str(tmp_path / "c"))
    assert p.returncode == Exit.OK, p.stderr[-2000:]
    got = cases(xml)
    assert got and not any(c.is_failure or c.is_error for c in got)
    assert any(c.classname == "servefuzz.exercise" for c in got)


def test_a_junit_path_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    for bad in (tmp_path / "missing" / "x.xml", tmp_path):
        p = servefuzz("fuzz", "--fault", "none", "--requests", "5", "--junit", str(bad), "--out", str(tmp_path / "c"),
                      timeout=60)
        assert p.returncode == Exit.USAGE and "--junit" in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_the_schema_refuses_what_it_should() -> None:
    """Control for the validation above: the vendored schema is no rubber stamp. A test case
    without its name, and a suite without its counts, are refused; a minimal document passes."""
    ok = '<testsuites><testsuite name="s" tests="1" failures="0" errors="0"><testcase name="c"/></testsuite></testsuites>'
    assert SCHEMA.is_valid(ok)
    assert not SCHEMA.is_valid(ok.replace(' name="c"', ""))
    assert not SCHEMA.is_valid(ok.replace(' failures="0"', ""))
    assert not SCHEMA.is_valid(ok.replace("<testcase", "<test-case"))
