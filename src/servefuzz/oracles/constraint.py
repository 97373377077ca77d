"""The constraint oracle: a structured-output answer must satisfy its own constraint.

A request with `choices` must answer exactly one of them (`workload.accepts`; a prefix of one
when it was cut at max_tokens). An answer that breaks its constraint is wrong whatever the
engine's numerics: no rounding turns a masked-out token into the argmax. So when a request
answers inside its constraint alone on a flushed cache and outside it under load (or in a cache
probe), the violation is a control of its own (`controls.CONSTRAINT`) that backs the request's
divergence as `corruption`, like a leak does (`controls.back`), its evidence naming the
constraint, the violating answer and the answer alone. An answer that keeps its constraint but
differs from the alone one is an ordinary divergence, judged on the usual ladder.

A request that breaks its constraint alone too is an engine bug of another kind (the constraint
is not enforced, concurrency or not): it backs nothing, and `ConstraintCheck.status` says so in a
line of its own, which the campaign keeps (`constraints.jsonl`), so it is never dropped silently.

    >>> from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
    >>> from servefuzz.workload import RequestSpec, Scenario
    >>> sc = Scenario(0, (RequestSpec("r1", 0, (5,), 4, ignore_eos=False, choices=(" w5", " w7 w8")),))
    >>> def rec(label, text):
    ...     return RequestRecord("r1", 0, label, Status.OK, 0, choices=(ChoiceRecord(0, (9,), text=text, finish_reason="stop"),))
    >>> check = constraint_check(sc, [RunHistory(0, "load", (rec("load", " w9"),))], {"r1": [rec("alone", " w5")]})
    >>> [(r.name, r.backs) for r in check.results], check.status
    ([('constraint', True)], ())
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servefuzz.evidence import ConstraintBreak
from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory
from servefuzz.oracles.controls import CONSTRAINT, ControlResult
from servefuzz.workload import Scenario, accepts

__all__ = ["ConstraintCheck", "constraint_check", "keeps"]


def keeps(choices: Sequence[str], choice: ChoiceRecord) -> bool:
    """Whether one answer keeps its constraint: a whole choice once the engine ended it, a
    prefix of one when it was cut at max_tokens or its finish reason is unknown (a weaker
    check, which never calls an unfinished answer wrong)."""
    return accepts(choices, choice.text, finished=choice.finish_reason == "stop")


@dataclass(frozen=True)
class ConstraintCheck:
    """The violations that back a divergence (`results`), and one line per request that broke
    its constraint with no load to blame (`status`)."""

    results: tuple[ControlResult, ...]
    status: tuple[str, ...]


def constraint_check(
    scenario: Scenario | None,
    loaded: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    cache: Sequence[RequestRecord] = (),
) -> ConstraintCheck:
    """Every constrained request's determinate answers, loaded and probed, held to its choices."""
    if scenario is None or not scenario.constrained:
        return ConstraintCheck((), ())
    results, status = [], []
    seen = [(f"{h.label}#{h.run}", r) for h in loaded for r in h.records]
    seen += [(f"{r.label}#{r.run}", r) for r in cache]
    for rid, choices in scenario.constrained.items():
        refs = [c for r in alone.get(rid, ()) if r.ok for c in r.choices]
        broken_alone = [c for c in refs if not keeps(choices, c)]
        answers = [(f"{where}" + (f"/c{c.index}" if c.index else ""), c)
                   for where, r in seen if r.request_id == rid and r.ok for c in r.choices]
        broken = [(where, c) for where, c in answers if not keeps(choices, c)]
        if broken_alone:
            status.append(f"{rid} breaks its constraint alone on a flushed cache too ({broken_alone[0].text!r} is "
                          f"none of its {len(choices)} choices): the engine does not enforce it, a bug, but not "
                          "one of concurrency")
            continue
        if not broken or not refs:
            continue  # kept everywhere, or nothing alone to hold a violation against
        where, first = broken[0]
        summary = (f"{len(broken)} of {len(answers)} answers under load broke the request's own constraint "
                   f"({where} answered {first.text!r}, none of its {len(choices)} choices) while alone it kept it "
                   f"({refs[0].text!r})")
        results.append(ControlResult(
            CONSTRAINT, rid, (len(broken), len(answers)), (0, len(refs)), 0.0, True, summary,
            broken=ConstraintBreak(tuple(choices), tuple((w, c.text, tuple(c.token_ids)) for w, c in broken[:8]),
                                   tuple(c.text for c in refs[:3])),
        ))
    return ConstraintCheck(tuple(results), tuple(status))
