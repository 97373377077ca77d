"""Trace import: Mooncake-style request traces as seed scenarios.

A Mooncake trace is JSONL, one request a line:

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48, ...]}

`timestamp` is milliseconds, and each hash id stands for one block of `block_tokens` prompt
tokens (512 in Mooncake's traces): two requests whose hash ids start alike share that many
blocks of prefix. servefuzz turns consecutive windows of the trace into scenarios: one fixed
random token block per hash id (so shared hash ids are shared token ids, bit-exact), lengths
scaled down to fit the target (`max_tokens_per_request`), and time compressed so that a window
spans at most `span_ms`. The shared prefix of a request is the run of leading blocks it has in
common with another request of its window.

    >>> rows = [TraceRow(0, 1000, 8, (1, 2)), TraceRow(5, 1100, 8, (1, 3)), TraceRow(9, 600, 8, (4,))]
    >>> [(r.prefix_len, r.prompt_len, r.max_tokens) for r in trace_scenarios(rows, window=3)[0].requests]
    [(512, 1000, 8), (512, 1100, 8), (0, 600, 8)]
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servefuzz.errors import UsageError
from servefuzz.terms import common_prefix
from servefuzz.workload import RequestSpec, Scenario

__all__ = ["TraceRow", "load_trace_seeds", "read_trace", "trace_scenarios"]


@dataclass(frozen=True)
class TraceRow:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def read_trace(path: Path) -> list[TraceRow]:
    """Parse a Mooncake-style JSONL trace; a bad line is a UsageError naming it."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise UsageError(f"{path}: cannot read the trace: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a text file, so not a trace") from None
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            row = TraceRow(float(d["timestamp"]), int(d["input_length"]), int(d["output_length"]),
                           tuple(int(h) for h in d.get("hash_ids", ())))
        except (ValueError, KeyError, TypeError) as e:
            what = f"missing {e}" if isinstance(e, KeyError) else "not a trace record"
            raise UsageError(f"{path} line {n}: {what} (want timestamp, input_length, output_length, hash_ids)") from None
        if row.input_length < 1 or row.output_length < 1:
            raise UsageError(f"{path} line {n}: input_length and output_length must be >= 1")
        rows.append(row)
    if not rows:
        raise UsageError(f"{path}: the trace holds no requests")
    return rows


def trace_scenarios(
    rows: Sequence[TraceRow],
    *,
    window: int = 12,
    block_tokens: int = 512,
    max_tokens_per_request: int = 2048,
    max_output: int = 64,
    span_ms: float = 1000.0,
    vocab: range = range(3, 1024),
    limit: int = 8,
) -> list[Scenario]:
    """Up to `limit` scenarios of `window` consecutive trace requests each."""
    out = []
    for w in range(0, min(len(rows), window * limit), window):
        chunk = rows[w : w + window]
        longest = max(r.input_length for r in chunk)
        scale = min(1.0, max_tokens_per_request / longest)
        block = max(1, round(block_tokens * scale))
        t0, t1 = chunk[0].timestamp_ms, max(r.timestamp_ms for r in chunk)
        squeeze = min(1.0, span_ms / (t1 - t0)) if t1 > t0 else 1.0
        blocks: dict[int, tuple[int, ...]] = {}
        specs = []
        for i, r in enumerate(chunk):
            length = max(1, round(r.input_length * scale))
            ids: list[int] = []
            for h in r.hash_ids:
                if h not in blocks:
                    rng = random.Random(f"trace-block:{h}")
                    blocks[h] = tuple(vocab[rng.randrange(len(vocab))] for _ in range(block))
                ids += blocks[h]
            filler = random.Random(f"trace-fill:{w}:{i}")
            ids += [vocab[filler.randrange(len(vocab))] for _ in range(max(0, length - len(ids)))]
            shared = max((common_prefix(r.hash_ids, o.hash_ids) for o in chunk if o is not r), default=0)
            prefix_len = min(shared * block, length)
            specs.append(RequestSpec(
                f"t{i + 1:02d}", round((r.timestamp_ms - t0) * squeeze, 1), tuple(ids[:length]),
                min(r.output_length, max_output), f"h{r.hash_ids[0]}" if prefix_len else None, prefix_len,
            ))
        out.append(Scenario(seed=w, requests=tuple(specs), meta={"strategy": "trace", "trace_offset": w, "scale": scale}))
    return out


def load_trace_seeds(path: Path, **kw: Any) -> tuple[Scenario, ...]:
    """`trace_scenarios` of the trace file at `path` (keyword arguments passed on)."""
    return tuple(trace_scenarios(read_trace(path), **kw))
