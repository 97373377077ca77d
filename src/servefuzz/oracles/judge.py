"""Judging: every oracle over one scenario's histories, and the rule that says a finding came back.

This is the one place where servefuzz decides. The campaign judges each execution with `judge`;
confirmation, `servefuzz replay`, shrink and triage all ask `reproduction` whether replays
showed a finding again (through `servefuzz.trial`, which runs them). Both are pure.

    >>> from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
    >>> def rec(run, label, ids):
    ...     return RequestRecord("r01", run, label, Status.OK, 0.0, choices=(ChoiceRecord(0, ids),))
    >>> loaded = [RunHistory(i, "load", (rec(i, "load", (5, 6)),)) for i in range(2)]
    >>> judge(loaded, {"r01": [rec(0, "alone", (5, 6))]}).anomalies
    ()
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from servefuzz.anomaly import Anomaly, Oracle, Verdict, deciding, worst
from servefuzz.finding import Confirmation, Finding
from servefuzz.history import RequestRecord, RunHistory
from servefuzz.oracles.constraint import constraint_check
from servefuzz.oracles.controls import (
    LEAK,
    TRUTH_NEAR,
    ControlResult,
    back,
    chance_run,
    leak_forensics,
    leak_span,
    leak_tokens,
    own_by_truth,
    with_own_check,
)
from servefuzz.oracles.liveness import liveness
from servefuzz.oracles.noise import CampaignNoise, benign_shifts
from servefuzz.oracles.noisy_neighbour import noisy_neighbour
from servefuzz.oracles.observations import CHECKERS, Checker, Observations, alone_run
from servefuzz.oracles.outputs import determinate_outputs, group_variants, observed_runs, output_key
from servefuzz.oracles.tenancy import breached_in
from servefuzz.truth import Truth
from servefuzz.workload import Scenario

__all__ = [
    "Judgement",
    "Expectation",
    "judge",
    "judged",
    "leak_min_tokens",
    "learn",
    "rejudged_leaks",
    "reproduction",
    "alone_run",
]


@dataclass(frozen=True)
class Judgement:
    """What the oracles said about one scenario's histories."""

    anomalies: tuple[Anomaly, ...]
    stable: tuple[str, ...]
    # The tenant-isolation oracle's one line (`oracles.tenancy.TenantCheck.status`): "" without
    # salts; "isolated: ...", "breach: ..." or "untested: ..." (the cache never showed a
    # same-salt reuse, so the cross-salt half proved nothing).
    tenancy: str = ""
    # The constraint oracle's lines (`oracles.constraint.ConstraintCheck.status`): one per
    # constrained request that broke its constraint alone too (an engine bug, not a concurrency
    # one, so it backs no finding; the campaign keeps these lines in constraints.jsonl).
    constraint: tuple[str, ...] = ()
    # The anomalies before the leak oracle backed any: the confirmation judges leaks again with
    # what only it has (fresh references, the forced check), and must not inherit the unchecked
    # judgement's. None: no leak backed anything (`anomalies` are the same).
    unleaked: tuple[Anomaly, ...] | None = None

    @property
    def before_leaks(self) -> tuple[Anomaly, ...]:
        return self.anomalies if self.unleaked is None else self.unleaked

    @property
    def divergent(self) -> tuple[Anomaly, ...]:
        return tuple(a for a in self.anomalies if a.verdict.is_divergence)

    @property
    def verdict(self) -> Verdict | None:
        return worst(a.verdict for a in self.anomalies)


def judge(
    loaded: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    *,
    cache: Sequence[RequestRecord] = (),
    performance: bool = False,
    campaign: CampaignNoise | None = None,
    scenario: Scenario | None = None,
) -> Judgement:
    """Run every oracle over one scenario's histories (`judged` over their `Observations`).

    `alone`: each request's answer alone on a flushed cache (the isolation reference, and the
    cold state of the cache-state oracle); `cache`: warm and primed probe records;
    `performance`: include the noisy-neighbour oracle's slowdowns; `campaign`: the benign
    shifts seen so far (`oracles.noise`): flips are held against its threshold too, and
    requests that moved beyond it without a flip are `anomalous-shift`s; `scenario`: its
    prompts join the leak oracle's sources (without it, the other requests' solo continuations
    are). A divergence whose deviant output repeats another request's content (`leak`) is
    `corruption`, backed by the leak itself. With a scenario whose requests carry cache salts,
    the tenant-isolation oracle (`oracles.tenancy`) runs too: a request that reports cached
    tokens no request of its own salt could have left is an `isolation-breach`.
    """
    return judged(Observations.of(loaded, alone, cache=cache, scenario=scenario, campaign=campaign,
                                  performance=performance))


def judged(seen: Observations, checkers: Sequence[Checker] = CHECKERS) -> Judgement:
    """Every checker over `seen` (`oracles.observations.CHECKERS`), then the controls the records
    alone can run: the constraint control (an answer outside its own constraint backs its
    divergence) and the leak oracle (`leak`)."""
    found = [a for check in checkers for a in check(seen)]
    # Constrained answers are held to their constraints over the compared histories: an
    # unseeded draw's answer may be anything in its constraint, never outside it, but with no
    # divergence to back its violation is named in the status lines instead.
    bound = constraint_check(seen.scenario, seen.loaded, seen.alone, seen.cache)
    compared = {r.request_id for h in seen.compared_loaded for r in h.records}
    status = bound.status + tuple(f"{r.request_id} (an unseeded draw, compared by no token oracle): {r.summary}"
                                  for r in bound.results if r.request_id not in compared)
    found = list(back(found, bound.results))
    leaked = leak(found, seen.compared_loaded, seen.compared_alone, seen.compared_cache, seen.scenario, seen.campaign)
    tenancy = seen.tenancy
    return Judgement(leaked, seen.replay.stable, tenancy.status if tenancy is not None else "", status,
                     unleaked=None if leaked == tuple(found) else tuple(found))


def leak_min_tokens(
    alone: Mapping[str, Sequence[RequestRecord]],
    scenario: Scenario | None,
    campaign: CampaignNoise | None,
    skip: Collection[str] = (),
) -> int:
    """How long a run must be to be a candidate leak here: `controls.leak_tokens` of the longest
    chance run the campaign has seen and this scenario's own unflagged requests show."""
    prompts = {spec.id: spec.prompt_ids for spec in scenario.requests} if scenario is not None else {}
    here = chance_run(prompts, alone, skip=skip)
    return leak_tokens(max(here, campaign.chance_run if campaign is not None else 0))


def leak(
    found: Sequence[Anomaly],
    loaded: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    cache: Sequence[RequestRecord] = (),
    scenario: Scenario | None = None,
    campaign: CampaignNoise | None = None,
) -> tuple[Anomaly, ...]:
    """The leak oracle: every divergent request whose deviant output (loaded, or in a cache
    probe) repeats `leak_min_tokens` tokens of another request's prompt or solo continuation
    (`controls.leak_forensics`) is a candidate leak, kept in its evidence. No forced check runs
    here (it needs the model or the engine), so a candidate backs only a flip already above the
    noise threshold (`controls.back`); the confirmation checks every candidate. Only candidates
    are recorded: finding none says nothing, and the confirmation's forensics say it anyway."""
    divergent = dict.fromkeys(a.request_id for a in found if a.verdict.is_divergence)
    if not divergent:
        return tuple(found)
    sources: Scenario | Mapping[str, Sequence[int]] = scenario if scenario is not None else {}
    runs = observed_runs(loaded, cache)
    k = leak_min_tokens(alone, scenario, campaign, skip=divergent)
    leaks = [r for rid in divergent if (r := leak_forensics(rid, sources, runs, alone, min_tokens=k)).backs]
    return back(found, leaks)


def learn(
    campaign: CampaignNoise,
    judgement: Judgement,
    loaded: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    cache: Sequence[RequestRecord] = (),
    scenario: Scenario | None = None,
) -> CampaignNoise:
    """The campaign's noise model after one execution `judgement` judged: every agreeing token
    pair of it added, except on requests an oracle flagged as more than drift (corrupted or
    shifted logprobs are not noise) or the execution implicates (`noise.implicated`), and the
    longest chance run between its requests' answers alone (`controls.chance_run`; `scenario`
    gives the prompts). Judged first, added after, so nothing is its own bar. The campaign learns
    this way, and so does a re-judging of its stored histories."""
    flagged = {a.request_id for a in judgement.anomalies if a.verdict is not Verdict.NUMERIC_DRIFT}
    learned = campaign.merged(benign_shifts(loaded, alone, cache, exclude=flagged, campaign=campaign))
    # Chance runs are measured on answers no oracle questioned: a drifting request's alone answer
    # is its reference, and only divergent outputs (never measured here) can hold a leak.
    prompts = {spec.id: spec.prompt_ids for spec in scenario.requests} if scenario is not None else {}
    diverged = {a.request_id for a in judgement.anomalies if a.verdict.is_divergence and a.verdict is not Verdict.NUMERIC_DRIFT}
    return learned.with_chance_run(chance_run(prompts, alone, skip=diverged))


# -- the reproduction rule ------------------------------------------------------------------

_FAILURES = frozenset({Verdict.CRASH, Verdict.HANG, Verdict.SERVER_ERROR, Verdict.MALFORMED, Verdict.INDETERMINATE})


@dataclass(frozen=True)
class Expectation:
    """What counts as a finding coming back: its verdict and the anomalies that flag requests.

    For a divergence the flagged requests are the finding's expected-diverging ones; for a
    liveness failure, any request showing that failure again will do.
    """

    verdict: Verdict
    anomalies: tuple[Anomaly, ...]

    @classmethod
    def of(cls, finding: Finding) -> Expectation:
        """A divergence finding is expected back with its verdict as replays alone can show it
        (`Verdict.unbacked`): a corruption a control backed comes back as suspected corruption
        from the oracles, and that is the same finding coming back."""
        if not finding.verdict.is_divergence:
            return cls(finding.verdict, tuple(a for a in finding.anomalies if a.verdict is finding.verdict))
        expected = set(finding.expected_diverging)
        return cls(finding.verdict.unbacked, tuple(a for a in finding.anomalies if a.request_id in expected))

    @classmethod
    def of_judgement(cls, judgement: Judgement) -> Expectation:
        """Every anomaly of a first execution, about to be confirmed."""
        verdict = judgement.verdict
        assert verdict is not None, "a judgement without anomalies has nothing to expect"
        return cls(verdict, judgement.anomalies)

    @property
    def flagged(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a.request_id for a in self.anomalies))

    @property
    def probed(self) -> tuple[str, ...]:
        """Requests whose cache-state anomaly is checked by probing them warm and primed again."""
        return tuple(dict.fromkeys(a.request_id for a in self.anomalies if a.oracle is Oracle.CACHE_STATE))

    @property
    def about_failure(self) -> bool:
        """Whether it comes back as a liveness failure (crash, hang, 5xx, malformed) rather than
        as a request answering differently (or slower) than its reference."""
        return self.verdict in _FAILURES

    def within(self, scenario: Scenario) -> Expectation:
        """The part of the expectation about requests `scenario` still has."""
        present = {r.id for r in scenario.requests}
        return dataclasses.replace(self, anomalies=tuple(a for a in self.anomalies if a.request_id in present))

    def renamed(self, new_ids: Mapping[str, str]) -> Expectation:
        """The same expectation after requests were renamed (shrink records lineage in ids)."""
        return dataclasses.replace(
            self,
            anomalies=tuple(dataclasses.replace(a, request_id=new_ids.get(a.request_id, a.request_id)) for a in self.anomalies),
        )


def reproduction(
    expect: Expectation,
    replays: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    *,
    cache: Sequence[RequestRecord] = (),
    lost: str | None = None,
) -> Confirmation:
    """How often `replays` showed the expected finding again. The one rule, used everywhere.

    A replay reproduces a divergence when some flagged request answers other than its reference:
    its answer alone on a flushed cache when there is one (the most frequent of several), else
    the most frequent answer over
    the replays; in a replay's cache-state probes too (`cache`, by run: warm and primed), for a
    request flagged by the cache-state oracle. A slowdown reproduces where the noisy-neighbour
    oracle flags the request again; an isolation breach where the request again reports more
    cached tokens than its own salt allows (`oracles.tenancy.breached_in`); a
    liveness failure (crash, hang, 5xx, malformed) where a run shows the same failure again,
    and a crash also when the server went away between runs (`lost`). Variants are counted over
    the replays and the alone references.
    """
    if expect.about_failure:
        return _liveness_reproduction(expect, replays, lost)
    flagged = expect.flagged
    table = determinate_outputs(replays)
    alone_table = determinate_outputs([alone_run(alone)])
    references: dict[str, dict[int, object]] = {}
    variants = {}
    for rid in flagged:
        outs = [o for per in table.get(rid, {}).values() for o in per]
        refs = [o for per in alone_table.get(rid, {}).values() for o in per]
        groups = group_variants([*outs, *refs])
        if groups:
            variants[rid] = tuple(g.variant for g in groups)
            # Several alone references vote, choice by choice: the most frequent is the reference
            # (first seen on a tie, so one reference is simply itself). At temperature 0 every
            # choice has the same one; the choices of a seeded draw each have their own.
            by_choice = alone_table.get(rid, {}) if refs else table.get(rid, {})
            references[rid] = {i: output_key(group_variants(per)[0].outputs[0].choice)
                               for i, per in sorted(by_choice.items()) if per}
    diverged_in: dict[str, set[int]] = {rid: set() for rid in flagged}
    # A flagged request reproduces in a run when it answers other than its reference there,
    # under load or in that run's cache-state probes (warm, primed).
    probed = determinate_outputs(observed_runs((), cache))
    for rid in (r for r in flagged if r in references):  # nothing determinate: nothing to differ from
        refs_of = references[rid]
        for per in (*table.get(rid, {}).values(), *probed.get(rid, {}).values()):
            for o in per:
                # A choice the reference lacks is held to its first (temperature 0: all agree).
                if output_key(o.choice) != refs_of.get(o.choice.index, next(iter(refs_of.values()))):
                    diverged_in[rid].add(o.run)
    runs = {h.run for h in replays}
    for a in expect.anomalies:
        if a.oracle is Oracle.NOISY_NEIGHBOUR:
            for h in replays:
                if any(x.request_id == a.request_id for x in noisy_neighbour([h], alone)):
                    diverged_in[a.request_id].add(h.run)
        if a.oracle is Oracle.TENANT_ISOLATION:
            # A cross-tenant hit comes back where the request again reports more cached tokens
            # than its own salt allows (or, timing only, beats its cold twin by the threshold).
            diverged_in[a.request_id].update(h.run for h in replays if breached_in(a, h))
    diverged_in = {rid: runs_ & runs for rid, runs_ in diverged_in.items()}
    reproduced_runs = set().union(*diverged_in.values()) if diverged_in else set()
    expected = tuple(rid for rid in flagged if diverged_in[rid]) or flagged
    everyone = {rec.request_id for h in replays for rec in h.records}
    return Confirmation(
        reproduced=len(reproduced_runs),
        attempts=len(replays),
        variants=variants,
        expected=expected,
        stable=tuple(sorted(everyone - set(expected))),
    )


def _liveness_reproduction(expect: Expectation, replays: Sequence[RunHistory], lost: str | None) -> Confirmation:
    reproduced = sum(1 for h in replays if any(a.verdict is expect.verdict for a in liveness([h])))
    if lost is not None and expect.verdict is Verdict.CRASH and not reproduced:
        reproduced = 1  # it died between runs: no request saw it, but that is the crash again
    everyone = {rec.request_id for h in replays for rec in h.records}
    return Confirmation(
        reproduced=reproduced,
        attempts=max(len(replays), reproduced),
        variants={},
        expected=expect.flagged,
        stable=tuple(sorted(everyone - set(expect.flagged))),
    )


# -- stored findings under the leak rule ---------------------------------------------------------


def rejudged_leaks(finding: Finding, truth: Truth | None = None) -> Finding:
    """A stored finding under today's leak rule (docs/verdicts.md, *Leaks*): every anomaly a leak
    backed is judged again from what the file holds. Its deviant output comes from the leak's
    evidence or the anomaly's variants; with `truth` (the model servefuzz built and the target
    served) the forced check runs on it; without one, an unchecked leak backs only a flip above
    the noise. A leak the forced check explains backs nothing, and the anomaly falls back to
    what its flip's margin says (`numeric-drift` for a near-tie) unless another control backs it.
    Pure; the file is not rewritten."""
    specs = finding.scenario.by_id()
    out = []
    for a in finding.anomalies:
        if LEAK not in a.backed_by:
            out.append(a)
            continue
        leaks = [c for c in a.controls if c.name == LEAK and c.backs]
        base = _without_leak(a, [b for b in a.backed_by if b != LEAK])
        checked = []
        for r in leaks:
            r = _with_deviant_output(r, a)
            span = leak_span(r)
            spec = specs.get(a.request_id)
            head = deciding(a.divergences)
            if truth is not None and span is not None and spec is not None and spec.adapter is None \
                    and r.own_check is None and r.leak is not None and r.leak.output is not None:
                tolerance = max(head.threshold or 0.0 if head is not None else 0.0, TRUTH_NEAR)
                r = with_own_check(r, own_by_truth(truth, spec.prompt_ids, r.leak.output, span, tolerance))
            checked.append(r)
        out.append(back([base], checked)[0])
    return dataclasses.replace(finding, anomalies=tuple(out))


def _with_deviant_output(leak_result: ControlResult, a: Anomaly) -> ControlResult:
    """The leak with the whole deviant output in its match (files from before it was kept
    there: the variant that holds the match where the leak says it starts)."""
    m = leak_result.leak
    if m is None or m.output is not None:
        return leak_result
    output = next((v.token_ids for v in a.variants if v.token_ids[m.from_token:m.from_token + len(m.match)] == m.match),
                  None)
    if output is None:
        return leak_result
    return dataclasses.replace(leak_result, leak=dataclasses.replace(m, output=output))


def _without_leak(a: Anomaly, still_backed_by: Sequence[str]) -> Anomaly:
    """The anomaly as it was before a leak backed it: the leak's results out of its evidence, and,
    when no other control backs it, the verdict its flip's margin gives."""
    controls = tuple(c for c in a.controls if c.name != LEAK)
    if still_backed_by:
        return dataclasses.replace(a, controls=controls, backed_by=tuple(still_backed_by))
    head = deciding(a.divergences)
    if head is None or head.margin is None:
        verdict = Verdict.UNCLASSIFIED
    elif head.margin <= (head.threshold or 0.0) and not head.margin_is_bound:
        verdict = Verdict.NUMERIC_DRIFT
    else:
        verdict = Verdict.SUSPECTED_CORRUPTION

    def undo(reason: str) -> str:
        cut = reason.find(f" -> {Verdict.CORRUPTION.value} (")
        return (reason[:cut] if cut >= 0 else reason) + f" -> {verdict.value}"

    divergences = tuple(dataclasses.replace(d, verdict=verdict, reason=undo(d.reason)) if d.verdict is Verdict.CORRUPTION
                        else d for d in a.divergences)
    summary = a.summary.replace(f" (backed by {LEAK})", "").replace(Verdict.CORRUPTION.value, verdict.value, 1)
    return dataclasses.replace(a, verdict=verdict, summary=summary, divergences=divergences, controls=controls,
                               backed_by=())
