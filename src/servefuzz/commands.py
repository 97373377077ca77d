"""What each CLI command does, as plain functions the CLI (and tests) call.

These are the edges that put the pieces together: start the embedded reference engine when no
target is given, open a `Runner`, drive a campaign or a replay, and hand back a result for the
CLI to print. No argument parsing and no printing of results happens here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from servefuzz.campaign import (
    CampaignConfig,
    CampaignResult,
    CampaignState,
    check_campaign_dir,
    run_campaign,
)
from servefuzz.errors import UsageError
from servefuzz.finding import Finding, load_finding
from servefuzz.history import RunHistory
from servefuzz.launcher import ServerProcess
from servefuzz.replay_report import ReplayResult, replay_result
from servefuzz.runner import RunConfig, Runner
from servefuzz.strategies import get_strategies
from servefuzz.targets import make_target
from servefuzz.traces import load_trace_seeds

__all__ = [
    "FuzzOptions",
    "EMBEDDED_FAULT",
    "ZOO_SETTINGS",
    "EMBEDDED_TIME_S",
    "REMOTE_TIME_S",
    "fuzz",
    "replay",
    "embedded_banner",
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
    """Everything `servefuzz fuzz` can be told. `url=None` means the embedded reference engine.

    `seed` and `strategy` None mean: 0 and "mix" for a new campaign, the stored ones on
    `resume`. `trace`: a Mooncake-style JSONL trace whose windows seed the corpus.
    """

    out: Path
    url: str | None = None
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
        return self.url is None

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
    """Run one campaign; starts (and stops) the embedded reference engine when `opts.url` is None."""
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
    with ExitStack() as stack:
        url, engine = opts.url, opts.engine or "sglang"
        if opts.embedded:
            opts.out.mkdir(parents=True, exist_ok=True)
            server = ServerProcess.reference(opts.reference_flags(), log_path=opts.out / "server.log")
            url, engine = stack.enter_context(server).base_url, "reference"
        assert url is not None
        target = make_target(engine, url)

        async def go() -> CampaignResult:
            async with Runner(target, RunConfig()) as runner:
                return await run_campaign(runner, strategies, config, seeds=seeds, on_event=on_event)

        return asyncio.run(go())


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

