"""A server that servefuzz launched dies mid-campaign: the crash is a finding, the server is
started again, and the campaign goes on to spend its budget.

The deaths are real, one per engine, each the way that engine's processes fail:
- vLLM: the test SIGKILLs its API server (the PID servefuzz recorded in the campaign's
  `server.json`) while requests are in flight; vLLM's engine-core process is left behind by that
  kill, and servefuzz ends it with the rest of the process group before restarting.
- SGLang: the test SIGKILLs its scheduler, a child of the recorded PID (where an engine bug in
  the forward pass or the radix cache would end); SGLang's launcher notices and takes its own
  process tree down, and servefuzz sees the server gone.
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

from servefuzz import engine_files, engines
from servefuzz.engines import sglang as sglang_engine
from servefuzz.engines import vllm as vllm_engine
from servefuzz.finding import load_finding
from servefuzz.launcher import group_alive
from servefuzz.models import ModelPaths

_START_S = max(vllm_engine.START_TIMEOUT_S, sglang_engine.START_TIMEOUT_S)
# Two starts (the first and the restart), each allowed its start timeout on a busy machine, and
# the requests around them: the test's own waits, which the suite's 300 s default would cut short.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(int(2 * _START_S) + 480)]


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _children(pid: int) -> list[int]:
    """The PIDs whose parent is `pid` (from /proc: the children of each of its threads)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _scheduler_of(pid: int) -> int:
    """SGLang's scheduler process under its launcher `pid` (it names itself `sglang::scheduler`)."""
    for child in _children(pid):
        if b"scheduler" in Path(f"/proc/{child}/cmdline").read_bytes():
            return child
    raise AssertionError(f"no SGLang scheduler among the children of {pid}: {_children(pid)}")


@pytest.mark.parametrize("preset", ["vllm-cpu", "sglang-cpu"])
def test_a_killed_server_is_a_crash_finding_and_the_campaign_goes_on(
    preset: str, tiny_models: ModelPaths, tmp_path: Path
) -> None:
    if preset == "vllm-cpu" and not engine_files.installed("vllm-cpu"):
        pytest.skip(f"vLLM CPU is not installed under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    if preset == "sglang-cpu" and not engine_files.installed("sglang-cpu", engines.PRESET_VERSIONS["sglang-cpu"].known[0]):
        pytest.skip(f"SGLang CPU is not installed under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    out = tmp_path / "campaign"
    # Killed at 20 requests: 80 leave the restarted server some 60 to serve (120 were the suite's
    # longest engine test on SGLang CPU, 243 s on a loaded box, for nothing the assertions read).
    campaign = subprocess.Popen(
        [sys.executable, "-m", "servefuzz", "fuzz", "--launch", preset, "--model", str(tiny_models.hf_dir),
         "--keep-going", "--requests", "80", "--json", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + _START_S + 120
        while time.monotonic() < deadline and _read(out / "progress.json").get("requests", 0) < 20:
            assert campaign.poll() is None, campaign.communicate()
            time.sleep(0.2)
        first = _read(out / "server.json")
        done_before = _read(out / "progress.json")["requests"]
        victim = first["pid"] if preset == "vllm-cpu" else _scheduler_of(first["pid"])
        os.kill(victim, signal.SIGKILL)
        stdout, stderr = campaign.communicate(timeout=_START_S + 300)
    finally:
        if campaign.poll() is None:
            campaign.kill()
    assert "Traceback" not in stderr, stderr[-2000:]
    summary = json.loads(stdout)
    second = _read(out / "server.json")
    # Started again, on a fresh process, and the campaign spent its budget there.
    assert summary["restarts"] == 1 and second["starts"] == 2 and second["pid"] != first["pid"], summary
    assert summary["stopped_because"] == "request budget of 80 spent" and summary["requests"] > done_before
    crash = next(load_finding(Path(f["path"])) for f in summary["findings"] if f["verdict"] == "crash")
    evidence = next(a.evidence for a in crash.anomalies if a.verdict.value == "crash")
    # SIGKILL either way: vLLM's from the test; SGLang's launcher, never signalled by the test,
    # ends its own process tree once its scheduler is gone (`kill_process_tree`, SIGKILL).
    assert evidence["exit_code"] == -signal.SIGKILL
    if preset == "vllm-cpu":
        assert crash.target.engine == "vllm" and crash.target.page_size == 32  # the preset's block size
    else:
        assert crash.target.engine == "sglang" and "sgl_kernel" in crash.target.standins
    first_log = (out / "server.log").read_text(encoding="utf-8").split("--- servefuzz ")[1]
    assert evidence["log_tail"] and first_log.rstrip().endswith(evidence["log_tail"].splitlines()[-1])
    # Nothing of either server is left running: the first group was ended before the restart.
    assert not group_alive(first["pid"]) and not group_alive(second["pid"])
