"""A campaign under faults of the machine, not of the server (issue 30): a second campaign on
its directory, `kill -9`, SIGTERM, a full disk. Real campaigns on the embedded reference engine
with no fault planted (so they run until told to stop), each a subprocess as a user starts it."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servefuzz.errors import Exit
from servefuzz.launcher import group_alive

pytestmark = pytest.mark.slow

CLEAN = ("--fault", "none")  # a clean engine finds nothing: the campaign runs until stopped


def servefuzz(*args: str) -> list[str]:
    return [sys.executable, "-m", "servefuzz", *args]  # PYTHONPATH is inherited: this checkout's servefuzz


def start(out: Path, *extra: str) -> subprocess.Popen[str]:
    """A campaign with budget to spare, once it has finished an iteration (progress.json)."""
    proc = subprocess.Popen(servefuzz("fuzz", *CLEAN, "--time", "300", "--json", "--out", str(out), *extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / "progress.json").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the campaign did not get going: {proc.communicate()}")
        time.sleep(0.1)
    return proc


def progress(out: Path) -> dict[str, float]:
    return json.loads((out / "progress.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def whole_jsonl(out: Path) -> None:
    """Every appended log ends at a whole line and every line reads back."""
    for name in ("scenarios.jsonl", "histories.jsonl"):
        data = (out / name).read_bytes()
        assert data.endswith(b"\n"), f"{name} ends in a torn line"
        for line in data.splitlines():
            json.loads(line)


def resume(out: Path, seconds: float, *extra: str) -> subprocess.CompletedProcess[str]:
    """`--resume` with a few seconds more than the campaign has spent (budgets count it all)."""
    budget = f"{progress(out)['elapsed_s'] + seconds:.0f}"
    return subprocess.run(servefuzz("fuzz", *CLEAN, "--resume", "--time", budget, "--json", "--out", str(out), *extra),
                          capture_output=True, text=True, timeout=180, check=False)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.communicate(timeout=30)


@pytest.mark.timeout(300)
def test_a_second_campaign_on_a_running_campaigns_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "campaign"
    first = start(out)
    try:
        server = json.loads((out / "server.json").read_text(encoding="utf-8"))
        for args in (("--resume",), ()):  # resuming it, or starting one over it (refused either way)
            second = subprocess.run(servefuzz("fuzz", *CLEAN, *args, "--time", "300", "--out", str(out)),
                                    capture_output=True, text=True, timeout=60, check=False)
            line = one_line(second.stderr)
            assert second.returncode == Exit.USAGE, (second.returncode, line)
            if args:
                assert f"in use by another servefuzz campaign (pid {first.pid})" in line and str(out) in line, line
        assert first.poll() is None, "the running campaign goes on"
        again = json.loads((out / "server.json").read_text(encoding="utf-8"))
        assert (again["pid"], again["starts"]) == (server["pid"], 1), "no second engine was started into its directory"
    finally:
        stop(first)


@pytest.mark.timeout(300)
def test_a_campaign_killed_with_sigkill_holds_no_lock_and_resume_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "campaign"
    proc = start(out)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    before = progress(out)
    assert (out / "campaign.lock").exists(), "the lock file is left behind, as a kill leaves it"
    resumed = resume(out, 4)
    assert resumed.returncode == Exit.OK, resumed.stderr[-2000:]
    assert progress(out)["next_iteration"] > before["next_iteration"], "the resumed campaign fuzzed on"
    whole_jsonl(out)


@pytest.mark.timeout(300)
def test_sigterm_stops_the_campaign_and_its_engine_says_how_to_resume_and_exits_130(tmp_path: Path) -> None:
    out = tmp_path / "campaign"
    proc = start(out)
    try:
        engine = json.loads((out / "server.json").read_text(encoding="utf-8"))["pid"]
        assert group_alive(engine)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        stop(proc)
    assert proc.returncode == Exit.INTERRUPTED, (proc.returncode, stderr)
    assert took < 10, f"stopping took {took:.1f} s"
    assert not group_alive(engine), "the engine the campaign launched is left running"
    command = f"servefuzz fuzz --resume --out {out.absolute()} --fault none --time 300 --json"
    assert one_line(stderr) == f"servefuzz: stopped by SIGTERM; what was written so far is kept; continue with: {command}"
    whole_jsonl(out)

    # The printed command continues the campaign (with a shorter budget than its 300 s).
    before = progress(out)
    words = shlex.split(command)[1:]
    words[words.index("--time") + 1] = f"{before['elapsed_s'] + 4:.0f}"
    resumed = subprocess.run(servefuzz(*words), capture_output=True, text=True, timeout=180, check=False)
    assert resumed.returncode == Exit.OK, resumed.stderr[-2000:]
    assert progress(out)["next_iteration"] > before["next_iteration"]
    whole_jsonl(out)


def _mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command: a full filesystem cannot be made here")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root or CAP_SYS_ADMIN): {made.stderr.strip()}")


@pytest.mark.timeout(300)
def test_a_full_disk_is_one_line_exit_5_keeps_every_file_whole_and_resume_goes_on(tmp_path: Path) -> None:
    small = tmp_path / "small"
    _mount_tmpfs(small, "300k")
    try:
        out = small / "campaign"
        full = subprocess.run(servefuzz("fuzz", *CLEAN, "--time", "300", "--json", "--out", str(out)),
                              capture_output=True, text=True, timeout=180, check=False)
        line = one_line(full.stderr)
        assert full.returncode == Exit.DISK, (full.returncode, line)
        assert line.startswith(f"servefuzz: error: no space left on the device writing {out}/"), line
        assert "free there); what was written before is kept" in line and "a bug in servefuzz" not in line
        assert line.endswith(f"free some space, then continue with: servefuzz fuzz --resume --out {out} "
                             "--fault none --time 300 --json"), line
        whole_jsonl(out)
        assert not list(out.rglob("*.tmp")), "a failed atomic write leaves no temp file holding space"
        before = progress(out)

        # Room again; and a torn last line, as a kill mid-append leaves one, which --resume cuts
        # off so that what it appends is not glued onto the fragment.
        subprocess.run(["mount", "-o", "remount,size=32m", str(small)], check=True)
        with open(out / "histories.jsonl", "ab") as f:
            f.write(b'{"kind": "run", "ru')
        resumed = resume(out, 4)
        assert resumed.returncode == Exit.OK, resumed.stderr[-2000:]
        assert progress(out)["next_iteration"] > before["next_iteration"]
        whole_jsonl(out)
    finally:
        if subprocess.run(["umount", str(small)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(small)], capture_output=True, check=False)


def test_a_background_job_s_ignored_sigint_is_python_s_handler_while_a_command_runs() -> None:
    """A shell starts `servefuzz fuzz ... &` with SIGINT ignored; asyncio.run then installs no
    handler of its own and SIGTERM raised KeyboardInterrupt inside whatever ran, once an aiohttp
    task, whose traceback reached stderr (CI, 2026-12-02). For the command's run the default
    handler is back, so asyncio.run installs its own; afterwards the ignore is restored."""
    from servefuzz.cli import _Stop

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with _Stop().on_sigterm():
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_sigint_stops_a_campaign_started_as_a_background_job(tmp_path: Path) -> None:
    """`kill -INT` reaches a campaign a shell started in the background (SIGINT ignored): it
    stops the way Ctrl-C does, with one line and exit 130."""
    out = tmp_path / "campaign"
    proc = subprocess.Popen(servefuzz("fuzz", *CLEAN, "--time", "300", "--json", "--out", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 120
        while not (out / "progress.json").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        stop(proc)
    assert proc.returncode == Exit.INTERRUPTED, (proc.returncode, stderr)
    assert one_line(stderr).startswith("servefuzz: stopped by SIGINT (Ctrl-C); what was written so far is kept")
