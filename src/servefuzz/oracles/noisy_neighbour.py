"""Noisy neighbour: a request slowed by the others far beyond what the others suffered.

Each request's latency under load is compared with its own solo baseline (the same request
alone on a flushed cache): time to first token when both were streamed, else time to the whole
answer. Load slows every request somewhat, so the threshold is measured, not assumed: over all
requests of the scenario, the log of loaded/solo has a median and a spread (the median absolute
deviation); a victim is a request above median + `SPREAD_K` spreads *and* `VICTIM_FACTOR`
times the others' typical slowdown *and* at least `MIN_RATIO` times its baseline *and*
`MIN_EXCESS_MS` slower, so that neither a tight spread nor jitter on a tiny baseline makes a
finding.

    >>> from servefuzz.history import RequestRecord, RunHistory, Status
    >>> rec = lambda rid, label, ms: RequestRecord(rid, 0, label, Status.OK, 0.0, sent_ms=0.0, end_ms=ms)
    >>> loaded = [RunHistory(0, "load", tuple(rec(f"r{i}", "load", 60.0) for i in range(6)) + (rec("r9", "load", 900.0),))]
    >>> alone = {rid: [rec(rid, "alone", 40.0)] for rid in [f"r{i}" for i in range(6)] + ["r9"]}
    >>> [a.summary for a in noisy_neighbour(loaded, alone)]
    ['r9: 900 ms under load against 40 ms alone (22.5x; the others 1.5x, threshold 8.0x)']
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.history import RequestRecord, RunHistory

__all__ = ["MIN_EXCESS_MS", "MIN_RATIO", "SPREAD_K", "VICTIM_FACTOR", "latency_ms", "noisy_neighbour"]

SPREAD_K = 6.0
VICTIM_FACTOR = 3.0
MIN_RATIO = 8.0
MIN_EXCESS_MS = 250.0


def latency_ms(record: RequestRecord, *, first_token: bool) -> float | None:
    """Time to first token (when asked and streamed) or to the whole answer; None if unknown."""
    if record.sent_ms is None:
        return None
    end = record.first_token_ms if first_token else record.end_ms
    return None if end is None else max(0.0, end - record.sent_ms)


def noisy_neighbour(loaded: Sequence[RunHistory], solo: Mapping[str, Sequence[RequestRecord]]) -> list[Anomaly]:
    """One anomaly per request whose worst loaded latency is an outlier against its solo one."""
    ratios: dict[str, list[tuple[float, float, float, int]]] = {}
    for h in loaded:
        for rec in h.records:
            base = next((r for r in solo.get(rec.request_id, ()) if r.ok), None)
            if base is None or not rec.ok:
                continue
            first = rec.first_token_ms is not None and base.first_token_ms is not None
            got, ref = latency_ms(rec, first_token=first), latency_ms(base, first_token=first)
            if got is not None and ref is not None and ref > 0:
                ratios.setdefault(rec.request_id, []).append((got / ref, got, ref, h.run))
    logs = [math.log(max(r, 1e-9)) for rs in ratios.values() for r, *_ in rs]
    if len(logs) < 4:
        return []  # too few requests to tell a victim from the common slowdown
    median = statistics.median(logs)
    spread = statistics.median(abs(x - median) for x in logs)
    threshold = max(math.exp(median + SPREAD_K * spread), VICTIM_FACTOR * math.exp(median), MIN_RATIO)
    found = []
    for rid, rs in sorted(ratios.items()):
        ratio, got, ref, run = max(rs)
        if ratio > threshold and got - ref >= MIN_EXCESS_MS:
            found.append(Anomaly(
                Oracle.NOISY_NEIGHBOUR, Verdict.SLOWDOWN, rid,
                f"{rid}: {got:.0f} ms under load against {ref:.0f} ms alone ({ratio:.1f}x; the others "
                f"{math.exp(median):.1f}x, threshold {threshold:.1f}x)",
                evidence={"loaded_ms": round(got, 1), "solo_ms": round(ref, 1), "ratio": round(ratio, 2), "run": run,
                          "median_ratio": round(math.exp(median), 2), "threshold": round(threshold, 2)},
            ))
    return found
