"""Engine coverage: the reference engine traces its own scheduling code as AFL-style edges.

With `--coverage` the engine thread runs under `sys.settrace`. A program fuzzer keeps an input
that reaches a new edge of the program; servefuzz's strategies are written per bug class, so
without this it can only find what someone aimed at. The tracer follows only the engine's own
modules (scheduler, radix cache, KV pool, faults, and the sampler of the model): the global
trace function returns None for every other frame (numpy, aiohttp, the forward pass), so those
cost one dictionary lookup per call and nothing per line.

A *point* is an edge within one code object, (previous line, line) hashed to `EDGE_BITS`
bits as AFL hashes (previous >> 1) ^ current, together with the *context* of the scheduler step
it ran in: which features the requests in flight had at the step's start (`CONTEXTS`, a bit
each). The same edge under a new context is a new point (AFL's context-sensitive coverage):
the abort path run while a forked n > 1 request is decoding is not the abort path alone.

    >>> t = Tracer(files=())
    >>> context_of({"n", "multi"}), context_names(context_of({"n", "multi"}))
    (3, ('multi', 'n'))
    >>> t.counts, t.context is None
    ({}, True)

Edges are hashed from each code object's file name (without its folder), qualified name and
first line, so a point means the same in every process of the same engine code: a campaign's
restarted server reaches the points its first one reached under the same numbers.
"""

from __future__ import annotations

import os
import sys
import zlib
from collections.abc import Callable, Collection, Iterable, Mapping
from types import CodeType, FrameType
from typing import Any

__all__ = ["CONTEXTS", "CONTEXT_BITS", "EDGE_BITS", "Tracer", "context_names", "context_of", "engine_files"]

# AFL's map is 64 Ki edges; the engine's traced modules hold about two thousand lines, so
# collisions are rare at this size and a point stays a small int (EDGE_BITS + CONTEXT_BITS bits).
EDGE_BITS = 16
_EDGE_MASK = (1 << EDGE_BITS) - 1

# The features of the requests in flight that make up a step's context, one bit each, in this
# order (`Engine._context` reads them from its own request objects at the start of each step):
# more than one request; a request with n > 1 (forks); a sampled (seeded) request; a request under
# a LoRA adapter; a constrained (choice) request; a tenant's cache salt; an abort since the last
# step; a prompt chunked across steps; a request whose prompt hit the prefix cache.
CONTEXTS = ("multi", "n", "seed", "adapter", "choice", "salt", "abort", "chunk", "hit")
CONTEXT_BITS = len(CONTEXTS)

# The engine's own modules, traced whole, and the model's sampler (its forward pass is numpy
# work that branches on nothing a scheduler decides, and would cost a call per line per layer).
_TRACED_MODULES = ("scheduler.py", "radix.py", "kvpool.py", "statecache.py", "window.py", "faults.py", "hosttier.py")
_MODEL_SAMPLER = frozenset({"logprobs", "greedy", "_top_k"})


def engine_files() -> dict[str, frozenset[str] | None]:
    """The files the tracer follows: each engine module's path -> None (all of its code), and
    the model's path -> the names of its sampling functions."""
    here = os.path.dirname(os.path.abspath(__file__))
    files: dict[str, frozenset[str] | None] = {os.path.join(here, m): None for m in _TRACED_MODULES}
    files[os.path.join(here, "model.py")] = _MODEL_SAMPLER
    return files


def context_of(names: Iterable[str]) -> int:
    """The context bits of a set of feature names (`CONTEXTS`); unknown names are a bug."""
    return sum(1 << CONTEXTS.index(n) for n in set(names))


def context_names(bits: int) -> tuple[str, ...]:
    """The names back from context bits, in `CONTEXTS` order."""
    return tuple(n for i, n in enumerate(CONTEXTS) if bits >> i & 1)


_UNSEEN = -1


class Tracer:
    """The cumulative map `{point: hits}` of one engine, filled on the engine thread.

    `context` is what the engine sets at the start of each step (`context_of`); None while it is
    idle, so that flushes, idle steps and whatever a client's read of the map races with count
    nothing: the map moves only while requests are in flight.
    """

    def __init__(self, files: Mapping[str, Collection[str] | None] | Collection[str]) -> None:
        self._files: dict[str, frozenset[str] | None] = (
            {f: None if names is None else frozenset(names) for f, names in files.items()}
            if isinstance(files, Mapping) else dict.fromkeys(files))
        self.counts: dict[int, int] = {}
        self.context: int | None = None
        # Each code object's edge base, or None for code not traced: decided once per code.
        self._codes: dict[CodeType, int | None] = {}

    def install(self) -> None:
        """Trace the calling thread (the engine thread calls this first thing)."""
        sys.settrace(self._call)

    def snapshot(self) -> dict[int, int]:
        """A copy of the map, safe from another thread: `dict(d)` copies an int-keyed dict in C
        without releasing the GIL, so the engine thread cannot change it mid-copy."""
        return dict(self.counts)

    def _base(self, code: CodeType) -> int | None:
        if code.co_filename not in self._files:
            return None
        names = self._files[code.co_filename]
        if names is not None and code.co_name not in names:
            return None
        where = f"{os.path.basename(code.co_filename)}:{code.co_qualname}:{code.co_firstlineno}"
        return zlib.crc32(where.encode()) & _EDGE_MASK

    def _call(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        code = frame.f_code
        base = self._codes.get(code, _UNSEEN)
        if base == _UNSEEN:
            base = self._codes[code] = self._base(code)
        if base is None:
            return None  # not the engine's: no per-line tracing of this frame
        counts = self.counts
        prev = base

        def line(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
            nonlocal prev
            if event == "line":
                # AFL: a line's id is a hash of its place; the edge is the current id xor the
                # previous one shifted, so A->B and B->A differ and a tight loop's A->A is not 0.
                cur = (base + frame.f_lineno * 40503) & _EDGE_MASK
                ctx = self.context
                if ctx is not None:
                    point = ((cur ^ (prev >> 1)) << CONTEXT_BITS) | ctx
                    counts[point] = counts.get(point, 0) + 1
                prev = cur
            return line

        return line
