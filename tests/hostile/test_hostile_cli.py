"""Every command against a hostile server or a crafted finding: one line and a documented exit
code, or a recorded anomaly; never a traceback, never a hang, never exit 1 for a crash of ours.

The server misbehaves on purpose (tests/hostile/hostile_server.py); the commands run as a user
runs them, in a subprocess, with a wall-clock limit that a hang would overrun.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import Hostile

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.campaign import BUDGET_GRACE_S
from servefuzz.errors import Exit
from servefuzz.finding import Finding, load_finding, write_finding
from servefuzz.history import Status, read_history_jsonl
from servefuzz.server_facts import TargetInfo
from servefuzz.workload import RequestSpec, Scenario

pytestmark = pytest.mark.slow


def servefuzz(*args: str, timeout: float = 90, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servefuzz", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def held(p: subprocess.CompletedProcess[str], *allowed: int) -> None:
    """A documented code, and no traceback; a failure of the tool is one line on stderr."""
    assert p.returncode in allowed, (p.returncode, p.stdout[-1500:], p.stderr[-1500:])
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr[-3000:]
    if p.returncode in (Exit.USAGE, Exit.TARGET):
        assert len([line for line in p.stderr.splitlines() if line.strip()]) == 1, p.stderr
    assert "\x1b" not in p.stdout and "\x1b" not in p.stderr, "raw ESC reached the terminal"


FUZZ = ["--engine", "sglang", "--requests", "12", "--time", "20", "--request-timeout", "3", "--strategy", "random"]


@pytest.mark.parametrize("mode", ["markup", "http500", "nonutf8", "nonutf8-ok", "badjson", "nan", "wrongshape",
                                  "truncated", "oversized", "hang", "flushfail", "redirect"])
def test_fuzz_survives_a_hostile_server_and_shows_its_text_inert(hostile_server: Hostile, mode: str,
                                                                    tmp_path: Path) -> None:
    # The live display and the summary table (not --json): where markup crashed before.
    p = servefuzz("fuzz", "--url", hostile_server(mode), *FUZZ, "--out", str(tmp_path / "c"))
    held(p, Exit.OK, Exit.FOUND, Exit.TARGET)
    if p.returncode == Exit.FOUND:
        assert list((tmp_path / "c" / "findings").glob("finding_*.json"))


def test_the_junit_file_of_a_hostile_campaign_parses_and_holds_no_control_character(hostile_server: Hostile,
                                                                                     tmp_path: Path) -> None:
    # The server's text (markup, escapes, bidi, control characters) reaches a CI page through
    # --junit only through sanitize: XML 1.0 refuses most control characters outright.
    import xml.etree.ElementTree as ET

    xml = tmp_path / "j.xml"
    p = servefuzz("fuzz", "--url", hostile_server("markup"), *FUZZ, "--junit", str(xml), "--out", str(tmp_path / "c"))
    held(p, Exit.OK, Exit.FOUND)
    text = xml.read_text(encoding="utf-8")
    assert ET.fromstring(text.split("\n", 1)[1]).tag == "testsuites"
    assert not any(ord(ch) < 0x20 and ch not in "\t\n" for ch in text), "a raw control character in the XML"


# Starting the command is outside the budget: the interpreter, the imports and the target's
# /server_info, on a shared 2-core machine. The budget and its grace are the campaign's own.
STARTUP_SLACK_S = 20.0


WEDGED = "target lost: the server stopped answering: after requests of run 0 hung, a lone 1-token request got no answer"


@pytest.mark.parametrize(("mode", "timeout", "budget", "code", "stop"), [
    # Every answer comes a byte a second, so every request outlives its 2 s: a hang, as
    # --request-timeout defines it, and so does the lone 1-token request sent after it. A server
    # that answers nothing in time is lost (trial.stopped_answering): with no --launch to start
    # it again, the campaign ends there, inside its budget, and the hang is kept unconfirmed.
    # Its budget leaves room for the flush probe (its last request sent 2 s in, each cut at 2 s:
    # 4 s before run 0), the 2 s run and the 2 s probe on a loaded box (12 s ran out once under
    # the whole suite on a fresh machine, before the probe had its answer; 6 s before the flush
    # probe existed).
    ("drip", "2", 20, Exit.FOUND, WEDGED),
    # Every other request never ends, and the default request timeout (120 s) is far past the
    # budget: those requests are cut at the budget, indeterminate, and nothing is found.
    ("hang", None, 6, Exit.OK, "time budget of 6 s spent"),
])  # fmt: skip
def test_a_campaign_ends_within_its_budget_and_grace_whatever_the_server_does(
        hostile_server: Hostile, mode: str, timeout: str | None, budget: int, code: int, stop: str,
        tmp_path: Path) -> None:
    out = tmp_path / "c"
    began = time.monotonic()
    p = servefuzz("fuzz", "--url", hostile_server(mode), "--engine", "sglang", "--time", str(budget), "--json",
                  "--out", str(out), *(["--request-timeout", timeout] if timeout else []), timeout=120)
    took = time.monotonic() - began
    held(p, code)
    assert took < budget + BUDGET_GRACE_S + STARTUP_SLACK_S, f"{mode}: {took:.1f} s for a {budget} s budget"
    summary = json.loads(p.stdout)
    assert summary["stopped_because"].startswith(stop), summary["stopped_because"]
    assert summary["elapsed_s"] < budget + BUDGET_GRACE_S
    records = [r for h in read_history_jsonl(out / "histories.jsonl") for r in h.records]
    if stop.startswith("time budget"):
        cut = [r for r in records if r.error in (f"cut: {stop}", f"not sent: {stop}")]
        assert cut and all(r.status is Status.CANCELLED and r.indeterminate for r in cut), "in flight at the budget: cut, recorded"
    findings = [load_finding(f) for f in (out / "findings").glob("finding_*.json")]
    assert all(f.verdict is Verdict.HANG and f.confirmation is None for f in findings), [f.verdict for f in findings]
    unconfirmed = f"not confirmed: {stop.removeprefix('target lost: ')}"
    assert all(any(n.startswith(unconfirmed) for n in f.notes) for f in findings), [f.notes for f in findings]
    assert bool(findings) == (code == Exit.FOUND)


@pytest.mark.parametrize("mode", ["hanginfo", "deepinfo", "bigint"])
def test_a_server_info_that_hangs_or_chokes_the_parser_is_one_line(hostile_server: Hostile, mode: str,
                                                                     tmp_path: Path) -> None:
    p = servefuzz("fuzz", "--url", hostile_server(mode), *FUZZ, "--json", "--out", str(tmp_path / "c"))
    held(p, Exit.OK, Exit.FOUND, Exit.TARGET)


def test_auth_is_sent_and_never_written(hostile_server: Hostile, tmp_path: Path) -> None:
    url = hostile_server("auth")
    refused = servefuzz("fuzz", "--url", url, *FUZZ, "--json", "--out", str(tmp_path / "a"))
    held(refused, Exit.TARGET)
    env = {**__import__("os").environ, "SERVEFUZZ_API_KEY": "sekrit"}
    p = servefuzz("fuzz", "--url", url, *FUZZ, "--json", "--out", str(tmp_path / "b"), env=env)
    held(p, Exit.OK, Exit.FOUND)
    p = servefuzz("fuzz", "--url", url, *FUZZ, "--json", "--out", str(tmp_path / "c"),
                  "--header", "Authorization: Bearer sekrit")
    held(p, Exit.OK, Exit.FOUND)
    written = "".join(f.read_text(errors="replace") for d in ("b", "c") for f in (tmp_path / d).rglob("*") if f.is_file())
    assert "sekrit" not in written and '"auth": true' in (tmp_path / "b" / "config.json").read_text()


def planted_finding(tmp_path: Path, server_args: dict[str, object], faults: tuple[str, ...] = ()) -> Path:
    spec = RequestSpec("r01", 0.0, tuple(range(3, 40)), 4)
    target = TargetInfo("reference", "http://127.0.0.1:1", server_args=server_args, faults=faults)
    finding = Finding(1, 1, Scenario(1, (spec,)), target, (Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r01", "x"),))
    return write_finding(tmp_path, finding)


@pytest.mark.parametrize("args, faults", [
    ({"disable_radix_cache": "--host=0.0.0.0"}, ()),
    ({"page_size": "16 --host 0.0.0.0"}, ()),
    ({}, ("--host=0.0.0.0",)),
])
@pytest.mark.parametrize("command", ["replay", "shrink", "triage"])
def test_planted_server_args_never_become_flags(tmp_path: Path, args: dict[str, object], faults: tuple[str, ...],
                                                command: str) -> None:
    path = planted_finding(tmp_path, args, faults)
    p = servefuzz(command, str(path), "--launch", "reference", timeout=60)
    held(p, Exit.USAGE)
    assert "refusing" in p.stderr or "fault" in p.stderr


def test_report_of_a_finding_from_a_hostile_server_is_inert(hostile_server: Hostile, tmp_path: Path) -> None:
    spec = RequestSpec("r01\x1b[2J", 0.0, tuple(range(3, 40)), 4)
    target = TargetInfo("sglang", hostile_server("markup"), version="[/oops]\x1b]0;t\x07",
                        server_args={"x": "[link=http://e]y[/link]"})
    finding = Finding(1, 1, Scenario(1, (spec,)), target,
                      (Anomaly(Oracle.LIVENESS, Verdict.SERVER_ERROR, spec.id, "500: [/oops]\x1b[5m"),))
    path = write_finding(tmp_path, finding)
    p = servefuzz("report", str(path), "--out", str(tmp_path / "r"))
    held(p, Exit.OK)
    r = servefuzz("replay", str(path), "--base-url", hostile_server("http500"), "--runs", "2", "--request-timeout", "3")
    held(r, Exit.OK, Exit.FOUND, Exit.TARGET)


def test_a_crafted_finding_is_refused_in_one_line(tmp_path: Path) -> None:
    good = json.loads(planted_finding(tmp_path, {}).read_text())
    cases = {
        "nan-offset": {**good, "scenario": {**good["scenario"], "requests": [
            {**good["scenario"]["requests"][0], "offset_ms": float("nan")}]}},
        "no-requests": {**good, "scenario": {**good["scenario"], "requests": []}},
        "huge-int": None,
        "deep": None,
    }
    texts = {k: json.dumps(v) for k, v in cases.items() if v is not None}
    texts["huge-int"] = json.dumps(good).replace('"iteration": 1', '"iteration": ' + "9" * 5000)
    texts["deep"] = "[" * 100_000 + "]" * 100_000
    for name, text in texts.items():
        path = tmp_path / f"{name}.json"
        path.write_text(text)
        for command in (["replay", str(path), "--base-url", "http://127.0.0.1:9"], ["report", str(path)]):
            p = servefuzz(*command, timeout=30)
            held(p, Exit.USAGE)


@pytest.mark.parametrize("mode", ["http500", "badjson", "markup"])
def test_shrink_on_a_hostile_server_ends_in_a_documented_code(hostile_server: Hostile, mode: str, tmp_path: Path) -> None:
    spec = RequestSpec("r01", 0.0, tuple(range(3, 40)), 4)
    target = TargetInfo("sglang", hostile_server(mode))
    finding = Finding(1, 1, Scenario(1, (spec,)), target, (Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r01", "x"),))
    path = write_finding(tmp_path, finding)
    p = servefuzz("shrink", str(path), "--base-url", hostile_server(mode), "--runs", "8", "--request-timeout", "3")
    held(p, Exit.OK, Exit.FOUND, Exit.TARGET)
