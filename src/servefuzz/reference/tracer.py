"""Engine coverage: the reference engine traces its own scheduling code as AFL-style edges.

With `--coverage` the engine thread runs under `sys.settrace`. A program fuzzer keeps an input
that reaches a new edge of the program; servefuzz's strategies are written per bug class, so
without this it can only find what someone aimed at. The tracer follows only the engine's own
modules (scheduler, radix cache, KV pool, faults, and the sampler of the model): the global
trace function returns None for every other frame (numpy, aiohttp, the forward pass), so those
cost one dictionary lookup per call and nothing per line.

A *point* is an edge within one code object, (previous line, line) hashed to `EDGE_BITS`
bits as AFL hashes (previous >> 1) ^ current, together with the *context* of the scheduler step
it ran in: the features of each request in flight at the step's start, request by request
(`REQUEST_FEATURES`), and the step's own (`STEP_FEATURES`), as a frozenset keyed to
`CONTEXT_BITS` bits (`step_context`). The same edge under a new context is a new point (AFL's
context-sensitive coverage): the abort path run while a forked n > 1 request is decoding is not
the abort path alone, and a forked *seeded* request beside a plain one is not a forked request
beside a seeded one, though the features held in flight are the same.

    >>> t = Tracer(files=())
    >>> a = step_context({"multi"}, [{"n", "seed"}, set()])
    >>> b = step_context({"multi"}, [{"n"}, {"seed"}])
    >>> a != b, a == step_context({"multi"}, [set(), {"seed", "n"}]), 0 <= a < 1 << CONTEXT_BITS
    (True, True, True)
    >>> describe({"multi"}, [{"n", "seed"}, set()])
    'multi|-;n+seed'
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

__all__ = ["CONTEXT_BITS", "EDGE_BITS", "REQUEST_FEATURES", "STEP_FEATURES", "Tracer", "describe", "engine_files",
           "step_context"]

# AFL's map is 64 Ki edges; the engine's traced modules hold about two thousand lines, so
# collisions are rare at this size and a point stays a small int (EDGE_BITS + CONTEXT_BITS bits).
EDGE_BITS = 16
_EDGE_MASK = (1 << EDGE_BITS) - 1

# The features of one request in flight that make up its part of a step's context, in this order
# (`Engine._context` reads them from its own request objects at the start of each step): n > 1
# (forks); sampled (seeded); under a LoRA adapter; constrained (choice); a tenant's cache salt;
# its prompt hit the prefix cache; its prompt is the one being chunked across steps; it was
# retracted (its state carried over a second prefill). Each is state the request carries that an
# engine event can move: kept per request, so that a combination *within* a request (a seeded
# fork, a retracted grammar) is a context of its own.
REQUEST_FEATURES = ("n", "seed", "adapter", "choice", "salt", "hit", "chunk", "retracted")
# The step's own features: more than one request in flight; an abort since the last step.
STEP_FEATURES = ("multi", "abort")
# A step context is a frozenset of per-request feature sets with the step's features, hashed
# (crc32 of its canonical text, `describe`) to this many bits: a campaign reaches some hundreds,
# so collisions are rare at 64 Ki and a point stays a small int. Feedback splits every engine's
# points at this width (`feedback.COV_CONTEXT_BITS`, held equal by tests/test_feedback.py).
CONTEXT_BITS = 16
_CONTEXT_MASK = (1 << CONTEXT_BITS) - 1

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


def describe(step: Collection[str], requests: Iterable[Collection[str]]) -> str:
    """A step context's canonical text: its step features, then the distinct feature sets of its
    requests (`-` for a request with none), each sorted: `multi|-;n+seed`. Unknown names are a bug."""
    assert set(step) <= set(STEP_FEATURES), step
    kinds = set()
    for names in requests:
        assert set(names) <= set(REQUEST_FEATURES), names
        kinds.add("+".join(sorted(names)) or "-")
    return f"{','.join(sorted(step))}|{';'.join(sorted(kinds))}"


def step_context(step: Collection[str], requests: Iterable[Collection[str]]) -> int:
    """The `CONTEXT_BITS`-bit key of a step context (`describe`): the same in every process."""
    return zlib.crc32(describe(step, requests).encode()) & _CONTEXT_MASK


_UNSEEN = -1


class Tracer:
    """The cumulative map `{point: hits}` of one engine, filled on the engine thread.

    `context` is what the engine sets at the start of each step (`enter`); None while it is
    idle, so that flushes, idle steps and whatever a client's read of the map races with count
    nothing: the map moves only while requests are in flight. `contexts` names each key the
    engine entered (`describe`), for a reader of `/coverage`.
    """

    def __init__(self, files: Mapping[str, Collection[str] | None] | Collection[str]) -> None:
        self._files: dict[str, frozenset[str] | None] = (
            {f: None if names is None else frozenset(names) for f, names in files.items()}
            if isinstance(files, Mapping) else dict.fromkeys(files))
        self.counts: dict[int, int] = {}
        self.context: int | None = None
        self.contexts: dict[int, str] = {}
        # (step features, per-request feature sets) -> key: a step's key is one dict lookup once
        # its mix was seen, not a crc32 per step.
        self._keys: dict[tuple[frozenset[str], frozenset[frozenset[str]]], int] = {}
        # Each code object's edge base, or None for code not traced: decided once per code.
        self._codes: dict[CodeType, int | None] = {}

    def enter(self, step: frozenset[str], requests: frozenset[frozenset[str]]) -> int:
        """Count from here in the step context of `step`'s and `requests`' features; its key."""
        key = self._keys.get((step, requests))
        if key is None:
            key = self._keys[(step, requests)] = step_context(step, requests)
            self.contexts[key] = describe(step, requests)
        self.context = key
        return key

    def install(self) -> None:
        """Trace the calling thread (the engine thread calls this first thing)."""
        sys.settrace(self._call)

    def snapshot(self) -> dict[int, int]:
        """A copy of the map, safe from another thread: `dict(d)` copies an int-keyed dict in C
        without releasing the GIL, so the engine thread cannot change it mid-copy."""
        return dict(self.counts)

    def names(self) -> dict[int, str]:
        """A copy of `contexts`, safe from another thread as `snapshot` is."""
        return dict(self.contexts)

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
