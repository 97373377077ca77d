"""Campaign workers on a Ray cluster: `fuzz --ray ADDRESS|local --workers N`.

Each worker is a Ray actor that launches and owns one server on its node (`servers.LaunchedServer`,
GPUs as the Ray resource `num_gpus`), executes the scenarios the driver sends it and confirms
what it saw there; the driver keeps the one campaign loop (`campaign.run_campaign_on`), the
campaign directory, the corpus, the feedback and the dedup. Ray is an optional extra
(`pip install servefuzz[ray]`): only this module imports it, and only `api.fuzz` with `ray=`
imports this module.

    async with ray_workers("local", 2, Launch.resolve("reference"), out) as workers:
        result = await run_campaign_on(workers, strategies, config)

A worker's server writes its log beside the campaign (`<out>/workers/<name>/server.log`, and
`server.json`); on a cluster of several nodes that path is on the worker's node.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from servefuzz.campaign import Worker, WorkerLost
from servefuzz.confirm import ConfirmConfig, Confirmed, confirm_finding
from servefuzz.errors import LaunchError, TargetError, UsageError, extra_module
from servefuzz.finding import Finding, TriageOutcome
from servefuzz.launcher import Launch
from servefuzz.oracles.judge import Judgement
from servefuzz.oracles.noise import CampaignNoise
from servefuzz.runner import RunConfig
from servefuzz.server_facts import TargetInfo
from servefuzz.servers import LaunchedServer
from servefuzz.triager import FlagVariant, RowRunner, run_row
from servefuzz.trial import Executed, execute
from servefuzz.workload import RequestSpec, Scenario

__all__ = ["LOCAL", "RayWorker", "ServerActor", "ray_rows", "ray_workers"]

# `--ray local`: a Ray cluster of this machine alone, started for the campaign and shut down after.
LOCAL = "local"


def _ray() -> Any:
    """The ray module, or one line saying how to get it."""
    return extra_module("ray", "--ray", extra="ray")


class ServerActor:
    """What runs inside a worker's Ray actor: one launched server and a Runner on it. Every
    method is async (an async actor: one event loop, the one the Runner's session lives on)."""

    def __init__(self, launch: Launch, log_dir: Path, headers: Mapping[str, str], config: RunConfig) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.server = LaunchedServer(launch, log_dir, headers=headers, config=config)
        self.started = False

    def _info(self) -> TargetInfo:
        info = self.server.runner.info
        assert info is not None
        return info

    async def start(self) -> TargetInfo:
        await self.server.__aenter__()
        self.started = True
        return self._info()

    async def execute(self, scenario: Scenario, runs: int, with_alone: bool, probes: Sequence[RequestSpec]) -> Executed:
        return await execute(self.server.runner, scenario, runs=runs, with_alone=with_alone, probes=probes)

    async def confirm(self, scenario: Scenario, iteration: int, done: Executed, verdict: Judgement,
                      config: ConfirmConfig, noise: CampaignNoise | None) -> Confirmed:
        return await confirm_finding(self.server.runner, scenario, iteration, done, verdict, config, noise)

    async def death(self) -> dict[str, Any]:
        return await self.server.death()

    async def revive(self) -> TargetInfo:
        await self.server.revive()
        return self._info()

    async def stop(self) -> None:
        if self.started:
            self.started = False
            await self.server.__aexit__(None, None, None)


class RayWorker:
    """The driver's handle on one worker actor (a `campaign.Worker`). A worker whose actor is
    lost (its process died, or its node) is replaced by a new actor on `revive`, as a dead
    server is started again; what the lost one was running is dropped (`campaign.WorkerLost`)."""

    revivable = True  # the actor launched its server, so it can start it again

    def __init__(self, name: str, spawn: Callable[[], Any], actor: Any, info: TargetInfo,
                 lost: type[BaseException]) -> None:
        self._name, self.spawn, self.actor, self._info, self._lost = name, spawn, actor, info, lost

    @property
    def name(self) -> str:
        return self._name

    @property
    def info(self) -> TargetInfo:
        return self._info

    def stop_at(self, when: float | None, why: str) -> None:
        """Nothing here: `when` is on the driver's clock, and the actor's runner keeps none. The
        driver cancels a scenario still in flight `campaign.BUDGET_GRACE_S` after the deadline
        (what the actor was running then is not recorded), so the budget holds all the same."""

    async def execute(self, scenario: Scenario, *, runs: int, with_alone: bool,
                      probes: Sequence[RequestSpec]) -> Executed:
        try:
            done: Executed = await self.actor.execute.remote(scenario, runs, with_alone, list(probes))
        except self._lost as e:
            raise WorkerLost(f"worker {self.name} was lost: {_cause(e)}") from None
        return done

    async def confirm(self, scenario: Scenario, iteration: int, done: Executed, verdict: Judgement,
                      config: ConfirmConfig, noise: CampaignNoise | None, say: Callable[[str], None]) -> Confirmed:
        # Progress lines of a remote confirmation stay there: the driver said "confirming on wN".
        try:
            confirmed: Confirmed = await self.actor.confirm.remote(scenario, iteration, done, verdict, config, noise)
        except self._lost as e:
            raise WorkerLost(f"worker {self.name} was lost: {_cause(e)}") from None
        return confirmed

    async def death(self) -> dict[str, Any]:
        try:
            left: dict[str, Any] = await self.actor.death.remote()
        except self._lost:
            return {}  # the actor went with its server: nothing of either is left to read
        return left

    async def revive(self) -> TargetInfo:
        try:
            try:
                info: TargetInfo = await self.actor.revive.remote()
            except self._lost:
                # The actor itself is gone (its server went with it): a new one takes its place.
                self.actor = self.spawn()
                info = await self.actor.start.remote()
        except Exception as e:  # noqa: BLE001 - Ray wraps the actor's TargetError in its own error type
            raise TargetError(f"worker {self.name}: {_cause(e)}") from None
        self._info = info
        return info


# A RayWorker is a campaign Worker, held by mypy (as `campaign.workers` holds LocalWorker).
_RAY: Callable[[str, Callable[[], Any], Any, TargetInfo, type[BaseException]], Worker] = RayWorker


def _cause(e: BaseException) -> str:
    """The actor's own error behind Ray's wrapper (`RayTaskError.cause`), as one line."""
    cause = getattr(e, "cause", None)
    return str(cause if isinstance(cause, BaseException) else e).strip().splitlines()[-1]


@asynccontextmanager
async def ray_workers(
    address: str,
    count: int,
    launch: Launch,
    out: Path,
    *,
    headers: Mapping[str, str] | None = None,
    config: RunConfig | None = None,
    gpus_per_worker: float = 0.0,
) -> AsyncIterator[list[Worker]]:
    """`count` workers on the Ray cluster at `address` (`local`: one started on this machine
    with a CPU per worker, shut down on exit; a cluster already joined in this process is used
    as it is), each an actor holding `gpus_per_worker` GPUs and one CPU, each with its server
    started from `launch` and healthy before this yields. Every server is stopped and every
    actor ended on exit."""
    if count < 1:
        raise UsageError("--workers must be at least 1")
    ray = _ray()
    with _cluster(ray, address, count):
        actor_class = ray.remote(num_cpus=1, num_gpus=gpus_per_worker)(ServerActor)

        def spawner(i: int) -> Callable[[], Any]:
            return lambda: actor_class.remote(launch, out / "workers" / f"w{i}", dict(headers or {}), config or RunConfig())

        spawns = [spawner(i) for i in range(count)]
        actors = [spawn() for spawn in spawns]
        workers: list[RayWorker] = []
        try:
            # Started side by side: a vLLM server takes tens of seconds to come up.
            started = await asyncio.gather(*(actor.start.remote() for actor in actors), return_exceptions=True)
            for i, (actor, info) in enumerate(zip(actors, started, strict=True)):
                if isinstance(info, BaseException):
                    raise LaunchError(f"worker w{i} could not start its server: {_cause(info)}")
                workers.append(RayWorker(f"w{i}", spawns[i], actor, info, ray.exceptions.RayActorError))
            yield list(workers)
        finally:
            # The first actors, and the ones that replaced lost ones (a lost actor's stop just fails).
            for actor in [*actors, *(w.actor for w in workers if not any(w.actor is a for a in actors))]:
                try:
                    await actor.stop.remote()
                except Exception:  # noqa: BLE001, S110 - a dead actor has no server left to stop
                    pass
                ray.kill(actor)


@contextmanager
def _cluster(ray: Any, address: str, cpus: int) -> Iterator[None]:
    """Joined to the Ray cluster at `address` (`local`: one started on this machine with `cpus`
    CPUs, on the loopback, shut down on exit); a cluster this process already joined is used as
    it is, and left as it is."""
    if ray.is_initialized():
        yield
        return
    # No dashboard and no log forwarding: servefuzz's own display is the one on the terminal.
    opts: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    if address == LOCAL:
        # Bound to the loopback: the servers are on this machine and so is every actor.
        ray.init(address=LOCAL, num_cpus=cpus, _node_ip_address="127.0.0.1", **opts)
    else:
        ray.init(address=address, **opts)
    try:
        yield
    finally:
        ray.shutdown()


@contextmanager
def ray_rows(address: str, parallel: int, *, gpus_per_row: float = 0.0) -> Iterator[RowRunner]:
    """Triage rows as Ray tasks (`triage --ray`): each row (`triager.run_row`) runs where the
    cluster has a CPU and `gpus_per_row` GPUs free, and starts its own server there; the
    triage's `parallel` threads each wait on one task.

        with ray_rows("local", 2) as run:
            result = triage(finding, launch, parallel=2, run=run)
    """
    ray = _ray()
    with _cluster(ray, address, parallel):
        task = ray.remote(num_cpus=1, num_gpus=gpus_per_row)(run_row)

        def run(finding: Finding, launch: Launch, variant: FlagVariant | None, *, runs: int,
                stop: Callable[[int, int], bool] | None = None, log_dir: Path | None = None,
                noise: CampaignNoise | None = None) -> TriageOutcome:
            row: TriageOutcome = ray.get(task.remote(finding, launch, variant, runs=runs, stop=stop, log_dir=log_dir,
                                                     noise=noise))
            return row

        yield run
