"""The campaign: a greybox loop of generate-or-mutate, run, judge, confirm, keep.

One iteration, all against one target:

1. the schedule (`servefuzz.corpus`) picks a source by energy: a strategy generates a fresh
   scenario, or a corpus entry is mutated (`servefuzz.mutators`); trace seeds run first;
2. `execute` fires the scenario `runs` times under load (cache flushed before each, `/metrics`
   read around each), sends each request once *alone* on a flushed cache (the isolation
   reference, which is also the *cold* cache state) and probes a request with a shared prefix
   *warm* and *primed* (the cache-state oracle);
3. `judge` runs every oracle; `features` (`servefuzz.feedback`) says what the run reached, and
   the corpus keeps the scenario if that includes something new;
4. an anomaly is confirmed by `confirm_runs` replays, unless an equal-or-smaller confirmed
   finding with the same signature is already kept; findings are deduplicated by
   `Finding.signature` (see `FindingStore`).

The campaign directory holds everything, written so that `kill -9` loses nothing:

| path                    | written                                   | on resume                              |
|-------------------------|-------------------------------------------|----------------------------------------|
| `config.json`           | once, atomically                          | the seed and strategies must match      |
| `progress.json`         | atomically after every iteration          | iteration, totals, schedule, counts    |
| `corpus/entry_N.json`   | once per kept scenario, atomically        | reloaded: the corpus continues         |
| `findings/*.json`       | atomically; a smaller duplicate replaces its file only once it is durable | rescanned: the files are the truth |
| `scenarios.jsonl`       | appended and fsynced before each execution | appended to (an iteration cut by a kill runs again: the last line of an iteration counts) |
| `histories.jsonl`       | appended and fsynced after every execution; each run's `meta.iteration` names its scenario | appended to |

Budgets (time, requests) count the whole campaign, resumed sessions included. The campaign
stops when one is spent, when the target goes away, or, if asked, at the first confirmed
finding (optionally only one of given verdicts). The caller watches through `on_event`.

A target that dies mid-campaign is a crash finding. When servefuzz launched the server itself
the caller passes a `Revival`: the crash finding then carries the server's exit status and the
tail of its log, the server is started again, and the campaign goes on (up to `max_restarts`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from servefuzz.anomaly import Anomaly, Oracle, Verdict, worst
from servefuzz.corpus import MUTATE_SHARE, Corpus, CorpusEntry, Schedule
from servefuzz.errors import FindingError, TargetError, UsageError
from servefuzz.feedback import features, metric_deltas
from servefuzz.finding import (
    Confirmation,
    Finding,
    TargetInfo,
    load_finding,
    write_finding,
)
from servefuzz.history import RequestRecord, RunHistory, write_history_jsonl
from servefuzz.mutators import mutate
from servefuzz.oracles import (
    NoiseModel,
    cache_state,
    determinate_outputs,
    group_variants,
    isolation,
    liveness,
    measure_noise,
    n_consistency,
    noisy_neighbour,
    output_key,
    replay_consistency,
)
from servefuzz.runner import Runner
from servefuzz.strategies import DEFAULT_CAPTURE_SIZES, Strategy, TargetShape
from servefuzz.workload import RequestSpec, Scenario

__all__ = [
    "CampaignConfig",
    "CampaignResult",
    "CampaignState",
    "Executed",
    "FindingStore",
    "Judgement",
    "Revival",
    "check_campaign_dir",
    "confirm",
    "confirmation_of",
    "derive_seed",
    "execute",
    "finding_size",
    "judge",
    "run_campaign",
    "shape_of",
]


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
    dies on every scenario would otherwise be restarted forever).
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

    @property
    def found(self) -> bool:
        return bool(self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
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
    """What the strategies may assume about this target (SGLang's and vLLM's names for it)."""
    args = info.server_args

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
    )


def judge(
    loaded: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    *,
    cache: Sequence[RequestRecord] = (),
    performance: bool = False,
) -> Judgement:
    """Run every oracle over one scenario's histories. Pure.

    `cache`: warm and primed probe records (their cold reference is the alone record);
    `performance`: include the noisy-neighbour oracle's slowdowns.
    """
    replay = replay_consistency(loaded)
    # Loaded runs of one scenario often batch alike, so their jitter can be zero while a request
    # alone (a batch of one) still rounds differently: every oracle is held against the larger of
    # the two measured jitters, or benign batch numerics would pass for corruption (and one flip
    # could be drift to one oracle and corruption to another).
    noise = max(replay.noise, _isolation_noise(loaded, alone), key=lambda n: n.threshold)
    if noise is not replay.noise:
        replay = replay_consistency(loaded, noise=noise)
    found: list[Anomaly] = list(replay.anomalies)
    found += isolation(loaded, alone, noise=noise)
    found += n_consistency(loaded, replay.noise)
    if cache:
        probed = {r.request_id for r in cache}
        cold = [dataclasses.replace(r, label="cold") for rid in probed for r in alone.get(rid, ())]
        found += cache_state([*cold, *cache], replay.noise)
    if performance:
        found += noisy_neighbour(loaded, alone)
    alone_runs = [RunHistory(0, "alone", tuple(r for recs in alone.values() for r in recs))] if alone else []
    found += liveness([*loaded, *alone_runs])
    return Judgement(tuple(found), replay.stable)


def _isolation_noise(loaded: Sequence[RunHistory], alone: Mapping[str, Sequence[RequestRecord]]) -> NoiseModel:
    """Logprob jitter between each request alone and its loaded outputs that agree with it."""
    table = determinate_outputs(loaded)
    groups = []
    for rid, records in alone.items():
        ref = next((r for r in records if r.ok and r.choices), None)
        if ref is None:
            continue
        for index, outs in table.get(rid, {}).items():
            mine = next((c for c in ref.choices if c.index == index), ref.choices[0])
            same = [o.choice for o in outs if output_key(o.choice) == output_key(mine)]
            if same:
                groups.append([mine, *same])
    return measure_noise(groups)


@dataclass
class Executed:
    """The histories of one scenario's execution, as far as it got.

    Filled in place, so that when the target goes away mid-way (`lost` says why) everything
    recorded before that is still here to be judged and kept.
    """

    loaded: list[RunHistory] = field(default_factory=list)
    alone: dict[str, list[RequestRecord]] = field(default_factory=dict)
    cache: list[RequestRecord] = field(default_factory=list)
    lost: str | None = None
    sent: int = 0  # requests on the wire, probes' priming requests included

    @property
    def requests(self) -> int:
        return self.sent


async def _metrics(runner: Runner) -> dict[str, float]:
    try:
        return await runner.metrics()
    except TargetError:
        return {}  # no metrics is no feedback, not a lost target: the next run will tell


async def _probe(runner: Runner, spec: RequestSpec, run: int, done: Executed) -> None:
    """The cache-state probes of one request: warm (again, no flush) and primed (flush, bare
    prefix alone, then the request)."""
    done.cache.append(await runner.run_alone(spec, run=run, label="warm", flush=False))
    bare = dataclasses.replace(spec, id=f"{spec.id}~prefix", prompt_ids=spec.prompt_ids[: spec.prefix_len],
                               max_tokens=1, n=1, stream=False)
    await runner.run_alone(bare, run=run, label="prime")
    done.cache.append(await runner.run_alone(spec, run=run, label="primed", flush=False))
    done.sent += 3


def probe_targets(scenario: Scenario, count: int) -> list[RequestSpec]:
    """Which requests the cache-state probes visit: those with a shared prefix and a suffix,
    not cancelled, first in scenario order."""
    fit = [r for r in scenario.requests if r.prefix_len and r.suffix_len and not r.cancelled]
    return fit[:count]


async def execute(
    runner: Runner,
    scenario: Scenario,
    *,
    runs: int,
    with_alone: bool,
    first_run: int = 0,
    probes: Sequence[RequestSpec] = (),
) -> Executed:
    """Run `scenario` `runs` times under load (flushed before each; counter deltas of
    `/metrics` in each run's `meta["metrics"]`) and, if asked, each request alone on a flushed
    cache; then the cache-state `probes`. Requests cancelled on purpose have no alone reference."""
    done = Executed()
    try:
        for i in range(runs):
            await runner.flush()
            before = await _metrics(runner)
            h = await runner.run(scenario, run=first_run + i, label="load")
            delta = metric_deltas(before, await _metrics(runner))
            done.loaded.append(dataclasses.replace(h, meta={**h.meta, "metrics": delta}))
            done.sent += scenario.total_requests
        if with_alone:
            for spec in scenario.requests:
                if not spec.cancelled:
                    done.alone[spec.id] = [await runner.run_alone(spec, run=0)]
                    done.sent += 1
                    if spec in probes:  # warm: right after its own cold run
                        await _probe(runner, spec, first_run, done)
        else:
            for spec in probes:  # warm: after the loaded run cached its prompt
                await _probe(runner, spec, first_run, done)
    except TargetError as e:
        done.lost = str(e)
    return done


async def confirm(
    runner: Runner,
    info: TargetInfo,
    scenario: Scenario,
    iteration: int,
    done: Executed,
    first: Judgement,
    config: CampaignConfig,
) -> tuple[Finding, Executed]:
    """Replay the scenario `confirm_runs` more times and build the finding from all the evidence.

    Cache-state anomalies are re-probed in every replay, slowdowns re-measured; a replay
    reproduces when any flagged anomaly shows again in it. Returns the finding and the replays'
    histories (their `lost` says why the target went away, if it did).
    """
    flagged = {a.request_id for a in first.anomalies if a.oracle is Oracle.CACHE_STATE}
    probes = [s for s in scenario.requests if s.id in flagged]
    more = Executed()
    for k in range(config.confirm_runs):
        step = await execute(runner, scenario, runs=1, with_alone=False, first_run=len(done.loaded) + k, probes=probes)
        more.loaded += step.loaded
        more.cache += step.cache
        more.sent += step.sent
        if step.lost is not None:
            more.lost = step.lost
            break
    notes = () if more.lost is None else (f"confirmation cut short: {more.lost}",)
    confirmation = confirmation_of(first, [*done.loaded, *more.loaded], more.loaded, done.alone, cache=more.cache)
    finding = Finding(
        iteration=iteration, seed=scenario.seed, scenario=scenario, target=info, anomalies=first.anomalies,
        confirmation=confirmation, notes=notes,
    )
    return finding, more


def confirmation_of(
    first: Judgement,
    every_run: Sequence[RunHistory],
    replays: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    *,
    cache: Sequence[RequestRecord] = (),
) -> Confirmation:
    """How the flagged requests held up in `replays`. Pure.

    A replay reproduces the finding when some flagged request again gives an output other than
    its reference: its output alone on a flushed cache when there is one, else the most frequent
    output over every run. Variants are counted over every run, the alone reference included.
    Cache-state anomalies reproduce in a replay whose probes (`cache`, by run) flag them again;
    slowdowns in a replay where the noisy-neighbour oracle flags the request again.
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
    for a in first.anomalies:
        if a.oracle is Oracle.CACHE_STATE:
            cold = [dataclasses.replace(r, label="cold") for r in alone.get(a.request_id, ())]
            for run in replay_runs:
                probes = [r for r in cache if r.run == run and r.request_id == a.request_id]
                if probes and cache_state([*cold, *probes]):
                    diverged_in[a.request_id].add(run)
        elif a.oracle is Oracle.NOISY_NEIGHBOUR:
            for h in replays:
                if any(x.request_id == a.request_id for x in noisy_neighbour([h], alone)):
                    diverged_in[a.request_id].add(h.run)
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


def finding_size(f: Finding) -> tuple[int, int, int]:
    """Dedup order, smaller is better: unconfirmed after confirmed, then the shrink order
    (requests, then total tokens)."""
    confirmed = f.confirmation is not None and f.confirmation.reproduced > 0
    tokens = sum(r.prompt_len + r.max_tokens * r.n for r in f.scenario.requests)
    return (0 if confirmed else 1, len(f.scenario.requests), tokens)


class FindingStore:
    """The findings directory, deduplicated by `Finding.signature`.

    The first finding of a signature is written as a new file; later ones only count, unless
    smaller by `finding_size`, in which case the smaller one is written (atomically, fsynced)
    and only then the old file removed. Opening a directory rescans it: the files are the
    truth, so a finding written just before a `kill -9` is never lost or written twice, and of
    two files with one signature (a kill between writing a replacement and removing the old)
    the larger is removed, its replacement being durable.
    """

    def __init__(self, directory: Path, counts: Mapping[str, int] | None = None) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.kept: dict[str, tuple[Path, Finding]] = {}
        self.counts: Counter[str] = Counter()
        self.latest_iteration = -1
        for path in sorted(directory.glob("finding_*.json")):
            try:
                f = load_finding(path)
            except FindingError:
                continue  # not ours to judge or delete; it is simply not part of the dedup table
            self.latest_iteration = max(self.latest_iteration, f.iteration)
            self.counts[f.signature] += 1
            old = self.kept.get(f.signature)
            if old is None or finding_size(f) < finding_size(old[1]):
                self.kept[f.signature] = (path, f)
                if old is not None:
                    _unlink_durably(old[0])
            else:
                _unlink_durably(path)
        for sig, n in (counts or {}).items():
            if sig in self.kept:
                self.counts[sig] = max(self.counts[sig], n)

    def known(self, signature: str) -> Finding | None:
        kept = self.kept.get(signature)
        return None if kept is None else kept[1]

    def add(self, finding: Finding) -> tuple[Path, str]:
        """Record `finding`; returns its file and what happened: new, smaller or duplicate."""
        sig = finding.signature
        self.counts[sig] += 1
        old = self.kept.get(sig)
        if old is not None and finding_size(finding) >= finding_size(old[1]):
            return old[0], "duplicate"
        path = write_finding(self.directory, finding)
        self.kept[sig] = (path, finding)
        if old is None:
            return path, "new"
        _unlink_durably(old[0])
        return path, "smaller"

    def findings(self) -> list[tuple[Path, Finding]]:
        return sorted(self.kept.values(), key=lambda pf: pf[1].iteration)


def _unlink_durably(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Revival(Protocol):
    """A server servefuzz launched, which the campaign may start again after it dies."""

    def death(self) -> dict[str, Any]:
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
    info = runner.info
    shape = shape_of(info)
    strategies = {s.name: s for s in (strategy if isinstance(strategy, Sequence) else [strategy])}
    out = config.out_dir
    progress = _open_dir(out, config, tuple(strategies), info)
    corpus = Corpus(_load_entries(out / "corpus"), {int(k): v for k, v in progress.get("picks", {}).items()})
    schedule = Schedule(tuple(strategies), **progress.get("schedule", {}),
                        mutate_share=MUTATE_SHARE if config.greybox else 0.0)
    store = FindingStore(out / "findings", progress.get("seen", {}))
    state = CampaignState(elapsed_before_s=float(progress.get("elapsed_s", 0.0)))
    state.requests = int(progress.get("requests", 0))
    state.restarts = int(progress.get("restarts", 0))
    first_iteration = max(int(progress.get("next_iteration", 0)), store.latest_iteration + 1,
                          max((e.iteration + 1 for e in corpus.entries), default=0))
    state.iteration = first_iteration
    firsts: dict[str, tuple[int, float]] = {
        v: (int(x[0]), float(x[1])) for v, x in progress.get("first_confirmed", {}).items()
    }
    _sync(state, corpus, store)
    budget = _Budget(config, state)
    stopped = ""
    while not (stopped := budget.exhausted() or ""):
        iteration = state.iteration
        seed = derive_seed(config.seed, iteration)
        if iteration < len(seeds):
            scenario, origin = dataclasses.replace(seeds[iteration], seed=seed), "trace"
        else:
            scenario, origin = _next_scenario(random.Random(seed), iteration - len(seeds), seed, schedule, corpus,
                                              strategies, shape)
        source = origin if origin == scenario.meta.get("strategy") else f"{origin} ({scenario.meta.get('strategy', '?')})"
        state.last = f"iteration {iteration}: {source}, {len(scenario.requests)} requests"
        on_event(state)
        began = time.monotonic()
        _append_json_line(out / "scenarios.jsonl", {"iteration": iteration, "origin": origin, "scenario": scenario.to_json()})
        done = await execute(runner, scenario, runs=config.runs, with_alone=config.isolation,
                             probes=probe_targets(scenario, config.cache_probes))
        state.requests += done.requests
        write_history_jsonl(out / "histories.jsonl", [
            dataclasses.replace(h, meta={**h.meta, "iteration": iteration})
            for h in (*done.loaded, *_alone_as_runs(done.alone, done.cache))
        ])
        verdict = judge(done.loaded, done.alone, cache=done.cache, performance=config.performance)
        if done.lost is not None:
            verdict = _with_target_lost(verdict, done.lost, {} if revival is None else revival.death())
        for a in verdict.anomalies:
            state.anomalies[a.verdict.value] += 1
        reached = features(scenario, done.loaded, done.alone, verdict.anomalies, shape)
        entry = corpus.consider(scenario, reached, origin=origin, iteration=iteration, flagged=bool(verdict.anomalies))
        if entry is not None:
            _write_json_atomic(out / "corpus" / f"entry_{entry.id:05d}.json", entry.to_json())
        schedule.credit(str(scenario.meta.get("strategy", origin)), len(entry.new) if entry else 0,
                        time.monotonic() - began)
        finding = await _finding_of(runner, info, scenario, iteration, done, verdict, config, store, state, on_event)
        if finding is not None:
            path, what_happened = store.add(finding)
            if _confirmed(finding) and finding.verdict.value not in firsts:
                firsts[finding.verdict.value] = (state.requests, state.elapsed_s)
            state.last = f"finding {path.name} ({what_happened}): {finding.verdict.value}, {finding.headline.summary}"
        state.iteration += 1
        _sync(state, corpus, store)
        _write_json_atomic(out / "progress.json", {
            "next_iteration": state.iteration, "requests": state.requests, "elapsed_s": round(state.elapsed_s, 3),
            "picks": corpus.state_json(), "schedule": schedule.state_json(), "seen": dict(store.counts),
            "first_confirmed": {v: list(x) for v, x in firsts.items()}, "restarts": state.restarts,
        })  # last of the iteration's writes: what it names is already on disk
        on_event(state)
        if done.lost is not None:
            if revival is None or state.restarts >= config.max_restarts:
                stopped = f"target lost: {done.lost}" + ("" if revival is None else f" ({state.restarts} restarts already)")
                break
            state.last = f"the server died ({done.lost}); starting it again"
            on_event(state)
            try:
                runner = await revival.revive()
            except TargetError as e:
                stopped = f"target lost: {done.lost}; it could not be started again: {e}"
                break
            assert runner.info is not None
            info = runner.info
            state.restarts += 1
            state.last = f"the server died ({done.lost}); restarted it at {info.base_url}"
            on_event(state)
            continue
        if finding is not None and config.stop_at_first and _confirmed(finding) and (
            not config.stop_verdicts or finding.verdict.value in config.stop_verdicts
        ):
            stopped = "first confirmed finding"
            break
    return CampaignResult(
        state.iteration - first_iteration, state.requests, state.elapsed_s, tuple(store.findings()), stopped,
        features=state.features, corpus=state.corpus, seen=dict(store.counts), first_confirmed=firsts,
        restarts=state.restarts,
    )


def _next_scenario(
    rng: random.Random,
    turn: int,
    seed: int,
    schedule: Schedule,
    corpus: Corpus,
    strategies: Mapping[str, Strategy],
    shape: TargetShape,
) -> tuple[Scenario, str]:
    """The schedule's choice made concrete: a mutated corpus entry or a fresh scenario."""
    _, what = schedule.next(rng, turn, corpus)
    if isinstance(what, CorpusEntry):
        return mutate(what.scenario, rng, shape, seed=seed), f"mutate:{what.id}"
    return strategies[what].generate(rng, shape, seed=seed), what


async def _finding_of(
    runner: Runner,
    info: TargetInfo,
    scenario: Scenario,
    iteration: int,
    done: Executed,
    verdict: Judgement,
    config: CampaignConfig,
    store: FindingStore,
    state: CampaignState,
    on_event: Callable[[CampaignState], None],
) -> Finding | None:
    """The finding of one execution, confirmed unless that is known to be wasted effort."""
    if not verdict.anomalies:
        return None
    if done.lost is not None:
        # The target is gone: keep what was seen, unconfirmed, rather than lose it.
        return Finding(iteration, scenario.seed, scenario, info, verdict.anomalies, notes=(f"not confirmed: {done.lost}",))
    provisional = Finding(iteration, scenario.seed, scenario, info, verdict.anomalies)
    kept = store.known(provisional.signature)
    if kept is not None and _confirmed(kept) and finding_size(provisional)[1:] >= finding_size(kept)[1:]:
        # A confirmed, no larger example of this signature is kept: count it, spare the replays.
        return provisional
    state.last = f"iteration {iteration}: {len(verdict.anomalies)} anomalies, confirming"
    on_event(state)
    finding, more = await confirm(runner, info, scenario, iteration, done, verdict, config)
    state.requests += more.requests
    done.lost = more.lost
    return finding


def _sync(state: CampaignState, corpus: Corpus, store: FindingStore) -> None:
    state.features, state.corpus = len(corpus.seen), len(corpus)
    state.findings = store.findings()
    state.seen = Counter(store.counts)


def check_campaign_dir(out: Path, *, resume: bool) -> bool:
    """Whether `out` already holds a campaign; refused (UsageError) unless resuming it."""
    existing = (out / "config.json").exists() or (out / "progress.json").exists()
    if existing and not resume:
        raise UsageError(f"{out} already holds a campaign; continue it with --resume, or choose another --out")
    return existing


def _open_dir(out: Path, config: CampaignConfig, strategies: tuple[str, ...], info: TargetInfo) -> dict[str, Any]:
    """Create or reopen the campaign directory; return the saved progress (empty when new)."""
    existing = check_campaign_dir(out, resume=config.resume)
    (out / "findings").mkdir(parents=True, exist_ok=True)
    (out / "corpus").mkdir(exist_ok=True)
    identity = {"seed": config.seed, "strategies": list(strategies)}
    if existing:
        saved = _read_json(out / "config.json")
        clash = [k for k, v in identity.items() if k in saved and saved[k] != v]
        if clash:
            raise UsageError(
                f"{out} was started with {', '.join(f'{k} {saved[k]}' for k in clash)}; resume it with the same values"
            )
        return _read_json(out / "progress.json")
    _write_json_atomic(out / "config.json", {
        **identity, "runs": config.runs, "confirm_runs": config.confirm_runs, "target": info.to_json(),
    })
    return {}


def _load_entries(directory: Path) -> list[CorpusEntry]:
    entries = []
    for path in sorted(directory.glob("entry_*.json")):
        try:
            entries.append(CorpusEntry.from_json(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # written atomically, so only a foreign file lands here; skip it
    # Ids must run 0..n-1 for new entries to get fresh ones; keep the unbroken run.
    return [e for i, e in enumerate(entries) if e.id == i]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _with_target_lost(j: Judgement, why: str, death: Mapping[str, Any]) -> Judgement:
    """A server that stops answering between runs crashed, even if no request saw it die.

    `death` (exit status, log tail) joins the evidence of every crash anomaly: what the server
    said as it died is often the whole story.
    """
    crashes = [a for a in j.anomalies if a.verdict is Verdict.CRASH]
    if not crashes:
        lost = Anomaly(Oracle.LIVENESS, Verdict.CRASH, "-", f"the server stopped answering: {why}", evidence={"error": why})
        return Judgement((*j.anomalies, dataclasses.replace(lost, evidence={**lost.evidence, **death})), j.stable)
    if not death:
        return j
    return Judgement(tuple(dataclasses.replace(a, evidence={**a.evidence, **death}) if a.verdict is Verdict.CRASH else a
                           for a in j.anomalies), j.stable)


def _confirmed(f: Finding) -> bool:
    return f.confirmation is not None and f.confirmation.reproduced > 0


def _alone_as_runs(alone: Mapping[str, Sequence[RequestRecord]], cache: Sequence[RequestRecord]) -> list[RunHistory]:
    recs = tuple(r for rs in alone.values() for r in rs)
    return [RunHistory(0, label, rs) for label, rs in (("alone", recs), ("cache", tuple(cache))) if rs]


def _append_json_line(path: Path, obj: Any) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(obj, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=1, sort_keys=True))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
