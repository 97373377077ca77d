"""Starting the reference server: the ready line, --port 0, bad flags as one line, clean exit."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest
from refclient import get

from servefuzz.reference.server import main

PY = [sys.executable, "-m", "servefuzz.reference"]


def test_port_zero_picks_a_free_port_and_says_which() -> None:
    proc = subprocess.Popen([*PY, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        prefix = "servefuzz-reference listening on http://127.0.0.1:"
        assert line.startswith(prefix) and int(line[len(prefix) :]) > 0
        url = line.split(" on ", 1)[1]
        assert get(url, "/health") == (200, "OK\n")
        assert f'"port": {url.rsplit(":", 1)[1]}' in get(url, "/server_info")[1]
    finally:
        proc.send_signal(signal.SIGTERM)  # our own child, by PID
        assert proc.wait(timeout=15) == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--page-size", "0"], "--page-size must be >= 1"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--fault", "nope"], "unknown fault 'nope'; known: abort-reuse"),
        (["--chunked-prefill-size", "0"], "or -1 to disable chunking"),
        (["--max-total-tokens", "64"], "at least two pages"),
        (["--port", "x"], "invalid int value"),
        (["--model-arch", "gemma9"], "argument --model-arch: invalid choice: 'gemma9' (choose from 'llama', 'qwen3-next')"),
        (["--model-arch", "qwen3-next", "--page-size", "48"], "--mamba-track-interval must be a positive multiple"),
        (["--model-arch", "qwen3-next", "--max-mamba-cache-size", "3"], "at least --max-running-requests"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err, err


def test_both_entry_points_refuse_a_bad_flag_the_same_way() -> None:
    for cmd in (PY, ["servefuzz", "serve-reference"]):
        done = subprocess.run([*cmd, "--page-size", "0"], check=False, capture_output=True, text=True, timeout=30)
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == "servefuzz-reference: error: --page-size must be >= 1\n"


def test_a_busy_port_is_one_line_and_exit_1() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        done = subprocess.run([*PY, "--port", str(port)], check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr


def test_help_lists_the_faults_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "stale-padding" in out and "--disable-radix-cache" in out
