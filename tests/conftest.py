"""Shared fixtures: real servers on 127.0.0.1, started and stopped by PID.

- `reference_server(*flags)` -> base URL of the embedded reference engine started with those
  flags (one process per distinct flag set, shared by the whole test session; tests that care
  about cache state flush it first).
- `stub_server(mode)` -> a `ServerProcess` running `tests/targets/stub_server.py` in one of its
  misbehaving modes (http500, garbage, down, hang); stopped after the test.

At the end of a run the terminal summary says where the tests' time went, by group (`group_of`:
vLLM's, the other real engines', the other slow tests, the rest), so every run of the README's
command shows it (docs/benchmarks.md, "The test command's time").
"""

from __future__ import annotations

import os

# Before anything imports numpy: a BLAS thread pool on two busy cores makes the reference
# engine's scoring 3x slower and helps nothing at these matrix sizes.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import resource  # noqa: E402
import sys
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from servefuzz.launcher import ServerProcess

# Tests do not time things: Hypothesis's 200 ms deadline per example failed property tests on
# two cores busy with the suite's servers (the batch-sweep and chunk-boundary strategy tests).
settings.register_profile("servefuzz", deadline=None)
settings.load_profile("servefuzz")

STUB = Path(__file__).parent / "targets" / "stub_server.py"
TESTS = Path(__file__).parent


def group_of(nodeid: str, marks: Collection[str], *, in_engines: bool) -> str:
    """A test's group: "vllm" for vLLM's real-engine tests, "engines" for the other real engines'
    (llama-server's, SGLang's, the tiny models'), both xdist groups; "slow" for the other tests
    marked slow, "quick" for the rest. `in_engines`: the test is in tests/engines/."""
    if in_engines or "engine" in marks:
        return "vllm" if "vllm" in nodeid.lower() else "engines"
    return "slow" if "slow" in marks else "quick"


def engine_group(item: pytest.Item) -> str | None:
    """The xdist group of a real engine's test: "vllm" for vLLM's, "engines" for the others
    (llama-server's, the tiny models'); None for a test that starts no real engine."""
    group = group_of(item.nodeid, {m.name for m in item.iter_markers()}, in_engines=TESTS / "engines" in item.path.parents)
    return group if group in ("vllm", "engines") else None


# `scripts/test.sh` runs the suite in two parts: the tests that need no real engine beside the
# engines' setup, then the real engines' tests once it has finished. This variable names the part
# ("no-engines" or "engines"); unset, a run has every test.
PART = "SERVEFUZZ_TEST_PART"
PARTS = ("no-engines", "engines")


def needs_an_engine(item: pytest.Item) -> bool:
    """The test starts a real engine or reads an installed one (`engine_group`): it waits for
    `scripts/setup_engines.sh`. Tests outside tests/engines/ that read the engines' cache are
    marked `engine` for this."""
    return engine_group(item) is not None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the group markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the part `SERVEFUZZ_TEST_PART` names (the rest deselected, so counted as such), and
    order the suite for the workers (`scripts/test.sh` runs `pytest -n N --dist loadgroup`).

    The real engines' tests form two groups, each run by one worker in order: vLLM's, so that
    one vLLM runs at a time (two starting together on two cores also run every other test
    slower) and the session's server is started once; and the rest (llama-server, the tiny
    models), which start in seconds. The vLLM group (the longest, about seven minutes) goes first,
    then the other group, then the other slow tests (their files taken in turn, below), then the
    rest: longest first, so the last test to finish is a short one. Without xdist the marker is
    inert and only the order changes.
    """
    part = os.environ.get(PART)
    if part is not None:
        if part not in PARTS:
            raise pytest.UsageError(f"{PART}={part!r}: expected one of {', '.join(PARTS)}")
        keep = [item for item in items if needs_an_engine(item) == (part == "engines")]
        dropped = [item for item in items if needs_an_engine(item) != (part == "engines")]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    groups = {item.nodeid: engine_group(item) for item in items}
    for item in items:
        if groups[item.nodeid] is not None:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))

    def rank(item: pytest.Item) -> int:
        group = groups[item.nodeid]
        if group is not None:
            return 0 if group == "vllm" else 1
        return 2 if item.get_closest_marker("slow") is not None else 3

    # The slow tests of different files taken in turn (each file's first, then each one's second,
    # ...), not file after file: the zoo's 26 campaigns are mostly CPU and its 26 shrinks mostly
    # waiting on a scenario's offsets, and file after file the workers ran three campaigns at once
    # (the cores short, each campaign's search slower) and then three shrinks (the cores idle).
    # A file whose tests share a module-scoped fixture stays together, so that it is made once.
    turn: dict[str, int] = {}
    seen: Counter[Path] = Counter()
    for item in items:
        if rank(item) == 2 and not _shares_a_module_fixture(item):
            turn[item.nodeid] = seen[item.path]
            seen[item.path] += 1
    items.sort(key=lambda item: (rank(item), turn.get(item.nodeid, 0)))  # stable: else in file order


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """The test uses a fixture made once per module or class (pytest's own record of its
    fixtures; an item without one shares none)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d and d[-1].scope in ("module", "class", "package") for d in defs)


_SPENT: dict[str, float] = {}  # seconds by group, setup and teardown included
_COUNTED: Counter[str] = Counter()  # tests by group


_CPU: dict[str, float] = {}  # CPU seconds by group
_CPU_BY_TEST: Counter[str] = Counter()


def _cpu_seconds() -> float:
    """This process's CPU time and that of the children it has reaped (a test's subprocesses and
    the servers it stopped; a server shared by a module is counted where it is stopped)."""
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


_cpu_mark = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the CPU seconds since the last report to this phase's report: on a machine whose
    cores are shared, wall time says how busy the box was, CPU time what a test costs (a worker
    runs one test at a time, so the difference between two reports is that phase's)."""
    global _cpu_mark
    outcome = yield
    now = _cpu_seconds()
    report = outcome.get_result()
    report.user_properties = [*report.user_properties, ("cpu_s", now - _cpu_mark)]
    _cpu_mark = now


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's time to its test's group (on the controller, every worker's reports)."""
    group = group_of(report.nodeid, report.keywords, in_engines=report.nodeid.startswith("tests/engines/"))
    _SPENT[group] = _SPENT.get(group, 0.0) + report.duration
    _COUNTED[group] += report.when == "call" or (report.when == "setup" and report.skipped)
    cpu = sum(float(v) for k, v in report.user_properties if k == "cpu_s")
    _CPU[group] = _CPU.get(group, 0.0) + cpu
    _CPU_BY_TEST[report.nodeid] += cpu


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _SPENT:
        return
    groups = [g for g in ("vllm", "engines", "slow", "quick") if g in _SPENT]
    terminalreporter.write_line("time by group (the tests' own seconds, setup and teardown included): " + ", ".join(
        f"{g} {_SPENT[g]:.0f} s in {_COUNTED[g]} tests" for g in groups))
    terminalreporter.write_line("CPU by group (seconds, servers and subprocesses included): " + ", ".join(
        f"{g} {_CPU.get(g, 0.0):.0f} s" for g in groups))
    terminalreporter.write_line("most CPU (seconds, all phases):")
    for nodeid, cpu in _CPU_BY_TEST.most_common(25):
        terminalreporter.write_line(f"{cpu:8.1f}  {nodeid}")


@pytest.fixture(scope="session")
def reference_server() -> Iterator[Callable[..., str]]:
    servers: dict[tuple[str, ...], ServerProcess] = {}

    def start(*flags: str) -> str:
        if flags not in servers:
            servers[flags] = ServerProcess.reference(list(flags))
            servers[flags].start()
        return servers[flags].base_url

    yield start
    for srv in servers.values():
        srv.stop()


@pytest.fixture
def stub_server() -> Iterator[Callable[[str], ServerProcess]]:
    started: list[ServerProcess] = []

    def start(mode: str) -> ServerProcess:
        srv = ServerProcess(
            [sys.executable, str(STUB), "--mode", mode, "--port", "{port}"], start_timeout_s=20
        )
        started.append(srv)
        srv.start()
        return srv

    yield start
    for srv in started:
        srv.stop()
