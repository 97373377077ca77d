"""Scale-out on Ray (`fuzz --ray`, `servefuzz.scaleout`): without the extra nothing changes and
nothing imports ray; with it, a local Ray cluster of two workers, each owning an embedded
reference engine on 127.0.0.1, finds the planted fault, keeps one finding per signature and
names the worker of every history."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from servefuzz.errors import Exit


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_without_ray_servefuzz_imports_fuzz_help_works_and_ray_asks_for_the_extra(tmp_path: Path) -> None:
    # ray blocked as if it were not installed: `import ray` raises ImportError.
    done = _python(f"""
        import sys
        sys.modules["ray"] = None
        import servefuzz, servefuzz.api, servefuzz.campaign
        from servefuzz.cli import main
        try:
            main(["fuzz", "--help"])
        except SystemExit as e:
            print("help exit", e.code)
        print("code", main(["fuzz", "--ray", "local", "--workers", "2", "--json", "--out", {str(tmp_path / "c")!r}]))
    """)
    assert "help exit 0" in done.stdout and "--ray ADDRESS" in done.stdout and "--workers N" in done.stdout
    assert f"code {int(Exit.USAGE)}" in done.stdout, done.stdout + done.stderr
    assert "--ray needs the Python package 'ray': pip install 'servefuzz[ray]'" in done.stderr
    assert not (tmp_path / "c" / "progress.json").exists(), "nothing of a campaign was started"


def test_no_servefuzz_entry_point_imports_ray_unless_asked() -> None:
    pytest.importorskip("ray")  # the control: ray is there to be imported, and nothing does
    done = _python("""
        import sys
        import servefuzz, servefuzz.api, servefuzz.campaign, servefuzz.cli.parser
        from servefuzz.cli import main
        print("before", "ray" in sys.modules)
        import servefuzz.scaleout
        servefuzz.scaleout._ray()
        print("after", "ray" in sys.modules)
    """)
    assert "before False" in done.stdout and "after True" in done.stdout, done.stdout + done.stderr


def test_workers_without_ray_and_ray_with_a_url_are_refused_in_one_line(tmp_path: Path) -> None:
    from servefuzz.api import FuzzOptions
    from servefuzz.errors import UsageError

    with pytest.raises(UsageError, match="--ray"):
        FuzzOptions(out=tmp_path / "a", workers=2).validate()
    with pytest.raises(UsageError, match="not --url"):
        FuzzOptions(out=tmp_path / "b", ray="local", url="http://127.0.0.1:1").validate()
    FuzzOptions(out=tmp_path / "c", ray="local", workers=2).validate()  # and the right use passes


@pytest.mark.timeout(240)
def test_two_ray_workers_find_the_embedded_fault_once_and_every_history_names_its_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray")
    # A cluster of this machine alone, on the loopback: no cluster token for Ray to write into $HOME.
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    from servefuzz.api import fuzz
    from servefuzz.finding import load_finding

    out = tmp_path / "c"
    result = fuzz(out=out, ray="local", workers=2, time_s=80)  # the embedded default: stops at its first finding
    assert result.stopped_because == "first confirmed finding", result.stopped_because
    findings = [load_finding(p) for p in sorted((out / "findings").glob("finding_*.json"))]
    assert findings and len({f.signature for f in findings}) == len(findings), "one finding per signature"
    confirmed = [f for f in findings if f.confirmation is not None and f.confirmation.reproduced]
    assert any(f.verdict.value == "corruption" for f in confirmed)

    lines = [json.loads(line) for line in (out / "histories.jsonl").read_text().splitlines()]
    runs = [r for r in lines if r["kind"] == "run"]
    workers = Counter(r["meta"].get("worker") for r in runs)
    assert set(workers) == {"w0", "w1"}, workers  # both ran scenarios, and no history is unnamed
    # (The flush probe's runs, before the first scenario, are named by worker and by no iteration.)
    by_iteration = {r["meta"]["iteration"]: r["meta"]["worker"] for r in runs if "probe" not in r["meta"]}
    for f in confirmed:
        # Confirmed on the worker that saw it: its note names the worker that ran its iteration.
        assert f"found and confirmed on worker {by_iteration[f.iteration]}" in f.notes
    for name in ("w0", "w1"):
        assert (out / "workers" / name / "server.log").stat().st_size > 0
        assert json.loads((out / "workers" / name / "server.json").read_text())["pid"] > 0


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc: no psutil here)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.timeout(300)
def test_a_ray_campaign_resumes_after_its_driver_is_killed(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    import os
    import signal
    import time

    from servefuzz.api import fuzz
    from servefuzz.finding import load_finding

    out = tmp_path / "c"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    driver = subprocess.Popen([sys.executable, "-m", "servefuzz", "fuzz", "--ray", "local", "--workers", "2", "--keep-going",
                               "--time", "600", "--json", "--out", str(out)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    below: set[int] = set()
    servers_left: list[int] = []
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            progress = json.loads((out / "progress.json").read_text()) if (out / "progress.json").exists() else {}
            if progress.get("next_iteration", 0) >= 4 and progress.get("first_confirmed"):
                break
            time.sleep(1)
        else:
            pytest.fail("the campaign made no confirmed finding in 150 s")
    finally:
        below = _descendants(driver.pid)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        # The actors and their servers die with the driver (servers die with their parent); Ray's
        # own agents may outlive it: they are this test's to end, by pid.
        time.sleep(3)
        servers_left = [pid for pid in below if "servefuzz.reference" in _cmdline(pid)]
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    assert not servers_left, "a worker's server outlived the killed driver"
    before = json.loads((out / "progress.json").read_text())
    logged = [json.loads(line)["iteration"] for line in (out / "scenarios.jsonl").read_text().splitlines()]
    found = {load_finding(p).signature for p in (out / "findings").glob("finding_*.json")}
    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        result = fuzz(out=out, ray="local", workers=2, resume=True, stop_at_first=False,
                      requests=before["requests"] + 40)
    finally:
        del os.environ["RAY_AUTH_MODE"]
    assert result.iterations >= 1 and result.requests > before["requests"]
    after = [json.loads(line)["iteration"] for line in (out / "scenarios.jsonl").read_text().splitlines()]
    assert after[: len(logged)] == logged, "what the killed session logged is kept as it was"
    assert min(after[len(logged):]) == max(logged) + 1 and len(set(after)) == len(after), "no number names two scenarios"
    files = [load_finding(p) for p in (out / "findings").glob("finding_*.json")]
    assert found <= {f.signature for f in files} and len({f.signature for f in files}) == len(files)


@pytest.mark.timeout(240)
def test_a_lost_ray_worker_is_replaced_and_the_campaign_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    import os
    import signal

    from servefuzz.api import fuzz
    from servefuzz.campaign import CampaignState

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    out = tmp_path / "c"
    killed: list[int] = []

    def kill_w0_once(state: CampaignState) -> None:
        # Once two scenarios are done, end w0's actor process (its server goes with it).
        if killed or state.iteration < 2:
            return
        server = json.loads((out / "workers" / "w0" / "server.json").read_text())["pid"]
        actor = int(Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert "ServerActor" in _cmdline(actor), _cmdline(actor)
        killed.extend([actor, state.iteration, server])
        os.kill(actor, signal.SIGKILL)

    result = fuzz(out=out, ray="local", workers=2, faults=("none",), time_s=45, on_event=kill_w0_once)
    assert killed and result.stopped_because.startswith("time budget"), result.stopped_because
    assert result.restarts == 1 and not result.findings, "a lost worker is no crash of the target"
    runs = [json.loads(line)["meta"] for line in (out / "histories.jsonl").read_text().splitlines()
            if line.startswith('{"kind": "run"')]
    assert any(m["worker"] == "w0" and "probe" not in m and m["iteration"] > killed[1] for m in runs), "the new w0 ran scenarios"
    now = json.loads((out / "workers" / "w0" / "server.json").read_text())
    assert now["pid"] != killed[2] and now["starts"] == 1, "a new actor started a server of its own"
    assert not [p for p in killed[:1] if _cmdline(p)], "the lost actor is gone"


def test_the_live_panel_shows_every_remote_worker_and_nothing_more_for_a_local_one() -> None:
    import io
    import re

    from rich.console import Console

    from servefuzz.campaign import CampaignState, Chose
    from servefuzz.progress import LiveProgress

    def shown(state: CampaignState) -> str:
        screen = io.StringIO()
        with LiveProgress(Console(file=screen, force_terminal=True, width=120), "fuzzing") as live:
            live.update(state)
            live._live.refresh()
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())  # the text, without terminal codes

    state = CampaignState(last=Chose(7, "random-load", 3))
    state.workers = {"w1": "iteration 7: random-load, 3 requests", "w0": "iteration 6: confirming 1 anomalies"}
    remote = shown(state)
    assert "w0  iteration 6: confirming 1 anomalies" in remote and "w1  iteration 7: random-load" in remote
    assert "w0" not in shown(CampaignState(last=Chose(7, "random-load", 3)))


@pytest.mark.timeout(300)
def test_triage_on_ray_runs_every_row_as_a_task_and_names_the_overlap_scheduler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ray = pytest.importorskip("ray")
    from servefuzz.anomaly import Anomaly, Oracle, Verdict
    from servefuzz.cli import main as cli
    from servefuzz.finding import Finding, load_finding, write_finding
    from servefuzz.server_facts import TargetInfo
    from servefuzz.triager import triaged_name
    from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    # The overlap-war finding of tests/test_triage.py: one running request at a time, so r02
    # takes r01's row while r01's last decode is in flight (deterministic, not timing luck).
    b = PromptBuilder(3, range(3, 1000))
    scenario = Scenario(3, (RequestSpec("r01", 0.0, b.prompt(None, 0, 40), 6), RequestSpec("r02", 0.5, b.prompt(None, 0, 30), 4)))
    target = TargetInfo("reference", "http://127.0.0.1:1", server_args={"max_running_requests": 1, "page_size": 64},
                        faults=("overlap-war",))
    path = write_finding(tmp_path, Finding(5, 3, scenario, target,
                                           (Anomaly(Oracle.ISOLATION, Verdict.CORRUPTION, "r01", "r01 differs from alone"),)))
    code = cli(["triage", str(path), "--launch", "reference", "--runs", "3", "--parallel", "2", "--ray", "local"])
    out = capsys.readouterr().out
    assert code == 0, out
    triaged = load_finding(tmp_path / triaged_name(path))
    assert triaged.triage is not None and triaged.triage.baseline.reproduced >= 1
    rows = {r.name: r for r in triaged.triage.variants}
    assert rows["--disable-overlap-schedule"] in triaged.triage.cures
    assert rows["--max-running-requests 1"].error == "no change: the baseline already runs this way"
    assert "implicated: overlap scheduler" in out
    assert not ray.is_initialized(), "the local cluster is shut down after the matrix"
