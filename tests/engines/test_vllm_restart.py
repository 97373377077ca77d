"""A vLLM server that servefuzz launched dies mid-campaign: the crash is a finding, the server is
started again, and the campaign goes on to spend its budget.

The death is real: the test SIGKILLs vLLM's API server (the PID servefuzz recorded in the
campaign's `server.json`) while requests are in flight. vLLM's engine-core process is left
behind by that kill; servefuzz ends it with the rest of the process group before restarting.
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

from servefuzz import engines
from servefuzz.finding import load_finding
from servefuzz.launcher import group_alive
from servefuzz.models import ModelPaths

# Two vLLM starts (the first and the restart), each allowed VLLM_START_TIMEOUT_S on a busy
# machine, and the requests around them: the test's own waits, which the suite's 300 s default
# would cut short.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(int(2 * engines.VLLM_START_TIMEOUT_S) + 480)]


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def test_a_killed_vllm_is_a_crash_finding_and_the_campaign_goes_on(tiny_models: ModelPaths, tmp_path: Path) -> None:
    if not engines.vllm_installed():
        pytest.skip(f"vLLM CPU is not installed under {engines.cache_dir()}: run {engines.SETUP_SCRIPT}")
    out = tmp_path / "campaign"
    campaign = subprocess.Popen(
        [sys.executable, "-m", "servefuzz", "fuzz", "--launch", "vllm-cpu", "--model", str(tiny_models.hf_dir),
         "--keep-going", "--requests", "120", "--json", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + engines.VLLM_START_TIMEOUT_S + 120
        while time.monotonic() < deadline and _read(out / "progress.json").get("requests", 0) < 20:
            assert campaign.poll() is None, campaign.communicate()
            time.sleep(0.2)
        first = _read(out / "server.json")
        done_before = _read(out / "progress.json")["requests"]
        os.kill(first["pid"], signal.SIGKILL)
        stdout, stderr = campaign.communicate(timeout=engines.VLLM_START_TIMEOUT_S + 300)
    finally:
        if campaign.poll() is None:
            campaign.kill()
    assert "Traceback" not in stderr, stderr[-2000:]
    summary = json.loads(stdout)
    second = _read(out / "server.json")
    # Started again, on a fresh process, and the campaign spent its budget there.
    assert summary["restarts"] == 1 and second["starts"] == 2 and second["pid"] != first["pid"], summary
    assert summary["stopped_because"] == "request budget of 120 spent" and summary["requests"] > done_before
    crash = next(load_finding(Path(f["path"])) for f in summary["findings"] if f["verdict"] == "crash")
    evidence = next(a.evidence for a in crash.anomalies if a.verdict.value == "crash")
    assert evidence["exit_code"] == -signal.SIGKILL
    first_log = (out / "server.log").read_text(encoding="utf-8").split("--- servefuzz ")[1]
    assert evidence["log_tail"] and first_log.rstrip().endswith(evidence["log_tail"].splitlines()[-1])
    assert crash.target.engine == "vllm" and crash.target.page_size == 32  # the preset's block size
    # Nothing of either server is left running: the first group was ended before the restart.
    assert not group_alive(first["pid"]) and not group_alive(second["pid"])
