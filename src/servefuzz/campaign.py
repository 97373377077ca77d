"""The campaign: a greybox loop of generate-or-mutate, run, judge, confirm, keep.

One iteration, all against one target:

1. the schedule (`servefuzz.corpus`) picks a source by energy: a strategy generates a fresh
   scenario, or a corpus entry is mutated (`servefuzz.mutators`); trace seeds run first;
2. `trial.execute` fires the scenario `runs` times under load, sends each request alone on a
   flushed cache and probes a request with a shared prefix warm and primed;
3. `oracles.judge` runs every oracle; `features` (`servefuzz.feedback`) says what the run
   reached, and the corpus keeps the scenario if that includes something new;
4. an anomaly is confirmed (`servefuzz.confirm`: `confirm_runs` replays against fresh alone
   references that vote, the leak check, the content-swap, deterministic and truth controls),
   unless an equal-or-smaller confirmed finding with the same signature is already kept; the
   worker that showed it confirms it, given only `confirm.ConfirmConfig`; findings are
   deduplicated by `Finding.signature` (`servefuzz.store.FindingStore`).

The campaign directory holds everything (`servefuzz.store` says what and how). Budgets (time,
requests) count the whole campaign, resumed sessions included. The campaign stops when one is
spent, when the target goes away, or, if asked, at the first confirmed finding (optionally only
one of given verdicts). A time budget is a deadline: at it, requests in flight are cut and
recorded as indeterminate, nothing new starts (no reference, probe or replay), the iteration in
flight is judged and kept on what it has, and the campaign ends within `BUDGET_GRACE_S` of it
whatever the server does. The caller watches through `on_event`. A strategy that raises is
benched for the rest of the campaign (its error kept in `progress.json` and shown), and the
campaign goes on with the others.

The loop is one for every executor: scenarios run on `Worker`s (`LocalWorker`: the Runner of this
process; `servefuzz.scaleout`: Ray actors that own their servers), one scenario in flight per
worker, while the corpus, the feedback, the noise model and the dedup stay here.

A target that dies mid-campaign is a crash finding. When servefuzz launched the server itself
the caller passes a `Revival`: the crash finding then carries the server's exit status and the
tail of its log, the server is started again, the scenario is replayed there to confirm the
crash (`CRASH_REPLAYS`), and the campaign goes on (up to `max_restarts`). A target that stops
answering after its requests hang (`trial.stopped_answering`) is lost the same way, alive: its
hang is the finding, and it is started again and replayed like a crash.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from servefuzz import durable
from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.confirm import ConfirmConfig, Confirmed, confirm_finding
from servefuzz.corpus import MUTATE_SHARE, Corpus, CorpusEntry, Schedule
from servefuzz.coverage import Coverage, FeatureSpace, points
from servefuzz.covering import PairwiseCover
from servefuzz.engines.registry import spec_of
from servefuzz.errors import TargetError, UsageError
from servefuzz.feedback import features
from servefuzz.finding import Finding, TargetInfo
from servefuzz.history import RequestRecord, RunHistory, write_history_jsonl
from servefuzz.launcher import Launch
from servefuzz.mutators import CROSS, Mutator, mutate
from servefuzz.oracles.judge import Judgement, learn
from servefuzz.oracles.noise import CampaignNoise
from servefuzz.runner import Runner
from servefuzz.store import (
    FindingStore,
    append_json_line,
    finding_size,
    load_entries,
    open_campaign_dir,
    read_json,
    read_noise,
    write_json,
    write_noise,
)
from servefuzz.strategies import DEFAULT_CAPTURE_SIZES, Strategy, TargetShape, aimed_first, offered, shape_aims
from servefuzz.trial import Executed, execute, probe_targets
from servefuzz.workload import RequestSpec, Scenario, TextSource

__all__ = [
    "BUDGET_GRACE_S",
    "COVERAGE_FILE",
    "CampaignConfig",
    "CampaignResult",
    "CampaignState",
    "LocalWorker",
    "Revival",
    "Worker",
    "WorkerLost",
    "derive_seed",
    "run_campaign",
    "run_campaign_on",
    "shape_of",
]


# The campaign's pairwise coverage (`coverage.Coverage.to_json`), rewritten atomically after
# every iteration (before progress.json) when `CampaignConfig.coverage` is on.
COVERAGE_FILE = "coverage.json"
# How long past its time budget a campaign may still run. At the budget the runner cuts every
# request in flight (recorded as cancelled: indeterminate) and starts nothing more, so what is
# left is the iteration's own bookkeeping: judging what it has, appending its histories, writing
# corpus, coverage and progress (pure computation and a few fsyncs: well under a second even for
# the largest scenario on a busy 2-core machine). 5 s is that many times over, and small beside
# any budget worth setting; past it the loop cancels whatever it still waits for (a remote
# worker's scenario, which no local deadline cuts) and ends, unrecorded, rather than wait.
BUDGET_GRACE_S = 5.0


@dataclass(frozen=True)
class CampaignConfig:
    """What a campaign does and when it stops. None budgets mean "no limit of that kind".

    `stop_verdicts`: with `stop_at_first`, only a confirmed finding of one of these verdicts
    stops the campaign (empty: any). `cache_probes`: requests per scenario probed warm and
    primed. `performance`: noisy-neighbour slowdowns become findings (otherwise they only steer,
    as the `slow:` feature). `resume`: continue the campaign in `out_dir`; without it a
    directory that already holds a campaign is refused. `greybox=False` never mutates the
    corpus: every scenario comes fresh from a strategy (how anchor batteries are replayed).
    `max_restarts`: how many times a launched server that died is started again (a server that
    dies on every scenario would otherwise be restarted forever). `truth_model`: the GGUF or HF
    folder the target serves, when servefuzz built it (`servefuzz.truth` computes it exactly): a
    suspected corruption the content swap left unbacked is then held against the truth too.
    `launch`: how the target was started, when servefuzz started it: a suspected corruption the
    content swap left unbacked then gets the deterministic control (a fresh server in the
    engine's deterministic mode, `trial.deterministic_control`), where the engine has one.
    Confirmation reads `confirm_runs`, `truth_model` and `launch` alone, as `confirm.ConfirmConfig`.
    `aims`: strategies the first round runs first (a feature profile's `Profile.aims`), ahead of
    those the target's shape points at (`strategies.shape_aims`: eviction first on a small pool).
    `coverage`: track pairwise feature coverage (`servefuzz.coverage`, kept in `coverage.json`):
    the `pairwise` covering generator joins the mix, the `cross` mutator joins the havoc, and
    every pair a scenario is first to exercise counts as a new feature (`pair:...`), so it gives
    the scenario energy and its strategy weight. Off by default until it is measured.
    """

    out_dir: Path
    seed: int = 0
    runs: int = 2
    confirm_runs: int = 5
    time_budget_s: float | None = None
    request_budget: int | None = None
    stop_at_first: bool = False
    stop_verdicts: tuple[str, ...] = ()
    isolation: bool = True
    cache_probes: int = 1
    performance: bool = False
    resume: bool = False
    greybox: bool = True
    max_restarts: int = 5
    truth_model: Path | None = None
    launch: Launch | None = None
    coverage: bool = False
    aims: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.runs < 2:
            raise ValueError("runs must be >= 2: replay consistency compares runs")
        if self.confirm_runs < 1:
            raise ValueError("confirm_runs must be >= 1")


@dataclass
class CampaignState:
    """Live, mutable counters for the progress display (persisted only as totals)."""

    started: float = field(default_factory=time.monotonic)
    elapsed_before_s: float = 0.0  # spent by earlier sessions of a resumed campaign
    iteration: int = 0
    requests: int = 0
    features: int = 0
    corpus: int = 0
    anomalies: Counter[str] = field(default_factory=Counter)
    findings: list[tuple[Path, Finding]] = field(default_factory=list)
    seen: Counter[str] = field(default_factory=Counter)  # signature -> times found
    restarts: int = 0  # of a launched server that died, this campaign, resumed sessions included
    last: str = ""
    coverage: Coverage | None = None  # pairwise feature coverage, when the campaign tracks it
    workers: dict[str, str] = field(default_factory=dict)  # a named (remote) worker -> what it does now

    @property
    def elapsed_s(self) -> float:
        return self.elapsed_before_s + time.monotonic() - self.started

    @property
    def findings_by_verdict(self) -> Counter[str]:
        return Counter(f.verdict.value for _, f in self.findings)


@dataclass(frozen=True)
class CampaignResult:
    iterations: int
    requests: int
    elapsed_s: float
    findings: tuple[tuple[Path, Finding], ...]
    stopped_because: str
    features: int = 0
    corpus: int = 0
    seen: Mapping[str, int] = field(default_factory=dict)
    # verdict -> (requests, seconds) at its first confirmed finding: the detection-power numbers
    first_confirmed: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    restarts: int = 0
    coverage: Coverage | None = None

    @property
    def found(self) -> bool:
        """Whether a finding is more than benign numerics: what `fuzz`'s exit 1 means. A
        numeric-drift finding is kept and listed, but its verdict is that it is no bug, and a CI
        job that gates on the exit code must not fail on it; except on a server in its
        deterministic mode (`TargetInfo.deterministic`), which promised that even those would
        not happen."""
        return any(f.verdict is not Verdict.NUMERIC_DRIFT or f.target.deterministic is not None
                   for _, f in self.findings)

    def to_json(self) -> dict[str, Any]:
        # Pairwise coverage only when the campaign tracked it: the summary's shape is otherwise unchanged.
        tracked = {} if self.coverage is None else {"coverage": {
            "covered_pairs": self.coverage.covered, "total_pairs": self.coverage.total,
            "covered_triples": len(self.coverage.triples), "total_triples": len(self.coverage.space.triples),
        }}
        return {
            **tracked,
            "iterations": self.iterations,
            "requests": self.requests,
            "elapsed_s": round(self.elapsed_s, 3),
            "stopped_because": self.stopped_because,
            "features": self.features,
            "corpus": self.corpus,
            "restarts": self.restarts,
            "first_confirmed": {v: {"requests": r, "elapsed_s": round(s, 3)} for v, (r, s) in self.first_confirmed.items()},
            "findings": [
                {
                    "path": str(p),
                    "verdict": f.verdict.value,
                    "why": f.why,
                    "rate": f.confirmation.rate if f.confirmation else None,
                    "diverged": list(f.expected_diverging),
                    "signature": f.signature,
                    "count": self.seen.get(f.signature, 1),
                }
                for p, f in self.findings
            ],
        }


def derive_seed(campaign_seed: int, iteration: int) -> int:
    """The scenario seed of an iteration: stable across Python versions and platforms."""
    return random.Random(f"servefuzz:{campaign_seed}:{iteration}").getrandbits(31)


def shape_of(info: TargetInfo) -> TargetShape:
    """What the strategies may assume about this target (SGLang's and vLLM's names for it)."""
    args = info.server_args
    spec = spec_of(info.engine)

    def positive(*keys: str) -> int | None:
        for k in keys:
            v = args.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return None

    graphs = args.get("cuda_graph_bs")
    capture = tuple(sorted(int(b) for b in graphs)) if isinstance(graphs, list) and graphs else DEFAULT_CAPTURE_SIZES
    return TargetShape(
        page_size=info.page_size,
        context_length=positive("context_length", "max_model_len") or 4096,
        vocab=range(3, info.vocab_size or 1024),
        max_total_tokens=info.max_total_tokens,
        chunked_prefill_size=positive("chunked_prefill_size", "max_num_batched_tokens"),
        capture_sizes=capture,
        max_running_requests=positive("max_running_requests", "max_num_seqs"),
        # What the engine's dialect sends and promises, from its spec (an unknown engine: none).
        salts=spec.salts,
        seeded_sampling=spec.seeds,
        choices=spec.choices,
        adapters=info.adapters if spec.adapters else (),
    )


class Revival(Protocol):
    """A server servefuzz launched, which the campaign may start again after it dies."""

    async def death(self) -> dict[str, Any]:
        """What the dead server left: its exit status and the tail of its log (JSON-ready)."""
        ...

    async def revive(self) -> Runner:
        """Start the server again and return a Runner entered on it; TargetError if it won't."""
        ...


class _Budget:
    def __init__(self, config: CampaignConfig, state: CampaignState) -> None:
        self.config, self.state = config, state

    def exhausted(self) -> str | None:
        c, s = self.config, self.state
        if c.time_budget_s is not None and s.elapsed_s >= c.time_budget_s:
            return f"time budget of {c.time_budget_s:g} s spent"
        if c.request_budget is not None and s.requests >= c.request_budget:
            return f"request budget of {c.request_budget:,} spent"
        return None


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


async def run_campaign(
    runner: Runner,
    strategy: Strategy | Sequence[Strategy],
    config: CampaignConfig,
    *,
    seeds: Sequence[Scenario] = (),
    on_event: Callable[[CampaignState], None] = lambda s: None,
    revival: Revival | None = None,
) -> CampaignResult:
    """Fuzz the runner's target until a budget is spent (or the first confirmed finding).

    `strategy`: one strategy or a mix, scheduled by energy; `seeds`: scenarios (e.g. from a
    trace) run first and kept in the corpus when they reach something new; `revival`: how to
    start the server again when it dies (None: the campaign stops there).
    """
    assert runner.info is not None, "enter the Runner before starting a campaign"
    return await run_campaign_on([LocalWorker(runner, revival)], strategy, config, seeds=seeds, on_event=on_event)


@dataclass(frozen=True)
class _Downed:
    """A scenario whose execution took the server down (it died, or stopped answering: a
    wedge): what replaying it on the restarted server needs (`_Loop.confirm_on_restart`)."""

    scenario: Scenario
    done: Executed
    verdict: Judgement
    finding: Finding


@dataclass(frozen=True)
class _Outcome:
    iteration: int
    finding: Finding | None
    lost: str | None
    downed: _Downed | None = None


# A crash that takes the server down (or a hang that wedges it: `trial.stopped_answering`) is
# confirmed by replaying its scenario on the restarted server, up to this many times, stopping
# at the first loss: each costs a restart (vLLM: tens of seconds; a wedge also the request
# timeout), where the five replays of a divergence cost a few requests each.
CRASH_REPLAYS = 2


async def run_campaign_on(
    workers: Sequence[Worker],
    strategy: Strategy | Sequence[Strategy],
    config: CampaignConfig,
    *,
    seeds: Sequence[Scenario] = (),
    on_event: Callable[[CampaignState], None] = lambda s: None,
) -> CampaignResult:
    """`run_campaign` on several workers at once: each free worker is sent the next scenario,
    and what it brings back is judged, learnt from and kept here, one iteration at a time (the
    event loop runs one completion's bookkeeping to its end before the next). With one worker
    this is exactly the sequential loop. The target shape comes from the first worker's server
    (workers serve one launch). A worker whose server died is started again (up to
    `max_restarts` for the campaign); one that cannot be ends the campaign."""
    if not workers:
        raise ValueError("a campaign needs at least one worker")
    info = workers[0].info
    shape = dataclasses.replace(shape_of(info), text=getattr(workers[0], "text", None))  # scale-out: random ids
    asked = tuple(strategy) if isinstance(strategy, Sequence) else (strategy,)
    # The first round meets what the target was set up to exercise first: the profile's feature,
    # then its shape's (stable, so the rest keep the order asked, and a resumed campaign against
    # the same target computes the same order, which its identity holds).
    strategies = {s.name: s for s in aimed_first(offered(asked, shape), (*config.aims, *shape_aims(shape)))}
    if not strategies:
        raise UsageError(
            f"{', '.join(s.name for s in asked)} needs what this {info.engine} target lacks "
            "(cache salts, per-request seeds, choice constraints or LoRA adapters)"
        )
    if config.coverage:
        strategies.setdefault(PairwiseCover.name, PairwiseCover())
    out = config.out_dir
    progress = open_campaign_dir(
        out, resume=config.resume, identity={"seed": config.seed, "strategies": list(strategies)},
        settings={"runs": config.runs, "confirm_runs": config.confirm_runs, "target": info.to_json()},
    )
    for log in ("scenarios.jsonl", "histories.jsonl", "constraints.jsonl"):
        durable.truncate_torn_tail(out / log)  # a kill mid-append must not glue the next line on
    corpus = Corpus(load_entries(out / "corpus"), {int(k): v for k, v in progress.get("picks", {}).items()})
    schedule = Schedule(tuple(strategies), **progress.get("schedule", {}),
                        mutate_share=MUTATE_SHARE if config.greybox else 0.0)
    for name, error in progress.get("benched", {}).items():
        schedule.bench(name, error)
    store = FindingStore(out / "findings", progress.get("seen", {}))
    state = CampaignState(elapsed_before_s=float(progress.get("elapsed_s", 0.0)))
    state.requests = int(progress.get("requests", 0))
    state.restarts = int(progress.get("restarts", 0))
    # A scenario logged but not finished (a kill mid-iteration; with several workers, every one in
    # flight) keeps its number: the resumed campaign starts after it, so no number names two.
    first_iteration = max(int(progress.get("next_iteration", 0)), store.latest_iteration + 1,
                          max((e.iteration + 1 for e in corpus.entries), default=0),
                          _last_logged(out / "scenarios.jsonl") + 1)
    state.iteration = first_iteration
    firsts: dict[str, tuple[int, float]] = {
        v: (int(x[0]), float(x[1])) for v, x in progress.get("first_confirmed", {}).items()
    }
    if config.coverage:
        state.coverage = _read_coverage(out, FeatureSpace.for_shape(shape))
    # The benign shifts of earlier sessions (empty for a new campaign).
    run = _Loop(config, state, corpus, schedule, store, read_noise(out), firsts, shape, on_event, first_iteration)
    _sync(state, corpus, store)
    budget = _Budget(config, state)
    # The time budget as a deadline on this clock: every worker's runner cuts at it, and the loop
    # stops waiting for any worker BUDGET_GRACE_S after it (counted across sessions, as the budget).
    deadline, spent = None, ""
    if config.time_budget_s is not None:
        deadline = state.started + config.time_budget_s - state.elapsed_before_s
        spent = f"time budget of {config.time_budget_s:g} s spent"  # as `_Budget` says it
    for w in workers:
        w.stop_at(deadline, spent)
    stopped = ""
    free = list(workers)
    busy: dict[asyncio.Future[_Outcome], Worker] = {}
    try:
        while True:
            while free and not stopped:
                if stopped := budget.exhausted() or "":
                    break
                iteration = run.dispatched
                run.dispatched += 1
                try:
                    scenario, origin = run.choose(iteration, seeds, strategies)
                except _SourceFailed as e:
                    # A bug in one of our generators must not end the campaign (nor pass for a finding).
                    if e.strategy is not None:
                        schedule.bench(e.strategy, e.error)
                    state.last = f"iteration {iteration}: {e.source} failed ({e.error})" + (
                        "; benched it" if e.strategy is not None else "")
                    state.iteration = run.dispatched
                    _save_progress(out, state, corpus, schedule, store, firsts)
                    on_event(state)
                    if not schedule.active:
                        stopped = "every strategy failed: " + "; ".join(f"{k}: {v}" for k, v in schedule.benched.items())
                    continue
                worker = free.pop(0)
                busy[asyncio.ensure_future(run.iterate(worker, iteration, scenario, origin))] = worker
            if not busy or (stopped and run.halt):
                break
            wait = None if deadline is None else max(0.0, deadline + BUDGET_GRACE_S - time.monotonic())
            finished, _ = await asyncio.wait(busy, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            if not finished:
                # The grace is spent too: what is still in flight is cancelled (in `finally`),
                # its scenario logged in scenarios.jsonl and nothing else of it kept.
                stopped, run.halt = f"{budget.exhausted() or spent}; {len(busy)} scenario(s) still in flight cut", True
                break
            for task in sorted(finished, key=lambda t: t.result().iteration):
                worker, outcome = busy.pop(task), task.result()
                if outcome.lost is not None and (over := budget.exhausted()) is not None:
                    # No restart past the budget: it would outlast the grace, for nothing.
                    stopped = stopped or over
                    continue
                finding = outcome.finding
                if outcome.lost is not None:
                    why = await _revive(worker, outcome.lost, config, state, on_event)
                    if not why and outcome.downed is not None and budget.exhausted() is None:
                        finding, why = await run.confirm_on_restart(worker, outcome.iteration, outcome.downed)
                    if why:
                        stopped, run.halt = stopped or why, True
                        continue
                    free.append(worker)
                else:
                    free.append(worker)
                if finding is not None and config.stop_at_first and _confirmed(finding) and (
                    not config.stop_verdicts or finding.verdict.value in config.stop_verdicts
                ):
                    stopped, run.halt = stopped or "first confirmed finding", True
    finally:
        # Stopped at a finding or a lost target: what other workers still run is not waited for
        # (a budget, by contrast, lets every scenario already sent finish: cut at its deadline,
        # it does so at once, and what does not is cancelled BUDGET_GRACE_S after it).
        for task in busy:
            task.cancel()
        await asyncio.gather(*busy, return_exceptions=True)
    return CampaignResult(
        state.iteration - first_iteration, state.requests, state.elapsed_s, tuple(store.findings()), stopped,
        features=state.features, corpus=state.corpus, seen=dict(store.counts), first_confirmed=firsts,
        restarts=state.restarts, coverage=state.coverage,
    )


async def _revive(worker: Worker, lost: str, config: CampaignConfig, state: CampaignState,
                  on_event: Callable[[CampaignState], None]) -> str:
    """Start a worker's dead server again; why the campaign must stop instead ("" when revived)."""
    if not worker.revivable or state.restarts >= config.max_restarts:
        return f"target lost: {lost}" + ("" if not worker.revivable else f" ({state.restarts} restarts already)")
    state.last = f"the server is lost ({lost}); starting it again"
    on_event(state)
    try:
        info = await worker.revive()
    except TargetError as e:
        return f"target lost: {lost}; it could not be started again: {e}"
    state.restarts += 1
    state.last = f"the server is lost ({lost}); restarted it at {info.base_url}"
    if worker.name is not None:
        state.workers[worker.name] = f"restarted at {info.base_url}"
    on_event(state)
    return ""


class _Loop:
    """The campaign's driver-side state, shared by the iterations in flight: choosing the next
    scenario, and judging, learning from and keeping what a worker brought back."""

    def __init__(self, config: CampaignConfig, state: CampaignState, corpus: Corpus, schedule: Schedule,
                 store: FindingStore, noise: CampaignNoise, firsts: dict[str, tuple[int, float]], shape: TargetShape,
                 on_event: Callable[[CampaignState], None], first_iteration: int) -> None:
        self.config, self.state, self.corpus, self.schedule, self.store = config, state, corpus, schedule, store
        self.noise, self.firsts, self.shape, self.on_event = noise, firsts, shape, on_event
        self.dispatched = first_iteration  # the next iteration to send out
        self.halt = False  # stop without waiting for the iterations in flight

    def choose(self, iteration: int, seeds: Sequence[Scenario], strategies: dict[str, Strategy]) -> tuple[Scenario, str]:
        seed = derive_seed(self.config.seed, iteration)
        if iteration < len(seeds):
            return dataclasses.replace(seeds[iteration], seed=seed), "trace"
        coverage = self.state.coverage
        if coverage is not None and isinstance(pairwise := strategies.get(PairwiseCover.name), PairwiseCover):
            strategies[PairwiseCover.name] = pairwise.with_coverage(coverage)
        return _next_scenario(random.Random(seed), iteration - len(seeds), seed, self.schedule, self.corpus,
                              strategies, self.shape, extra=(CROSS,) if self.config.coverage else ())

    async def iterate(self, worker: Worker, iteration: int, scenario: Scenario, origin: str) -> _Outcome:
        config, state, corpus, store, on_event = self.config, self.state, self.corpus, self.store, self.on_event
        out = config.out_dir
        source = origin if origin == scenario.meta.get("strategy") else f"{origin} ({scenario.meta.get('strategy', '?')})"
        state.last = f"iteration {iteration}: {source}, {len(scenario.requests)} requests"
        if worker.name is not None:
            state.workers[worker.name] = state.last
        on_event(state)
        began = time.monotonic()
        append_json_line(out / "scenarios.jsonl", {"iteration": iteration, "origin": origin, "scenario": scenario.to_json()})
        try:
            done = await worker.execute(scenario, runs=config.runs, with_alone=config.isolation,
                                        probes=probe_targets(scenario, config.cache_probes))
        except WorkerLost as e:
            state.last = f"iteration {iteration}: {e}; dropped"
            state.workers[str(worker.name)] = "lost; replacing it"
            on_event(state)
            return _Outcome(iteration, None, str(e))
        state.requests += done.requests
        tag = {"iteration": iteration} if worker.name is None else {"iteration": iteration, "worker": worker.name}
        write_history_jsonl(out / "histories.jsonl", [
            dataclasses.replace(h, meta={**h.meta, **tag})
            for h in (*done.loaded, *_alone_as_runs(done.alone, done.cache, done.reused))
        ])
        noise = self.noise
        verdict = done.judge(performance=config.performance, campaign=noise)
        self.noise = learn(noise, verdict, done.loaded, done.alone, done.cache, scenario)  # judged first, added after
        if verdict.constraint:
            # A constraint broken alone too backs no finding (oracles.constraint); kept, not dropped.
            append_json_line(out / "constraints.jsonl", {"iteration": iteration, "lines": list(verdict.constraint)})
        if done.wedged:
            verdict = _with_wedge(verdict, str(done.lost))
        elif done.lost is not None:
            verdict = _with_target_lost(verdict, done.lost, await worker.death())
        for a in verdict.anomalies:
            state.anomalies[a.verdict.value] += 1
        reached = features(scenario, done.loaded, done.alone, verdict.anomalies, self.shape)
        if state.coverage is not None:
            # Every pair this execution exercised is a feature: one no scenario reached before
            # makes this one new to the corpus, with energy, and credits its strategy.
            now = points(scenario, self.shape, done.loaded).values()
            reached |= {f"pair:{k}" for p in now for k in state.coverage.space.cells_of(p)[0]}
            state.coverage = state.coverage.observe(now)
            write_json(out / COVERAGE_FILE, state.coverage.to_json())
        entry = corpus.consider(scenario, reached, origin=origin, iteration=iteration, flagged=bool(verdict.anomalies))
        if entry is not None:
            write_json(out / "corpus" / f"entry_{entry.id:05d}.json", entry.to_json())
        self.schedule.credit(str(scenario.meta.get("strategy", origin)), len(entry.new) if entry else 0,
                             time.monotonic() - began)
        try:
            finding = await _finding_of(worker, scenario, iteration, done, verdict, config, store, state, on_event,
                                        self.noise)
        except WorkerLost as e:
            finding, done.lost = None, str(e)  # seen, but not confirmed where it was seen: found again later
        if finding is not None:
            if worker.name is not None:
                finding = dataclasses.replace(finding, notes=(*finding.notes, f"found and confirmed on worker {worker.name}"))
            path, what_happened = store.add(finding)
            if _confirmed(finding) and finding.verdict.value not in self.firsts:
                self.firsts[finding.verdict.value] = (state.requests, state.elapsed_s)
            state.last = f"finding {path.name} ({what_happened}): {finding.verdict.value}, {finding.headline.summary}"
        state.iteration = max(state.iteration, self.dispatched)
        if worker.name is not None:
            state.workers[worker.name] = f"iteration {iteration} done"
        write_noise(out, self.noise)
        _save_progress(out, state, corpus, self.schedule, store, self.firsts)  # last: what it names is on disk
        on_event(state)
        downed = None
        # Replayed until one crash (or one wedge) is confirmed in the campaign: each replay that
        # takes the server down costs a restart, and later ones (other signatures of what may
        # well be the same bug) are kept as seen rather than spend the restarts the rest of the
        # campaign lives on.
        if (done.lost is not None and finding is not None and finding.verdict is _downed_by(done)
                and not _confirmed(finding) and worker.revivable and finding.verdict.value not in self.firsts):
            downed = _Downed(scenario, done, verdict, finding)
        return _Outcome(iteration, finding, done.lost, downed)

    async def confirm_on_restart(self, worker: Worker, iteration: int, downed: _Downed) -> tuple[Finding | None, str]:
        """Replay a scenario that took the server down on the restarted server (`CRASH_REPLAYS`
        times at most, ending at the first loss); the finding, confirmed when the server died (or
        hung) again, and why the campaign must stop ("" when the server is up again).

        The finding was kept as seen before this starts: a replay that finds nothing, or a
        server that cannot be started again, loses nothing."""
        state = self.state
        state.last = f"iteration {iteration}: the server was lost; replaying the scenario on the restarted server"
        self.on_event(state)

        def say(what: str) -> None:
            state.last = what
            self.on_event(state)

        settings = ConfirmConfig(runs=CRASH_REPLAYS)
        try:
            confirmed = await worker.confirm(downed.scenario, iteration, downed.done, downed.verdict, settings,
                                             self.noise, say)
        except WorkerLost as e:
            return None, await _revive(worker, str(e), self.config, state, self.on_event)
        state.requests += confirmed.sent
        why = ""
        if confirmed.lost is not None:
            why = await _revive(worker, confirmed.lost, self.config, state, self.on_event)
        rep = confirmed.finding.confirmation
        if rep is None or rep.reproduced == 0:
            tried = 0 if rep is None else rep.attempts
            state.last = (f"iteration {iteration}: the {downed.finding.verdict.value} did not come back in {tried} "
                          "replay(s); kept as seen")
            self.on_event(state)
            _save_progress(self.config.out_dir, state, self.corpus, self.schedule, self.store, self.firsts)
            return None, why
        # The first death's evidence (exit status, log) stays; the replay's note says what it was.
        again = "died again" if downed.finding.verdict is Verdict.CRASH else "hung again"
        finding = dataclasses.replace(
            downed.finding, confirmation=rep,
            notes=(f"confirmed: the server {again} when the scenario was replayed on the restarted server "
                   f"({rep.reproduced}/{rep.attempts}: {confirmed.lost or 'a request saw it fail'})",))
        path, what_happened = self.store.add(finding, again=True)
        if finding.verdict.value not in self.firsts:
            self.firsts[finding.verdict.value] = (state.requests, state.elapsed_s)
        state.last = f"finding {path.name} ({what_happened}): {finding.verdict.value} confirmed on the restarted server"
        _save_progress(self.config.out_dir, state, self.corpus, self.schedule, self.store, self.firsts)
        self.on_event(state)
        return finding, why


def _next_scenario(
    rng: random.Random,
    turn: int,
    seed: int,
    schedule: Schedule,
    corpus: Corpus,
    strategies: Mapping[str, Strategy],
    shape: TargetShape,
    extra: Sequence[Mutator] = (),
) -> tuple[Scenario, str]:
    """The schedule's choice made concrete: a mutated corpus entry or a fresh scenario."""
    _, what = schedule.next(rng, turn, corpus)
    try:
        if isinstance(what, CorpusEntry):
            return mutate(what.scenario, rng, shape, seed=seed, extra=extra), f"mutate:{what.id}"
        return strategies[what].generate(rng, shape, seed=seed), what
    except Exception as e:  # noqa: BLE001 - any bug of a generator; reported, never a finding
        error = f"{type(e).__name__}: {e}"
        if isinstance(what, CorpusEntry):
            raise _SourceFailed(f"mutating corpus entry {what.id}", error, None) from e
        raise _SourceFailed(f"strategy {what}", error, what) from e


class _SourceFailed(Exception):
    """A strategy or a mutation raised instead of giving a scenario."""

    def __init__(self, source: str, error: str, strategy: str | None) -> None:
        super().__init__(f"{source}: {error}")
        self.source, self.error, self.strategy = source, error, strategy


def _save_progress(
    out: Path, state: CampaignState, corpus: Corpus, schedule: Schedule, store: FindingStore,
    firsts: Mapping[str, tuple[int, float]],
) -> None:
    _sync(state, corpus, store)
    write_json(out / "progress.json", {
        "next_iteration": state.iteration, "requests": state.requests, "elapsed_s": round(state.elapsed_s, 3),
        "picks": corpus.state_json(), "schedule": schedule.state_json(), "seen": dict(store.counts),
        "first_confirmed": {v: list(x) for v, x in firsts.items()}, "restarts": state.restarts,
        "benched": dict(schedule.benched),
    })


async def _finding_of(
    worker: Worker,
    scenario: Scenario,
    iteration: int,
    done: Executed,
    verdict: Judgement,
    config: CampaignConfig,
    store: FindingStore,
    state: CampaignState,
    on_event: Callable[[CampaignState], None],
    noise: CampaignNoise | None = None,
) -> Finding | None:
    """The finding of one execution, confirmed (on the worker that saw it) unless that is known
    to be wasted effort."""
    info = worker.info
    if not verdict.anomalies:
        return None
    if done.lost is not None or done.cut is not None:
        # The target is gone, or the budget is spent: keep what was seen, unconfirmed, rather
        # than lose it (requests cut at the budget are indeterminate and back no anomaly).
        return Finding(iteration, scenario.seed, scenario, info, verdict.anomalies,
                       notes=(f"not confirmed: {done.lost or done.cut}",))
    if all(a.verdict is Verdict.ANOMALOUS_SHIFT for a in verdict.anomalies):
        # The reproduction rule compares tokens, and a shift's tokens agree: replays could only
        # ever say 0/n. Kept as seen, with its numbers, for a person (or a control) to look at.
        return Finding(iteration, scenario.seed, scenario, info, verdict.anomalies,
                       notes=("not confirmed: an anomalous shift is kept as seen (replays compare tokens, and its "
                              "tokens agree)",))
    provisional = Finding(iteration, scenario.seed, scenario, info, verdict.anomalies)
    kept = store.known(provisional.signature)
    if kept is not None and _confirmed(kept) and finding_size(provisional)[1:] >= finding_size(kept)[1:]:
        # A confirmed, no larger example of this signature is kept: count it, spare the replays.
        return provisional
    state.last = f"iteration {iteration}: {len(verdict.anomalies)} anomalies, confirming" + (
        "" if worker.name is None else f" on worker {worker.name}")
    if worker.name is not None:
        state.workers[worker.name] = f"iteration {iteration}: confirming {len(verdict.anomalies)} anomalies"
    on_event(state)

    def say(what: str) -> None:
        state.last = what
        on_event(state)

    settings = ConfirmConfig(runs=config.confirm_runs, truth_model=config.truth_model, launch=config.launch)
    confirmed = await worker.confirm(scenario, iteration, done, verdict, settings, noise, say)
    state.requests += confirmed.sent
    done.lost = confirmed.lost
    return confirmed.finding


def _last_logged(path: Path) -> int:
    """The highest iteration in a scenarios log (-1: none); a line that does not parse is skipped."""
    last = -1
    try:
        with path.open(encoding="utf-8") as f:
            for line in f:
                try:
                    last = max(last, int(json.loads(line)["iteration"]))
                except (ValueError, KeyError, TypeError):
                    continue
    except FileNotFoundError:
        pass
    return last


def _read_coverage(out: Path, space: FeatureSpace) -> Coverage:
    """The coverage of earlier sessions (empty for a new campaign, or a damaged file: only the
    counts are lost, never the campaign), held to this target's space."""
    data = read_json(out / COVERAGE_FILE)
    try:
        return Coverage.from_json(data, space) if data else Coverage.empty(space)
    except (KeyError, TypeError, ValueError):
        return Coverage.empty(space)


def _sync(state: CampaignState, corpus: Corpus, store: FindingStore) -> None:
    state.features, state.corpus = len(corpus.seen), len(corpus)
    state.findings = store.findings()
    state.seen = Counter(store.counts)


def _with_target_lost(j: Judgement, why: str, death: Mapping[str, Any]) -> Judgement:
    """A server that stops answering between runs crashed, even if no request saw it die.

    `death` (exit status, log tail) joins the evidence of every crash anomaly: what the server
    said as it died is often the whole story.
    """
    lost = Anomaly(Oracle.LIVENESS, Verdict.CRASH, "-", f"the server stopped answering: {why}",
                   evidence={"error": why, **death})
    return _with_evidence(j, Verdict.CRASH, death, otherwise=lost)


def _with_wedge(j: Judgement, why: str) -> Judgement:
    """A server that stopped answering after its requests hung: the why joins the evidence of
    every hang (what makes the hang a wedge of the whole server, not one slow request)."""
    wedged = {"wedged": why}
    return _with_evidence(j, Verdict.HANG, wedged, otherwise=Anomaly(Oracle.LIVENESS, Verdict.HANG, "-", why,
                                                                     evidence=wedged))


def _with_evidence(j: Judgement, verdict: Verdict, evidence: Mapping[str, Any], *, otherwise: Anomaly) -> Judgement:
    """`evidence` joined to every anomaly of `verdict` in `j`, or `otherwise` added where none is."""
    if not any(a.verdict is verdict for a in j.anomalies):
        return Judgement((*j.anomalies, otherwise), j.stable)
    return Judgement(tuple(dataclasses.replace(a, evidence={**a.evidence, **evidence}) if a.verdict is verdict else a
                           for a in j.anomalies), j.stable)


def _downed_by(done: Executed) -> Verdict:
    """The verdict of a finding that took its server down: a wedge is a hang, a death a crash."""
    return Verdict.HANG if done.wedged else Verdict.CRASH


def _confirmed(f: Finding) -> bool:
    return f.confirmation is not None and f.confirmation.reproduced > 0


def _alone_as_runs(alone: Mapping[str, Sequence[RequestRecord]], cache: Sequence[RequestRecord],
                   reused: Sequence[str] = ()) -> list[RunHistory]:
    """The references and cache probes as histories; the alone run's meta names the references
    that were an earlier identical request's answer (`reused`), not sent for this scenario."""
    recs = tuple(r for rs in alone.values() for r in rs)
    runs = [RunHistory(0, "alone", recs, meta={"reused": list(reused)} if reused else {})] if recs else []
    return runs + ([RunHistory(0, "cache", tuple(cache))] if cache else [])
