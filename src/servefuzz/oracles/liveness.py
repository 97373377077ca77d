"""Liveness and health: crash, hang, HTTP 5xx, malformed bodies, cut connections.

These are anomalies, not tool errors: a server that misbehaves is data. None of them is ever
corruption; an op whose outcome is unknown (timeout, cut) stays unknown.

- crash: in one run, the last requests to end (at least CRASH_MIN_TAIL of them, or all of the
  run's) all failed with connection errors: the server went away and did not come back.
- hang: a request timed out.
- server-error: HTTP 5xx. A 4xx is the target refusing a request it does not support (vLLM
  rejects n > 1 at temperature 0), which is the adapter's business, not a server fault.
- malformed: a 2xx whose body could not be understood.
- indeterminate: a connection cut while the server went on answering later requests.

    >>> from servefuzz.history import RequestRecord, RunHistory, Status
    >>> rec = lambda rid, st, end: RequestRecord(rid, 0, "load", st, 0.0, end_ms=end, error="refused")
    >>> h = RunHistory(0, "load", (rec("r01", Status.OK, 10.0), rec("r02", Status.CONNECTION_ERROR, 20.0),
    ...                            rec("r03", Status.CONNECTION_ERROR, 30.0)))
    >>> [(a.verdict.value, a.request_id) for a in liveness([h])]
    [('crash', 'r02')]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.history import RequestRecord, RunHistory, Status

__all__ = ["CRASH_MIN_TAIL", "liveness"]

# One trailing connection error is as likely a single cut socket as a dead server; two in a row
# with nothing succeeding after them is the smallest pattern we call a crash.
CRASH_MIN_TAIL = 2

_ERROR_CHARS = 200  # error strings can carry whole HTML pages; evidence keeps their start


def liveness(histories: Sequence[RunHistory]) -> list[Anomaly]:
    """Anomalies grouped by (verdict, request) across runs, most severe first."""
    events: dict[tuple[Verdict, str], list[dict[str, Any]]] = {}
    for h in histories:
        tail = _crash_tail(h)
        if tail:
            detail = _detail(tail[0]) | {"failed": [r.request_id for r in tail]}
            events.setdefault((Verdict.CRASH, tail[0].request_id), []).append(detail)
        crashed = {r.request_id for r in tail}
        for rec in h.records:
            verdict = None if rec.request_id in crashed else _verdict(rec)
            if verdict is not None:
                events.setdefault((verdict, rec.request_id), []).append(_detail(rec))
    ordered = sorted(events.items(), key=lambda kv: (kv[0][0].rank, kv[0][1]))
    return [_anomaly(verdict, rid, details, len(histories)) for (verdict, rid), details in ordered]


def _crash_tail(h: RunHistory) -> list[RequestRecord]:
    """The trailing connection errors of a run, in order of when they ended, if they make a crash."""
    # Cancelled requests are cut on purpose and say nothing about the server.
    considered = sorted((r for r in h.records if r.status is not Status.CANCELLED), key=_ended)
    tail: list[RequestRecord] = []
    for r in reversed(considered):
        if r.status is not Status.CONNECTION_ERROR:
            break
        tail.insert(0, r)
    return tail if len(tail) >= CRASH_MIN_TAIL or (tail and len(tail) == len(considered)) else []


def _ended(r: RequestRecord) -> tuple[float, str]:
    # A request in flight when the server died fails then, not when it was sent.
    when = next((t for t in (r.end_ms, r.sent_ms) if t is not None), r.scheduled_ms)
    return when, r.request_id


def _verdict(r: RequestRecord) -> Verdict | None:
    if r.status is Status.HTTP_ERROR:
        return Verdict.SERVER_ERROR if r.http_status is None or r.http_status >= 500 else None
    return {
        Status.MALFORMED: Verdict.MALFORMED,
        Status.TIMEOUT: Verdict.HANG,
        Status.CONNECTION_ERROR: Verdict.INDETERMINATE,
    }.get(r.status)


def _detail(r: RequestRecord) -> dict[str, Any]:
    return {
        "run": r.run,
        "label": r.label,
        "status": r.status.value,
        "http_status": r.http_status,
        "error": (r.error or "")[:_ERROR_CHARS],
        "sent_ms": r.sent_ms,
        "end_ms": r.end_ms,
    }


def _anomaly(verdict: Verdict, rid: str, details: list[dict[str, Any]], total: int) -> Anomaly:
    first = details[0]
    where = f"{len(details)}/{total} runs"
    error = first["error"].splitlines()[0][:80] if first["error"] else "no error text"
    summary = {
        Verdict.CRASH: (
            f"server went away in {where}: the last {len(first.get('failed', ()))} requests to end, "
            f"from {rid} at {first['end_ms'] or 0:.0f} ms on, failed to connect ({error})"
        ),
        Verdict.HANG: f"{rid}: no answer in time in {where}",
        Verdict.SERVER_ERROR: f"{rid}: HTTP {first['http_status']} in {where}: {error}",
        Verdict.MALFORMED: f"{rid}: malformed response in {where}: {error}",
        Verdict.INDETERMINATE: f"{rid}: connection cut in {where} while the server kept answering ({error})",
    }[verdict]
    return Anomaly(
        Oracle.LIVENESS,
        verdict,
        rid,
        summary,
        evidence={"runs": sorted({d["run"] for d in details}), "events": details},
    )
