"""servefuzz's engine-coverage tracer, run inside a launched engine's own processes (vLLM, SGLang).

Imported at start-up by `sitecustomize` (this folder's, or the stand-ins' beside it) in every
Python process the engine starts, which all inherit its PYTHONPATH; it does nothing unless
`SERVEFUZZ_ENGINE_COVERAGE` names a folder. It is the reference engine's tracer
(`servefuzz/reference/tracer.py`) carried into another interpreter: AFL edges within one code
object, (previous line, line) hashed as AFL does, each code object's base the crc32 of its file
name (without folder), qualified name and first line, so a point means the same in every process
and every start of the same engine build. It imports nothing of servefuzz's (another venv runs
it); tests/test_engine_tracer.py holds its edges equal to the reference tracer's.

What it follows: only files whose path holds one of the fragments in `SERVEFUZZ_ENGINE_TRACED`
(':'-separated, e.g. `vllm/v1/core/`: the engine's scheduler, KV cache manager, block pool,
sampler; the engine spec's `traced`). Every other frame costs one dictionary lookup per call and
nothing per line. Every thread is traced (`threading.settrace`: vLLM's engine core busy loop and
SGLang's scheduler run in threads and child processes), every process (forks reset their map
and start their own answering thread).

There is no step context here: the engine's request objects differ per engine and version, so
servefuzz folds in the features of the run's own requests client-side (`feedback.run_context`).

The handshake (no HTTP route to add to a program not ours): servefuzz writes a sequence number
to `DIR/ask`; a thread in each process reads it every `POLL_S` and, when it changed, writes its
cumulative map `{"seq": N, "points": {"<edge>": hits}}` atomically to `DIR/<pid>.json`. A process
answers once as it starts too, so servefuzz knows which processes to wait for.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from types import CodeType, FrameType
from typing import Any

__all__ = ["ENV_DIR", "ENV_TRACED", "EDGE_BITS", "Tracer", "start"]

ENV_DIR = "SERVEFUZZ_ENGINE_COVERAGE"
ENV_TRACED = "SERVEFUZZ_ENGINE_TRACED"
ASK = "ask"
# Wider than the reference engine's 16 bits: an engine's scheduler and cache packages hold tens
# of thousands of lines, where 64 Ki edges would collide often.
EDGE_BITS = 20
POLL_S = 0.02
_UNSEEN = -1


class Tracer:
    """The cumulative map `{edge: hits}` of one process, over the code under `fragments`."""

    def __init__(self, fragments: Iterable[str], bits: int = EDGE_BITS) -> None:
        # '/vllm/v1/core/' in a path, never 'xvllm/v1/core/'
        self.fragments = tuple("/" + f.strip("/") + ("/" if f.endswith("/") else "") for f in fragments if f.strip("/"))
        self.mask = (1 << bits) - 1
        self.counts: dict[int, int] = {}
        self._codes: dict[CodeType, int | None] = {}

    def install(self) -> None:
        """Trace this thread and every thread started from now on."""
        threading.settrace(self.call)
        sys.settrace(self.call)

    def snapshot(self) -> dict[int, int]:
        # dict(d) of an int-keyed dict copies in C without releasing the GIL (as the reference's).
        return dict(self.counts)

    def _base(self, code: CodeType) -> int | None:
        path = code.co_filename.replace(os.sep, "/")
        if not any(f in path for f in self.fragments):
            return None
        where = f"{os.path.basename(code.co_filename)}:{code.co_qualname}:{code.co_firstlineno}"
        return zlib.crc32(where.encode()) & self.mask

    def call(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        code = frame.f_code
        base = self._codes.get(code, _UNSEEN)
        if base == _UNSEEN:
            base = self._codes[code] = self._base(code)
        if base is None:
            return None  # not traced: no per-line events in this frame
        counts, mask = self.counts, self.mask
        prev = base

        def line(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
            nonlocal prev
            if event == "line":
                cur = (base + frame.f_lineno * 40503) & mask  # the reference tracer's hash
                point = cur ^ (prev >> 1)
                counts[point] = counts.get(point, 0) + 1
                prev = cur
            return line

        return line


class _Answerer:
    """The thread that answers servefuzz's asks with this process's map."""

    def __init__(self, tracer: Tracer, folder: str) -> None:
        self.tracer, self.folder = tracer, folder
        self.answered: str | None = None

    def start(self) -> None:
        self.answered = None
        self.answer()  # at once: servefuzz learns this process exists
        threading.Thread(target=self.loop, name="servefuzz-coverage", daemon=True).start()

    def loop(self) -> None:
        while True:
            time.sleep(POLL_S)
            try:
                self.answer()
            except Exception:  # noqa: BLE001 - the engine must never die of its tracer
                pass

    def answer(self) -> None:
        try:
            with open(os.path.join(self.folder, ASK), encoding="ascii") as fh:
                seq = fh.read(32).strip()
        except (OSError, ValueError):
            seq = "0"
        if seq == self.answered or not seq.isdigit():
            return
        points = self.tracer.snapshot()
        pid = os.getpid()
        body = json.dumps({"seq": int(seq), "pid": pid, "points": {str(k): v for k, v in points.items()}})
        tmp = os.path.join(self.folder, f".{pid}.tmp")
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write(body)
        os.replace(tmp, os.path.join(self.folder, f"{pid}.json"))  # atomic: never half a map
        self.answered = seq


def start() -> Tracer | None:
    """Trace this process when `SERVEFUZZ_ENGINE_COVERAGE` names an existing folder; else None."""
    folder = os.environ.get(ENV_DIR, "")
    fragments = [f for f in os.environ.get(ENV_TRACED, "").split(":") if f]
    if not folder or not fragments or not os.path.isdir(folder):
        return None
    tracer = Tracer(fragments)
    answerer = _Answerer(tracer, folder)
    answerer.start()  # before tracing: its own thread is not the engine's

    def in_child() -> None:
        # A forked child inherits the parent's map and trace functions but not its threads:
        # it counts from zero (the parent reports its own) and answers under its own pid.
        tracer.counts.clear()
        answerer.start()

    os.register_at_fork(after_in_child=in_child)
    tracer.install()
    return tracer


TRACER = start()
