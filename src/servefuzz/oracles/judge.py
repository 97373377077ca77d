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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servefuzz.anomaly import Anomaly, Oracle, Verdict, worst
from servefuzz.finding import Confirmation, Finding
from servefuzz.history import RequestRecord, RunHistory
from servefuzz.oracles.cache_state import cache_state
from servefuzz.oracles.constraint import constraint_check
from servefuzz.oracles.controls import back, leak_forensics
from servefuzz.oracles.isolation import isolation
from servefuzz.oracles.liveness import liveness
from servefuzz.oracles.nconsistency import n_consistency
from servefuzz.oracles.noise import CampaignNoise, benign_shifts, pairs
from servefuzz.oracles.noisy_neighbour import noisy_neighbour
from servefuzz.oracles.outputs import determinate_outputs, group_variants, output_key
from servefuzz.oracles.replay import replay_consistency
from servefuzz.oracles.shift import anomalous_shifts
from servefuzz.oracles.tenancy import breached_in, tenant_isolation
from servefuzz.oracles.verdict import NoiseModel, measure_noise
from servefuzz.workload import Scenario

__all__ = [
    "Judgement",
    "Expectation",
    "judge",
    "learn",
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

    @property
    def divergent(self) -> tuple[Anomaly, ...]:
        return tuple(a for a in self.anomalies if a.verdict.is_divergence)

    @property
    def verdict(self) -> Verdict | None:
        return worst(a.verdict for a in self.anomalies)


def alone_run(alone: Mapping[str, Sequence[RequestRecord]], run: int = 0) -> RunHistory:
    """The alone references of a scenario as one history (labelled 'alone')."""
    return RunHistory(run, "alone", tuple(r for recs in alone.values() for r in recs))


def judge(
    loaded: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    *,
    cache: Sequence[RequestRecord] = (),
    performance: bool = False,
    campaign: CampaignNoise | None = None,
    scenario: Scenario | None = None,
) -> Judgement:
    """Run every oracle over one scenario's histories.

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
    # Liveness and tenant isolation judge every request, unseeded draws too.
    every_loaded, every_alone, every_cache = loaded, alone, cache
    if scenario is not None and scenario.unseeded:
        # A sampled request without a seed may answer anything each time: nothing to compare
        # its tokens with, so only liveness sees it.
        loaded, alone = _without(set(scenario.unseeded), loaded, alone)
        cache = [r for r in cache if r.request_id not in scenario.unseeded]
    seeded = scenario.seeded if scenario is not None else frozenset()
    shifts: list[Anomaly] = []
    if campaign is not None:
        # Logprobs that moved beyond the campaign's noise without a flip are an anomaly of their
        # own, and must not lift this scenario's threshold for the real flips beside them.
        flipped = frozenset(p.request_id for p in pairs(loaded, alone, cache)
                            if output_key(p.a.choice) != output_key(p.b.choice))
        shifts = anomalous_shifts(loaded, alone, cache, campaign, skip=flipped)
    quiet_loaded, quiet_alone = _without({a.request_id for a in shifts}, loaded, alone)
    replay = replay_consistency(quiet_loaded)
    # Loaded runs of one scenario often batch alike, so their jitter can be zero while a request
    # alone (a batch of one) still rounds differently: every oracle is held against the larger of
    # the two measured jitters, or benign batch numerics would pass for corruption (and one flip
    # could be drift to one oracle and corruption to another).
    noise = max(replay.noise, _isolation_noise(quiet_loaded, quiet_alone), key=lambda n: n.threshold)
    noise = dataclasses.replace(noise, campaign=campaign, sampled=seeded)
    replay = replay_consistency(loaded, noise=noise)
    found: list[Anomaly] = [*replay.anomalies, *shifts]
    found += isolation(loaded, alone, noise=noise)
    # The n choices of a sampled request are n draws: they need not agree with each other.
    found += n_consistency(_without(set(seeded), loaded, {})[0], replay.noise)
    if cache:
        found += _cache_anomalies(alone, cache, dataclasses.replace(replay.noise, sampled=seeded))
    if performance:
        found += noisy_neighbour(loaded, alone)
    found += liveness([*every_loaded, *([alone_run(every_alone)] if every_alone else [])])
    # Cached tokens say as much about an unseeded draw as about any request.
    tenancy = tenant_isolation(scenario, every_loaded, every_cache) if scenario is not None else None
    if tenancy is not None:
        found += tenancy.anomalies
    # Constrained answers are held to their constraints over the compared histories: an
    # unseeded draw's answer may be anything in its constraint, never outside it, but with no
    # divergence to back its violation is named in the status lines instead.
    bound = constraint_check(scenario, every_loaded, every_alone, every_cache)
    compared = {r.request_id for h in loaded for r in h.records}
    status = bound.status + tuple(f"{r.request_id} (an unseeded draw, compared by no token oracle): {r.summary}"
                                  for r in bound.results if r.request_id not in compared)
    found = list(back(found, bound.results))
    return Judgement(leak(found, loaded, alone, cache, scenario), replay.stable,
                     tenancy.status if tenancy is not None else "", status)


def leak(
    found: Sequence[Anomaly],
    loaded: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    cache: Sequence[RequestRecord] = (),
    scenario: Scenario | None = None,
) -> tuple[Anomaly, ...]:
    """The leak oracle: every divergent request whose deviant output (loaded, or in a cache
    probe) repeats LEAK_MIN_TOKENS tokens of another request's prompt or solo continuation
    (`controls.leak_forensics`) becomes `corruption`, the leak its backing control. Only leaks
    are recorded: finding none says nothing, and the confirmation's forensics say it anyway."""
    divergent = dict.fromkeys(a.request_id for a in found if a.verdict.is_divergence)
    if not divergent:
        return tuple(found)
    sources: Scenario | Mapping[str, Sequence[int]] = scenario if scenario is not None else {}
    runs = [*loaded, RunHistory(0, "cache", tuple(cache))] if cache else list(loaded)
    leaks = [r for rid in divergent if (r := leak_forensics(rid, sources, runs, alone)).backs]
    return back(found, leaks)


def learn(
    campaign: CampaignNoise,
    judgement: Judgement,
    loaded: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    cache: Sequence[RequestRecord] = (),
) -> CampaignNoise:
    """The campaign's noise model after one execution `judgement` judged: every agreeing token
    pair of it added, except on requests an oracle flagged as more than drift (corrupted or
    shifted logprobs are not noise). Judged first, added after, so nothing is its own bar. The
    campaign learns this way, and so does a re-judging of its stored histories."""
    flagged = {a.request_id for a in judgement.anomalies if a.verdict is not Verdict.NUMERIC_DRIFT}
    return campaign.merged(benign_shifts(loaded, alone, cache, exclude=flagged))


def _without(
    drop: set[str], loaded: Sequence[RunHistory], alone: Mapping[str, Sequence[RequestRecord]]
) -> tuple[Sequence[RunHistory], Mapping[str, Sequence[RequestRecord]]]:
    """The histories without the `drop`ped requests (what the scenario's noise is measured on)."""
    if not drop:
        return loaded, alone
    kept = [dataclasses.replace(h, records=tuple(r for r in h.records if r.request_id not in drop)) for h in loaded]
    return kept, {rid: recs for rid, recs in alone.items() if rid not in drop}


def _cache_anomalies(
    alone: Mapping[str, Sequence[RequestRecord]], cache: Sequence[RequestRecord], noise: NoiseModel | None = None
) -> list[Anomaly]:
    """The cache-state oracle over probe records; a probed request's alone record is its cold state."""
    probed = {r.request_id for r in cache}
    cold = [dataclasses.replace(r, label="cold") for rid in probed for r in alone.get(rid, ())]
    return cache_state([*cold, *cache], noise)


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
    probed = determinate_outputs([RunHistory(0, "cache", tuple(cache))])
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
