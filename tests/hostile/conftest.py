"""The hostile server (hostile_server.py), started once for the session, stopped by PID.

`hostile_server(mode)` -> the base URL that speaks `mode` (`http://127.0.0.1:PORT/<mode>`);
`hostile_server.stats()` -> what the server was asked, per mode and path, and how many requests
came without credentials (auth mode).
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servefuzz.launcher import ServerProcess

SERVER = Path(__file__).parent / "hostile_server.py"


class Hostile:
    def __init__(self, process: ServerProcess) -> None:
        self.process = process

    def __call__(self, mode: str) -> str:
        return f"{self.process.base_url}/{mode}"

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.process.base_url + "/stats", timeout=10) as resp:  # noqa: S310 - 127.0.0.1
            stats: dict[str, Any] = json.loads(resp.read())
        return stats


@pytest.fixture(scope="session")
def hostile_server() -> Iterator[Hostile]:
    process = ServerProcess([sys.executable, str(SERVER), "--port", "{port}"], health_path="/stats", start_timeout_s=30)
    process.start()
    try:
        yield Hostile(process)
    finally:
        process.stop()
