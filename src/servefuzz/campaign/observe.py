"""What one execution showed, before the campaign learns from it: the `Observation` an
iteration's observe step hands to feedback and objective, and the evidence a lost server adds
to its judgement (a death's to the crashes, a wedge's to the hangs)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.exercise import Exercise
from servefuzz.history import RequestRecord, RunHistory
from servefuzz.oracles.judge import Judgement
from servefuzz.trial import Executed
from servefuzz.workload import Scenario

__all__ = [
    "Observation",
    "histories_of",
    "with_target_lost",
    "with_wedge",
]


@dataclass(frozen=True)
class Observation:
    """One iteration's execution, judged: what feedback (the corpus) and the objective (findings)
    are computed from. `began`: when the iteration started (`time.monotonic()`), for the
    strategy's cost. `did`: what the engine did under the scenario's load (`exercise.observe`
    over the loaded runs alone: the references and probes are servefuzz's own requests), which
    feedback turns into features."""

    iteration: int
    scenario: Scenario
    origin: str
    done: Executed
    verdict: Judgement
    began: float
    did: Exercise = Exercise()


def with_target_lost(j: Judgement, why: str, death: Mapping[str, Any]) -> Judgement:
    """A server that stops answering between runs crashed, even if no request saw it die.

    `death` (exit status, log tail) joins the evidence of every crash anomaly: what the server
    said as it died is often the whole story.
    """
    lost = Anomaly(Oracle.LIVENESS, Verdict.CRASH, "-", f"the server stopped answering: {why}",
                   evidence={"error": why, **death})
    return _with_evidence(j, Verdict.CRASH, death, otherwise=lost)


def with_wedge(j: Judgement, why: str) -> Judgement:
    """A server that stopped answering after its requests hung: the why joins the evidence of
    every hang (what makes the hang a wedge of the whole server, not one slow request)."""
    wedged = {"wedged": why}
    return _with_evidence(j, Verdict.HANG, wedged, otherwise=Anomaly(Oracle.LIVENESS, Verdict.HANG, "-", why,
                                                                     evidence=wedged))


def _with_evidence(j: Judgement, verdict: Verdict, evidence: Mapping[str, Any], *, otherwise: Anomaly) -> Judgement:
    """`evidence` joined to every anomaly of `verdict` in `j`, or `otherwise` added where none is."""
    if not any(a.verdict is verdict for a in j.anomalies):
        return Judgement((*j.anomalies, otherwise), j.stable)
    return Judgement(tuple(dataclasses.replace(a, evidence={**a.evidence, **evidence}) if a.verdict is verdict else a
                           for a in j.anomalies), j.stable)


def _alone_as_runs(alone: Mapping[str, Sequence[RequestRecord]], cache: Sequence[RequestRecord],
                   reused: Sequence[str] = ()) -> list[RunHistory]:
    """The references and cache probes as histories; the alone run's meta names the references
    that were an earlier identical request's answer (`reused`), not sent for this scenario."""
    recs = tuple(r for rs in alone.values() for r in rs)
    runs = [RunHistory(0, "alone", recs, meta={"reused": list(reused)} if reused else {})] if recs else []
    return runs + ([RunHistory(0, "cache", tuple(cache))] if cache else [])


def histories_of(done: Executed) -> list[RunHistory]:
    """Every history an execution holds, as histories.jsonl logs them: the loaded runs, then the
    references and cache probes (`_alone_as_runs`). What the engine did is read from these."""
    return [*done.loaded, *_alone_as_runs(done.alone, done.cache, done.reused)]
