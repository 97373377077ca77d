"""Engine coverage read from files: the handshake with servefuzz's tracer inside a launched
engine that has no `/coverage` route of its own (vLLM, SGLang: `standins/coverage`).

Each traced process of the engine keeps its cumulative map `{edge: hits}`. To read them,
servefuzz writes a new sequence number to `DIR/ask`; a thread in each process notices within
20 ms and writes its map, with that number, atomically to `DIR/<pid>.json`. `CoverageFiles.read`
waits (at most `ANSWER_WAIT_S`) until every live process answered, then sums them: the same
contract as `HttpTarget.engine_coverage` (None: no traced process ever answered, no coverage;
{}: an answer is malformed). What a process wrote is untrusted as any server's answer: bounded in
size, decimal ints only (`parse_coverage`); a process that does not answer in time (busy, or
stopped) counts with its last answer.

    files = CoverageFiles(out / "engine_coverage")
    files.reset()                  # before each start of the server: no map of a former one
    files.read()                   # {edge: hits} summed over its processes

The engine's points carry no context (`context_free`): the run's requests' features are folded
in client-side (`feedback.run_context`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path

from servefuzz import durable
from servefuzz.targets.base import MAX_COVERAGE_POINTS, parse_coverage

__all__ = ["ANSWER_WAIT_S", "ASK", "ENV_DIR", "ENV_TRACED", "MAX_ANSWER_BYTES", "CoverageFiles"]

# The tracer's names (standins/coverage/servefuzz_tracer.py, which imports nothing of servefuzz's
# and so restates them: tests/test_engine_tracer.py holds the two equal).
ENV_DIR = "SERVEFUZZ_ENGINE_COVERAGE"
ENV_TRACED = "SERVEFUZZ_ENGINE_TRACED"
ASK = "ask"
# A process polls every 20 ms; a busy engine's GIL may delay its thread: 2 s is ample, and a
# read around every loaded run must stay cheap when a process hangs.
ANSWER_WAIT_S = 2.0
# One process's answer: its map at a few thousand edges is some 100 KiB; past this it is no answer.
MAX_ANSWER_BYTES = 16 << 20
_POLL_S = 0.01


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not: it will never answer)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc: ask the kernel
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


class Malformed(Exception):
    """An answer that is not a map: the whole read is no coverage ({})."""


def _answer(path: Path) -> tuple[int, dict[int, int]]:
    """(seq, map) of one process's answer file; Malformed when it is not one."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_ANSWER_BYTES + 1)
    except OSError as e:
        raise Malformed(str(e)) from None
    if len(raw) > MAX_ANSWER_BYTES:
        raise Malformed("too big")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise Malformed("not JSON") from None
    seq = data.get("seq") if isinstance(data, dict) else None
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 1 << 62:
        raise Malformed("no seq")
    points = parse_coverage(data)
    if not points and data.get("points") != {}:  # {} from parse_coverage is malformed unless empty
        raise Malformed("bad points")
    return seq, points


class CoverageFiles:
    """The folder a launched engine's tracer answers in, and the reading of it."""

    # The engine's points are edges alone (no step context: `feedback.run_context` adds the run's).
    context_free = True

    def __init__(self, folder: Path, wait_s: float = ANSWER_WAIT_S) -> None:
        self.folder = folder
        self.wait_s = wait_s
        self.seq = 0

    def reset(self) -> None:
        """An empty folder (the former server's answers gone) asking 0, before the server starts."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for old in self.folder.iterdir():
            if old.name != ASK:
                with contextlib.suppress(OSError):
                    old.unlink()
        self.seq = 0
        durable.write_atomic(self.folder / ASK, "0")

    def _answers(self) -> dict[int, tuple[int, dict[int, int]]]:
        found = {}
        for path in self.folder.glob("*.json"):
            stem = path.stem
            if stem.isascii() and stem.isdigit() and len(stem) <= 9:
                found[int(stem)] = _answer(path)
        return found

    def read(self) -> dict[int, int] | None:
        """Ask every traced process for its map and sum the answers (see the module's doc)."""
        if not self.folder.is_dir():
            return None
        self.seq += 1
        durable.write_atomic(self.folder / ASK, str(self.seq))
        deadline = time.monotonic() + self.wait_s
        try:
            while True:
                answers = self._answers()
                waiting = [pid for pid, (seq, _) in answers.items() if seq < self.seq and _alive(pid)]
                if answers and not waiting or time.monotonic() >= deadline:
                    break
                time.sleep(_POLL_S)
        except Malformed:
            return {}
        if not answers:
            return None  # no process of the engine runs the tracer
        total: dict[int, int] = {}
        for _, points in answers.values():
            for point, hits in points.items():
                total[point] = total.get(point, 0) + hits
        return total if len(total) <= MAX_COVERAGE_POINTS else {}

    async def engine_coverage(self) -> dict[int, int] | None:
        """`read`, in a thread: the wait must not hold the event loop."""
        return await asyncio.to_thread(self.read)
