"""`ServerProcess` ends everything it started, and nothing else.

The server here is a real one: a tiny HTTP server whose worker (a child in the same process
group, as vLLM's engine core is) ignores SIGTERM and would outlive its leader.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from servefuzz.errors import LaunchError
from servefuzz.launcher import ServerProcess, group_alive

SERVER = """
import http.server, os, subprocess, sys
# A worker that shrugs off SIGTERM, like an engine process busy in native code.
worker = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('worker up', flush=True); time.sleep(600)"])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(str(os.getpid()).encode())
    def log_message(self, *a):
        pass
print("worker", worker.pid, flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


@pytest.fixture()
def server(tmp_path: Path) -> ServerProcess:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    return ServerProcess([sys.executable, str(script), "{port}"], log_path=tmp_path / "server.log", start_timeout_s=30)


def test_stop_ends_a_worker_that_ignores_sigterm(server: ServerProcess) -> None:
    server.start()
    pgid = server.pid
    assert pgid is not None and group_alive(pgid)
    server.stop(timeout_s=2)
    assert not group_alive(pgid)


def test_a_leader_killed_alone_leaves_workers_that_stop_ends(server: ServerProcess) -> None:
    server.start()
    pgid = server.pid
    assert pgid is not None
    os.kill(pgid, signal.SIGKILL)  # the crash: only the leader dies
    server._proc.wait(timeout=10)  # type: ignore[union-attr]
    assert group_alive(pgid), "the worker outlived its leader"
    assert server.returncode == -signal.SIGKILL
    server.stop(timeout_s=2)
    assert not group_alive(pgid)


def test_every_start_is_headed_in_the_one_log_and_a_restart_takes_a_new_port(server: ServerProcess) -> None:
    first = server.start()
    second = server.restart()
    server.stop(timeout_s=2)
    assert first != second and server.restarts == 1
    assert server.log_path is not None
    log = server.log_path.read_text()
    workers = [line for line in log.splitlines() if line.startswith("worker ")]
    assert log.count("--- servefuzz ") == 2 and sum(line.split()[1:2] != ["up"] for line in workers) == 2


def test_a_command_that_exits_at_once_says_so_with_its_log(tmp_path: Path) -> None:
    srv = ServerProcess([sys.executable, "-c", "print('no model here'); raise SystemExit(3)", "{port}"],
                        log_path=tmp_path / "log", start_timeout_s=30)
    with pytest.raises(LaunchError, match="exited with code 3 .*no model here"):
        srv.start()


def test_a_campaign_killed_with_sigkill_leaves_no_server_behind(tmp_path: Path) -> None:
    out = tmp_path / "campaign"
    campaign = subprocess.Popen([sys.executable, "-m", "servefuzz", "fuzz", "--time", "60", "--out", str(out), "--json"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (out / "server.json").exists():
            time.sleep(0.05)
        server = json.loads((out / "server.json").read_text())["pid"]
        assert group_alive(server)
    finally:
        campaign.kill()
        campaign.wait(timeout=10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and group_alive(server):
        time.sleep(0.05)
    assert not group_alive(server), "the server outlived the campaign that started it"


def test_a_crash_keeps_its_traceback_whole_from_the_last_start() -> None:
    from servefuzz.launcher import traceback_of

    frames = [f'  File "x{i}.py", line {i}, in f' for i in range(60)]  # longer than the 20-line tail
    log = "\n".join(["--- servefuzz 1: old", "Traceback (most recent call last):", "  old", "--- servefuzz 2: new", "boot",
                     "(EngineCore pid=7) ERROR Traceback (most recent call last):", *frames,
                     "RuntimeError: CPU Generator does not use offset", "EngineCore encountered a fatal error."])
    got = traceback_of(log).splitlines()
    assert got[0].endswith("Traceback (most recent call last):") and "old" not in got
    assert got[-2:] == ["RuntimeError: CPU Generator does not use offset", "EngineCore encountered a fatal error."]
    assert len(got) == 63 and traceback_of("--- servefuzz 1\nfine") == ""
    assert len(traceback_of(log, most=5).splitlines()) == 5


def test_the_exit_status_of_a_server_on_its_way_down_is_waited_for(tmp_path: Path) -> None:
    # Healthy at once, gone a second after its first health check answered: like SGLang's
    # launcher, which ends its own tree a moment after its scheduler dies.
    script = tmp_path / "dying.py"
    script.write_text(
        "import http.server, sys, threading, os\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(b'ok')\n"
        "        threading.Timer(1.0, lambda: os._exit(7)).start()\n"
        "    def log_message(self, *a): pass\n"
        "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n"
    )
    srv = ServerProcess([sys.executable, str(script), "{port}"], log_path=tmp_path / "log", start_timeout_s=30)
    srv.start()
    try:
        assert srv.returncode is None  # not yet: read at once, the crash would have no exit code
        assert srv.exit_status(grace_s=30) == 7
    finally:
        srv.stop(timeout_s=2)


def test_a_server_still_running_after_the_grace_has_no_exit_status(server: ServerProcess) -> None:
    server.start()
    try:
        assert server.exit_status(grace_s=0.5) is None and server.alive
    finally:
        server.stop(timeout_s=2)


def test_a_port_taken_while_the_server_starts_is_not_mistaken_for_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`free_port` names a port free a moment ago; a slow server (SGLang: a minute) can find it
    taken by another, whose /health would pass for its own. The launcher accepts only an answer
    from a listener of its own process group, and starts once more on a fresh port. Each test
    server answers with its own pid, so the test reads whose answer a URL gives, by no helper of
    the launcher's."""
    from servefuzz import launcher

    def answerer(url: str) -> int:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:  # noqa: S310 - 127.0.0.1 only
            return int(resp.read())

    script = tmp_path / "server.py"
    script.write_text(SERVER)
    other = ServerProcess([sys.executable, str(script), "{port}"], log_path=tmp_path / "other.log", start_timeout_s=30)
    other.start()
    try:
        assert answerer(other.base_url) == other.pid  # control: the answer names the server that gave it
        ports = iter([other.port, launcher.free_port()])
        monkeypatch.setattr(launcher, "free_port", lambda: next(ports))
        ours = ServerProcess([sys.executable, str(script), "{port}"], log_path=tmp_path / "ours.log", start_timeout_s=30)
        ours.start()
        try:
            assert answerer(ours.base_url) == ours.pid != other.pid  # the URL it gave answers for our server
            assert ours.port != other.port  # the taken port was given up, not answered for us
        finally:
            ours.stop()
    finally:
        other.stop()
