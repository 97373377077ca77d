"""The serving core: a continuous-batching scheduler and model runner shaped like SGLang's.

One engine thread owns all state. Each step is an extend (prefill) batch, bounded by the
chunked-prefill budget, or else a decode batch over the running sequences (prefill first, as
SGLang does). In overlap mode (the default) batch N+1 is *scheduled* (admissions, row and page
allocation, req_to_token writes) before batch N's forward reads req_to_token and before N's
results are processed, so results land one step late; the forward reads req_to_token when it
runs, so that ordering is real, not simulated.

    >>> from servefuzz.reference.server_args import ServerArgs
    >>> eng = Engine(ServerArgs(page_size=4, max_total_tokens=256))
    >>> got = []
    >>> eng.add_request(Request("r1", (5, 6, 7, 8, 9), max_new_tokens=3, sink=got.extend))
    >>> eng.run_until_idle()
    >>> [e.step.token_id for e in got if isinstance(e, TokenEvent)] == list(
    ...     eng.model.generate([5, 6, 7, 8, 9], 3).token_ids)
    True

The HTTP layer (`server.py`) uses the thread-safe side: `check`, `submit`, `abort`,
`flush_cache`, `start`, `stop`; events reach it through each request's `sink`, called on the
engine thread once per step with that step's events.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import enum
import math
import queue
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from servefuzz.reference.faults import LOSSY_STEP, batch_variant_offsets
from servefuzz.reference.hosttier import HostEntry, HostTier
from servefuzz.reference.kvpool import PADDING_SLOT, KVPool, ReqToTokenPool
from servefuzz.reference.model import (
    EOS_ID,
    LOGIT_UNIT,
    PAD_ID,
    ModelConfig,
    TinyModel,
    TokenLogprobs,
    attend,
    causal_attention,
)
from servefuzz.reference.radix import RadixCache, RadixNode
from servefuzz.reference.server_args import CAPTURE_BATCH_SIZES, ServerArgs
from servefuzz.reference.tracer import Tracer, context_of, engine_files

__all__ = [
    "Engine",
    "EngineStats",
    "Event",
    "FinishEvent",
    "FinishReason",
    "Request",
    "RequestError",
    "TokenEvent",
]


# A request that wakes an idle engine waits for the rest of its burst before the first scheduling
# round: until no request has arrived for BURST_QUIET_S (at most BURST_MAX_S in all). A modelling
# choice for reproducibility, so that the requests one client sends at one instant are one
# arrival. They leave the client one after another and the HTTP front takes a while for each:
# two requests sent at once by servefuzz's runner reached the engine 0.2 to 1 ms apart, but up
# to 11 ms apart on two busy cores (30 pairs measured), and an aimed burst rides 6 to 14 ms
# behind its blocker. Without the wait a round boundary fell among them at random (three
# requests sent at once reproduced page-boundary-prefix 29 times in 40). A fixed wait was not
# enough: it put a round boundary a fixed time after whatever woke the engine, and a burst
# arriving just then was split. The wait stands for SGLang's scheduler taking what has queued
# in one receive (recv_requests drains its socket), on a machine where one client's burst takes
# milliseconds to arrive. A busy engine never waits; a request alone is served 20 ms later.
BURST_QUIET_S = 0.02
BURST_MAX_S = 0.1


class RequestError(ValueError):
    """A request the engine cannot serve; the message is one line for the client (HTTP 400)."""


@dataclass(frozen=True)
class FinishReason:
    kind: str  # "length" | "stop" | "abort"
    length: int = 0
    matched: int | None = None
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        """SGLang's `meta_info.finish_reason` shape."""
        if self.kind == "length":
            return {"type": "length", "length": self.length}
        if self.kind == "stop":
            return {"type": "stop", "matched": self.matched}
        return {"type": "abort", "message": self.message, "status_code": None, "err_type": None}


@dataclass(frozen=True)
class TokenEvent:
    """Choice `index` produced one token."""

    index: int
    step: TokenLogprobs


@dataclass(frozen=True)
class FinishEvent:
    index: int
    reason: FinishReason


Event = TokenEvent | FinishEvent


@dataclass(eq=False)
class Request:
    """One generate call: `n` choices of one prompt. Owned by the engine once submitted."""

    rid: str
    prompt: tuple[int, ...]
    max_new_tokens: int
    n: int = 1
    temperature: float = 0.0
    ignore_eos: bool = True
    top_logprobs_num: int = 0
    seed: int = 0
    cache_salt: str | None = None  # the tenant's prefix-cache salt: no page is shared across salts
    # Structured output: the answer must be one of these token sequences (a `regex` alternation
    # of choices in the engine's own spelling, ' w<t>' per token: `server._choices`). Each step a
    # row may take only a token that continues some choice, or EOS once it has spelt one whole.
    choices: tuple[tuple[int, ...], ...] | None = None
    adapter: str | None = None  # the LoRA adapter (a `--lora` name) it runs under; None: the base model
    sink: Callable[[Sequence[Event]], None] | None = None
    cached_tokens: int = 0  # set by the engine when the request is admitted
    seqs: list[Seq] = field(default_factory=list, repr=False)


# The request features whose state a retraction must carry over to the sequence's second
# prefill: its seeded generator's draws so far, its grammar's position, its adapter, its siblings.
STATEFUL = ("seeded", "choices", "adapter", "n")


def stateful(req: Request) -> tuple[str, ...]:
    """The `STATEFUL` features `req` has."""
    return tuple(name for name, on in zip(STATEFUL, (req.temperature > 0, req.choices is not None,
                                                       req.adapter is not None, req.n > 1), strict=True) if on)


class _State(enum.Enum):
    WAITING = "waiting"
    PREFILL = "prefill"
    FORK_PENDING = "fork-pending"  # choice 1..n-1, waiting for choice 0's prefill to fork from
    RUNNING = "running"
    RETRACTING = "retracting"
    DONE = "done"


class Seq:
    """One choice of a request: the mutable in-flight record."""

    def __init__(self, req: Request, index: int) -> None:
        self.req = req
        self.index = index
        self.tokens = list(req.prompt)
        self.state = _State.WAITING if index == 0 else _State.FORK_PENDING
        self.row: int | None = None
        self.pages: list[int] = []
        self.kv_len = 0  # positions whose KV is written or scheduled to be written
        self.inflight = 0  # scheduled batches holding this sequence, not yet processed
        self.node: RadixNode | None = None  # the radix node this sequence keeps locked
        self.admitted = False
        # Any integer seeds a choice's own generator (numpy wants non-negative: fold it).
        self.rng = np.random.default_rng((req.seed % 2**63, index)) if req.temperature > 0 else None

    @property
    def outputs(self) -> int:
        return len(self.tokens) - len(self.req.prompt)

    @property
    def scheduled_outputs(self) -> int:
        """Outputs there will be once every scheduled batch is processed."""
        return self.kv_len - len(self.req.prompt) + 1


@dataclass(eq=False)
class _ExtendItem:
    seq: Seq
    row: int
    start: int
    end: int
    ids: np.ndarray
    final: bool  # the chunk reaches the end of the sequence: its last position yields a token


@dataclass(eq=False)
class _DecodeItem:
    seq: Seq
    row: int
    position: int
    slot: int


@dataclass(eq=False)
class _ExtendBatch:
    items: list[_ExtendItem]


@dataclass(eq=False)
class _DecodeBatch:
    items: list[_DecodeItem]


_Batch = _ExtendBatch | _DecodeBatch


@dataclass
class EngineStats:
    """Counters and gauges behind /metrics."""

    cache_hit_tokens: int = 0
    cache_query_tokens: int = 0
    evicted_tokens: int = 0
    retracted_reqs: int = 0
    # Retractions by the request state a retraction must carry over (`STATEFUL`): what a client
    # reads to know that a retracted request of that kind ran at all (issue 53, item 5).
    retracted_by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATEFUL, 0))
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished_reqs: int = 0
    aborted_reqs: int = 0
    forward_steps: int = 0
    num_running_reqs: int = 0
    num_queue_reqs: int = 0
    token_usage: float = 0.0


class _GraphBuffers:
    """The persistent inputs of "captured" decode graphs: a replay reads these, not fresh arrays."""

    def __init__(self, size: int, padding_row: int) -> None:
        self.ids = np.zeros(size, dtype=np.intp)
        self.positions = np.zeros(size, dtype=np.intp)
        self.rows = np.zeros(size, dtype=np.intp)
        self.lens = np.ones(size, dtype=np.intp)
        self.slots = np.zeros(size, dtype=np.intp)
        self.padding_row = padding_row
        self.last_bs = 0

    def load(
        self, ids: np.ndarray, positions: np.ndarray, rows: np.ndarray, slots: np.ndarray, *, stale_fault: bool
    ) -> tuple[np.ndarray, ...]:
        raw = len(ids)
        bs = next(b for b in CAPTURE_BATCH_SIZES if b >= raw)
        fresh = raw
        if stale_fault and bs < self.last_bs:
            # FAULT stale-padding (models SGLang #24361 / PR #24401): when the captured size
            # shrinks, the copy into the graph's position/row buffers is one entry short, so
            # the last real row replays with the previous step's position and row.
            fresh = raw - 1
        self.ids[:raw], self.slots[:raw] = ids, slots
        self.positions[:fresh], self.rows[:fresh], self.lens[:fresh] = (
            positions[:fresh],
            rows[:fresh],
            positions[:fresh] + 1,
        )
        # Padding rows: token 0 at position 0 of the all-zero padding row, writing to slot 0.
        self.ids[raw:bs], self.positions[raw:bs], self.rows[raw:bs] = PAD_ID, 0, self.padding_row
        self.lens[raw:bs], self.slots[raw:bs] = 1, PADDING_SLOT
        self.last_bs = bs
        return self.ids[:bs], self.positions[:bs], self.rows[:bs], self.lens[:bs], self.slots[:bs]


class Engine:
    """Scheduler + model runner over one KV pool. See the module docstring."""

    def __init__(self, args: ServerArgs, model: TinyModel | None = None) -> None:
        self.args = args
        self.model = model or TinyModel(ModelConfig(seed=args.model_seed, context_length=args.context_length))
        # Adapters are loaded at start, as vLLM's --lora-modules and SGLang's --lora-paths are.
        self.loras = {name: self.model.with_lora(seed) for name, seed in args.lora}
        c = self.model.config
        self.pool = KVPool(c.n_layers, c.n_heads, c.head_dim, args.max_total_tokens, args.page_size)
        self.rows = ReqToTokenPool(args.max_running_requests, args.context_length)
        self.tree = None if args.disable_radix_cache else RadixCache(self.pool)
        # The host tier (HiCache-shaped, `hosttier`): behind the radix tree only.
        self.host = None if self.tree is None or not args.host_tier_tokens else HostTier(
            self.pool, self.tree, args.host_tier_tokens, key_no_salt=self._has("host-key-no-salt"))
        # The last admissions' fresh pages and who took them (FAULT host-loadback-stale-pages).
        self._handed: deque[tuple[Seq, list[int]]] = deque(maxlen=4)
        self.overlap = not args.disable_overlap_schedule
        self.graph = None if args.disable_cuda_graph else _GraphBuffers(max(CAPTURE_BATCH_SIZES), self.rows.padding_row)
        self.stats = EngineStats()
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []  # decoding sequences, in admission order
        self.chunked: Seq | None = None  # the one sequence whose prefill continues next batch
        self.inflight: _Batch | None = None  # overlap mode: scheduled, forward not yet run
        self.requests: dict[str, Request] = {}
        # FAULT stale-slot-continuation: the prompt state a finished request left in its idle slot.
        self._idle_slot: tuple[int, ...] | None = None
        self.error: str | None = None
        self._events: dict[int, tuple[Request, list[Event]]] = {}
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        # --coverage: the engine thread traces its own code (`tracer`); `_aborted` marks the
        # step after an abort, part of that step's context.
        self.coverage = Tracer(engine_files()) if args.coverage else None
        self._aborted = False

    def _has(self, fault: str) -> bool:
        return self.args.has_fault(fault)

    def _cache_key(self, req: Request) -> str | None:
        """What the radix tree keys a request's first page on beside its tokens: its tenant's
        salt and its adapter. Pages computed under one adapter hold that adapter's KV (its v
        projection, and every layer after the first), so no other adapter, nor the base model,
        may read them: vLLM puts the LoRA name in every block hash's extra keys for this."""
        if req.adapter is None or self._has("lora-prefix-shared"):
            # FAULT lora-prefix-shared (models vLLM #38606, prefix-cache block visibility x
            # LoRA): the lookup's key is the tokens (and salt) alone, so a request under one
            # adapter hits pages another adapter, or the base model, computed for the same
            # prefix and decodes over KV it would never have made. Needs a page cached by an
            # earlier request under another adapter: one request alone on a flushed server
            # never sees it. Cured by --disable-radix-cache (no tree, no lookup).
            return req.cache_salt
        return f"{req.cache_salt or ''}\x00lora:{req.adapter}"

    # -- thread-safe side ----------------------------------------------------------------------

    def check(self, req: Request) -> None:
        """Raise RequestError if `req` can never be served. Reads only immutable settings."""
        a, c = self.args, self.model.config
        if not req.prompt:
            raise RequestError("the prompt must hold at least one token id")
        bad = next((t for t in req.prompt if not 0 <= t < c.vocab_size), None)
        if bad is not None:
            raise RequestError(f"token id {bad} is outside the vocabulary [0, {c.vocab_size})")
        if req.max_new_tokens < 0:
            raise RequestError("max_new_tokens must be >= 0")
        if len(req.prompt) + req.max_new_tokens > a.context_length:
            raise RequestError(
                f"prompt ({len(req.prompt)} tokens) + max_new_tokens ({req.max_new_tokens}) "
                f"exceeds the context length {a.context_length}"
            )
        if not 1 <= req.n <= a.max_running_requests:
            raise RequestError(f"n must be in 1..{a.max_running_requests} (max_running_requests)")
        pages = math.ceil((len(req.prompt) + req.max_new_tokens) / a.page_size) * req.n
        if pages > self.pool.usable_pages:
            raise RequestError(
                f"the request needs up to {pages * a.page_size} KV tokens, more than "
                f"max_total_tokens={a.max_total_tokens} can hold"
            )
        if not (req.temperature >= 0 and math.isfinite(req.temperature)):
            raise RequestError("temperature must be a finite number >= 0")
        if not 0 <= req.top_logprobs_num <= c.vocab_size:
            raise RequestError(f"top_logprobs_num must be in 0..{c.vocab_size}")
        if req.choices is not None:
            if req.ignore_eos:
                raise RequestError("a constrained request ends at its EOS: ignore_eos must be false")
            bad = next((t for ch in req.choices for t in ch if not EOS_ID < t < c.vocab_size), None)
            if bad is not None:
                raise RequestError(f"choice token {bad} is not an ordinary token of [3, {c.vocab_size})")
        if req.adapter is not None and req.adapter not in self.loras:
            raise RequestError(f"no such LoRA adapter; this server has: {', '.join(self.loras) or 'none'} (--lora)")

    def submit(self, req: Request) -> None:
        self._inbox.put(("submit", req))

    def abort(self, rid: str) -> None:
        self._inbox.put(("abort", rid))

    def abort_all(self) -> None:
        self._inbox.put(("abort_all", None))

    def flush_cache(self) -> concurrent.futures.Future[bool]:
        """Resolves True if the cache was flushed, False if requests were in progress."""
        fut: concurrent.futures.Future[bool] = concurrent.futures.Future()
        self._inbox.put(("flush", fut))
        return fut

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="reference-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._inbox.put(("stop", None))
            self._thread.join(timeout=10)
            self._thread = None

    def _loop(self) -> None:
        try:
            if self.coverage is not None:
                self.coverage.install()  # this thread only: the HTTP loop is never traced
            while True:
                idle = not self.busy
                # Set while an idle engine waits for the rest of a burst (see BURST_QUIET_S).
                deadline: float | None = None
                limit: float | None = None
                while True:
                    try:
                        if deadline is None:
                            cmd, arg = self._inbox.get(block=idle)
                        else:
                            cmd, arg = self._inbox.get(timeout=max(0.0, deadline - time.monotonic()))
                    except queue.Empty:
                        break
                    if cmd == "stop":
                        return
                    self._apply(cmd, arg)
                    if idle and cmd == "submit":
                        now = time.monotonic()
                        limit = now + BURST_MAX_S if limit is None else limit
                        deadline = min(limit, now + BURST_QUIET_S)
                    elif deadline is None:
                        idle = False
                self.step()
        except Exception:  # noqa: BLE001 - a bug in the engine itself: fail loudly, never hang clients
            self.error = traceback.format_exc()
            print(self.error, file=sys.stderr, flush=True)
            reason = FinishReason("abort", message="internal engine error")
            for req in self.requests.values():
                if req.sink is not None:
                    with contextlib.suppress(Exception):
                        req.sink([FinishEvent(s.index, reason) for s in req.seqs if s.state is not _State.DONE])

    def _apply(self, cmd: str, arg: Any) -> None:
        if cmd == "submit":
            try:
                self.add_request(arg)
            except RequestError as e:  # the HTTP layer checks first; this is a last resort
                if arg.sink is not None:
                    arg.sink([FinishEvent(i, FinishReason("abort", message=str(e))) for i in range(arg.n)])
        elif cmd == "abort":
            self.abort_now(arg)
        elif cmd == "abort_all":
            for rid in list(self.requests):
                self.abort_now(rid)
        elif cmd == "flush":
            arg.set_result(self.flush_now())

    # -- engine-thread side (also driven directly by in-process tests) ---------------------------

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running or self.chunked or self.inflight)

    def add_request(self, req: Request) -> None:
        self.check(req)
        if req.rid in self.requests:
            raise RequestError(f"duplicate request id {req.rid!r}")
        req.seqs = [Seq(req, i) for i in range(req.n)]
        self.requests[req.rid] = req
        self.waiting.append(req.seqs[0])
        self._update_gauges()

    def abort_now(self, rid: str) -> None:
        req = self.requests.get(rid)
        if req is None:
            return
        for s in req.seqs:
            if s.state is _State.DONE:
                continue
            if s.state is _State.WAITING and s in self.waiting:
                self.waiting.remove(s)
            if self.chunked is s:
                self.chunked = None
            if self._has("abort-reuse") and s.pages:
                # FAULT abort-reuse (models SGLang #23392 / #24527): the abort path frees every
                # page of the request, including the prefix pages it shares with the radix
                # tree, which it should only unlock. The tree keeps pointing at them.
                self.pool.force_free(s.pages)
                s.pages = []
            self._finish(s, FinishReason("abort", message="aborted by the client"))
            if s.inflight == 0:
                self._release(s)
        self._aborted = True
        self._emit()

    def flush_now(self) -> bool:
        """Idle only: empty the cache and reset the allocators, as SGLang's flush_cache does.

        A flushed engine is a fresh engine, whatever a planted fault did to its free lists.
        """
        if self.busy:
            return False
        if self.tree is not None:
            self.tree.reset()
        if self.host is not None and not self.args.flush_device_only:
            # --flush-device-only leaves the host tier as it is (vLLM's /reset_prefix_cache
            # without reset_external, vllm#57727): what a client's flush check must catch.
            self.host.clear()
        self.pool.clear()
        self.rows.clear()
        self._idle_slot = None
        self._update_gauges()
        return True

    def step(self) -> None:
        """One scheduling round: in overlap mode schedule N+1, then run and process N."""
        if self.coverage is not None:
            self.coverage.context = self._context() if self.busy else None
        if self.overlap:
            nxt = self._schedule()
            if self.inflight is not None:
                self._run(self.inflight)
            self.inflight = nxt
        else:
            batch = self._schedule()
            if batch is not None:
                self._run(batch)
        if self.graph is not None and not self.busy:
            self.graph.last_bs = 0  # a busy period ended: the next decode is nobody's "next step"
        self._update_gauges()
        if self.coverage is not None and not self.busy:
            # Idle from here: stop counting before the answers go out, so that a client that
            # reads /coverage once its requests are answered reads a map that has stopped.
            self.coverage.context = None
        self._emit()

    def _context(self) -> int:
        """The step's context for engine coverage (`tracer.CONTEXTS`): what the requests in
        flight are, read from the engine's own records. Clears the abort mark."""
        reqs = list(self.requests.values())
        names = {"multi"} if len(reqs) > 1 else set()
        for r in reqs:
            names |= {name for name, on in (
                ("n", r.n > 1), ("seed", r.temperature > 0), ("adapter", r.adapter is not None),
                ("choice", r.choices is not None), ("salt", r.cache_salt is not None), ("hit", r.cached_tokens > 0),
            ) if on}
        if self.chunked is not None:
            names.add("chunk")
        if self._aborted:
            names.add("abort")
            self._aborted = False
        return context_of(names)

    def run_until_idle(self, max_steps: int = 100_000) -> None:
        """Step until nothing is waiting, running or in flight (tests and tools)."""
        for _ in range(max_steps):
            if not self.busy:
                return
            self.step()
        raise RuntimeError("engine did not become idle")

    # -- scheduling ----------------------------------------------------------------------------

    def _schedule(self) -> _Batch | None:
        if self._has("overlap-war"):
            self._fault_free_finishing_rows()
        return self._schedule_extend() or self._schedule_decode()

    def _fault_free_finishing_rows(self) -> None:
        # FAULT overlap-war (models SGLang PR #26380, #18744): a request that reaches
        # max_new_tokens in the in-flight batch N is predictably finished, so its req_to_token
        # row is handed back *now*, while batch N's forward has yet to read it. Without overlap
        # nothing is in flight at schedule time and this is harmless.
        batch = self.inflight
        if not isinstance(batch, _DecodeBatch):
            return
        for it in batch.items:
            s = it.seq
            if s.row is not None and s.inflight == 1 and s.scheduled_outputs >= s.req.max_new_tokens:
                self.rows.free(s.row)
                s.row = None

    def _ensure_free_pages(self, n: int) -> bool:
        short = n - self.pool.free_pages
        if short > 0 and self.tree is not None:
            evicted = self.tree.evict(short, ignore_locks=self._has("evict-in-use"))
            self.stats.evicted_tokens += evicted * self.args.page_size
        return self.pool.free_pages >= n

    def _pages_for(self, s: Seq, end: int) -> int:
        return max(0, math.ceil(end / self.args.page_size) - len(s.pages))

    def _schedule_extend(self) -> _ExtendBatch | None:
        budget = self.args.chunked_prefill_size if self.args.chunked_prefill_size > 0 else sys.maxsize
        reserve = len(self.running)  # headroom: each decoding sequence may need a page soon
        items: list[_ExtendItem] = []
        if self.chunked is not None:
            s = self.chunked
            end = min(len(s.tokens), s.kv_len + budget)
            need = self._pages_for(s, end)
            if not self._ensure_free_pages(need + reserve):
                return None
            s.pages += self.pool.alloc(need) or []
            items.append(self._extend_item(s, end))
            budget -= end - items[-1].start
        while self.waiting and budget > 0:
            item = self._admit(self.waiting[0], budget, reserve)
            if item is None:
                break
            self.waiting.popleft()
            items.append(item)
            budget -= item.end - item.start
        return _ExtendBatch(items) if items else None

    def _admit(self, s: Seq, budget: int, reserve: int) -> _ExtendItem | None:
        ps = self.args.page_size
        fresh = not s.admitted
        siblings = [x for x in s.req.seqs[1:] if x.state is _State.FORK_PENDING] if fresh else []
        if self.rows.free_rows < 1 + len(siblings):
            return None
        stale = fresh and self._fault_stale_slot(s)
        prefix: list[int] = []
        node = None
        if self.tree is not None:
            match = self.tree.match_prefix(
                s.tokens, (len(s.tokens) - 1) // ps, salt=self._cache_key(s.req),
                boundary_fast_path=self._has("page-boundary-prefix"), salt_blind=self._has("salt-ignored"),
            )
            prefix, node = match.pages, match.node
        # Pages the host tier holds past the device match (loaded back below, once there is room).
        hosted = [] if self.host is None or node is None else self.host.lookup(
            node, s.tokens, len(prefix), (len(s.tokens) - 1) // ps, self._cache_key(s.req))
        start = (len(prefix) + len(hosted)) * ps
        end = min(len(s.tokens), start + budget)
        need = math.ceil(end / ps) - len(prefix)
        # Hold the matched prefix *before* making room: eviction must not take it from under us.
        self.pool.retain(prefix)
        if self.tree is not None and node is not None and prefix:
            self.tree.lock(node)
        if not self._ensure_free_pages(need + reserve):
            self.pool.release(prefix)
            if self.tree is not None and node is not None and prefix:
                self.tree.unlock(node)
            return None
        if hosted:
            loaded = self._load_back(s, prefix, node, hosted)  # type: ignore[arg-type]
            prefix, node = prefix + loaded, s.node
            start = len(prefix) * ps  # less than planned where the host dropped a page meanwhile
            end = min(len(s.tokens), start + budget)
            need = math.ceil(end / ps) - len(prefix)
        elif prefix:
            s.node = node
        handed = self.pool.alloc(need) or []
        s.pages = prefix + handed
        self._handed.append((s, handed))
        s.row = self.rows.alloc()
        for sib in siblings:
            sib.row = self.rows.alloc()
        self.rows.write(s.row, 0, self.pool.slots(s.pages, 0, start))
        s.kv_len, s.state, s.admitted = start, _State.PREFILL, True
        if fresh:
            s.req.cached_tokens = 0 if stale else start  # the victim's own prompt matched nothing
            self.stats.prompt_tokens += len(s.tokens)
        self.stats.cache_query_tokens += len(s.tokens)
        self.stats.cache_hit_tokens += start
        return self._extend_item(s, end)

    def _load_back(self, s: Seq, prefix: list[int], node: RadixNode, hosted: list[HostEntry]) -> list[int]:
        """The host pages `hosted` continue `s`'s device match `prefix` (whose last node `node`
        `s` holds locked): copied into device pages and cached in the radix tree as if computed
        here; `s`'s lock moves down to them (`s.node`). Returns the device pages, held for `s`."""
        assert self.host is not None and self.tree is not None
        ps = self.args.page_size
        hosted = self.host.still_held(hosted)
        pages = self._fault_loadback_pages(s, len(hosted)) if self._has("host-loadback-stale-pages") else (
            self.pool.alloc(len(hosted)) or [])
        # FAULT host-loadback-race (models a load-back whose copy stream is not waited on: SGLang's
        # HiCache load_back / load_cache_event class): in overlap mode, when the batch in flight
        # is a decode, the host-to-device copy is issued beside it and the extend that reads the
        # pages is not made to wait: its forward reads them before the copy lands (zeros, or the
        # KV of whoever held the pages before), and the copy lands only after it. Needs a load-back
        # (other requests evicted the prefix to the host) while another request decodes. Cured by
        # --disable-overlap-schedule (nothing is in flight at schedule time).
        racing = self._has("host-loadback-race") and self.overlap and isinstance(self.inflight, _DecodeBatch)
        self.host.copy_in(hosted[: len(pages)], pages, defer_for=s if racing else None)
        full = prefix + pages
        deepest = self.tree.insert(s.tokens[: len(full) * ps], full, salt=self._cache_key(s.req))
        self.tree.lock(deepest)
        if prefix:
            self.tree.unlock(node)
        s.node = deepest if deepest is not self.tree.root else None
        self.host.stats.host_hit_tokens += len(pages) * ps
        return pages

    def _fault_loadback_pages(self, s: Seq, n: int) -> list[int]:
        # FAULT host-loadback-stale-pages (models a HiCache load-back landing in device indices
        # the allocator already handed out, the class of sglang#38031 and #39830's "host-tier hit
        # answers another prompt"): the load-back takes its device pages from a free-list view a
        # few admissions stale, so it is given pages one of the last admitted requests took while
        # that request still holds them. The copy lands there, then that request's prefill and
        # decode write their own KV over it: the returning request decodes, and every later hit
        # on the loaded prefix reads, another prompt's KV. Needs a load-back (other requests
        # evicted the prefix to the host) while a recently admitted request still runs.
        taken = next((fresh for other, fresh in reversed(self._handed) if fresh and other is not s
                      and other.state is not _State.DONE and set(fresh) <= set(other.pages)), [])[:n]
        self.pool.retain(taken)  # held for s too: the accounting stays whole, only the KV is wrong
        return taken + (self.pool.alloc(n - len(taken)) or [])

    def _fault_stale_slot(self, s: Seq) -> bool:
        # FAULT stale-slot-continuation (models llama.cpp #27148, the server prompt cache with
        # --cache-ram / --cache-idle-slots): a request that finished while another was still
        # running leaves its prompt state in its idle slot; the next fresh request (n = 1) whose
        # own prompt misses the cache is handed that slot's state instead of a cleared one, so
        # it decodes the finished request's conversation: its answer is that request's solo
        # continuation, reported with cached_tokens = 0. Consumed once; flushed with the cache.
        # Needs prior traffic in the same busy period: a lone request on a flushed server never
        # sees it. Cured by turning the prompt cache off (--disable-radix-cache).
        donor = self._idle_slot
        if donor is None or self.tree is None or s.req.n != 1 or donor == s.req.prompt:
            return False
        if len(donor) + s.req.max_new_tokens > self.args.context_length:
            return False
        if self.tree.match_prefix(s.tokens, (len(s.tokens) - 1) // self.args.page_size, salt=self._cache_key(s.req)).pages:
            return False  # a cache hit: the slot is not the one picked
        s.req.prompt, s.tokens, self._idle_slot = donor, list(donor), None
        return True

    def _extend_item(self, s: Seq, end: int) -> _ExtendItem:
        start = s.kv_len
        assert s.row is not None
        self.rows.write(s.row, start, self.pool.slots(s.pages, start, end))
        s.kv_len = end
        s.inflight += 1
        final = end == len(s.tokens)
        self.chunked = None if final else s
        if self._has("page-boundary-prefix") and self.tree is not None:
            # FAULT page-boundary-prefix (models SGLang #22819): the batch's full pages enter
            # the tree at schedule time, before the forward writes their KV (marked not ready;
            # only the faulty fast path in RadixCache.match_prefix accepts them).
            self.tree.insert(s.tokens[:end], s.pages, ready=False, salt=self._cache_key(s.req))
        return _ExtendItem(s, s.row, start, end, np.asarray(s.tokens[start:end], dtype=np.intp), final)

    def _schedule_decode(self) -> _DecodeBatch | None:
        ps = self.args.page_size
        items: list[_DecodeItem] = []
        for s in list(self.running):
            if s.state is not _State.RUNNING or s.scheduled_outputs >= s.req.max_new_tokens:
                continue
            pos = s.kv_len
            if pos == len(s.pages) * ps:
                if not self._ensure_free_pages(1):
                    self._retract(s)
                    continue
                s.pages += self.pool.alloc(1) or []
            slot = s.pages[pos // ps] * ps + pos % ps
            assert s.row is not None
            self.rows.table[s.row, pos] = slot
            s.kv_len += 1
            s.inflight += 1
            items.append(_DecodeItem(s, s.row, pos, slot))
        return _DecodeBatch(items) if items else None

    def _retract(self, s: Seq) -> None:
        """Out of pages: give this sequence's memory back and prefill it again later."""
        self.running.remove(s)
        s.state = _State.RETRACTING
        self.stats.retracted_reqs += 1
        for name in stateful(s.req):
            self.stats.retracted_by[name] += 1
        if s.inflight == 0:
            self._requeue(s)

    def _requeue(self, s: Seq) -> None:
        self._release(s)
        s.kv_len, s.state = 0, _State.WAITING
        self.waiting.appendleft(s)

    # -- running a batch ---------------------------------------------------------------------

    def _run(self, batch: _Batch) -> None:
        if isinstance(batch, _ExtendBatch):
            logits = self._forward_extend(batch)
            if self.host is not None and self.host.pending:
                self.host.landed([it.seq for it in batch.items])  # FAULT host-loadback-race: late copies land
            self._process_extend(batch, self._drift(batch, logits))
        else:
            self._process_decode(batch, self._drift(batch, self._forward_decode(batch)))
        self.stats.forward_steps += 1

    def _drift(self, batch: _Batch, logits: np.ndarray) -> np.ndarray:
        n_requests = len({id(it.seq.req) for it in batch.items})
        if self._has("batch-variant-numerics") and not self.args.enable_deterministic_inference:
            return logits + batch_variant_offsets(n_requests, logits.shape[1])
        if self._has("deterministic-decode-drift") and isinstance(batch, _DecodeBatch):
            # FAULT deterministic-decode-drift (models vLLM #51902 / #47069, FA3 decode under
            # VLLM_BATCH_INVARIANT=1): the batch-invariant path covers prefill only, so a decode
            # step shared with other requests rounds by the batch's size, in the deterministic
            # mode too. Near-tie scale, as batch-variant-numerics: drift in default mode, a broken
            # promise under --enable-deterministic-inference.
            return logits + batch_variant_offsets(n_requests, logits.shape[1])
        return logits

    def _qkv(
        self, layer: int, h: np.ndarray, positions: np.ndarray, adapters: Sequence[str | None]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """q, k, v of a batch whose rows run under different adapters (as punica's batched
        LoRA kernels serve mixed batches): each adapter's rows go through its own weights.
        Every row's projection depends on that row alone, so this is what each row alone gets."""
        q, k, v = self.model.qkv(layer, h, positions)
        for name in dict.fromkeys(a for a in adapters if a is not None):
            rows = np.flatnonzero([a == name for a in adapters])
            q[rows], k[rows], v[rows] = self.loras[name].qkv(layer, h[rows], positions[rows])
        return q, k, v

    def _forward_extend(self, batch: _ExtendBatch) -> np.ndarray:
        m, pool = self.model, self.pool
        items = batch.items
        ids = np.concatenate([it.ids for it in items])
        positions = np.concatenate([np.arange(it.start, it.end) for it in items])
        bounds = np.cumsum([0] + [it.end - it.start for it in items])
        spans = list(zip(items, bounds[:-1], bounds[1:]))
        h = m.embed(ids)
        adapters = [it.seq.req.adapter for it in items for _ in range(it.end - it.start)]
        lossy = self._has("lossy-hit-reload") and len({id(it.seq.req) for it in items}) > 1
        for layer in range(m.config.n_layers):
            q, k, v = self._qkv(layer, h, positions, adapters)
            out = np.empty_like(q)
            for it, a, b in spans:
                # Prefix KV is gathered from the pool through the row, read now; the new tokens'
                # KV comes straight from this batch, as in a ragged extend kernel. The batch's
                # writes land after every request has gathered its prefix.
                prefix_k, prefix_v = pool.gather(layer, self.rows.table[it.row, : it.start])
                if lossy and it.start and it.start == it.seq.req.cached_tokens:
                    # FAULT lossy-hit-reload (models vLLM #50702, int8 KV with prefix caching, and
                    # SGLang #38031's host-tier load-back): a prompt that hit the cache and is
                    # prefilled beside other requests reads its cached pages through a lossy copy
                    # (rounded to LOSSY_STEP), while its own new tokens' KV is exact. The error is
                    # small: its answer's logprobs move, and only near-tied tokens flip.
                    prefix_k = np.round(prefix_k / LOSSY_STEP) * LOSSY_STEP
                    prefix_v = np.round(prefix_v / LOSSY_STEP) * LOSSY_STEP
                keys = np.concatenate([prefix_k, k[a:b]])
                values = np.concatenate([prefix_v, v[a:b]])
                out[a:b] = causal_attention(q[a:b], keys, values, it.start, m.attn_lut)
            for it, a, b in spans:
                slots = self.rows.table[it.row, it.start : it.end]
                if self._has("chunk-boundary") and len(items) > 1 and not it.final:
                    # FAULT chunk-boundary (models SGLang #22291 / PR #17850): a chunk cut at the
                    # batch's token budget next to other requests takes its keys one row early
                    # in the batch's ragged K (its values from the right rows), so every later
                    # read pairs each token's value with the previous token's key, the first
                    # with the previous request's last key (a > 0: a cut chunk is never first
                    # in a shared batch). Shifting whole entries would be nearly harmless:
                    # attention over a cached prefix ignores where an entry sits (RoPE is in
                    # the key), and a lost entry is one among hundreds.
                    kv = pool.kv[layer]  # [slot, K|V, head, dim]
                    kv[slots, 0], kv[slots, 1] = k[a - 1 : b - 1], v[a:b]
                else:
                    pool.write(layer, slots, k[a:b], v[a:b])
            h = m.post_attention(layer, h, out)
        last = [b - 1 for it, _, b in spans if it.final]
        return m.logits(h[last])

    def _forward_decode(self, batch: _DecodeBatch) -> np.ndarray:
        m, pool = self.model, self.pool
        items = batch.items
        raw = len(items)
        # The input token is resolved when the forward runs: in overlap mode it was produced
        # by the batch processed just before. Dropped outputs (aborted) read as padding.
        ids = np.array([it.seq.tokens[it.position] if it.position < len(it.seq.tokens) else PAD_ID for it in items])
        positions = np.array([it.position for it in items], dtype=np.intp)
        rows = np.array([it.row for it in items], dtype=np.intp)
        slots = np.array([it.slot for it in items], dtype=np.intp)
        if self.graph is not None and raw <= CAPTURE_BATCH_SIZES[-1]:
            ids, positions, rows, lens, slots = self.graph.load(
                ids, positions, rows, slots, stale_fault=self._has("stale-padding")
            )
        else:
            lens = positions + 1
        h = m.embed(ids)
        width = int(lens.max())
        valid = (np.arange(width)[None, :] < lens[:, None])[:, None, None, :]
        # Padding rows (past `raw`) run the base model; a padded row's output is never read.
        adapters = [it.seq.req.adapter for it in items] + [None] * (len(ids) - raw)
        for layer in range(m.config.n_layers):
            q, k, v = self._qkv(layer, h, positions, adapters)
            pool.write(layer, slots, k, v)  # a paged decode kernel writes its token, then reads the row
            keys, values = pool.gather(layer, self.rows.table[rows, :width])  # row read at execution time
            keys, values = np.swapaxes(keys, 1, 2), np.swapaxes(values, 1, 2)  # [B, H, width, D]
            a = attend(q[:, :, None, :], keys, values, valid, m.attn_lut)[:, :, 0, :]
            h = m.post_attention(layer, h, a)
        return m.logits(h[:raw])

    # -- results ---------------------------------------------------------------------------------

    def _process_extend(self, batch: _ExtendBatch, logits: np.ndarray) -> None:
        rows = iter(logits)
        taking: list[tuple[Seq, np.ndarray]] = []
        for it in batch.items:
            s: Seq = it.seq
            s.inflight -= 1
            row = next(rows) if it.final else None
            if s.state is _State.DONE:
                if s.inflight == 0:
                    self._release(s)
                continue
            self._cache(s, it.end)
            if row is None:
                continue
            if s.req.max_new_tokens == 0:
                for c in [s, *self._fork_pending(s)]:
                    self._finish(c, FinishReason("length", length=0))
                    self._release(c)
                continue
            for c in [s, *self._fork(s)]:
                c.state = _State.RUNNING
                self.running.append(c)
                taking.append((c, row))
        self._take_tokens(taking)
        for c, _ in taking:
            if c.state is _State.DONE and c.inflight == 0:
                self._release(c)

    def _process_decode(self, batch: _DecodeBatch, logits: np.ndarray) -> None:
        taking = []
        for it, row in zip(batch.items, logits, strict=True):
            it.seq.inflight -= 1
            if it.seq.state in (_State.RUNNING, _State.RETRACTING):
                taking.append((it.seq, row))
        self._take_tokens(taking)
        for it in batch.items:
            if it.seq.inflight == 0 and it.seq.state is _State.DONE:
                self._release(it.seq)
            elif it.seq.inflight == 0 and it.seq.state is _State.RETRACTING:
                self._requeue(it.seq)

    def _take_tokens(self, taking: list[tuple[Seq, np.ndarray]]) -> None:
        """Each sequence takes its next token from its logits row (and may finish)."""
        if not taking:
            return
        rngs = [s.rng for s, _ in taking]
        if self._has("shared-sampler-rng") and len({id(s.req) for s, _ in taking if s.rng is not None}) > 1:
            # FAULT shared-sampler-rng (models vLLM #1595, fixed by per-request generators in
            # PR #2514): when choices of more than one sampled request draw in the same step,
            # they all draw from one generator (the first's), in batch order, so each one's
            # noise depends on who else sampled beside it. The choices of one request alone
            # keep their own generators, as vLLM's n > 1 children (seed + i) do.
            shared = next(r for r in rngs if r is not None)
            rngs = [shared if r is not None else None for r in rngs]
        masks = [self._grammar_mask(s) for s, _ in taking]
        bound = [s.req for (s, _), m in zip(taking, masks, strict=True) if m is not None]
        if self._has("bitmask-row-skip") and len({id(r) for r in bound}) > 1:
            # FAULT bitmask-row-skip (models vLLM #19493, fixed by PR #19565): when rows of more
            # than one constrained request take tokens in one step, the bitmask of every row
            # after the first request's is applied to the low half of the vocabulary only (its
            # upper words are left all ones), so a row whose best token lies up there takes it
            # whatever its grammar says. One request alone, whatever its n, masks every row.
            half = self.model.config.vocab_size // 2
            for k, ((s, _), m) in enumerate(zip(taking, masks, strict=True)):
                if m is not None and s.req is not bound[0]:
                    masks[k] = np.concatenate([m[:half], np.ones(len(m) - half, dtype=bool)])
        chosen = [self._choose(s, row if m is None else np.where(m, row, -np.inf), rng)
                  for (s, row), rng, m in zip(taking, rngs, masks, strict=True)]
        rows = np.stack([row for _, row in taking])
        steps = self.model.logprobs(rows, chosen, [s.req.top_logprobs_num for s, _ in taking])
        for (s, _), tok, step in zip(taking, chosen, steps, strict=True):
            req = s.req
            s.tokens.append(tok)
            self.stats.generation_tokens += 1
            self._event(req, TokenEvent(s.index, step))
            if s.outputs >= req.max_new_tokens:
                self._finish(s, FinishReason("length", length=s.outputs))
            elif tok == EOS_ID and not req.ignore_eos:
                self._finish(s, FinishReason("stop", matched=EOS_ID))

    def _grammar_mask(self, s: Seq) -> np.ndarray | None:
        """The tokens a constrained row may take next (None: unconstrained): the next token of
        every choice its output so far begins, and EOS where it has spelt one whole. An output
        no choice begins (only a fault makes one) may take only EOS: it ends there."""
        if s.req.choices is None:
            return None
        out = tuple(s.tokens[len(s.req.prompt):])
        mask = np.zeros(self.model.config.vocab_size, dtype=bool)
        for ch in s.req.choices:
            if ch[: len(out)] == out:
                if len(ch) > len(out):
                    mask[ch[len(out)]] = True
                else:
                    mask[EOS_ID] = True
        if not mask.any():
            mask[EOS_ID] = True
        return mask

    @staticmethod
    def _choose(s: Seq, row: np.ndarray, rng: np.random.Generator | None) -> int:
        if rng is None:
            return TinyModel.greedy(row)
        # Gumbel-max, as vLLM samples (probs / Exp(1) noise, argmax): the seed fixes one noise
        # per token, so the draw moves only where the logits move, and only toward a token whose
        # odds rose (docs/verdicts.md, Seeded sampling).
        z = (row - row.max()) / (LOGIT_UNIT * s.req.temperature)
        return int(np.argmax(z - np.log(rng.standard_exponential(len(row)))))

    def _fork_pending(self, parent: Seq) -> list[Seq]:
        if parent.index != 0:
            return []
        return [x for x in parent.req.seqs[1:] if x.state is _State.FORK_PENDING]

    def _fork(self, parent: Seq) -> list[Seq]:
        """Choices 1..n-1 start from choice 0's prefill: shared full pages, a copied last page."""
        ps = self.args.page_size
        full, rem = divmod(parent.kv_len, ps)
        forked = []
        for sib in self._fork_pending(parent):
            sib.admitted = True
            own: list[int] = []
            if rem:
                if not self._ensure_free_pages(1):
                    self.rows.free(sib.row)  # type: ignore[arg-type]
                    sib.row, sib.state = None, _State.WAITING
                    self.waiting.appendleft(sib)  # prefill it on its own later (cache hit)
                    continue
                own = self.pool.alloc(1) or []
                src = self.pool.slots(parent.pages, full * ps, parent.kv_len)
                self.pool.copy_slots(src, self.pool.slots(own, 0, rem))
            self.pool.retain(parent.pages[:full])
            sib.pages = parent.pages[:full] + own
            assert sib.row is not None
            self.rows.write(sib.row, 0, self.pool.slots(sib.pages, 0, parent.kv_len))
            sib.kv_len = parent.kv_len
            if self.tree is not None and parent.node is not None:
                self.tree.lock(parent.node)
                sib.node = parent.node
            forked.append(sib)
        return forked

    def _cache(self, s: Seq, end: int) -> None:
        """Put the computed full pages in the radix tree and move this sequence's lock there."""
        if self.tree is None or not s.pages:
            return
        node = self.tree.insert(s.tokens[:end], s.pages, salt=self._cache_key(s.req))
        if self.host is not None:
            self.host.write_through(node)  # write-through: the host gets each page as it is cached
        if node is not s.node and node is not self.tree.root:
            self.tree.lock(node)
            if s.node is not None:
                self.tree.unlock(s.node)
            s.node = node

    def _release(self, s: Seq) -> None:
        if s.row is not None:
            self.rows.free(s.row)
            s.row = None
        self._cache(s, min(s.kv_len, len(s.tokens)))
        if s.node is not None and self.tree is not None:
            self.tree.unlock(s.node)
        s.node = None
        self.pool.release(s.pages)
        s.pages = []

    def _finish(self, s: Seq, reason: FinishReason) -> None:
        s.state = _State.DONE
        if (self._has("stale-slot-continuation") and reason.kind != "abort" and s.req.n == 1
                and len(self.requests) > 1):
            self._idle_slot = s.req.prompt  # FAULT stale-slot-continuation: the idle slot keeps it
        if s in self.running:
            self.running.remove(s)
        self._event(s.req, FinishEvent(s.index, reason))
        if all(x.state is _State.DONE for x in s.req.seqs):
            self.requests.pop(s.req.rid, None)
            if reason.kind == "abort":
                self.stats.aborted_reqs += 1
            else:
                self.stats.finished_reqs += 1

    def _event(self, req: Request, ev: Event) -> None:
        self._events.setdefault(id(req), (req, []))[1].append(ev)

    def _emit(self) -> None:
        events, self._events = self._events, {}
        for req, evs in events.values():
            if req.sink is not None:
                req.sink(evs)

    def _update_gauges(self) -> None:
        st = self.stats
        st.num_running_reqs = len(
            {id(s.req) for s in self.running} | ({id(self.chunked.req)} if self.chunked else set())
        )
        st.num_queue_reqs = len({id(s.req) for s in self.waiting})
        st.token_usage = 1.0 - self.pool.free_pages / self.pool.usable_pages
