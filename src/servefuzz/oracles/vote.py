"""Which run is wrong: a majority vote over fresh alone references, and recurrences that count.

One alone run is one sample. When every loaded run agrees and the single alone run is the odd one
out (docs/gpu finding_00026: 7 loaded outputs against one alone), "the loaded runs differ from the
reference 5/5" measures the reference, not the bug. So a confirmation takes at least
MIN_REFERENCES fresh alone references; the reference is their majority (a strict one: without it
the vote names no reference and says so), and every run that answered otherwise is named, with
what was cached for it and what ran just before it.

A recurrence counts only when a replay shows *the same deviant variant* the first execution
showed, and only when that replay's flip, re-judged against the reference with the campaign's
noise, is still above the threshold: "3/5 recurrences of variant B, each re-judged".

    >>> from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
    >>> def rec(run, label, ids):
    ...     return RequestRecord("r11", run, label, Status.OK, 0.0, choices=(ChoiceRecord(0, ids),))
    >>> v = vote("r11", [rec(0, "alone", (5, 6))], [rec(i, "alone", (5, 7)) for i in range(3)],
    ...          [RunHistory(i, "load", (rec(i, "load", (5, 7)),)) for i in range(2, 7)])
    >>> v.odd, v.agree, v.recurrences, v.deviant
    (('first alone#0',), '3/3', 0, (5, 6))
"""

from __future__ import annotations

from collections.abc import Sequence

from servefuzz.anomaly import Verdict
from servefuzz.evidence import OddRun, Vote
from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory
from servefuzz.oracles.outputs import Output, group_variants, output_key
from servefuzz.oracles.verdict import NoiseModel, classify

__all__ = ["MIN_REFERENCES", "Vote", "vote"]

MIN_REFERENCES = 3


def _choice(r: RequestRecord) -> ChoiceRecord | None:
    return next((c for c in r.choices if c.index == 0), None) if r.ok else None


def _context(r: RequestRecord, before: str | None) -> OddRun:
    return OddRun(f"{r.label}#{r.run}", r.cached_tokens, before)


def vote(
    request_id: str,
    first_alone: Sequence[RequestRecord],
    fresh: Sequence[RequestRecord],
    replays: Sequence[RunHistory],
    *,
    deviant: tuple[int, ...] | None = None,
    first_loaded: Sequence[RunHistory] = (),
    noise: NoiseModel | None = None,
    before: dict[str, str] | None = None,
) -> Vote:
    """The vote for `request_id`: `fresh` alone references (the confirmation's), the first
    execution's `first_alone` and `first_loaded` runs, the confirmation's `replays`; `deviant`:
    the deviant token ids to count recurrences of (default: the first execution's most frequent
    answer other than the reference; None when it had none); `before`: for alone runs, the
    request that ran just before it (alone runs go in scenario order)."""
    votes = [(r, c) for r in fresh if (c := _choice(r)) is not None]
    groups = group_variants(Output.of(r, c) for r, c in votes)
    top = groups[0] if groups else None
    strict = top is not None and top.variant.count * 2 > len(votes)
    reference = top.variant.token_ids if strict and top is not None else None
    ref_out = top.outputs[0] if strict and top is not None else None
    noise = noise or NoiseModel(p99=None, tokens=0, outputs=0)
    odd: list[str] = []
    context: list[OddRun] = []
    named = [("first", r) for r in first_alone] + [("first", r) for h in first_loaded for r in h.records
                                                    if r.request_id == request_id]
    named += [("fresh", r) for r in fresh] + [("replay", r) for h in replays for r in h.records
                                              if r.request_id == request_id]
    for where, r in named:
        c = _choice(r)
        if reference is not None and c is not None and c.token_ids != reference:
            odd.append(f"{where} {r.label}#{r.run}")
            context.append(_context(r, (before or {}).get(request_id) if r.label == "alone" else None))
    if deviant is None and reference is not None:
        first = [Output.of(r, c) for where, r in named if where == "first" and (c := _choice(r)) is not None]
        other = [g for g in group_variants(first) if g.variant.token_ids != reference]
        deviant = other[0].variant.token_ids if other else None
    recurrences = rejudged = 0
    outs = [(r, c) for h in replays for r in h.records if r.request_id == request_id and (c := _choice(r)) is not None]
    if deviant is not None:
        for r, c in outs:
            if c.token_ids == deviant:
                recurrences += 1
                if ref_out is not None and output_key(c) != output_key(ref_out.choice):
                    d = classify(request_id, ref_out, Output.of(r, c), noise)
                    rejudged += d.verdict in (Verdict.SUSPECTED_CORRUPTION, Verdict.CORRUPTION)
    agree = f"{top.variant.count if top else 0}/{len(votes)}"
    return Vote(request_id, reference, agree, tuple(odd), tuple(context), recurrences, rejudged, len(outs), deviant)
