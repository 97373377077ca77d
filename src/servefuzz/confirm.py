"""Confirmation: whether a candidate finding is real, decided on the server that showed it.

A candidate is one execution's anomalies (`trial.execute`, judged by `oracles.judge`). To
confirm it, the scenario is replayed `ConfirmConfig.runs` times (`trial.reproduce`) against
fresh alone references, and those references vote on which run is wrong (`oracles.vote`): the
one stored alone run may itself be the odd one. A reproduced divergence then goes through leak
forensics (`oracles.controls.leak_forensics`: does the deviant output repeat another request's
tokens?), each candidate leak with its forced check, on the exact truth where servefuzz built
the model or on the engine alone (`trial.own_continuation`). A suspected corruption the leaks
did not back gets the content-swap control (`trial.content_swap`), then, where the campaign
has them, the deterministic control on a fresh server in the engine's deterministic mode
(`servers.deterministic_control`, when servefuzz launched the target) and the truth control
(`oracles.controls.truth_control`: the references' majority and the deviant against the float64
truth, when servefuzz built the model). The result is a `Finding` with its `Confirmation`.

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
from collections.abc import Callable, Sequence
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

__all__ = ["ConfirmConfig", "Confirmed", "confirm_finding"]


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
    against fresh alone references that vote, leak forensics and the content-swap control for a
    suspected corruption, then the deterministic and truth controls where the campaign has them.
    Touches no campaign state, so that a remote worker can run it (`say`: progress lines)."""
    assert runner.info is not None, "enter the Runner before confirming on it"
    info = runner.info
    # The leaks are judged again below, with fresh references and the forced check: start from
    # the anomalies as they were before the judgement's unchecked leak oracle backed any.
    verdict = dataclasses.replace(verdict, anomalies=verdict.before_leaks, unleaked=None)
    expect = Expectation.of_judgement(verdict)
    # Fresh alone references vote (oracles/vote.py): one stored alone run may itself be the odd one.
    rep = await reproduce(runner, scenario, expect, config.runs, alone=done.alone,
                          first_run=len(done.loaded), noise=noise, references=MIN_REFERENCES)
    if rep.cut is not None:
        # The budget ran out mid-confirmation: a rate of the runs that fitted would be a rate of
        # the budget, not of the bug. Kept as seen, unconfirmed, as a lost target's is.
        return Confirmed(Finding(iteration, scenario.seed, scenario, info, verdict.anomalies,
                                 notes=(f"not confirmed: {rep.cut}",)), rep.sent, rep.lost)
    sent = rep.sent
    lost = rep.lost
    notes: tuple[str, ...] = () if rep.lost is None else (f"confirmation cut short: {rep.lost}",)
    anomalies = verdict.anomalies
    if rep.lost is None:
        votes = _votes(scenario, expect, done, rep, noise)
        anomalies = tuple(dataclasses.replace(a, evidence={**a.evidence, "vote": votes[a.request_id].to_json()})
                          if a.request_id in votes and a.verdict.is_divergence else a for a in anomalies)
        notes = tuple(v.summary for v in votes.values())
    if rep.lost is None and rep.reproduced:
        # Leak forensics first: it reads the runs already made (every request's solo answer from
        # the first execution, the fresh references for the suspects) and costs no replay but
        # the forced check's, for every divergent request (a leak can back a near-tie flip).
        leaks, forced = await _checked_leaks(runner, scenario, anomalies, done, rep, config, noise)
        sent += forced
        anomalies = back(anomalies, leaks)
        expect = dataclasses.replace(expect, anomalies=tuple(
            a for a in expect.anomalies if any(b.request_id == a.request_id and b.verdict is Verdict.SUSPECTED_CORRUPTION
                                               for b in anomalies)))
    if rep.lost is None and rep.reproduced and suspects(expect):
        # A confident flip is only suspected until a control backs it: the content swap keeps
        # every batch shape and changes only the neighbours' tokens (oracles/controls.py).
        say(f"iteration {iteration}: confirmed {rep.rate}, content-swap control")
        control = await content_swap(runner, scenario, expect, max(config.runs, MIN_CONTROL_RUNS),
                                     original=rep.loaded,
                                     alone=rep.alone, first_run=len(done.loaded) + rep.attempts, noise=noise)
        sent += control.sent
        lost = control.lost
        if control.lost is None and control.cut is None:
            anomalies = back(anomalies, control.results)
        else:
            notes = (*notes, f"content-swap control cut short: {control.lost or control.cut}")
    if (why := runner.stopped) is not None and rep.lost is None and any(
            a.verdict is Verdict.SUSPECTED_CORRUPTION for a in anomalies):
        # Past the deadline no control starts (the deterministic one starts a whole server).
        notes = (*notes, f"no further control: {why}")
    if rep.lost is None and rep.reproduced and runner.stopped is None and config.launch is not None and deterministic_launch(
            config.launch) is not None and any(
            a.verdict is Verdict.SUSPECTED_CORRUPTION for a in anomalies):
        say(f"iteration {iteration}: deterministic control on a fresh server")
        unbacked = dataclasses.replace(expect, anomalies=tuple(
            a for a in expect.anomalies if any(b.request_id == a.request_id and b.verdict is Verdict.SUSPECTED_CORRUPTION
                                               for b in anomalies)))
        try:
            # A deviation seen rarely needs more runs before its absence there says anything.
            runs = max(config.runs, runs_to_see(rep.reproduced, rep.attempts))
            det = await asyncio.to_thread(deterministic_control, config.launch, scenario, unbacked, runs, original=rep)
        except (LaunchError, TargetError) as e:
            notes = (*notes, f"deterministic control did not run: {e}")
        else:
            sent += det.sent
            anomalies = back(anomalies, det.results)
    if rep.lost is None and runner.stopped is None and config.truth_model is not None and any(
            a.verdict is Verdict.SUSPECTED_CORRUPTION for a in anomalies):
        anomalies = back(anomalies, _truth_results(_truth(config.truth_model), scenario, anomalies, done, rep))
    if rep.lost is None and noise is not None:
        anomalies = tuple(_with_picture(a, noise, done, rep) for a in anomalies)
    finding = Finding(iteration, scenario.seed, scenario, info, anomalies, confirmation=rep.confirmation, notes=notes)
    return Confirmed(finding, sent, lost)


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
        if not found.backs or span is None or rid not in specs:
            out.append(found)
            continue
        head = deciding(a.divergences)
        tolerance = max(head.threshold or 0.0 if head is not None else 0.0, TRUTH_NEAR)
        spec = specs[rid]
        check: OwnContinuation | None = None
        if config.truth_model is not None and spec.adapter is None:
            truth = _truth(config.truth_model)
            output = [int(t) for t in found.evidence["output"]]
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
    execution, then replays), both with top-k logprobs; None when there is no such pair."""
    refs = [Output.of(r, c) for r in rep.alone.get(rid, ()) if r.ok for c in r.choices if c.index == 0]
    if not refs:
        return None
    ref = group_variants(refs)[0].outputs[0]
    others = [Output.of(r, c) for h in (*done.loaded, *rep.loaded) for r in h.records
              if r.request_id == rid and r.ok for c in r.choices if c.index == 0]
    others += [Output.of(r, c) for r in done.alone.get(rid, ()) if r.ok for c in r.choices if c.index == 0]
    deviant = next((o for o in others if o.choice.token_ids != ref.choice.token_ids and o.choice.top_logprobs), None)
    return None if deviant is None or not ref.choice.top_logprobs else (ref, deviant)


def _with_picture(a: Anomaly, noise: CampaignNoise, done: Executed, rep: Reproduction) -> Anomaly:
    """The anomaly with what the report draws (`oracles.noise.picture`) in its evidence."""
    head = deciding(a.divergences)
    pair = _reference_and_deviant(a.request_id, done, rep) if head is not None and a.verdict.is_divergence else None
    if pair is None or head is None:
        return a
    ref, dev = pair
    drawn = picture(noise, ref.choice, dev.choice, cached=ref.cached or dev.cached, margin=head.margin)
    return dataclasses.replace(a, evidence={**a.evidence, "picture": drawn})


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
        out.append(truth_control(a.request_id, specs[a.request_id].prompt_ids, (f"alone#{ref.run}", ref.choice),
                                 (f"{deviant.label}#{deviant.run}", deviant.choice), pos, head.threshold or 0.0, truth))
    return out


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
