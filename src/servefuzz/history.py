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
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Status",
    "TopLogprobs",
    "ChoiceRecord",
    "RequestRecord",
    "RunHistory",
    "write_history_jsonl",
    "read_history_jsonl",
    "truncate_torn_tail",
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

    @property
    def ttft_ms(self) -> float | None:
        if self.sent_ms is None or self.first_token_ms is None:
            return None
        return self.first_token_ms - self.sent_ms

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
    which the reader skips; `truncate_torn_tail` removes it before anything is appended again.
    """
    with open(path, "a", encoding="utf-8") as f:
        for h in histories:
            f.write(json.dumps({"kind": "run", "run": h.run, "label": h.label, "meta": dict(h.meta)}) + "\n")
            for r in h.records:
                f.write(json.dumps({"kind": "record", **r.to_json()}) + "\n")
        f.flush()
        os.fsync(f.fileno())


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


def truncate_torn_tail(path: Path) -> int:
    """Cut a torn last line off an append-only JSONL file; return how many bytes went.

    A kill mid-append leaves a last line without its newline. Appending to such a file glues
    the next line onto the fragment, and a reader then drops both (a run's header included, so
    its records land under the previous run). Call this when reopening a file for appending
    (a campaign's `--resume`): the file then ends at its last complete line, made durable.
    A missing, empty or whole file is left as it is (0).
    """
    try:
        f = open(path, "r+b")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return 0
    with f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        # Walk back block by block to the last newline: the fragment is at most one line long.
        end = size
        keep = 0
        while end > 0:
            start = max(0, end - (64 << 10))
            f.seek(start)
            nl = f.read(end - start).rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                break
            end = start
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return size - keep


def _iter_json_lines(path: Path) -> Iterator[dict[str, Any]]:
    # errors="replace": a torn multi-byte character must not make the whole file unreadable.
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line from a crash; everything before it stands
