"""What each CLI command does, as plain functions the CLI (and tests) call.

These are the edges that put the pieces together: start the server (the embedded reference
engine when no target is given, or what `--launch` names), open a `Runner`, drive a campaign or a
replay, and hand back a result for the CLI to print. No argument parsing and no printing of
results happens here.

A server `fuzz` starts is owned by a `LaunchedServer`: its log and `server.json` (pid, port,
command) live in the campaign directory, and when it dies the campaign records the crash and
starts it again through it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp

from servefuzz.campaign import (
    CampaignConfig,
    CampaignResult,
    CampaignState,
    check_campaign_dir,
    run_campaign,
)
from servefuzz.confirm import Launch
from servefuzz.errors import LaunchError, TargetError, UsageError
from servefuzz.finding import Finding, load_finding, redact_argv, redact_text
from servefuzz.history import RunHistory
from servefuzz.launcher import ServerProcess
from servefuzz.replay_report import ReplayResult, replay_result
from servefuzz.runner import RunConfig, Runner
from servefuzz.strategies import get_strategies
from servefuzz.targets import Target, detect_engine, make_target
from servefuzz.traces import load_trace_seeds

__all__ = [
    "FuzzOptions",
    "LaunchedServer",
    "EMBEDDED_FAULT",
    "ZOO_SETTINGS",
    "EMBEDDED_TIME_S",
    "REMOTE_TIME_S",
    "fuzz",
    "replay",
    "embedded_banner",
    "open_target",
]

# The seed's bug class, planted so that a newcomer's first run shows a finding being made.
EMBEDDED_FAULT = "page-boundary-prefix"
# The embedded default must end by itself within two minutes, start-up and confirmation included.
EMBEDDED_TIME_S = 90.0
# Against a real server, bugs hide longer; a campaign without a budget runs this long.
REMOTE_TIME_S = 600.0
# Engine settings a zoo fault needs to be reachable at all, as its trigger says (eviction needs
# a pool small enough to fill); the embedded engine gets them when that fault is planted.
ZOO_SETTINGS: dict[str, tuple[str, ...]] = {"evict-in-use": ("--max-total-tokens", "4096")}


@dataclass(frozen=True)
class FuzzOptions:
    """Everything `servefuzz fuzz` can be told.

    The target: `url` (a server someone else runs), or `launch` (a preset or a command with
    `{port}` that servefuzz starts, serving `model`), or neither: the embedded reference engine
    with `faults` planted. `engine` None: detected from the server's answers. `seed` and
    `strategy` None mean: 0 and "mix" for a new campaign, the stored ones on `resume`. `trace`:
    a Mooncake-style JSONL trace whose windows seed the corpus.
    """

    out: Path
    url: str | None = None
    launch: str | None = None
    model: Path | None = None
    engine: str | None = None
    faults: tuple[str, ...] = (EMBEDDED_FAULT,)
    requests: int | None = None
    time_s: float | None = None
    seed: int | None = None
    runs: int = 2
    confirm_runs: int = 5
    strategy: str | None = None
    stop_at_first: bool | None = None  # None: yes on the embedded default, no on a real server
    resume: bool = False
    trace: Path | None = None
    slowdowns: bool = False

    @property
    def embedded(self) -> bool:
        """No target named: the embedded reference engine, with its planted fault."""
        return self.url is None and self.launch is None

    def validate(self) -> None:
        """Refuse contradictory options with one line, before anything starts."""
        if self.url is not None and self.launch is not None:
            raise UsageError("give --url (a running server) or --launch (a server to start), not both")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise UsageError(f"--url must start with http:// or https://, got {self.url!r}")
        if self.model is not None and self.launch not in ("vllm-cpu", "llama-server"):
            raise UsageError("--model names the model a preset serves: use it with --launch vllm-cpu or llama-server")
        self.reference_flags()

    def reference_flags(self) -> list[str]:
        faults = [f for f in self.faults if f != "none"]
        if "none" in self.faults and faults:
            raise UsageError("--fault none cannot be combined with other faults")
        settings = [arg for f in faults for arg in ZOO_SETTINGS.get(f, ())]
        return [arg for f in faults for arg in ("--fault", f)] + settings

    def identity(self) -> tuple[int, str]:
        """The campaign's seed and strategy spec: as given, else stored (resume), else defaults."""
        stored = {}
        if self.resume:
            try:
                stored = json.loads((self.out / "config.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                stored = {}
        seed = self.seed if self.seed is not None else int(stored.get("seed", 0))
        spec = self.strategy or ",".join(stored.get("strategies") or ["mix"])
        return seed, spec


def embedded_banner(opts: FuzzOptions) -> str:
    faults = [f for f in opts.faults if f != "none"]
    if not faults:
        return "No target given: fuzzing the embedded reference engine with no fault planted."
    return (
        "No target given: fuzzing the embedded reference engine with the planted fault "
        f"{', '.join(faults)} (a known bug, planted on purpose so you can watch servefuzz find it). "
        "Point servefuzz at your own server with --url URL --engine ENGINE."
    )


def fuzz(opts: FuzzOptions, on_event: Callable[[CampaignState], None] = lambda s: None) -> CampaignResult:
    """Run one campaign; starts (and stops) the server unless `opts.url` names a running one."""
    opts.validate()
    check_campaign_dir(opts.out, resume=opts.resume)
    seed, spec = opts.identity()
    strategies = get_strategies(spec)
    seeds = load_trace_seeds(opts.trace) if opts.trace is not None else ()
    time_s = opts.time_s
    if time_s is None and opts.requests is None:
        time_s = EMBEDDED_TIME_S if opts.embedded else REMOTE_TIME_S
    stop_at_first = opts.embedded if opts.stop_at_first is None else opts.stop_at_first
    config = CampaignConfig(
        out_dir=opts.out,
        seed=seed,
        runs=opts.runs,
        confirm_runs=opts.confirm_runs,
        time_budget_s=time_s,
        request_budget=opts.requests,
        stop_at_first=stop_at_first,
        performance=opts.slowdowns,
        resume=opts.resume,
    )

    async def go() -> CampaignResult:
        if opts.url is not None:
            async with Runner(await open_target(opts.url, opts.engine), RunConfig()) as runner:
                return await run_campaign(runner, strategies, config, seeds=seeds, on_event=on_event)
        launch = Launch.resolve(opts.launch or "reference", model=opts.model, engine=opts.engine,
                                reference_flags=opts.reference_flags())
        opts.out.mkdir(parents=True, exist_ok=True)
        async with LaunchedServer(launch, opts.out) as server:
            return await run_campaign(server.runner, strategies, config, seeds=seeds, on_event=on_event, revival=server)

    return asyncio.run(go())


async def open_target(url: str, engine: str | None, **opts: Any) -> Target:
    """The adapter for the server at `url`: in `engine`'s dialect, or the one it answers in."""
    if engine is None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            engine = (await detect_engine(session, url)).engine
    return make_target(engine, url, **opts)


class LaunchedServer:
    """A server `fuzz` started and owns, with a Runner on it: the campaign's `Revival`.

        async with LaunchedServer(Launch.resolve("vllm-cpu"), out) as server:
            await run_campaign(server.runner, ..., revival=server)

    The server's output goes to `out/server.log` (every start appends, under a header line);
    `out/server.json` says which process and port serve now, for a person (or a test) who wants
    to look at it. Stopping ends the server's whole process group, workers included.
    """

    def __init__(self, launch: Launch, out: Path) -> None:
        self.launch = launch
        self.out = out
        self.engine = launch.engine or None  # a user's command may leave it to detection
        self.process = ServerProcess(launch.argv, env=launch.env, start_timeout_s=launch.start_timeout_s,
                                     log_path=out / "server.log")
        self._runner: Runner | None = None

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            raise RuntimeError("use the LaunchedServer inside `async with`")
        return self._runner

    async def __aenter__(self) -> Self:
        try:
            await self._start()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._close_runner()
        await asyncio.to_thread(self.process.stop)

    async def _start(self, *, again: bool = False) -> None:
        # Starting takes seconds (vLLM: tens of them); a thread keeps the event loop free.
        url = await asyncio.to_thread(self.process.restart if again else self.process.start)
        self._write_state()
        target = await open_target(url, self.engine, **self.launch.target_opts)
        self.engine = target.engine
        runner = Runner(target, RunConfig())
        await runner.__aenter__()
        self._runner = runner

    async def _close_runner(self) -> None:
        if self._runner is not None:
            await self._runner.__aexit__(None, None, None)
            self._runner = None

    def death(self) -> dict[str, Any]:
        return {
            "exit_code": self.process.returncode,
            "server_log": str(self.process.log_path),
            "log_tail": redact_text(self.process.log_tail(20)),
        }

    async def revive(self) -> Runner:
        await self._close_runner()
        try:
            await self._start(again=True)  # what is left of the old group goes first
        except (LaunchError, TargetError) as e:
            raise TargetError(str(e)) from None
        return self.runner

    def _write_state(self) -> None:
        state = {
            "pid": self.process.pid,
            "port": self.process.port,
            "base_url": self.process.base_url,
            "argv": redact_argv(self.process.argv),
            "starts": self.process.restarts + 1,
            "log": str(self.process.log_path),
        }
        tmp = self.out / ".server.json.tmp"
        tmp.write_text(json.dumps(state, indent=1), encoding="utf-8")
        os.replace(tmp, self.out / "server.json")


def replay(
    finding_path: Path, base_url: str, runs: int, engine: str | None = None
) -> tuple[Finding, ReplayResult]:
    """Replay a finding's scenario `runs` times (cache flushed before each) against `base_url`.

    The expected-diverging requests are also sent once alone on a flushed cache, so a corruption
    that repeats identically under load still shows as a second variant.
    """
    if runs < 1:
        raise UsageError("--runs must be at least 1")
    finding = load_finding(finding_path)
    target = make_target(engine or finding.target.engine, base_url)

    async def go() -> list[RunHistory]:
        async with Runner(target, RunConfig()) as runner:
            histories = []
            for i in range(runs):
                await runner.flush()
                histories.append(await runner.run(finding.scenario, run=i, label="load"))
            specs = finding.scenario.by_id()
            alone = [
                await runner.run_alone(specs[rid], run=runs)
                for rid in finding.expected_diverging
                if rid in specs and not specs[rid].cancelled
            ]
            if alone:
                histories.append(RunHistory(runs, "alone", tuple(alone)))
            return histories

    histories = asyncio.run(go())
    return finding, dataclasses.replace(replay_result(finding, histories), runs=runs)

