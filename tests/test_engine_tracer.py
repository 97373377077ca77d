"""servefuzz's tracer inside another interpreter's processes (`standins/coverage`) and the file
handshake that reads it (`targets.coverage_files`), on plain Python processes: the real engines'
side is tests/engines/test_engine_coverage.py.

- the tracer's edges are the reference engine's (the same hash, the same code, the same width);
- a traced process, its threads and its forked child answer an ask, and the maps are summed;
- without the env var nothing is written and the read says None (no coverage);
- a malformed answer makes the read {} (untrusted, never a crash).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType

import pytest

from servefuzz import engine_files
from servefuzz.reference.tracer import CONTEXT_BITS
from servefuzz.reference.tracer import Tracer as ReferenceTracer
from servefuzz.servers import tracing_env
from servefuzz.targets import coverage_files
from servefuzz.targets.coverage_files import CoverageFiles


def _tracer_module() -> ModuleType:
    """The tracer as the engines import it (by its file: it is no module of servefuzz's)."""
    path = engine_files.tracer_path() / "servefuzz_tracer.py"
    spec = importlib.util.spec_from_file_location("servefuzz_tracer_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # without its env var it traces nothing here
    return module


def _sample(n: int) -> int:
    total = 0
    for i in range(n):
        if i % 3:
            total += i
        else:
            total -= 1
    return total


def _run_traced(settrace: object) -> None:
    old = sys.gettrace()
    sys.settrace(settrace)  # type: ignore[arg-type]
    try:
        _sample(7)
    finally:
        sys.settrace(old)


def test_the_tracer_names_the_names_servefuzz_reads() -> None:
    mod = _tracer_module()
    assert mod.TRACER is None  # no env var: nothing started
    assert (mod.ENV_DIR, mod.ENV_TRACED, mod.ASK) == (coverage_files.ENV_DIR, coverage_files.ENV_TRACED,
                                                      coverage_files.ASK)


def test_its_edges_are_the_reference_tracers_at_the_same_width() -> None:
    mod = _tracer_module()
    ours = mod.Tracer(["tests/test_engine_tracer.py"], bits=16)
    ref = ReferenceTracer(files=[__file__])
    ref.context = 0
    _run_traced(ours.call)
    _run_traced(ref._call)
    assert ours.counts and {p >> CONTEXT_BITS: n for p, n in ref.counts.items()} == ours.counts
    wide = mod.Tracer(["tests/test_engine_tracer.py"])  # the engines' width: the same lines, other numbers
    _run_traced(wide.call)
    assert sorted(wide.counts.values()) == sorted(ours.counts.values())


_CHILD = """
import os, sys, threading, time
sys.path.insert(0, {here!r})
import traced_code
done = threading.Event()
def work():
    traced_code.run(5)
    done.set()
threading.Thread(target=work).start()
done.wait()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    traced_code.run(2)
    os.write(w, b"x")
    time.sleep(30)
    os._exit(0)
os.read(r, 1)  # the child has run its part
print(pid, flush=True)
time.sleep(30)
"""

_TRACED_CODE = """
def run(n):
    out = 0
    for i in range(n):
        out += i if i % 2 else -i
    return out
"""


def _start(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    (tmp_path / "traced_code.py").write_text(textwrap.dedent(_TRACED_CODE))
    proc = subprocess.Popen([sys.executable, "-c", _CHILD.format(here=str(tmp_path))], env=env,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    return proc, child


def _stop(proc: subprocess.Popen[str], child: int) -> None:
    for pid in (child, proc.pid):  # only what this test started, by PID
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    proc.wait(timeout=10)


def test_a_traced_process_its_thread_and_its_fork_answer_and_are_summed(tmp_path: Path) -> None:
    files = CoverageFiles(tmp_path / "cov")
    files.reset()
    base = {k: v for k, v in os.environ.items() if k not in (coverage_files.ENV_DIR, "PYTHONPATH")}
    env = tracing_env(base, files.folder, ("traced_code.py",))
    proc, child = _start(tmp_path, env)
    try:
        got = files.read()
        assert got, "the traced processes answered nothing"
        answers = {p.stem: json.loads(p.read_text()) for p in files.folder.glob("*.json")}
        assert {str(proc.pid), str(child)} <= set(answers)
        assert all(a["seq"] == files.seq for k, a in answers.items() if k in (str(proc.pid), str(child)))
        parent, forked = answers[str(proc.pid)]["points"], answers[str(child)]["points"]
        # The thread ran the loop 5 turns, the fork (from zero: no copy of its parent's map) 2.
        assert sum(parent.values()) > sum(forked.values()) > 0
        assert sum(got.values()) == sum(parent.values()) + sum(forked.values())
        assert files.read() == got  # nothing ran since: the same cumulative map
    finally:
        _stop(proc, child)


def test_without_the_env_var_nothing_is_written_and_there_is_no_coverage(tmp_path: Path) -> None:
    files = CoverageFiles(tmp_path / "cov", wait_s=0.5)
    files.reset()
    env = {k: v for k, v in os.environ.items() if k not in (coverage_files.ENV_DIR, coverage_files.ENV_TRACED)}
    env["PYTHONPATH"] = str(engine_files.tracer_path())  # the tracer on the path, not asked for
    proc, child = _start(tmp_path, env)
    try:
        assert files.read() is None
        assert [p.name for p in files.folder.iterdir()] == [coverage_files.ASK]
    finally:
        _stop(proc, child)
    assert CoverageFiles(tmp_path / "never-made").read() is None


@pytest.mark.parametrize("body", [
    b"not json",
    b'{"points": {"1": 2}}',  # no seq
    b'{"seq": true, "points": {"1": 2}}',
    b'{"seq": 9, "points": {"1": true}}',
    b'{"seq": 9, "points": {"-1": 2}}',
    b'{"seq": 9, "points": {"1": 2.5}}',
    b'{"seq": 9, "points": []}',
    b'[1, 2]',
    b"[" * 100_000,
])
def test_a_malformed_answer_is_no_coverage(tmp_path: Path, body: bytes) -> None:
    files = CoverageFiles(tmp_path / "cov", wait_s=0.1)
    files.reset()
    (files.folder / f"{os.getpid()}.json").write_bytes(body)  # a live pid: it is waited for, then read
    assert files.read() == {}


def test_an_answer_past_the_size_bound_is_no_coverage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coverage_files, "MAX_ANSWER_BYTES", 64)
    files = CoverageFiles(tmp_path / "cov", wait_s=0.1)
    files.reset()
    points = {str(i): 1 for i in range(20)}
    (files.folder / "1.json").write_text(json.dumps({"seq": 99, "points": points}))
    assert files.read() == {}


def test_a_dead_process_is_not_waited_for_and_its_last_map_counts(tmp_path: Path) -> None:
    files = CoverageFiles(tmp_path / "cov", wait_s=30.0)
    files.reset()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (files.folder / f"{int(gone.stdout)}.json").write_text(json.dumps({"seq": 0, "points": {"7": 3}}))
    started = time.monotonic()
    assert files.read() == {7: 3}
    assert time.monotonic() - started < 30.0  # it did not wait out the bound for a dead process


@pytest.mark.parametrize(("engine", "asked", "traced"), [
    ("vllm", True, True), ("sglang", True, True), ("vllm", False, False), ("reference", True, False),
    ("llamacpp", True, False),
])
def test_only_the_campaigns_launched_server_gets_the_tracer(tmp_path: Path, engine: str, asked: bool,
                                                            traced: bool) -> None:
    from servefuzz.launcher import Launch
    from servefuzz.servers import ENGINE_COVERAGE_DIR, LaunchedServer

    launch = Launch(engine, ("python", "-m", "engine", "--port", "{port}"), env={"PYTHONPATH": "/standins"})
    server = LaunchedServer(launch, tmp_path, engine_coverage=asked)
    env = server.process._env or {}
    assert (coverage_files.ENV_DIR in env) is traced and (server.coverage is not None) is traced
    if traced:
        assert env[coverage_files.ENV_DIR] == str(tmp_path / ENGINE_COVERAGE_DIR)
        assert env["PYTHONPATH"] == f"/standins{os.pathsep}{engine_files.tracer_path()}"  # the stand-ins' first
    # What a replay, triage or a control relaunches from is the Launch, which never carries it.
    assert coverage_files.ENV_DIR not in launch.env


def test_engine_coverage_is_on_by_default_only_where_its_cost_is_small(tmp_path: Path) -> None:
    # The reference engine traces itself at 0.75x its requests/s; servefuzz's tracer costs vLLM and
    # SGLang 0.53x and 0.67x, so there it waits to be asked for (docs/benchmarks.md).
    from servefuzz.api import FuzzOptions

    assert FuzzOptions(out=tmp_path).uses_engine_coverage()  # the embedded engine
    assert FuzzOptions(out=tmp_path, launch="reference").uses_engine_coverage()
    assert "--coverage" in FuzzOptions(out=tmp_path).reference_flags()
    for launch in ("vllm-cpu", "sglang-cpu"):
        assert not FuzzOptions(out=tmp_path, launch=launch).uses_engine_coverage()
        assert FuzzOptions(out=tmp_path, launch=launch, engine_coverage=True).uses_engine_coverage()
    assert not FuzzOptions(out=tmp_path, url="http://127.0.0.1:1").uses_engine_coverage()
    assert "--coverage" not in FuzzOptions(out=tmp_path, engine_coverage=False).reference_flags()
