"""Durable file writes: what servefuzz writes survives `kill -9` whole or not at all.

Every file servefuzz keeps is written through these primitives, so that each has one meaning
everywhere: `write_atomic` (a temp file in the same folder, fsynced, renamed into place, the
folder fsynced), `append_lines` (lines appended, then fsynced) and `unlink` (removed, and the
removal made durable). A finding is written by `finding.write_finding`, which links its temp
file into place so as never to replace another finding, and makes that durable with
`fsync_dir`. They import nothing from servefuzz.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["write_atomic", "append_line", "append_lines", "truncate_torn_tail", "unlink", "fsync_dir"]


def fsync_dir(directory: Path) -> None:
    """Make a rename or removal in `directory` durable (its entry list is data too)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text`: readers see the old file or the new one, never a part."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def append_line(path: Path, line: str) -> None:
    """Append one line (a newline is added) and fsync: a kill can only tear the last line."""
    append_lines(path, [line])


def append_lines(path: Path, lines: Iterable[str]) -> None:
    """Append lines (newlines added), then fsync once: a kill can only tear the last line."""
    with open(path, "a", encoding="utf-8") as f:
        for line in lines:
            f.write(line.rstrip("\n") + "\n")
        f.flush()
        os.fsync(f.fileno())


def unlink(path: Path) -> None:
    """Remove `path` if it is there, durably."""
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fsync_dir(path.parent)


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
