"""Where a campaign's scenarios run: the `Worker` protocol, and `LocalWorker`, the Runner of
this process (the Ray worker is `servefuzz.scaleout.RayWorker`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from servefuzz.confirm import ConfirmConfig, Confirmed, confirm_finding
from servefuzz.errors import TargetError
from servefuzz.oracles.judge import Judgement
from servefuzz.oracles.noise import CampaignNoise
from servefuzz.runner import Runner
from servefuzz.server_facts import TargetInfo
from servefuzz.trial import Executed, execute
from servefuzz.workload import RequestSpec, Scenario, TextSource

__all__ = ["LocalWorker", "Revival", "Worker", "WorkerLost"]


class Revival(Protocol):
    """A server servefuzz launched, which the campaign may start again after it dies."""

    async def death(self) -> dict[str, Any]:
        """What the dead server left: its exit status and the tail of its log (JSON-ready)."""
        ...

    async def revive(self) -> Runner:
        """Start the server again and return a Runner entered on it; TargetError if it won't."""
        ...


class Worker(Protocol):
    """Where the campaign's scenarios run: one server, and what holds it. The campaign loop is
    one for every executor: `LocalWorker` (the Runner `fuzz` holds, today's path) or a worker on
    a Ray cluster (`servefuzz.scaleout`). The driver keeps the campaign directory, the corpus,
    the feedback and the dedup; a worker runs what it is sent and confirms what it saw."""

    @property
    def name(self) -> str | None:
        """Written into every history this worker ran (`meta["worker"]`); None for the one local
        worker, whose histories say nothing more than they always did."""
        ...

    @property
    def info(self) -> TargetInfo:
        """The server this worker holds now."""
        ...

    @property
    def revivable(self) -> bool:
        """Whether `revive` can start its server again (servefuzz launched it)."""
        ...

    def stop_at(self, when: float | None, why: str) -> None:
        """The campaign's deadline (`time.monotonic()` on the driver; None: none): from then on
        this worker's server is sent nothing new and what is in flight is cut (`Runner.stop_at`).
        A worker that cannot honour it is cut by the driver at `when + BUDGET_GRACE_S`."""
        ...

    async def execute(self, scenario: Scenario, *, runs: int, with_alone: bool,
                      probes: Sequence[RequestSpec]) -> Executed:
        """`trial.execute` on this worker's server."""
        ...

    async def confirm(self, scenario: Scenario, iteration: int, done: Executed, verdict: Judgement,
                      config: ConfirmConfig, noise: CampaignNoise | None, say: Callable[[str], None]) -> Confirmed:
        """`confirm.confirm_finding` on this worker's server, the one that showed the anomalies."""
        ...

    async def death(self) -> dict[str, Any]:
        """What a dead server left (`Revival.death`); empty when servefuzz did not launch it."""
        ...

    async def revive(self) -> TargetInfo:
        """Start the server again; TargetError if it won't."""
        ...


class WorkerLost(Exception):
    """A worker itself went away (a remote actor's process, or its node), not just its server:
    what it was running is no evidence about the target, so it is dropped, never a finding. The
    worker is then revived like one whose server died (a remote one is replaced)."""


class LocalWorker:
    """The campaign's one worker in this process: a Runner, and the `Revival` of its server when
    servefuzz launched it."""

    name: str | None = None

    def __init__(self, runner: Runner, revival: Revival | None = None) -> None:
        self.runner, self.revival = runner, revival
        self._stop: tuple[float | None, str] = (None, "")

    def stop_at(self, when: float | None, why: str) -> None:
        self._stop = (when, why)
        self.runner.stop_at(when, why)

    @property
    def info(self) -> TargetInfo:
        assert self.runner.info is not None, "enter the Runner before starting a campaign"
        return self.runner.info

    @property
    def text(self) -> TextSource | None:
        return self.runner.text  # natural text for the prompts (`servefuzz.natural`)

    @property
    def revivable(self) -> bool:
        return self.revival is not None

    async def execute(self, scenario: Scenario, *, runs: int, with_alone: bool,
                      probes: Sequence[RequestSpec]) -> Executed:
        return await execute(self.runner, scenario, runs=runs, with_alone=with_alone, probes=probes)

    async def confirm(self, scenario: Scenario, iteration: int, done: Executed, verdict: Judgement,
                      config: ConfirmConfig, noise: CampaignNoise | None, say: Callable[[str], None]) -> Confirmed:
        return await confirm_finding(self.runner, scenario, iteration, done, verdict, config, noise, say)

    async def death(self) -> dict[str, Any]:
        return {} if self.revival is None else await self.revival.death()

    async def revive(self) -> TargetInfo:
        if self.revival is None:
            raise TargetError("this server was not started by servefuzz, so it cannot be started again")
        self.runner = await self.revival.revive()
        self.runner.stop_at(*self._stop)  # the new Runner keeps the campaign's deadline
        return self.info


# Both workers are Workers, held by mypy: `servefuzz.scaleout` checks its own the same way.
_LOCAL: Callable[[Runner, Revival | None], Worker] = LocalWorker
