"""One scenario's execution as the oracles see it, and the oracles as checkers over it.

`Observations` is the one record every oracle reads: the histories (loaded runs, alone
references, cache probes), the scenario and the campaign's noise, with the views derived from
them built once, on first use: the histories the token oracles compare (unseeded draws left
out), their determinate outputs per request, the pairs the campaign's noise compares, the
anomalous shifts, the noise every divergence is held against and the replay outcome. A checker
is a pure function of it (`Checker`): Observations -> anomalies, one per oracle, in `CHECKERS`,
the order a judgement lists them (the shape of Elle's checkers: one history in, anomalies out).

    >>> from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
    >>> def rec(run, label, ids):
    ...     return RequestRecord("r01", run, label, Status.OK, 0.0, choices=(ChoiceRecord(0, ids),))
    >>> seen = Observations.of([RunHistory(i, "load", (rec(i, "load", (5, 6 + i)),)) for i in range(3)],
    ...                        {"r01": [rec(0, "alone", (5, 6))]})
    >>> [(a.oracle.value, a.verdict.value) for check in CHECKERS for a in check(seen)]
    [('replay', 'unclassified'), ('isolation', 'unclassified')]
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from servefuzz.anomaly import Anomaly
from servefuzz.history import RequestRecord, RunHistory
from servefuzz.oracles.cache_state import cache_state
from servefuzz.oracles.isolation import isolation
from servefuzz.oracles.liveness import liveness
from servefuzz.oracles.nconsistency import n_consistency
from servefuzz.oracles.noise import CampaignNoise, Pair, implicated, pairs
from servefuzz.oracles.noisy_neighbour import noisy_neighbour
from servefuzz.oracles.outputs import Outputs, determinate_outputs, output_key
from servefuzz.oracles.replay import ReplayOutcome, replay_consistency
from servefuzz.oracles.shift import anomalous_shifts
from servefuzz.oracles.tenancy import TenantCheck, tenant_isolation
from servefuzz.oracles.verdict import NoiseModel, measure_noise
from servefuzz.workload import Scenario

__all__ = ["CHECKERS", "Checker", "Observations", "alone_run", "without"]


def alone_run(alone: Mapping[str, Sequence[RequestRecord]], run: int = 0) -> RunHistory:
    """The alone references of a scenario as one history (labelled 'alone')."""
    return RunHistory(run, "alone", tuple(r for recs in alone.values() for r in recs))


def without(
    drop: set[str] | frozenset[str], loaded: Sequence[RunHistory], alone: Mapping[str, Sequence[RequestRecord]]
) -> tuple[Sequence[RunHistory], Mapping[str, Sequence[RequestRecord]]]:
    """The histories without the `drop`ped requests (the same objects when nothing is dropped)."""
    if not drop:
        return loaded, alone
    kept = [dataclasses.replace(h, records=tuple(r for r in h.records if r.request_id not in drop)) for h in loaded]
    return kept, {rid: recs for rid, recs in alone.items() if rid not in drop}


@dataclass(frozen=True)
class Observations:
    """What one scenario's execution showed, for every oracle: the `loaded` runs, each request's
    answer `alone` on a flushed cache (the isolation reference, the cold state of the cache-state
    oracle), the warm and primed `cache` probes, the `scenario` (its prompts, salts, constraints
    and seeds; None where only the records are known), the `campaign`'s benign shifts so far, and
    whether slowdowns are judged (`performance`). Every derived view below is computed once."""

    loaded: tuple[RunHistory, ...]
    alone: Mapping[str, tuple[RequestRecord, ...]] = field(default_factory=dict)
    cache: tuple[RequestRecord, ...] = ()
    scenario: Scenario | None = None
    campaign: CampaignNoise | None = None
    performance: bool = False

    @classmethod
    def of(
        cls,
        loaded: Sequence[RunHistory],
        alone: Mapping[str, Sequence[RequestRecord]],
        *,
        cache: Sequence[RequestRecord] = (),
        scenario: Scenario | None = None,
        campaign: CampaignNoise | None = None,
        performance: bool = False,
    ) -> Observations:
        return cls(tuple(loaded), {rid: tuple(recs) for rid, recs in alone.items()}, tuple(cache), scenario, campaign,
                   performance)

    # -- what the token oracles compare ----------------------------------------------------

    @functools.cached_property
    def seeded(self) -> frozenset[str]:
        """Requests that sample with a seed: their n choices are n draws, and may disagree."""
        return self.scenario.seeded if self.scenario is not None else frozenset()

    @functools.cached_property
    def _compared(self) -> tuple[Sequence[RunHistory], Mapping[str, Sequence[RequestRecord]], tuple[RequestRecord, ...]]:
        # A sampled request without a seed may answer anything each time: nothing to compare its
        # tokens with, so only liveness (and tenant isolation: cached tokens say as much about
        # an unseeded draw as about any request) sees it.
        unseeded = set(self.scenario.unseeded) if self.scenario is not None else set()
        loaded, alone = without(unseeded, self.loaded, self.alone)
        return loaded, alone, tuple(r for r in self.cache if r.request_id not in unseeded)

    @property
    def compared_loaded(self) -> Sequence[RunHistory]:
        return self._compared[0]

    @property
    def compared_alone(self) -> Mapping[str, Sequence[RequestRecord]]:
        return self._compared[1]

    @property
    def compared_cache(self) -> tuple[RequestRecord, ...]:
        return self._compared[2]

    @functools.cached_property
    def outputs(self) -> Outputs:
        """The compared loaded runs' determinate outputs, per request and choice."""
        return determinate_outputs(self.compared_loaded)

    @functools.cached_property
    def pairs(self) -> tuple[Pair, ...]:
        """Every comparison the compared histories offer (what the campaign's noise compares)."""
        return tuple(pairs(self.compared_loaded, self.compared_alone, self.compared_cache, outputs=self.outputs))

    # -- the noise -------------------------------------------------------------------------

    @functools.cached_property
    def shifts(self) -> tuple[Anomaly, ...]:
        """Requests whose logprobs moved beyond the campaign's noise without a flip (none without
        a campaign): an anomaly of their own, which must not lift this scenario's threshold for
        the real flips beside them."""
        if self.campaign is None:
            return ()
        flipped = frozenset(p.request_id for p in self.pairs if output_key(p.a.choice) != output_key(p.b.choice))
        return tuple(anomalous_shifts(self.compared_loaded, self.compared_alone, self.compared_cache, self.campaign,
                                      skip=flipped, compared=self.pairs))

    @functools.cached_property
    def implicated(self) -> dict[str, float]:
        """The requests whose agreeing tokens moved too far beside the others' to be noise
        (`noise.implicated`), with how far."""
        return implicated(self.pairs, self.campaign)

    @functools.cached_property
    def noise(self) -> NoiseModel:
        """The noise every divergence is held against. Loaded runs of one scenario often batch
        alike, so their jitter can be zero while a request alone (a batch of one) still rounds
        differently: the larger of the two measured jitters, on the requests that neither shifted
        beyond the campaign's noise nor are implicated (a fault's other victim must not raise
        the bar for its flip), or benign batch numerics would pass for corruption (and one flip
        could be drift to one oracle and corruption to another); with the campaign's noise and
        the seeded requests."""
        drop = {a.request_id for a in self.shifts} | set(self.implicated)
        loaded, alone = without(drop, self.compared_loaded, self.compared_alone)
        same = None if drop else self.outputs
        replayed = replay_consistency(loaded, outputs=same).noise
        noise = max(replayed, _isolation_noise(loaded, alone, outputs=same), key=lambda n: n.threshold)
        return dataclasses.replace(noise, campaign=self.campaign, sampled=self.seeded,
                                   set_aside=tuple(self.implicated.items()))

    @functools.cached_property
    def replay(self) -> ReplayOutcome:
        """The replay oracle's outcome over the compared runs, held against `noise`."""
        return replay_consistency(self.compared_loaded, noise=self.noise, outputs=self.outputs)

    @functools.cached_property
    def tenancy(self) -> TenantCheck | None:
        """The tenant-isolation oracle's check over every loaded run and probe (None without a scenario)."""
        return tenant_isolation(self.scenario, self.loaded, self.cache) if self.scenario is not None else None


def _isolation_noise(
    loaded: Sequence[RunHistory], alone: Mapping[str, Sequence[RequestRecord]], *, outputs: Outputs | None = None
) -> NoiseModel:
    """Logprob jitter between each request alone and its loaded outputs that agree with it."""
    table = determinate_outputs(loaded) if outputs is None else outputs
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


# -- the checkers --------------------------------------------------------------------------

Checker = Callable[[Observations], Sequence[Anomaly]]


def replay_checker(seen: Observations) -> Sequence[Anomaly]:
    """The same scenario run R times must give one output per request."""
    return seen.replay.anomalies


def shift_checker(seen: Observations) -> Sequence[Anomaly]:
    """Logprobs that moved beyond the campaign's noise with every token the same."""
    return seen.shifts


def isolation_checker(seen: Observations) -> Sequence[Anomaly]:
    """Each request under load against itself alone on a flushed cache."""
    return isolation(seen.compared_loaded, seen.compared_alone, noise=seen.noise, outputs=seen.outputs)


def n_consistency_checker(seen: Observations) -> Sequence[Anomaly]:
    """The n choices of a temperature-0 request must agree (a seeded request's are n draws)."""
    return n_consistency(without(set(seen.seeded), seen.compared_loaded, {})[0], seen.replay.noise)


def cache_state_checker(seen: Observations) -> Sequence[Anomaly]:
    """Cold, self-warmed and primed-by-prefix must give one output; a probed request's alone
    record is its cold state."""
    if not seen.compared_cache:
        return ()
    probed = {r.request_id for r in seen.compared_cache}
    cold = [dataclasses.replace(r, label="cold") for rid in probed for r in seen.compared_alone.get(rid, ())]
    return cache_state([*cold, *seen.compared_cache], dataclasses.replace(seen.replay.noise, sampled=seen.seeded))


def slowdown_checker(seen: Observations) -> Sequence[Anomaly]:
    """A request's latency inflated by its neighbours (only when performance is judged)."""
    return noisy_neighbour(seen.compared_loaded, seen.compared_alone) if seen.performance else ()


def liveness_checker(seen: Observations) -> Sequence[Anomaly]:
    """Crash, hang, 5xx, malformed: over every request, unseeded draws and references too."""
    return liveness([*seen.loaded, *([alone_run(seen.alone)] if seen.alone else [])])


def tenancy_checker(seen: Observations) -> Sequence[Anomaly]:
    """A salt must never reuse another salt's cached prefix."""
    return seen.tenancy.anomalies if seen.tenancy is not None else ()


# In the order a judgement lists what they find.
CHECKERS: tuple[Checker, ...] = (
    replay_checker,
    shift_checker,
    isolation_checker,
    n_consistency_checker,
    cache_state_checker,
    slowdown_checker,
    liveness_checker,
    tenancy_checker,
)
