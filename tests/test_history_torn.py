"""A torn last line of an append-only JSONL file (a kill mid-append) is cut off on reopen, so
that what is appended next is read back whole and under its own run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servefuzz.durable import truncate_torn_tail
from servefuzz.history import (
    ChoiceRecord,
    RequestRecord,
    RunHistory,
    Status,
    read_history_jsonl,
    write_history_jsonl,
)


def run(i: int, iteration: int) -> RunHistory:
    records = tuple(RequestRecord(f"r0{j}", i, "load", Status.OK, 0.0, choices=(ChoiceRecord(0, (i, j)),)) for j in range(2))
    return RunHistory(i, "load", records, {"iteration": iteration})


def torn(path: Path, fragment: bytes) -> None:
    with open(path, "ab") as f:
        f.write(fragment)


def test_the_next_run_is_read_back_under_its_own_header(tmp_path: Path) -> None:
    path = tmp_path / "histories.jsonl"
    write_history_jsonl(path, [run(0, 1), run(1, 1)])
    whole = path.stat().st_size
    line = json.dumps({"kind": "run", "run": 2, "label": "load", "meta": {"iteration": 2}})
    torn(path, line[:25].encode())  # killed mid-append of iteration 2's header

    assert truncate_torn_tail(path) == 25
    assert path.stat().st_size == whole and path.read_bytes().endswith(b"\n")
    write_history_jsonl(path, [run(2, 3)])  # the resumed campaign goes on
    runs = read_history_jsonl(path)
    assert [(h.run, h.meta["iteration"], len(h.records)) for h in runs] == [(0, 1, 2), (1, 1, 2), (2, 3, 2)]


def test_without_the_cut_the_next_header_is_lost_and_its_records_misfiled(tmp_path: Path) -> None:
    # The failure the cut prevents (the control): glued onto the fragment, the header is
    # unreadable and the new run's records land under the previous run.
    path = tmp_path / "histories.jsonl"
    write_history_jsonl(path, [run(0, 1)])
    torn(path, b'{"kind": "run", "ru')
    write_history_jsonl(path, [run(1, 2)])
    runs = read_history_jsonl(path)
    assert [(h.run, len(h.records)) for h in runs] == [(0, 4)]


def test_whole_empty_and_missing_files_are_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "scenarios.jsonl"
    assert truncate_torn_tail(path) == 0 and not path.exists()
    path.write_bytes(b"")
    assert truncate_torn_tail(path) == 0
    path.write_bytes(b'{"a": 1}\n{"b": 2}\n')
    assert truncate_torn_tail(path) == 0 and path.read_bytes() == b'{"a": 1}\n{"b": 2}\n'


def test_a_file_that_is_one_torn_line_becomes_empty_and_a_long_fragment_goes_whole(tmp_path: Path) -> None:
    path = tmp_path / "scenarios.jsonl"
    path.write_bytes(b'{"iteration": 1, "scen')
    assert truncate_torn_tail(path) == 22 and path.read_bytes() == b""
    fragment = b'{"x": "' + b"a" * 300_000  # longer than one block of the backwards search
    path.write_bytes(b'{"a": 1}\n' + fragment)
    assert truncate_torn_tail(path) == len(fragment) and path.read_bytes() == b'{"a": 1}\n'


def test_an_append_that_runs_out_of_space_takes_back_its_part_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A full disk takes the first part of a write and refuses the rest: the lines that went in
    # part are taken back, so the file still ends at its last whole line.
    import errno
    import os

    from servefuzz.errors import DiskFullError, Exit

    path = tmp_path / "histories.jsonl"
    write_history_jsonl(path, [run(0, 1)])
    whole = path.read_bytes()
    real_write = os.write

    def full(fd: int, data: bytes) -> int:
        if not os.path.samestat(os.fstat(fd), os.stat(path)):
            return real_write(fd, data)
        if len(data) > 40:
            return real_write(fd, bytes(data)[:40])  # room for a fragment
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)  # durable writes through os.write
    try:
        write_history_jsonl(path, [run(1, 2)])
    except DiskFullError as e:
        assert e.exit_code == Exit.DISK and f"writing {path} (" in str(e) and "free there" in str(e)
    else:
        raise AssertionError("a full disk must be said")
    monkeypatch.undo()
    assert path.read_bytes() == whole
    write_history_jsonl(path, [run(1, 2)])
    assert [h.meta["iteration"] for h in read_history_jsonl(path)] == [1, 2]
