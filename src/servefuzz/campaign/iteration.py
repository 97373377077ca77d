"""One iteration of the campaign, on the driver: observe -> feedback -> objective.

`Loop.iterate` sends a scenario to a worker and takes what it brings back through three steps,
each a method returning a typed record (LibAFL's split of corpus feedback from objectives):

- **observe** (`Loop.observe`): the execution, its histories logged, judged against the
  campaign's noise (which then learns from it), a lost server's evidence joined to the
  judgement: an `Observation`;
- **feedback** (`Loop.feedback`): the features the execution reached (pairwise coverage,
  what the engine did under its load: `feedback.did_features`, and the engine's own code it
  reached where the engine reports it: `feedback.coverage_features`), the corpus
  keeping the scenario when one is new, its strategy credited: the `CorpusEntry` kept, or None;
- **objective** (`Loop.objective`): the finding (`objective.decide`, then confirmed on the
  worker, unless a confirmed, no larger one of its signature is kept), kept in the store, the
  progress written: the iteration's `Outcome`, which tells the loop whether its server was lost.

`Loop.confirm_on_restart` replays a scenario that took the server down on the restarted one.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from servefuzz.anomaly import Verdict
from servefuzz.campaign.choose import derive_seed, next_scenario
from servefuzz.campaign.events import (
    Chose,
    Confirming,
    FindingKept,
    LeadFollowed,
    NotBackOnRestart,
    ReplayingOnRestart,
    Said,
    ServerLost,
    WorkerDropped,
)
from servefuzz.campaign.objective import CRASH_REPLAYS, Confirm, Downed, Keep, confirm_settings, decide, downed_by
from servefuzz.campaign.observe import Observation, histories_of, with_target_lost, with_wedge
from servefuzz.campaign.records import COVERAGE_FILE, CampaignConfig, CampaignState, Stop, StopReason, is_confirmed
from servefuzz.campaign.workers import Worker, WorkerLost
from servefuzz.confirm import ConfirmConfig, glimpsed, truth_check
from servefuzz.corpus import LEAD_MUTATIONS, Corpus, CorpusEntry, Schedule, credit, new_contexts
from servefuzz.coverage import points
from servefuzz.covering import PairwiseCover
from servefuzz.errors import TargetError
from servefuzz.exercise import observe as exercise_of
from servefuzz.exercise import triggered
from servefuzz.feedback import features
from servefuzz.finding import Finding
from servefuzz.goals import GOAL_SHARE, Pursuit, budget_spent
from servefuzz.history import write_history_jsonl
from servefuzz.mutators import CROSS
from servefuzz.oracles.judge import learn
from servefuzz.oracles.noise import CampaignNoise
from servefuzz.pace import Pace, fit
from servefuzz.store import FindingStore, Progress, append_json_line, write_json, write_noise, write_progress
from servefuzz.strategies import Strategy, TargetShape
from servefuzz.trial import probe_targets
from servefuzz.workload import Scenario

__all__ = ["Loop", "Outcome", "revive_worker", "save_progress", "sync_state"]


@dataclass(frozen=True)
class Outcome:
    iteration: int
    finding: Finding | None
    lost: str | None
    downed: Downed | None = None


async def revive_worker(worker: Worker, lost: str, config: CampaignConfig, state: CampaignState,
                  on_event: Callable[[CampaignState], None]) -> Stop | None:
    """Start a worker's dead server again; why the campaign must stop instead (None when revived)."""
    if not worker.revivable or state.restarts >= config.max_restarts:
        return Stop(StopReason.TARGET_LOST, f"target lost: {lost}" + (
            "" if not worker.revivable else f" ({state.restarts} restarts already)"))
    state.last = ServerLost(lost, restarted_at=None)
    on_event(state)
    try:
        info = await worker.revive()
    except TargetError as e:
        return Stop(StopReason.TARGET_LOST, f"target lost: {lost}; it could not be started again: {e}")
    state.restarts += 1
    state.last = ServerLost(lost, restarted_at=info.base_url)
    if worker.name is not None:
        state.workers[worker.name] = f"restarted at {info.base_url}"
    on_event(state)
    return None


class Loop:
    """The campaign's driver-side state, shared by the iterations in flight: choosing the next
    scenario, and judging, learning from and keeping what a worker brought back."""

    def __init__(self, config: CampaignConfig, state: CampaignState, corpus: Corpus, schedule: Schedule,
                 store: FindingStore, noise: CampaignNoise, firsts: dict[str, tuple[int, float]], shape: TargetShape,
                 on_event: Callable[[CampaignState], None], first_iteration: int, pursuit: Pursuit) -> None:
        self.config, self.state, self.corpus, self.schedule, self.store = config, state, corpus, schedule, store
        self.noise, self.firsts, self.shape, self.on_event = noise, firsts, shape, on_event
        self.dispatched = first_iteration  # the next iteration to send out
        self.halt = False  # stop without waiting for the iterations in flight
        self.pace: Pace | None = None  # the target's speed, as the last execution measured it
        # The engine's meters as objectives (`servefuzz.goals`): rebuilt by a resumed campaign
        # from its exercise evidence, which progress.json keeps (what was tried is not kept).
        self.pursuit = pursuit

    def choose(self, iteration: int, seeds: Sequence[Scenario], strategies: dict[str, Strategy]) -> tuple[Scenario, str]:
        seed = derive_seed(self.config.seed, iteration)
        if iteration < len(seeds):
            return dataclasses.replace(seeds[iteration], seed=seed), "trace"
        coverage = self.state.coverage
        if coverage is not None and isinstance(pairwise := strategies.get(PairwiseCover.name), PairwiseCover):
            strategies[PairwiseCover.name] = pairwise.with_coverage(coverage)
        scenario, origin = next_scenario(random.Random(seed), iteration - len(seeds), seed, self.schedule,
                                          self.corpus, strategies, self.shape,
                                          extra=(CROSS,) if self.config.coverage else ())
        # Sized to the target's measured speed (a trace's scenarios run as the user wrote them).
        return fit(scenario, self.pace), origin


    async def iterate(self, worker: Worker, iteration: int, scenario: Scenario, origin: str) -> Outcome:
        seen = await self.observe(worker, iteration, scenario, origin)
        if isinstance(seen, Outcome):
            return seen  # the worker itself was lost: nothing of it is evidence
        entry = self.feedback(seen)
        outcome = await self.objective(worker, seen, entry)
        if outcome.finding is not None and self.config.greybox and glimpsed(outcome.finding):
            self.follow(seen, outcome.finding)
        return outcome

    def follow(self, seen: Observation, finding: Finding) -> None:
        """A confident flip no replay showed again: its scenario becomes the lead, whose mutations
        come next (`Corpus.follow`), since a bug that needs state the scenario builds only
        sometimes is often built every time by a neighbour of it."""
        # Kept already, it keeps its features; not kept, it reached nothing new, and none is needed.
        lead = self.corpus.follow(seen.scenario, frozenset(), signature=finding.signature, origin=seen.origin,
                                  iteration=seen.iteration)
        if lead is not None:
            write_json(self.config.out_dir / "corpus" / f"entry_{lead.id:05d}.json", lead.to_json())
            self.state.last = LeadFollowed(seen.iteration, finding.verdict.value, LEAD_MUTATIONS)
            self.on_event(self.state)

    async def observe(self, worker: Worker, iteration: int, scenario: Scenario, origin: str) -> Observation | Outcome:
        """The scenario executed on `worker`, logged and judged (a worker lost: its `Outcome`)."""
        config, state, on_event = self.config, self.state, self.on_event
        out = config.out_dir
        source = origin if origin == scenario.meta.get("strategy") else f"{origin} ({scenario.meta.get('strategy', '?')})"
        state.last = Chose(iteration, source, len(scenario.requests))
        if worker.name is not None:
            state.workers[worker.name] = state.last.words()
        on_event(state)
        began = time.monotonic()
        append_json_line(out / "scenarios.jsonl", {"iteration": iteration, "origin": origin, "scenario": scenario.to_json()})
        try:
            done = await worker.execute(scenario, runs=config.runs, with_alone=config.isolation,
                                        probes=probe_targets(scenario, config.cache_probes))
        except WorkerLost as e:
            state.last = WorkerDropped(iteration, str(e))
            state.workers[str(worker.name)] = "lost; replacing it"
            on_event(state)
            return Outcome(iteration, None, str(e))
        state.requests += done.requests
        self.pace = done.pace or self.pace
        tag = {"iteration": iteration} if worker.name is None else {"iteration": iteration, "worker": worker.name}
        write_history_jsonl(out / "histories.jsonl", [
            dataclasses.replace(h, meta={**h.meta, **tag})
            for h in histories_of(done)
        ])
        noise = self.noise
        verdict = done.judge(performance=config.performance, campaign=noise)
        self.noise = learn(noise, verdict, done.loaded, done.alone, done.cache, scenario)  # judged first, added after
        if verdict.constraint:
            # A constraint broken alone too backs no finding (oracles.constraint); kept, not dropped.
            append_json_line(out / "constraints.jsonl", {"iteration": iteration, "lines": list(verdict.constraint)})
        if done.wedged:
            verdict = with_wedge(verdict, str(done.lost))
        elif done.lost is not None:
            verdict = with_target_lost(verdict, done.lost, await worker.death())
        for a in verdict.anomalies:
            state.anomalies[a.verdict.value] += 1
        # What the engine did (servefuzz.exercise): read from every answer it gave, as logged;
        # what it did under the scenario's load alone steers the search (feedback).
        state.exercise = state.exercise.merged(exercise_of(worker.info, scenario, histories_of(done)))
        if state.flush is not None:
            # Every cold reference is one more probe of the flush: said at once when one is warm.
            trusted = state.flush.trusted
            state.flush = state.flush.seen(scenario, done.alone, done.reused)
            if trusted and not state.flush.trusted:
                state.last = Said(state.flush.said())
                on_event(state)
        did = exercise_of(worker.info, scenario, done.loaded)
        if config.truth_model is not None and state.truth is None and done.lost is None:
            # Read before this iteration's findings are confirmed, so no verdict leans on a truth
            # the engine does not compute; said at once, as the campaign's first word on its findings.
            state.truth = truth_check(config.truth_model, scenario, done)
            if state.truth is not None and state.truth.far:
                state.last = Said(state.truth.said())
                on_event(state)
        return Observation(iteration, scenario, origin, done, verdict, began, did)

    def feedback(self, seen: Observation) -> CorpusEntry | None:
        """What the execution reached, and the corpus entry it became when that was new."""
        state, corpus, out = self.state, self.corpus, self.config.out_dir
        scenario, done, verdict = seen.scenario, seen.done, seen.verdict
        reached = features(scenario, done.loaded, done.alone, verdict.anomalies, self.shape, seen.did,
                           done.engine_coverage if self.config.engine_coverage else ())
        if state.coverage is not None:
            # Every pair this execution exercised is a feature: one no scenario reached before
            # makes this one new to the corpus, with energy, and credits its strategy.
            now = points(scenario, self.shape, done.loaded).values()
            reached |= {f"pair:{k}" for p in now for k in state.coverage.space.cells_of(p)[0]}
            state.coverage = state.coverage.observe(now)
            write_json(out / COVERAGE_FILE, state.coverage.to_json())
        entry = corpus.consider(scenario, reached, origin=seen.origin, iteration=seen.iteration,
                                flagged=bool(verdict.anomalies), seconds=time.monotonic() - seen.began)
        if entry is not None:
            write_json(out / "corpus" / f"entry_{entry.id:05d}.json", entry.to_json())
        strategy = str(scenario.meta.get("strategy", seen.origin))
        self.schedule.credit(strategy, credit(entry.new) if entry else 0, time.monotonic() - seen.began)
        if seen.origin == strategy:
            # A fresh scenario (not a mutant, not a trace's): its new step contexts score the
            # strategy that generated it (the context bandit, when on; `Schedule.reward`).
            self.schedule.reward(strategy, new_contexts(entry.new) if entry else 0)
        elif seen.origin.startswith("mutate:"):
            self.schedule.reward_mutation(new_contexts(entry.new) if entry else 0)
        # What the engine has done so far against its goals: a mechanism still at zero once a
        # share of the budget is spent gets part of the schedule's turns (`goals.Pursuit`).
        self.pursuit.ran(strategy)
        config = self.config
        self.pursuit.update(state.exercise, iteration=seen.iteration, spent=budget_spent(
            elapsed_s=state.elapsed_s, time_budget_s=config.time_budget_s, requests=state.requests,
            request_budget=config.request_budget, scenarios=state.iteration))
        self.schedule.aim(self.pursuit.focus, GOAL_SHARE)
        return entry

    async def objective(self, worker: Worker, seen: Observation, entry: CorpusEntry | None) -> Outcome:
        """The finding the execution shows, kept; the iteration's outcome. (`entry`: what the
        corpus kept of it, which the objective does not read: feedback and objective are apart.)"""
        config, state, store, on_event = self.config, self.state, self.store, self.on_event
        iteration, scenario, done, verdict = seen.iteration, seen.scenario, seen.done, seen.verdict
        decision = decide(seen, worker.info, store)
        finding, lost = (decision.finding if isinstance(decision, Keep) else None), done.lost
        if isinstance(decision, Confirm):
            finding, lost = await self.confirm(worker, seen, decision)
        done = dataclasses.replace(done, lost=lost)
        if finding is not None:
            finding = dataclasses.replace(finding, triggered=triggered(worker.info, finding.anomalies, histories_of(done)))
            if worker.name is not None:
                finding = dataclasses.replace(finding, notes=(*finding.notes, f"found and confirmed on worker {worker.name}"))
            if state.truth is not None and state.truth.far:  # the file read alone says it too
                finding = dataclasses.replace(finding, notes=(*finding.notes, state.truth.said()))
            if state.flush is not None and not state.flush.trusted:  # its references may be warm
                finding = dataclasses.replace(finding, notes=(*finding.notes, state.flush.said()))
            path, what_happened = store.add(finding)
            if is_confirmed(finding) and finding.verdict.value not in self.firsts:
                self.firsts[finding.verdict.value] = (state.requests, state.elapsed_s)
            state.last = FindingKept(path.name, what_happened, finding.verdict.value, finding.headline.summary)
        state.iteration = max(state.iteration, self.dispatched)
        if worker.name is not None:
            state.workers[worker.name] = f"iteration {iteration} done"
        write_noise(config.out_dir, self.noise)
        save_progress(config.out_dir, state, self.corpus, self.schedule, store, self.firsts)  # last: what it names is on disk
        on_event(state)
        downed = None
        # Replayed until one crash (or one wedge) is confirmed in the campaign: each replay that
        # takes the server down costs a restart, and later ones (other signatures of what may
        # well be the same bug) are kept as seen rather than spend the restarts the rest of the
        # campaign lives on.
        if (done.lost is not None and finding is not None and finding.verdict is downed_by(done)
                and not is_confirmed(finding) and worker.revivable and finding.verdict.value not in self.firsts):
            downed = Downed(scenario, done, verdict, finding)
        return Outcome(iteration, finding, done.lost, downed)

    async def confirm(self, worker: Worker, seen: Observation, decision: Confirm) -> tuple[Finding | None, str | None]:
        """Carry out a `Confirm`: replay the execution on the worker that saw it, saying so; the
        finding it confirms (or keeps unconfirmed) and why the server is gone after it, if it is."""
        state, iteration = self.state, seen.iteration
        state.last = Confirming(iteration, decision.anomalies, worker.name)
        if worker.name is not None:
            state.workers[worker.name] = f"iteration {iteration}: confirming {decision.anomalies} anomalies"
        self.on_event(state)

        def say(what: str) -> None:
            state.last = Said(what)
            self.on_event(state)

        try:
            confirmed = await worker.confirm(seen.scenario, iteration, seen.done, seen.verdict,
                                             confirm_settings(self.config, state), self.noise, say)
        except WorkerLost as e:
            return None, str(e)  # seen, but not confirmed where it was seen: found again later
        state.requests += confirmed.sent
        return confirmed.finding, confirmed.lost

    async def confirm_on_restart(self, worker: Worker, iteration: int, downed: Downed) -> tuple[Finding | None, Stop | None]:
        """Replay a scenario that took the server down on the restarted server (`CRASH_REPLAYS`
        times at most, ending at the first loss); the finding, confirmed when the server died (or
        hung) again, and why the campaign must stop (None when the server is up again).

        The finding was kept as seen before this starts: a replay that finds nothing, or a
        server that cannot be started again, loses nothing."""
        state = self.state
        state.last = ReplayingOnRestart(iteration)
        self.on_event(state)

        def say(what: str) -> None:
            state.last = Said(what)
            self.on_event(state)

        settings = ConfirmConfig(runs=CRASH_REPLAYS)
        try:
            confirmed = await worker.confirm(downed.scenario, iteration, downed.done, downed.verdict, settings,
                                             self.noise, say)
        except WorkerLost as e:
            return None, await revive_worker(worker, str(e), self.config, state, self.on_event)
        state.requests += confirmed.sent
        why = None
        if confirmed.lost is not None:
            why = await revive_worker(worker, confirmed.lost, self.config, state, self.on_event)
        rep = confirmed.finding.confirmation
        if rep is None or rep.reproduced == 0:
            tried = 0 if rep is None else rep.attempts
            state.last = NotBackOnRestart(iteration, downed.finding.verdict.value, tried)
            self.on_event(state)
            save_progress(self.config.out_dir, state, self.corpus, self.schedule, self.store, self.firsts)
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
        state.last = FindingKept(path.name, what_happened, finding.verdict.value, "confirmed on the restarted server")
        save_progress(self.config.out_dir, state, self.corpus, self.schedule, self.store, self.firsts)
        self.on_event(state)
        return finding, why


def save_progress(
    out: Path, state: CampaignState, corpus: Corpus, schedule: Schedule, store: FindingStore,
    firsts: Mapping[str, tuple[int, float]],
) -> None:
    sync_state(state, corpus, store)
    write_progress(out, Progress(
        next_iteration=state.iteration, requests=state.requests, elapsed_s=state.elapsed_s, picks=dict(corpus.picks),
        schedule=schedule.state_json(), seen=dict(store.counts), first_confirmed=dict(firsts),
        restarts=state.restarts, benched=dict(schedule.benched), exercise=state.exercise,
    ))


def sync_state(state: CampaignState, corpus: Corpus, store: FindingStore) -> None:
    state.features, state.corpus = len(corpus.seen), len(corpus)
    state.findings = store.findings()
    state.seen = Counter(store.counts)
