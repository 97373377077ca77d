"""Trials: run a scenario against a server, and replay it until a finding shows or does not.

This is the one path by which servefuzz exercises a server. The campaign executes each new
scenario with `execute` and judges it with `servefuzz.oracles.judge`; every later question
("does this finding come back?") goes through `reproduce`, whoever asks it: the campaign's
confirmation, `servefuzz replay`, shrink's gate and triage's rows. `reproduce` decides with
`oracles.reproduction`, the same rule the standalone `repro_full.py` carries.

    async with Runner(target) as runner:
        done = await execute(runner, scenario, runs=2, with_alone=True)
        rep = await reproduce(runner, scenario, Expectation.of(finding), runs=10)
    rep.rate, rep.flaky                       # ('7/10', False)

The controls that run on the server at hand (content swap, the forced check) are here too;
holding a server (`Replayer`, `LaunchedServer`), opening a target, and the replays and controls
that need a server of their own are `servefuzz.servers`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from servefuzz.anomaly import Verdict, worst
from servefuzz.errors import TargetError
from servefuzz.feedback import coverage_delta, hit_bucket, in_context, metric_deltas, run_context
from servefuzz.finding import Confirmation, Finding
from servefuzz.history import RequestRecord, RunHistory, Status
from servefuzz.oracles.controls import (
    CONTENT_SWAP,
    ControlResult,
    OwnContinuation,
    deviant_outputs,
    deviating_runs,
    leak_span,
    read_control,
    runs_to_refute,
    swap_can_back,
    swap_content,
    swap_plan,
)
from servefuzz.oracles.judge import Expectation, Judgement, judge, judged, reproduction
from servefuzz.oracles.noise import CampaignNoise
from servefuzz.oracles.observations import Observations
from servefuzz.oracles.outputs import observed_runs
from servefuzz.pace import Pace, PaceMeter
from servefuzz.runner import DeadlinePassed, Runner
from servefuzz.workload import RequestSpec, Scenario

__all__ = [
    "DEFAULT_RUNS",
    "FORCED_ROUNDS",
    "Control",
    "Executed",
    "Reproduction",
    "execute",
    "probe_targets",
    "reproduce",
    "confirmed",
    "content_swap",
    "own_continuation",
    "suspects",
]

DEFAULT_RUNS = 10


# -- one execution -------------------------------------------------------------------------


@dataclass(frozen=True)
class Executed:
    """The histories of one scenario's execution, as far as it got: when the target went away
    mid-way (`lost` says why), or the runner's deadline cut it short (`cut` says why: the
    campaign's time budget), everything recorded before that is here to be judged and kept
    (`execute` records into a `_Recording` and freezes it into this, however it ended).
    """

    loaded: tuple[RunHistory, ...] = ()
    alone: Mapping[str, tuple[RequestRecord, ...]] = field(default_factory=dict)
    cache: tuple[RequestRecord, ...] = ()
    lost: str | None = None
    # The target is lost because it stopped answering, alive (`stopped_answering`), not dead:
    # its requests hung and a lone 1-token request did too. `lost` says so.
    wedged: bool = False
    cut: str | None = None
    sent: int = 0  # requests on the wire, probes' priming requests included
    # Requests whose alone reference is the answer of an earlier, identical one (`Runner.reference`):
    # not sent for this scenario, and said so in its history.
    reused: tuple[str, ...] = ()
    scenario: Scenario | None = None  # what ran: its prompts are the leak oracle's sources too
    # The target's speed as the runner measured it after this execution (`servefuzz.pace`): what
    # the campaign sizes its next scenarios by (`pace.fit`), wherever the runner is.
    pace: Pace | None = None
    # The engine's own code its loaded runs reached (the reference engine's `--coverage`): each
    # (point, hit bucket) one run reached, `feedback.coverage_features`. The set, not a map per
    # run: histories.jsonl stays as it was, and what feedback reads of it is this.
    engine_coverage: frozenset[tuple[int, int]] = frozenset()

    def __post_init__(self) -> None:
        # Sequences given as lists (a test's, a caller's) are kept as tuples: nothing refills them.
        object.__setattr__(self, "loaded", tuple(self.loaded))
        object.__setattr__(self, "alone", {rid: tuple(recs) for rid, recs in self.alone.items()})
        object.__setattr__(self, "cache", tuple(self.cache))
        object.__setattr__(self, "reused", tuple(self.reused))

    @property
    def requests(self) -> int:
        return self.sent

    def observations(self, *, performance: bool = False, campaign: CampaignNoise | None = None) -> Observations:
        """What the oracles read of this execution (`oracles.observations`), with the campaign's noise."""
        return Observations(self.loaded, self.alone, self.cache, self.scenario, campaign, performance)

    def judge(self, *, performance: bool = False, campaign: CampaignNoise | None = None) -> Judgement:
        return judged(self.observations(performance=performance, campaign=campaign))


@dataclass
class _Recording:
    """What `execute` fills in as the execution goes, frozen into an `Executed` when it ends
    however it ends (the target lost, the deadline passed): nothing recorded before is lost."""

    scenario: Scenario
    # The runner's meter: its pace when the execution ends, however it ends, goes with it.
    meter: PaceMeter
    loaded: list[RunHistory] = field(default_factory=list)
    alone: dict[str, tuple[RequestRecord, ...]] = field(default_factory=dict)
    cache: list[RequestRecord] = field(default_factory=list)
    sent: int = 0
    reused: list[str] = field(default_factory=list)
    engine_coverage: set[tuple[int, int]] = field(default_factory=set)

    def frozen(self, *, lost: str | None = None, wedged: bool = False, cut: str | None = None) -> Executed:
        return Executed(tuple(self.loaded), dict(self.alone), tuple(self.cache), lost, wedged, cut, self.sent,
                        tuple(self.reused), self.scenario, self.meter.pace, frozenset(self.engine_coverage))


async def _metrics(runner: Runner) -> dict[str, float]:
    try:
        return await runner.metrics()
    except TargetError:
        return {}  # no metrics is no feedback, not a lost target: the next run will tell


async def _engine_coverage(runner: Runner) -> dict[int, int]:
    try:
        return await runner.engine_coverage()
    except TargetError:
        return {}  # as _metrics: no coverage is no feedback


async def _probe(runner: Runner, spec: RequestSpec, run: int, done: _Recording) -> None:
    """The cache-state probes of one request: warm (again, no flush) and primed (flush, bare
    prefix alone, then the request)."""
    done.cache.append(await runner.run_alone(spec, run=run, label="warm", flush=False))
    done.sent += 1
    bare = dataclasses.replace(spec, id=f"{spec.id}~prefix", prompt_ids=spec.prompt_ids[: spec.prefix_len],
                               max_tokens=1, n=1, stream=False)
    await runner.run_alone(bare, run=run, label="prime")
    done.sent += 1
    done.cache.append(await runner.run_alone(spec, run=run, label="primed", flush=False))
    done.sent += 1


# What `stopped_answering` sends: one token out of four in, base model, greedy, nothing else in flight.
ALIVE_PROBE_ID = "~alive"


async def stopped_answering(runner: Runner, scenario: Scenario, run: RunHistory) -> str | None:
    """Why the server is to be taken as lost after `run`, in which requests hung; None when it
    still answers. Sends one request.

    A request that hangs on its own is a finding. A server that then answers nothing at all is
    wedged (SGLang 0.5.10.post1's scheduler, docs/findings/sglang-cpu-tiny-pool-hang): every
    later run on it would hang as a consequence of the first, not as a reproduction of it, and
    a campaign would spend the rest of its budget on it. So after a run with a timed-out request
    one lone 1-token request is sent, without a flush (a wedged SGLang refuses flushes); when it
    gets no answer within the request timeout either, the target is lost, as a dead one is: a
    launched server is started again, and replays go on on the fresh one.
    """
    first = scenario.requests[0]
    probe = RequestSpec(ALIVE_PROBE_ID, 0.0, first.prompt_ids[:4], 1)
    record = await runner.run_alone(probe, run=run.run, label="alive", flush=False)
    if record.status is not Status.TIMEOUT:
        return None
    return (f"the server stopped answering: after requests of run {run.run} hung, a lone 1-token request got no "
            f"answer within {runner.timeout_s([probe]):g} s either")


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
    `/metrics` in each run's `meta["metrics"]`), then the cache-state `probes` (warm: in the
    state the last loaded run left; primed: flushed, the bare prefix alone, then the request),
    then, if asked, each request alone on a flushed cache (its isolation reference and cold
    state; `Runner.reference`, which reuses one taken for the same request before). Requests
    cancelled on purpose have no alone reference. At the runner's deadline
    (`Runner.stop_at`) it stops where it is: `cut` says why. The engine's coverage (its
    `/coverage`, where it has one) is read around each loaded run too: `Executed.engine_coverage`."""
    done = _Recording(scenario, runner.meter)
    try:
        for i in range(runs):
            await runner.flush()
            before = await _metrics(runner)
            covered = await _engine_coverage(runner)
            h = await runner.run(scenario, run=first_run + i, label="load")
            done.loaded.append(h)  # kept even when the deadline takes the metrics after it
            done.sent += scenario.total_requests
            delta = metric_deltas(before, await _metrics(runner))
            done.loaded[-1] = dataclasses.replace(h, meta={**h.meta, "metrics": delta})
            gained = coverage_delta(covered, await _engine_coverage(runner))  # none: no request (Runner)
            if runner.coverage_context_free:
                gained = in_context(gained, run_context(scenario))  # the engine knows no step context
            done.engine_coverage |= {(p, hit_bucket(n)) for p, n in gained.items()}
            if any(r.status is Status.TIMEOUT for r in h.records):
                done.sent += 1  # the probe
                if (why := await stopped_answering(runner, scenario, h)) is not None:
                    return done.frozen(lost=why, wedged=True)
        # Probed in the state the last loaded run left (warm: no flush), then primed: every
        # execution, first or replay, probes the same state, so what a replay re-checks is
        # what the first execution saw.
        for spec in probes:
            await _probe(runner, spec, first_run + runs - 1, done)
        if with_alone:
            for spec in scenario.requests:
                if not spec.cancelled:
                    record, sent = await runner.reference(spec)  # an earlier one of the same request, reused
                    done.alone[spec.id] = (record,)
                    if sent:
                        done.sent += 1
                    else:
                        done.reused.append(spec.id)
    except TargetError as e:
        return done.frozen(lost=str(e))
    except DeadlinePassed as e:
        return done.frozen(cut=str(e))
    return done.frozen()


# -- reproduction --------------------------------------------------------------------------


@dataclass(frozen=True)
class Reproduction:
    """What replaying one scenario showed: the confirmation (rate, variants) and its evidence."""

    confirmation: Confirmation
    judgement: Judgement
    loaded: tuple[RunHistory, ...]
    alone: Mapping[str, tuple[RequestRecord, ...]]
    cache: tuple[RequestRecord, ...] = ()
    lost: str | None = None
    sent: int = 0
    # Why the runner's deadline ended the replays early (the campaign's time budget): the rate
    # then counts only the runs that were not cut, and a campaign keeps its finding unconfirmed.
    cut: str | None = None

    @property
    def reproduced(self) -> int:
        return self.confirmation.reproduced

    @property
    def attempts(self) -> int:
        return self.confirmation.attempts

    @property
    def rate(self) -> str:
        return self.confirmation.rate

    @property
    def flaky(self) -> bool:
        return self.reproduced == 0

    @property
    def observed(self) -> tuple[RunHistory, ...]:
        """The loaded runs and, as one more history, their cache-state probes (warm, primed), whose
        records keep their run's index: what a control counts of a request's deviations, as the
        reproduction rule does (a cache-state anomaly shows in the probes, not under load)."""
        return observed_runs(self.loaded, self.cache)

    def verdict_of(self, expect: Expectation) -> Verdict | None:
        """The worst verdict the oracles gave the flagged requests (a divergence finding), or the
        expected failure if it came back (a liveness finding); for any other finding (an
        isolation breach, a slowdown), the worst its own oracles gave the flagged requests."""
        if expect.about_failure:
            return expect.verdict if self.reproduced else None
        flagged = set(expect.flagged)
        if expect.verdict.is_divergence:
            return worst(a.verdict for a in self.judgement.anomalies if a.request_id in flagged and a.verdict.is_divergence)
        oracles = {a.oracle for a in expect.anomalies}
        return worst(a.verdict for a in self.judgement.anomalies if a.request_id in flagged and a.oracle in oracles)


async def reproduce(
    runner: Runner,
    scenario: Scenario,
    expect: Expectation,
    runs: int,
    *,
    stop: Callable[[int, int], bool] | None = None,
    settled: Callable[[Sequence[RunHistory]], bool] | None = None,
    alone: Mapping[str, Sequence[RequestRecord]] | None = None,
    memo: dict[RequestSpec, RequestRecord] | None = None,
    first_run: int = 0,
    noise: CampaignNoise | None = None,
    references: int = 1,
) -> Reproduction:
    """Replay `scenario` up to `runs` times under load, each on a flushed cache, and say how
    often `expect` came back (`oracles.reproduction`).

    Each flagged request's reference is its answer alone on a flushed cache: taken from `alone`
    when the caller has one (the campaign's first execution), else measured first (`memo`
    remembers references across calls, keyed by the exact spec). Requests with a cache-state
    anomaly are probed warm and primed after every loaded run. After each run `stop(reproduced,
    done)` may end the replays early. When the server goes away the replays end and `lost`
    says why; at the runner's deadline they end too, and `cut` says why (a cut run is left
    out). `settled(observed)` may end them too, given the runs so far with their probes (as
    `Reproduction.observed`): for a control decided by which answers came back, not how often.
    `noise`: the campaign's noise model (`store.read_noise`), which the judgement's
    verdicts are held against too (the rate does not depend on it). `references` > 1: that many
    fresh alone references per flagged request (alone#0, alone#1, ...), whatever `alone` holds;
    the reference is their majority (`oracles.vote` names the odd runs).
    """
    expect = expect.within(scenario)
    specs = scenario.by_id()
    refs: dict[str, tuple[RequestRecord, ...]] = {k: tuple(v) for k, v in (alone or {}).items()}
    probes = [specs[rid] for rid in expect.probed]
    loaded: list[RunHistory] = []
    cache: list[RequestRecord] = []
    lost: str | None = None
    cut: str | None = None
    sent = 0
    # A liveness finding needs no reference; a request cut on purpose has no reference output.
    wanted = [] if expect.about_failure else [specs[rid] for rid in expect.flagged if not specs[rid].cancelled]
    try:
        for spec in wanted if references > 1 else ():
            fresh = []
            for k in range(references):
                fresh.append(await runner.run_alone(spec, run=k))  # each on a flushed cache
                sent += 1
            refs[spec.id] = tuple(fresh)
        for spec in wanted:
            if refs.get(spec.id):
                continue
            key = dataclasses.replace(spec, offset_ms=0.0)
            record = None if memo is None else memo.get(key)
            if record is None:
                record = await runner.run_alone(spec, run=0)  # labelled 'alone', as the campaign's
                sent += 1
                if memo is not None and record.ok:
                    memo[key] = record
            refs[spec.id] = (record,)
    except TargetError as e:
        lost = str(e)
    except DeadlinePassed as e:
        cut = str(e)
    for i in range(runs if lost is None and cut is None else 0):
        step = await execute(runner, scenario, runs=1, with_alone=False, first_run=first_run + i, probes=probes)
        if step.cut is not None:
            # The deadline cut this run (or its probes): what it shows is ours, not the server's.
            cut = step.cut
            sent += step.sent
            break
        loaded += step.loaded
        cache += step.cache
        sent += step.sent
        lost = step.lost
        if lost is not None:
            break
        if stop is not None and stop(reproduction(expect, loaded, refs, cache=cache).reproduced, i + 1):
            break
        if settled is not None and settled(observed_runs(loaded, cache)):
            break
    return Reproduction(
        confirmation=reproduction(expect, loaded, refs, cache=cache, lost=lost),
        judgement=judge(loaded, refs, cache=cache, campaign=noise, scenario=scenario),
        loaded=tuple(loaded),
        alone=refs,
        cache=tuple(cache),
        lost=lost,
        sent=sent,
        cut=cut,
    )


# -- controls ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Control:
    """One control's replays and what they showed, victim by victim (`oracles.controls`)."""

    results: tuple[ControlResult, ...]
    reproduction: Reproduction

    @property
    def sent(self) -> int:
        return self.reproduction.sent

    @property
    def lost(self) -> str | None:
        return self.reproduction.lost

    @property
    def cut(self) -> str | None:
        return self.reproduction.cut


def suspects(expect: Expectation) -> tuple[str, ...]:
    """The requests whose confident flip no control has backed yet: what controls are run for."""
    return tuple(dict.fromkeys(a.request_id for a in expect.anomalies if a.verdict is Verdict.SUSPECTED_CORRUPTION))


async def content_swap(
    runner: Runner,
    scenario: Scenario,
    expect: Expectation,
    runs: int,
    *,
    original: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]] | None = None,
    memo: dict[RequestSpec, RequestRecord] | None = None,
    first_run: int = 0,
    victim: str | None = None,
    noise: CampaignNoise | None = None,
) -> Control:
    """The content-swap control for one suspect (`victim`, default: the one that deviated most
    often in `original`): replay
    `scenario` with every other request's own tail (past the prefix it shares with the victim)
    given other tokens of the same shape (`oracles.controls.swap_content`), through `reproduce`,
    and read the victim's deviations there against those in the `original` replays. When no
    neighbour has a tail of its own to swap (each is wholly a prefix of the victim's prompt),
    nothing is replayed: the result says the control was skipped, and backs nothing.

    One victim at a time: two suspects that share a prefix can corrupt each other, so keeping
    both would keep the dependency the swap is there to remove. `alone`: the victim's reference
    (its prompt is not changed, so the original one holds); without it `reproduce` measures it.
    `runs` is a floor: given `alone`, the control runs as often as `runs_to_refute` asks for the
    victim's original rate, so that a rarely reproduced flip can still be backed. `original`: the
    replays' `Reproduction.observed` (their cache-state probes too), as the control's are read."""
    # The suspect that deviated most often in the original replays: a flip seen once in the first
    # execution and never again has nothing for a control to take away.
    victim = victim or max(suspects(expect), key=lambda rid: deviating_runs(rid, original, alone or {})[0],
                           default=None)
    if victim is None:
        raise ValueError("the content-swap control needs a suspected corruption to control")
    if alone is not None:
        # Enough runs that the deviation's absence there can back the flip at its original rate.
        runs = max(runs, runs_to_refute(*deviating_runs(victim, original, alone)))
    plan = swap_plan(scenario, [victim])
    if plan.nothing_to_swap:
        skipped = Reproduction(Confirmation(0, 0, {}, (), ()), Judgement((), ()), (),
                               {k: tuple(v) for k, v in (alone or {}).items()})
        return Control((read_control(CONTENT_SWAP, victim, original=deviating_runs(victim, original, alone or {}),
                                     control=(0, 0), swap=plan),), skipped)
    vocab = runner.info.vocab_size if runner.info is not None else None
    swapped = swap_content(scenario, [victim], vocab)
    only = dataclasses.replace(expect, anomalies=tuple(a for a in expect.anomalies if a.request_id == victim))
    settled: Callable[[Sequence[RunHistory]], bool] | None = None
    if alone is not None:
        known, wrong, rate = alone, deviant_outputs(victim, original, alone), deviating_runs(victim, original, alone)

        def decided(seen: Sequence[RunHistory]) -> bool:
            """The swap ends once it can no longer back the flip, whatever its runs left would show:
            a bug that follows the victim's own state gives the same wrong answer run after run."""
            return not swap_can_back(deviating_runs(victim, seen, known, among=wrong), runs, rate)

        settled = decided
    rep = await reproduce(runner, swapped, only, runs, settled=settled, alone=alone,
                          memo=memo, first_run=first_run, noise=noise)
    wrong = deviant_outputs(victim, original, rep.alone)  # the same wrong answers, or the swap changed them
    result = read_control(CONTENT_SWAP, victim, original=deviating_runs(victim, original, rep.alone),
                          control=deviating_runs(victim, rep.observed, rep.alone, among=wrong), swap=plan)
    return Control((result,), rep)


# The forced check on an engine re-forces the victim's deviant output at each near-tie it meets
# (a tie flips either way, and the next prefill then follows the other branch); a real leak shows
# a clear miss within a round or two, and an attractor run sits on few ties. Past this many
# rounds the check says nothing, and the candidate backs only what it would unchecked.
FORCED_ROUNDS = 6


async def own_continuation(
    runner: Runner, spec: RequestSpec, leak: ControlResult, tolerance: float, *, run: int
) -> tuple[OwnContinuation | None, int]:
    """The forced check of a candidate leak on the engine (`oracles.controls.OwnContinuation`),
    and the requests it sent: the victim's prompt with its deviant output up to the first
    matched token forced, alone on a flushed cache, greedy for the rest of the match. Every
    matched token it writes again is the victim's own; at a token it does not, the deviant token
    is the victim's own only when it sits within `tolerance` (the flip's noise threshold) of
    the engine's choice there, and then it is forced too and the check goes on. None: nothing to
    say (a sampled or constrained request, whose forced prompt would not be its own state; an
    answer that failed or came back short; ties past FORCED_ROUNDS)."""
    span = leak_span(leak)
    if span is None or leak.leak is None or leak.leak.output is None or spec.temperature > 0 \
            or spec.choices is not None:
        return None, 0
    output = leak.leak.output
    start, end = span
    t, own, sent = start, 0, 0
    for _ in range(FORCED_ROUNDS):
        forced = dataclasses.replace(spec, id=f"{spec.id}~forced", prompt_ids=(*spec.prompt_ids, *output[:t]),
                                     max_tokens=end - t, n=1, ignore_eos=True, cancel_after_ms=None)
        record = await runner.run_alone(forced, run=run)
        sent += 1
        if not record.ok or not record.choices:
            return None, sent
        c = record.choices[0]
        j = 0
        while t < end and j < len(c.token_ids) and c.token_ids[j] == output[t]:
            own, t, j = own + 1, t + 1, j + 1
        if t >= end:
            return OwnContinuation("engine", end - start, own, tolerance), sent
        if j >= len(c.token_ids) or j >= len(c.top_logprobs):
            return None, sent
        top = dict(c.top_logprobs[j])
        best = max(top.values(), default=None)
        if best is None:
            return None, sent
        mine = top.get(output[t])
        if mine is None:
            bound = best - min(top.values())  # the deviant token is below the whole top-k
            if bound > tolerance:
                return OwnContinuation("engine", end - start, own, tolerance, first_other=t), sent
            return None, sent
        if best - mine > tolerance:
            return OwnContinuation("engine", end - start, own, tolerance, first_other=t, gap=best - mine), sent
        own, t = own + 1, t + 1  # a near-tie: the victim's own context might write it; force it
    return None, sent


def confirmed(finding: Finding, rep: Reproduction) -> Finding:
    """`finding` with the confirmation `rep` measured; marked flaky when it did not come back."""
    notes = list(finding.notes)
    if rep.flaky:
        notes.append(f"flaky: reproduced in 0/{rep.attempts} replays")
    if rep.lost is not None:
        notes.append(f"replays cut short: {rep.lost}")
    return dataclasses.replace(finding, confirmation=rep.confirmation, notes=tuple(dict.fromkeys(notes)))
