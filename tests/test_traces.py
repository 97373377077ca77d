"""Trace import: Mooncake-style JSONL traces become seed scenarios with exact shared blocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servefuzz.errors import UsageError
from servefuzz.traces import TraceRow, load_trace_seeds, read_trace, trace_scenarios


def write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_shared_hash_ids_become_shared_tokens_and_time_is_compressed(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 1000, "input_length": 1500, "output_length": 300, "hash_ids": [7, 8, 9]},
        {"timestamp": 4000, "input_length": 1100, "output_length": 20, "hash_ids": [7, 8, 11]},
        {"timestamp": 9000, "input_length": 700, "output_length": 20, "hash_ids": [12, 13]},
    ]
    [s] = load_trace_seeds(write(tmp_path / "t.jsonl", rows), window=3)
    a, b, c = s.requests
    assert (a.prompt_len, b.prompt_len, c.prompt_len) == (1500, 1100, 700)
    assert a.prompt_ids[:1024] == b.prompt_ids[:1024] and a.prompt_ids[1024] != b.prompt_ids[1024]
    assert (a.prefix_len, b.prefix_len, c.prefix_len) == (1024, 1024, 0) and a.prefix_name == b.prefix_name
    assert (a.offset_ms, b.offset_ms, c.offset_ms) == (0.0, 375.0, 1000.0)
    assert a.max_tokens == 64 and s.meta["strategy"] == "trace"


def test_long_traces_are_scaled_to_fit_and_cut_into_windows() -> None:
    rows = [TraceRow(i * 10.0, 8000, 50, (1, 2, 3, 4 + i)) for i in range(30)]
    seeds = trace_scenarios(rows, window=12, max_tokens_per_request=2048, limit=2)
    assert len(seeds) == 2 and all(len(s.requests) == 12 for s in seeds)
    assert all(r.prompt_len == 2048 and r.prefix_len == 3 * round(512 * 2048 / 8000) for s in seeds for r in s.requests)


@pytest.mark.parametrize("text, words", [
    ('{"timestamp": 1, "input_length": 5}', "line 1: missing 'output_length'"),
    ('{"timestamp": 1, "input_length": 5, "output_length": 5}\nnot json', "line 2: not a trace record"),
    ('{"timestamp": 1, "input_length": 0, "output_length": 5}', "must be >= 1"),
    ("\n\n", "holds no requests"),
])
def test_a_bad_trace_is_one_clear_error(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(UsageError, match=words.replace("(", r"\(")):
        read_trace(path)
    with pytest.raises(UsageError, match="cannot read"):
        read_trace(tmp_path / "missing.jsonl")
