"""Anomalous shift: logprobs that moved beyond the campaign's noise while every token agreed.

A flip is visible; a shift is not, and it is no less a sign that a request was computed on other
state (on an H200 a request's first-token logprobs moved 0.200 nats, fifteen times the largest
benign shift of its campaign, and nothing was reported). Each pair of agreeing outputs
(`oracles.noise.pairs`) is held, position by position, against SHIFT_K (4) x the largest benign
top-k L-inf shift the campaign has seen there; beyond it is an `anomalous-shift`, and the request
never adds to the noise estimate. An accusation needs a well-measured bar: a campaign with fewer
than `noise.SHIFT_MIN_SAMPLES` (1,000) shifts there (or pooled) says nothing yet.

Where the logits lie on a coarse grid (bfloat16: `verdict.logit_step`), the bar is at least two
of its steps, as it is for a flip: one logit rounded the other way moves its logprob by a whole
step, so a campaign whose benign shifts are nearly all exact zeros would otherwise call the
first one-step rounding it meets dozens of times its noise (SGLang on the H200: a 0.0616 shift,
one step of 1/16, judged "85x the largest benign shift", docs/gpu/sglang.md).

    >>> from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
    >>> top = lambda lp: (((5, lp), (7, -3.0)),)
    >>> rec = lambda run, label, lp: RequestRecord("r11", run, label, Status.OK, 0.0,
    ...                                            choices=(ChoiceRecord(0, (5,), (lp,), top(lp)),))
    >>> quiet = CampaignNoise.empty().with_shifts([Shift(0, 0.01, 0.01)] * 1000, cached=False)
    >>> [a] = anomalous_shifts([RunHistory(0, "load", (rec(0, "load", -0.3),))], {"r11": [rec(0, "alone", -0.1)]},
    ...                        (), quiet)
    >>> a.verdict.value, a.summary.split("; ")[1]
    ('anomalous-shift', 'shift 0.2000 = 20x the largest of 1,000 benign logprob shifts at position 0')

    On a bfloat16 grid of 1/16, one step is rounding and three are not:

    >>> grid = lambda lp: (((5, lp), (7, lp - 0.0625), (9, lp - 0.25)),)
    >>> on = lambda run, label, lp: RequestRecord("r11", run, label, Status.OK, 0.0,
    ...                                           choices=(ChoiceRecord(0, (5,), (lp,), grid(lp)),))
    >>> [len(anomalous_shifts([RunHistory(0, "load", (on(0, "load", -1.0 - d),))], {"r11": [on(0, "alone", -1.0)]},
    ...                        (), quiet)) for d in (0.0625, 0.1875)]
    [0, 1]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.history import RequestRecord, RunHistory
from servefuzz.oracles.noise import SHIFT_K, SHIFT_MIN_SAMPLES, CampaignNoise, Pair, Shift, fmt_lp, pairs
from servefuzz.oracles.verdict import step_at

__all__ = ["anomalous_shifts"]

_ORACLE = {"replay": Oracle.REPLAY, "isolation": Oracle.ISOLATION, "cache": Oracle.CACHE_STATE}


def anomalous_shifts(
    loaded: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    cache: Sequence[RequestRecord],
    campaign: CampaignNoise,
    *,
    skip: frozenset[str] = frozenset(),
    compared: Sequence[Pair] | None = None,
) -> list[Anomaly]:
    """One anomaly per request (not in `skip`: those already flagged for a flip) whose agreeing
    outputs moved beyond the campaign's noise; its evidence is the largest excess. `compared`:
    `pairs(loaded, alone, cache)`, where the caller has them."""
    worst: dict[str, tuple[float, Pair, Shift, float]] = {}
    for p in pairs(loaded, alone, cache) if compared is None else compared:
        if p.request_id in skip or p.a.choice.token_ids != p.b.choice.token_ids:
            continue
        for s in p.shifts():
            bar = campaign.threshold(s.position, p.cached, "linf", k=SHIFT_K, min_samples=SHIFT_MIN_SAMPLES)
            if bar > 0 and s.linf > max(bar, 2 * step_at(p.a.choice, p.b.choice, s.position)):
                ratio = s.linf / bar
                if p.request_id not in worst or ratio > worst[p.request_id][0]:
                    worst[p.request_id] = (ratio, p, s, bar)
    found = []
    for rid, (_, p, s, bar) in sorted(worst.items()):
        where = campaign.where(s.linf, s.position, p.cached, what="shift", metric="linf",
                               min_samples=SHIFT_MIN_SAMPLES)
        sides = f"{p.a.label}#{p.a.run} vs {p.b.label}#{p.b.run}"
        summary = (f"{rid}: logprobs moved {fmt_lp(s.linf)} at token {s.position} with every token the same "
                   f"({p.kind}: {sides}); {where}; threshold {fmt_lp(bar)}")
        found.append(Anomaly(_ORACLE[p.kind], Verdict.ANOMALOUS_SHIFT, rid, summary, evidence={
            "position": s.position, "shift": s.linf, "gap_shift": s.gap, "threshold": bar, "cached": p.cached,
            "compared": p.kind, "a": {"run": p.a.run, "label": p.a.label}, "b": {"run": p.b.run, "label": p.b.label},
            "where": where,
        }))
    return found
