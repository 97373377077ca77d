"""Histories: what the client observed, request by request (Jepsen-style).

A `RequestRecord` is frozen once the request has ended. Times are milliseconds from the start of
the run (the runner's monotonic clock). A request that timed out, was cut by the connection or
was cancelled on purpose is *indeterminate*: its partial output is kept for the record but no
oracle may call it evidence of corruption.

A `RunHistory` is one execution of a scenario (`label` says under which condition: "load",
"alone", "cold", "primed", ...). Histories are stored as JSONL: a header line, then one line per
request record, so a run cut mid-way still leaves every finished record readable.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servefuzz import durable

__all__ = [
    "Status",
    "TopLogprobs",
    "ChoiceRecord",
    "RequestRecord",
    "RunHistory",
    "write_history_jsonl",
    "read_history_jsonl",
]

# Top-k alternatives at one output position: ((token_id, logprob), ...), best first.
TopLogprobs = tuple[tuple[int, float], ...]


class Status(str, enum.Enum):
    OK = "ok"
    HTTP_ERROR = "http_error"  # server answered with a non-2xx status
    MALFORMED = "malformed"  # 2xx, but the body could not be understood
    TIMEOUT = "timeout"  # indeterminate: we gave up waiting
    CONNECTION_ERROR = "connection_error"  # indeterminate: refused, reset or cut mid-stream
    CANCELLED = "cancelled"  # indeterminate: cut on purpose (cancel_after_ms)

    @property
    def indeterminate(self) -> bool:
        return self in (Status.TIMEOUT, Status.CONNECTION_ERROR, Status.CANCELLED)


@dataclass(frozen=True)
class ChoiceRecord:
    """One of the n choices of a request, as the server returned it."""

    index: int
    token_ids: tuple[int, ...]
    # logprob of each chosen token (None where the engine gave none)
    logprobs: tuple[float | None, ...] = ()
    # top-k alternatives at each position (may be empty when not offered)
    top_logprobs: tuple[TopLogprobs, ...] = ()
    text: str = ""
    finish_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "token_ids": list(self.token_ids),
            "logprobs": list(self.logprobs),
            "top_logprobs": [[list(p) for p in pos] for pos in self.top_logprobs],
            "text": self.text,
            "finish_reason": self.finish_reason,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ChoiceRecord:
        return cls(
            index=int(d["index"]),
            token_ids=tuple(int(t) for t in d["token_ids"]),
            logprobs=tuple(None if x is None else float(x) for x in d.get("logprobs", ())),
            top_logprobs=tuple(
                tuple((int(t), float(lp)) for t, lp in pos) for pos in d.get("top_logprobs", ())
            ),
            text=str(d.get("text", "")),
            finish_reason=d.get("finish_reason"),
        )


@dataclass(frozen=True)
class RequestRecord:
    """Everything the client saw of one request in one run."""

    request_id: str
    run: int
    label: str
    status: Status
    scheduled_ms: float
    sent_ms: float | None = None
    first_token_ms: float | None = None
    end_ms: float | None = None
    choices: tuple[ChoiceRecord, ...] = ()
    cached_tokens: int | None = None
    prompt_tokens: int | None = None
    http_status: int | None = None
    error: str | None = None

    @property
    def indeterminate(self) -> bool:
        return self.status.indeterminate

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def send_error_ms(self) -> float | None:
        """How late the request left against its schedule."""
        return None if self.sent_ms is None else self.sent_ms - self.scheduled_ms

    def to_json(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["status"] = self.status.value
        d["choices"] = [c.to_json() for c in self.choices]
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RequestRecord:
        kw = dict(d)
        kw["status"] = Status(d["status"])
        kw["choices"] = tuple(ChoiceRecord.from_json(c) for c in d.get("choices", ()))
        return cls(**kw)


@dataclass(frozen=True)
class RunHistory:
    """One execution of a scenario under one condition."""

    run: int
    label: str
    records: tuple[RequestRecord, ...]
    # What the server said about itself around the run (metrics deltas, server info).
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:
        return hash((self.run, self.label, self.records))

    def by_id(self) -> dict[str, RequestRecord]:
        return {r.request_id: r for r in self.records}

    @property
    def determinate(self) -> tuple[RequestRecord, ...]:
        return tuple(r for r in self.records if not r.indeterminate)


def write_history_jsonl(path: Path, histories: Iterable[RunHistory]) -> None:
    """Append histories to a JSONL file (one header line per run, one line per record).

    Appending line by line means a campaign killed mid-write loses at most the last line,
    which the reader skips; `durable.truncate_torn_tail` removes it before anything is appended again.
    """
    durable.append_lines(path, (
        line
        for h in histories
        for line in (
            json.dumps({"kind": "run", "run": h.run, "label": h.label, "meta": dict(h.meta)}),
            *(json.dumps({"kind": "record", **r.to_json()}) for r in h.records),
        )
    ))


def read_history_jsonl(path: Path) -> list[RunHistory]:
    """Read histories back; a truncated last line (a crash mid-write) is skipped."""
    runs: list[RunHistory] = []
    header: dict[str, Any] | None = None
    records: list[RequestRecord] = []

    def flush() -> None:
        if header is not None:
            runs.append(RunHistory(header["run"], header["label"], tuple(records), header.get("meta", {})))

    for obj in _iter_json_lines(path):
        if obj.get("kind") == "run":
            flush()
            header, records = obj, []
        elif obj.get("kind") == "record":
            obj = dict(obj)
            del obj["kind"]
            records.append(RequestRecord.from_json(obj))
    flush()
    return runs


def _iter_json_lines(path: Path) -> Iterator[dict[str, Any]]:
    # errors="replace": a torn multi-byte character must not make the whole file unreadable.
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line from a crash; everything before it stands
