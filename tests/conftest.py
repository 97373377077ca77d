"""Shared fixtures: real servers on 127.0.0.1, started and stopped by PID.

- `reference_server(*flags)` -> base URL of the embedded reference engine started with those
  flags (one process per distinct flag set, shared by the whole test session; tests that care
  about cache state flush it first).
- `stub_server(mode)` -> a `ServerProcess` running `tests/targets/stub_server.py` in one of its
  misbehaving modes (http500, garbage, down, hang); stopped after the test.
"""

from __future__ import annotations

import os

# Before anything imports numpy: a BLAS thread pool on two busy cores makes the reference
# engine's scoring 3x slower and helps nothing at these matrix sizes.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import sys  # noqa: E402
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from servefuzz.launcher import ServerProcess

STUB = Path(__file__).parent / "targets" / "stub_server.py"


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
