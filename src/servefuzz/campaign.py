"""The campaign: generate scenarios, run them, judge them, confirm what looks wrong, keep it.

One iteration, all against one target:

1. a strategy generates a scenario from a seed derived from the campaign seed;
2. the runner fires it `runs` times under load, flushing the cache before each run, and sends
   each request once more *alone* on a flushed cache (the isolation reference);
3. the oracles judge the histories (replay consistency, isolation, n-consistency, liveness);
4. a divergence is confirmed by `confirm_runs` more replays; confirmed or flaky, it becomes a
   finding file written atomically under `out_dir/findings/` (a finding, once seen, is never
   lost), and every history is appended to `out_dir/histories.jsonl`.

The campaign stops at its time or request budget, or at the first confirmed finding when asked.
The caller watches through `on_event` (the CLI draws a live display from it).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servefuzz.anomaly import Anomaly, Oracle, Verdict, worst
from servefuzz.errors import TargetError
from servefuzz.finding import Confirmation, Finding, TargetInfo, write_finding
from servefuzz.history import RequestRecord, RunHistory, write_history_jsonl
from servefuzz.oracles import (
    determinate_outputs,
    group_variants,
    isolation,
    liveness,
    n_consistency,
    output_key,
    replay_consistency,
)
from servefuzz.runner import Runner
from servefuzz.strategies import Strategy, TargetShape
from servefuzz.workload import Scenario

__all__ = [
    "CampaignConfig",
    "CampaignState",
    "CampaignResult",
    "Judgement",
    "derive_seed",
    "shape_of",
    "judge",
    "run_campaign",
]


@dataclass(frozen=True)
class CampaignConfig:
    """What a campaign does and when it stops. None budgets mean "no limit of that kind"."""

    out_dir: Path
    seed: int = 0
    runs: int = 2
    confirm_runs: int = 5
    time_budget_s: float | None = None
    request_budget: int | None = None
    stop_at_first: bool = False
    isolation: bool = True

    def __post_init__(self) -> None:
        if self.runs < 2:
            raise ValueError("runs must be >= 2: replay consistency compares runs")
        if self.confirm_runs < 1:
            raise ValueError("confirm_runs must be >= 1")


@dataclass
class CampaignState:
    """Live, mutable counters for the progress display (never persisted as evidence)."""

    started: float = field(default_factory=time.monotonic)
    iteration: int = 0
    requests: int = 0
    anomalies: Counter[str] = field(default_factory=Counter)
    findings: list[tuple[Path, Finding]] = field(default_factory=list)
    last: str = ""

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

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

    @property
    def found(self) -> bool:
        return bool(self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "iterations": self.iterations,
            "requests": self.requests,
            "elapsed_s": round(self.elapsed_s, 3),
            "stopped_because": self.stopped_because,
            "findings": [
                {
                    "path": str(p),
                    "verdict": f.verdict.value,
                    "why": f.why,
                    "rate": f.confirmation.rate if f.confirmation else None,
                    "diverged": list(f.expected_diverging),
                    "signature": f.signature,
                }
                for p, f in self.findings
            ],
        }


@dataclass(frozen=True)
class Judgement:
    """What the oracles said about one scenario's histories."""

    anomalies: tuple[Anomaly, ...]
    stable: tuple[str, ...]

    @property
    def divergent(self) -> tuple[Anomaly, ...]:
        return tuple(a for a in self.anomalies if a.verdict.is_divergence)

    @property
    def verdict(self) -> Verdict | None:
        return worst(a.verdict for a in self.anomalies)


def derive_seed(campaign_seed: int, iteration: int) -> int:
    """The scenario seed of an iteration: stable across Python versions and platforms."""
    return random.Random(f"servefuzz:{campaign_seed}:{iteration}").getrandbits(31)


def shape_of(info: TargetInfo) -> TargetShape:
    """What the strategies may assume about this target."""
    args = info.server_args
    context = int(args.get("context_length") or args.get("max_model_len") or 4096)
    vocab_top = info.vocab_size or 1024
    return TargetShape(
        page_size=info.page_size,
        context_length=context,
        vocab=range(3, vocab_top),
        max_total_tokens=info.max_total_tokens,
    )


def judge(loaded: Sequence[RunHistory], alone: Mapping[str, Sequence[RequestRecord]]) -> Judgement:
    """Run every oracle over one scenario's histories. Pure."""
    replay = replay_consistency(loaded)
    found: list[Anomaly] = list(replay.anomalies)
    found += isolation(loaded, alone, noise=replay.noise)
    found += n_consistency(loaded, replay.noise)
    alone_runs = [RunHistory(0, "alone", tuple(r for recs in alone.values() for r in recs))] if alone else []
    found += liveness([*loaded, *alone_runs])
    return Judgement(tuple(found), replay.stable)


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


async def _run_flushed(runner: Runner, scenario: Scenario, run: int, label: str) -> RunHistory:
    await runner.flush()
    return await runner.run(scenario, run=run, label=label)


@dataclass
class Executed:
    """The histories of one scenario's execution, as far as it got.

    Filled in place, so that when the target goes away mid-way (`lost` says why) everything
    recorded before that is still here to be judged and kept.
    """

    loaded: list[RunHistory] = field(default_factory=list)
    alone: dict[str, list[RequestRecord]] = field(default_factory=dict)
    lost: str | None = None

    @property
    def requests(self) -> int:
        return sum(len(h.records) for h in self.loaded) + sum(len(v) for v in self.alone.values())


async def execute(
    runner: Runner, scenario: Scenario, *, runs: int, with_alone: bool, first_run: int = 0
) -> Executed:
    """Run `scenario` `runs` times under load (flushed before each) and, if asked, each request
    alone on a flushed cache. Requests cancelled on purpose have no alone reference."""
    done = Executed()
    try:
        for i in range(runs):
            done.loaded.append(await _run_flushed(runner, scenario, first_run + i, "load"))
        if with_alone:
            for spec in scenario.requests:
                if not spec.cancelled:
                    done.alone[spec.id] = [await runner.run_alone(spec, run=0)]
    except TargetError as e:
        done.lost = str(e)
    return done


async def run_campaign(
    runner: Runner,
    strategy: Strategy,
    config: CampaignConfig,
    *,
    on_event: Callable[[CampaignState], None] = lambda s: None,
) -> CampaignResult:
    """Fuzz the runner's target until a budget is spent (or the first confirmed finding)."""
    assert runner.info is not None, "enter the Runner before starting a campaign"
    info = runner.info
    shape = shape_of(info)
    out = config.out_dir
    (out / "findings").mkdir(parents=True, exist_ok=True)
    _write_json_atomic(out / "config.json", {
        "seed": config.seed, "runs": config.runs, "confirm_runs": config.confirm_runs,
        "strategy": strategy.name, "target": info.to_json(),
    })
    state = CampaignState()
    # A campaign directory used before is continued, never overwritten: iterations (and so
    # scenario seeds and finding names) pick up where the last run left them.
    first_iteration = _next_iteration(out)
    state.iteration = first_iteration
    budget = _Budget(config, state)
    stopped = ""
    while not (stopped := budget.exhausted() or ""):
        iteration = state.iteration
        seed = derive_seed(config.seed, iteration)
        scenario = strategy.generate(random.Random(seed), shape, seed=seed)
        done = await execute(runner, scenario, runs=config.runs, with_alone=config.isolation)
        state.requests += done.requests
        write_history_jsonl(out / "histories.jsonl", [*done.loaded, *_alone_as_runs(done.alone)])
        verdict = judge(done.loaded, done.alone)
        if done.lost is not None:
            verdict = _with_target_lost(verdict, done.lost)
        for a in verdict.anomalies:
            state.anomalies[a.verdict.value] += 1
        finding = None
        if verdict.anomalies and done.lost is None:
            state.last = f"iteration {iteration}: {len(verdict.anomalies)} anomalies, confirming"
            on_event(state)
            finding, lost = await confirm(runner, info, scenario, iteration, done, verdict, config)
            state.requests += config.confirm_runs * scenario.total_requests
            done.lost = lost
        elif verdict.anomalies:
            # The target is gone: keep what was seen, unconfirmed, rather than lose it.
            finding = Finding(iteration, scenario.seed, scenario, info, verdict.anomalies,
                              notes=(f"not confirmed: {done.lost}",))
        if finding is not None:
            path = write_finding(out / "findings", finding)
            state.findings.append((path, finding))
            state.last = f"finding {path.name}: {finding.verdict.value}, {finding.headline.summary}"
        state.iteration += 1
        _write_json_atomic(out / "progress.json", {"next_iteration": state.iteration})
        on_event(state)
        if done.lost is not None:
            stopped = f"target lost: {done.lost}"
            break
        if finding is not None and config.stop_at_first and _confirmed(finding):
            stopped = "first confirmed finding"
            break
    return CampaignResult(
        state.iteration - first_iteration, state.requests, state.elapsed_s, tuple(state.findings), stopped
    )


async def confirm(
    runner: Runner,
    info: TargetInfo,
    scenario: Scenario,
    iteration: int,
    done: Executed,
    first: Judgement,
    config: CampaignConfig,
) -> tuple[Finding, str | None]:
    """Replay the scenario `confirm_runs` more times and build the finding from all the evidence.

    Returns the finding and, when the target went away during the replays, why.
    """
    more = await execute(runner, scenario, runs=config.confirm_runs, with_alone=False, first_run=len(done.loaded))
    notes = () if more.lost is None else (f"confirmation cut short: {more.lost}",)
    confirmation = confirmation_of(first, [*done.loaded, *more.loaded], more.loaded, done.alone)
    finding = Finding(
        iteration=iteration,
        seed=scenario.seed,
        scenario=scenario,
        target=info,
        anomalies=first.anomalies,
        confirmation=confirmation,
        notes=notes,
    )
    return finding, more.lost


def confirmation_of(
    first: Judgement,
    every_run: Sequence[RunHistory],
    replays: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
) -> Confirmation:
    """How the flagged requests held up in `replays`. Pure.

    A replay reproduces the finding when some flagged request again gives an output other than
    its reference: its output alone on a flushed cache when there is one, else the most frequent
    output over every run. Variants are counted over every run, the alone reference included.
    """
    flagged = tuple(dict.fromkeys(a.request_id for a in first.anomalies))
    table = determinate_outputs(every_run)
    alone_table = determinate_outputs([RunHistory(0, "alone", tuple(r for rs in alone.values() for r in rs))])
    references: dict[str, object] = {}
    variants = {}
    for rid in flagged:
        outs = [o for per in table.get(rid, {}).values() for o in per]
        refs = [o for per in alone_table.get(rid, {}).values() for o in per]
        groups = group_variants([*outs, *refs])
        if groups:
            variants[rid] = tuple(g.variant for g in groups)
            references[rid] = output_key((refs[0] if refs else groups[0].outputs[0]).choice)
    replay_runs = {h.run for h in replays}
    diverged_in: dict[str, set[int]] = {rid: set() for rid in flagged}
    for rid in flagged:
        for per in table.get(rid, {}).values():
            for o in per:
                if o.run in replay_runs and output_key(o.choice) != references.get(rid):
                    diverged_in[rid].add(o.run)
    reproduced_runs = set().union(*diverged_in.values()) if diverged_in else set()
    expected = tuple(rid for rid in flagged if diverged_in[rid]) or flagged
    everyone = {rec.request_id for h in every_run for rec in h.records}
    return Confirmation(
        reproduced=len(reproduced_runs),
        attempts=len(replays),
        variants=variants,
        expected=expected,
        stable=tuple(sorted(everyone - set(expected))),
    )


def _with_target_lost(j: Judgement, why: str) -> Judgement:
    """A server that stops answering between runs crashed, even if no request saw it die."""
    if any(a.verdict is Verdict.CRASH for a in j.anomalies):
        return j
    lost = Anomaly(Oracle.LIVENESS, Verdict.CRASH, "-", f"the server stopped answering: {why}", evidence={"error": why})
    return Judgement((*j.anomalies, lost), j.stable)


def _confirmed(f: Finding) -> bool:
    return f.confirmation is not None and f.confirmation.reproduced > 0


def _alone_as_runs(alone: Mapping[str, Sequence[RequestRecord]]) -> list[RunHistory]:
    recs = tuple(r for rs in alone.values() for r in rs)
    return [RunHistory(0, "alone", recs)] if recs else []


def _next_iteration(out: Path) -> int:
    try:
        return int(json.loads((out / "progress.json").read_text(encoding="utf-8"))["next_iteration"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)

