"""The campaign loop: a dispatcher that sends each free worker the next scenario, takes each
outcome as it comes back, and asks its stop conditions (`servefuzz.campaign.stops`) when to end;
and the resume of a campaign from its directory (`store.Progress`)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from servefuzz import durable
from servefuzz.campaign.choose import SourceFailure, shape_of
from servefuzz.campaign.events import Said, SourceFailed
from servefuzz.campaign.iteration import Loop, Outcome, revive_worker, save_progress, sync_state
from servefuzz.campaign.observe import histories_of
from servefuzz.campaign.records import (
    BUDGET_GRACE_S,
    COVERAGE_FILE,
    CampaignConfig,
    CampaignResult,
    CampaignState,
    Stop,
)
from servefuzz.campaign.stops import Moment, TimeBudget, budgets, first_stop, stop_conditions
from servefuzz.campaign.workers import LocalWorker, Revival, Worker, WorkerLost
from servefuzz.corpus import Corpus, Schedule, first_round
from servefuzz.coverage import Coverage, FeatureSpace
from servefuzz.covering import PairwiseCover
from servefuzz.engines.registry import spec_of
from servefuzz.errors import UsageError
from servefuzz.flushcheck import FlushCheck, probe_scenario, probed
from servefuzz.goals import Pursuit, goal_parts, standing_goals
from servefuzz.history import write_history_jsonl
from servefuzz.runner import Runner
from servefuzz.store import FindingStore, load_entries, open_campaign_dir, read_json, read_noise
from servefuzz.strategies import Strategy, TargetShape, aimed_first, left_out, offered, shape_aims
from servefuzz.workload import Scenario

__all__ = ["run_campaign", "run_campaign_on"]


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
    run, strategies, first_iteration = _open_campaign(workers[0], strategy, config, on_event)
    state, corpus, schedule, store, firsts, shape = run.state, run.corpus, run.schedule, run.store, run.firsts, run.shape
    out = config.out_dir
    conditions = stop_conditions(config)

    def between() -> Stop | None:
        """Why to stop before sending the next scenario (a budget spent, every strategy benched)."""
        return first_stop(conditions, Moment(state, schedule))

    def past_budget() -> Stop | None:
        return first_stop(budgets(conditions), Moment(state, schedule))

    # The time budget as a deadline on this clock: every worker's runner cuts at it, and the loop
    # stops waiting for any worker BUDGET_GRACE_S after it (counted across sessions, as the budget).
    deadline, spent = None, None
    if config.time_budget_s is not None:
        deadline = state.started + config.time_budget_s - state.elapsed_before_s
        spent = TimeBudget(config.time_budget_s).spent
    for w in workers:
        w.stop_at(deadline, "" if spent is None else spent.detail)
    stopped: Stop | None = None
    free = list(workers)
    busy: dict[asyncio.Future[Outcome], Worker] = {}
    try:
        while True:
            while free and stopped is None:
                if (stopped := between()) is not None:
                    break
                iteration = run.dispatched
                run.dispatched += 1
                try:
                    scenario, origin = run.choose(iteration, seeds, strategies)
                except SourceFailure as e:
                    # A bug in one of our generators must not end the campaign (nor pass for a finding).
                    if e.strategy is not None:
                        schedule.bench(e.strategy, e.error)
                    state.last = SourceFailed(iteration, e.source, e.error, benched=e.strategy is not None)
                    state.iteration = run.dispatched
                    save_progress(out, state, corpus, schedule, store, firsts)
                    on_event(state)
                    continue  # asked again first: with every strategy benched, the campaign ends
                worker = free.pop(0)
                if config.flush_check and state.flush is None:
                    # Before the first scenario (none at all: nothing sent), as no reference yet rests on it.
                    await _prove_flush(worker, shape, state, on_event, out)
                busy[asyncio.ensure_future(run.iterate(worker, iteration, scenario, origin))] = worker
            if not busy or (stopped is not None and run.halt):
                break
            wait = None if deadline is None else max(0.0, deadline + BUDGET_GRACE_S - time.monotonic())
            finished, _ = await asyncio.wait(busy, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            if not finished:
                # The grace is spent too: what is still in flight is cancelled (in `finally`),
                # its scenario logged in scenarios.jsonl and nothing else of it kept.
                over = past_budget() or spent
                assert over is not None, "only a deadline's grace runs out"
                stopped, run.halt = Stop(over.reason, f"{over.detail}; {len(busy)} scenario(s) still in flight cut"), True
                break
            for task in sorted(finished, key=lambda t: t.result().iteration):
                worker, outcome = busy.pop(task), task.result()
                if outcome.lost is not None and (over := past_budget()) is not None:
                    # No restart past the budget: it would outlast the grace, for nothing.
                    stopped = stopped or over
                    continue
                finding = outcome.finding
                if outcome.lost is not None:
                    why = await revive_worker(worker, outcome.lost, config, state, on_event)
                    if why is None and outcome.downed is not None and past_budget() is None:
                        finding, why = await run.confirm_on_restart(worker, outcome.iteration, outcome.downed)
                    if why is not None:
                        stopped, run.halt = stopped or why, True
                        continue
                    free.append(worker)
                else:
                    free.append(worker)
                if finding is not None and (first := first_stop(conditions, Moment(state, schedule, finding))):
                    stopped, run.halt = stopped or first, True
    finally:
        # Stopped at a finding or a lost target: what other workers still run is not waited for
        # (a budget, by contrast, lets every scenario already sent finish: cut at its deadline,
        # it does so at once, and what does not is cancelled BUDGET_GRACE_S after it).
        for task in busy:
            task.cancel()
        await asyncio.gather(*busy, return_exceptions=True)
    assert stopped is not None, "the loop ends only where a stop says why"
    return CampaignResult(
        state.iteration - first_iteration, state.requests, state.elapsed_s, tuple(store.findings()), stopped,
        features=state.features, corpus=state.corpus, seen=dict(store.counts), first_confirmed=firsts,
        restarts=state.restarts, coverage=state.coverage, exercise=state.exercise, truth=state.truth,
        goals=tuple(run.pursuit.goals.values()), unreached=run.pursuit.said(shape),
        flush=state.flush,
    )


def _open_campaign(first: Worker, strategy: Strategy | Sequence[Strategy], config: CampaignConfig,
                   on_event: Callable[[CampaignState], None]) -> tuple[Loop, dict[str, Strategy], int]:
    """The campaign's driver state, new or resumed from its directory: the strategies offered to
    this target (first round aimed), the corpus, schedule, findings and counters where the last
    session left them, and the number of the first iteration to send. The target shape comes from
    the first worker's server (workers serve one launch)."""
    info = first.info
    shape = dataclasses.replace(shape_of(info), text=getattr(first, "text", None))  # scale-out: random ids
    asked = tuple(strategy) if isinstance(strategy, Sequence) else (strategy,)
    # The first round meets what the target was set up to exercise first: the profile's feature,
    # then its shape's (stable, so the rest keep the order asked, and a resumed campaign against
    # the same target computes the same order, which its identity holds).
    strategies = {s.name: s for s in aimed_first(offered(asked, shape), (*config.aims, *shape_aims(shape)))}
    if not strategies:
        raise UsageError(
            f"{', '.join(s.name for s in asked)} needs what this {info.engine} target lacks "
            "(cache salts, per-request seeds, choice constraints, LoRA adapters, or a model with a "
            "sliding window, a recurrent state or experts)"
        )
    # A strategy aimed at a trait the served model lacks would aim at nothing: said once, in
    # the campaign's config.json, with why.
    skipped = left_out(asked, shape)
    if config.coverage:
        strategies.setdefault(PairwiseCover.name, PairwiseCover())
    out = config.out_dir
    progress = open_campaign_dir(
        out, resume=config.resume, identity={"seed": config.seed, "strategies": list(strategies)},
        settings={"runs": config.runs, "confirm_runs": config.confirm_runs, "target": info.to_json(),
                  **({"left_out": skipped} if skipped else {})},
    )
    for log in ("scenarios.jsonl", "histories.jsonl", "constraints.jsonl"):
        durable.truncate_torn_tail(out / log)  # a kill mid-append must not glue the next line on
    corpus = Corpus(load_entries(out / "corpus"), progress.picks, power=config.power)
    # The covering arrays draw the target's capabilities in combination: in the first round they
    # come right after the strategies written for one capability each, before the costly
    # generic ones, rather than last (`corpus.first_round`).
    surface = [s.name for s in strategies.values() if s.needs & shape.capabilities]
    schedule = Schedule(tuple(strategies), **progress.schedule, mutate_share=config.mutate_share if config.greybox else 0.0,
                        first=first_round(tuple(strategies), PairwiseCover.name if config.coverage else None, surface),
                        contexts=config.greybox and config.engine_coverage and config.credit_contexts,
                        turns=config.share_by_contexts)
    for name, error in progress.benched.items():
        schedule.bench(name, error)
    store = FindingStore(out / "findings", progress.seen)
    state = CampaignState(elapsed_before_s=progress.elapsed_s)
    state.requests = progress.requests
    state.restarts = progress.restarts
    state.exercise = progress.exercise  # earlier sessions' (servefuzz.exercise)
    # A scenario logged but not finished (a kill mid-iteration; with several workers, every one in
    # flight) keeps its number: the resumed campaign starts after it, so no number names two.
    first_iteration = max(progress.next_iteration, store.latest_iteration + 1,
                          max((e.iteration + 1 for e in corpus.entries), default=0),
                          _last_logged(out / "scenarios.jsonl") + 1)
    state.iteration = first_iteration
    firsts: dict[str, tuple[int, float]] = dict(progress.first_confirmed)
    if config.coverage:
        state.coverage = _read_coverage(out, FeatureSpace.for_shape(shape))
    # The benign shifts of earlier sessions (empty for a new campaign).
    # The engine's meters as the search's goals, each with the parts this target can move.
    pursuit = Pursuit(schedule.names, goal_parts(spec_of(info.engine).meters, shape.capabilities),
                      standing_goals(shape))
    run = Loop(config, state, corpus, schedule, store, read_noise(out), firsts, shape, on_event, first_iteration,
                pursuit)
    sync_state(state, corpus, store)
    return run, strategies, first_iteration


async def _prove_flush(worker: Worker, shape: TargetShape, state: CampaignState,
                       on_event: Callable[[CampaignState], None], out: Path) -> None:
    """The flush probe (`flushcheck.probe_scenario`) on the first worker's server, before any
    reference rests on its flush: two loaded runs, each after a flush. A lost server or the
    deadline leave the flush untested (the campaign's own loop then meets what ended it)."""
    probe = probe_scenario(shape.unit, shape.vocab)
    try:
        done = await worker.execute(probe, runs=2, with_alone=False, probes=())
    except WorkerLost as e:
        state.flush = FlushCheck("untested", f"the flush probe's worker went away: {e}")
        return
    state.requests += done.requests
    # Logged as every execution is (what it sent, what was cut at a deadline, indeterminate), with
    # its worker's name, under no iteration: no scenario of the campaign's is it.
    tag = {"probe": "flush"} if worker.name is None else {"probe": "flush", "worker": worker.name}
    write_history_jsonl(out / "histories.jsonl", [dataclasses.replace(h, meta={**h.meta, **tag}) for h in histories_of(done)])
    state.flush = probed(worker.info, probe, done.loaded) if done.lost is None and done.cut is None else FlushCheck(
        "untested", f"the flush probe was cut short: {done.lost or done.cut}")
    if not state.flush.trusted:
        state.last = Said(state.flush.said())
        on_event(state)


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
