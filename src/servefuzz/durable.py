"""Durable file writes: what servefuzz writes survives `kill -9` whole or not at all.

Every file servefuzz keeps is written through these primitives, so that each has one meaning
everywhere: `write_atomic` (a temp file in the same folder, fsynced, renamed into place, the
folder fsynced), `append_lines` (lines appended, then fsynced) and `unlink` (removed, and the
removal made durable). A finding is written by `finding.write_finding`, which links its temp
file into place so as never to replace another finding, and makes that durable with
`fsync_dir`. `sha256_of` reads a kept file back as its checksum (the one a download is held
to, an engine's source or a real model's wheel). They import nothing from servefuzz but its errors.

A full disk is the machine's state, not a bug of ours: a write that fails for want of space
raises `DiskFullError` (one line naming the file and the space left, `Exit.DISK`), and leaves
what was there before whole: an append takes back the part of its lines that went, an atomic
write removes its temp file. `reporting_full_disk` is that translation, for writers of their own.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from servefuzz.errors import DiskFullError

__all__ = [
    "write_atomic",
    "append_line",
    "append_lines",
    "truncate_torn_tail",
    "unlink",
    "fsync_dir",
    "disk_full",
    "reporting_full_disk",
    "is_disk_full",
    "sha256_of",
]

# No room: the filesystem is full, or the user's share of it (a quota) is.
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in _FULL


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    value, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"


def disk_full(path: Path | str, size: int | None = None) -> DiskFullError:
    """The one line for a write of `path` (`size` bytes, when known) that found no room, with
    the room its filesystem has left now (once the failed write is taken back), so the user
    sees how much to free."""
    path = Path(path)
    where = path if path.is_dir() else path.parent
    try:
        free = f"{_size(shutil.disk_usage(where).free)} free there"
    except OSError:
        free = "its free space unknown"
    what = "" if size is None else f"{_size(size)}, "
    return DiskFullError(f"no space left on the device writing {path} ({what}{free}); what was written before is kept")


@contextlib.contextmanager
def reporting_full_disk(path: Path | str, size: int | None = None) -> Iterator[None]:
    """Turn a write's ENOSPC/EDQUOT inside the block into `disk_full(path, size)`; other errors pass."""
    try:
        yield
    except OSError as e:
        if e.errno not in _FULL:
            raise
        raise disk_full(path, size) from None


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
    with reporting_full_disk(path, len(text.encode("utf-8"))):
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()  # a half-written temp file would only hold on to the space that ran out
            raise
        os.replace(tmp, path)
        fsync_dir(path.parent)


def append_line(path: Path, line: str) -> None:
    """Append one line (a newline is added) and fsync: a kill can only tear the last line."""
    append_lines(path, [line])


def append_lines(path: Path, lines: Iterable[str]) -> None:
    """Append lines (newlines added), then fsync once: a kill can only tear the last line.

    A write that fails (a full disk: `DiskFullError`) takes back what of these lines went, so
    the file still ends at its last whole line and the next append is not glued onto a fragment.
    """
    data = "".join(line.rstrip("\n") + "\n" for line in lines).encode("utf-8")
    with reporting_full_disk(path, len(data)):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]  # a full disk first takes part of a write
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):  # shrinking needs no space; resume cuts a tail anyway
                    os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)


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


def sha256_of(path: Path) -> str:
    """The sha256 of `path`'s bytes, in hex, read a MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
