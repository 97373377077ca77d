"""Talking to a real engine in a test: the runner on its adapter, one request alone, a flag read back."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from servefuzz.history import RequestRecord
from servefuzz.launcher import ServerProcess
from servefuzz.runner import RunConfig, Runner
from servefuzz.targets import make_target
from servefuzz.workload import RequestSpec

_R = TypeVar("_R")


def flag(srv: ServerProcess, name: str) -> int:
    """A launch flag's value, read back from the command line the server was started with."""
    return int(srv.argv[srv.argv.index(name) + 1])


def with_runner(engine: str, url: str, body: Callable[[Runner], Awaitable[_R]], **target_opts: object) -> _R:
    async def main() -> _R:
        # vLLM's CPU build can take long over a first request; a hang is its own test.
        async with Runner(make_target(engine, url, **target_opts), RunConfig(top_k=5, request_timeout_s=300)) as r:
            return await body(r)

    return asyncio.run(main())


def alone(engine: str, url: str, *specs: RequestSpec, **target_opts: object) -> list[RequestRecord]:
    async def body(r: Runner) -> list[RequestRecord]:
        return [await r.run_alone(s, run=0) for s in specs]

    return with_runner(engine, url, body, **target_opts)
