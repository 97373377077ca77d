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

from servefuzz.reference.architectures import model_config
from servefuzz.reference.experts import router_offsets
from servefuzz.reference.faults import LOSSY_STEP, batch_variant_offsets
from servefuzz.reference.hosttier import HostEntry, HostTier
from servefuzz.reference.kvpool import PADDING_SLOT, KVPool, ReqToTokenPool
from servefuzz.reference.model import (
    EOS_ID,
    LINEAR,
    LOGIT_UNIT,
    PAD_ID,
    TinyModel,
    TokenLogprobs,
    attend,
)
from servefuzz.reference.radix import RadixCache, RadixNode
from servefuzz.reference.server_args import CAPTURE_BATCH_SIZES, ServerArgs
from servefuzz.reference.statecache import SCRATCH_SLOT, StateCache
from servefuzz.reference.tracer import Tracer, engine_files
from servefuzz.reference.transfer import Outbox, ReceiveBuffer, Transfer
from servefuzz.reference.window import WindowPool, WindowRadixCache, first_needed

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
    # Prefill/decode disaggregation (`transfer`): a prefill server keeps the prompt's KV for its
    # decode server under `transfer_out`; a decode server starts from the KV staged under `transfer_in`.
    transfer_out: str | None = None
    transfer_in: str | None = None
    sink: Callable[[Sequence[Event]], None] | None = None
    cached_tokens: int = 0  # set by the engine when the request is admitted
    seqs: list[Seq] = field(default_factory=list, repr=False)
    retracted: bool = False  # a choice of it was retracted: part of its engine-coverage context


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
        self.win_from = 0  # a windowed model: it holds the window pages of pages[win_from:] (window.py)
        self.admitted = False
        # A hybrid model's recurrent state: this sequence's slot (`StateCache`), and the
        # checkpoints its forwards took, (position, slot), not yet stored with the radix tree.
        self.state_slot: int | None = None
        self.pending: list[tuple[int, int]] = []
        self.transferred: Transfer | None = None  # a decode server's: the KV taken for its admission
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
    resumed: bool = False  # a later chunk of a prefill cut at the budget (not its first)


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
    # A hybrid model's state checkpoints: restored by prefix hits, dropped for want of a slot.
    state_restores: int = 0
    state_evictions: int = 0
    # A windowed model's cached window KV given back under window-pool pressure (tombstoned).
    swa_evicted_tokens: int = 0
    retracted_reqs: int = 0
    # Retractions by the request state a retraction must carry over (`STATEFUL`): what a client
    # reads to know that a retracted request of that kind ran at all (issue 53, item 5).
    retracted_by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATEFUL, 0))
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished_reqs: int = 0
    aborted_reqs: int = 0
    forward_steps: int = 0
    chunked_cuts: int = 0  # prefill chunks cut at the step budget, their sequence continued next batch
    num_running_reqs: int = 0
    num_queue_reqs: int = 0
    token_usage: float = 0.0
    swa_token_usage: float = 0.0  # a windowed model's window pool in use, as SGLang's gauge


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
        self.model = model or TinyModel(model_config(args.model_arch, seed=args.model_seed,
                                                     context_length=args.context_length))
        # Adapters are loaded at start, as vLLM's --lora-modules and SGLang's --lora-paths are.
        self.loras = {name: self.model.with_lora(seed) for name, seed in args.lora}
        c = self.model.config
        self.pool = KVPool(c.n_layers, c.n_heads, c.head_dim, args.max_total_tokens, args.page_size)
        self.rows = ReqToTokenPool(args.max_running_requests, args.context_length)
        # A windowed model's sliding-window layers keep their KV in a pool of their own (window.py).
        self.window = WindowPool(c.n_layers, c.n_heads, c.head_dim, args.swa_tokens, args.page_size,
                                 self.pool.num_pages) if c.window else None
        self.tree: RadixCache | None = None
        if not args.disable_radix_cache:
            self.tree = RadixCache(self.pool) if self.window is None else WindowRadixCache(self.pool, self.window, c.window)
        self._saturated = False  # FAULT window-modulo-after-saturation: a pool ran dry under load
        self.states = None
        if c.recurrent_layers:
            self.states = StateCache(self.model.state_shape(), slots=args.state_slots,
                                     interval=args.mamba_track_interval, page_size=args.page_size)
            if self.tree is not None:
                self.tree.on_evict = self.states.forget
        # The host tier (HiCache-shaped, `hosttier`): behind a dense model's radix tree only (a
        # window pool's or a recurrent state's host copy is not modelled; `server_args` refuses it).
        self.host = None if self.tree is None or not args.host_tier_tokens or c.window or c.recurrent_layers \
            else HostTier(self.pool, self.tree, args.host_tier_tokens, key_no_salt=self._has("host-key-no-salt"))
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
        # Prefill/decode disaggregation (`transfer`): the prefill side's finished transfers, the
        # decode side's transfers in flight.
        mode = args.disaggregation_mode
        self.outbox = Outbox(args.page_size) if mode == "prefill" else None
        self.received = ReceiveBuffer(args.page_size, dedupe_by_base=self._has("transfer-region-dedupe")) \
            if mode == "decode" else None

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
        if pages > self.pool.usable_pages or (self.window is not None and pages > self.window.usable_pages):
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
                if self.received is not None and s.req.transfer_in is not None:
                    self.received.discard(s.req.transfer_in)
            if self.chunked is s:
                self.chunked = None
            if self._has("abort-reuse") and s.pages:
                # FAULT abort-reuse (models SGLang #23392 / #24527): the abort path frees every
                # page of the request, including the prefix pages it shares with the radix
                # tree, which it should only unlock. The tree keeps pointing at them.
                self._release_window(s)  # the window pool's references are given back as they should be
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
        if self.window is not None:
            self.window.clear()
        self._saturated = False
        self.rows.clear()
        if self.states is not None:
            self.states.clear()
        self._idle_slot = None
        for side in (self.outbox, self.received):
            if side is not None:
                side.clear()
        self._update_gauges()
        return True

    def step(self) -> None:
        """One scheduling round: in overlap mode schedule N+1, then run and process N."""
        if self.coverage is not None:
            if self.busy:
                self._context()
            else:
                self.coverage.context = None
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
        """Enter the step's context for engine coverage (`tracer.step_context`): what each
        request in flight is, read from the engine's own records, and the step's own features.
        Clears the abort mark."""
        assert self.coverage is not None
        chunked = self.chunked.req if self.chunked is not None else None
        reqs = frozenset(frozenset(name for name, on in (
            ("n", r.n > 1), ("seed", r.temperature > 0), ("adapter", r.adapter is not None),
            ("choice", r.choices is not None), ("salt", r.cache_salt is not None), ("hit", r.cached_tokens > 0),
            ("chunk", r is chunked), ("retracted", r.retracted),
        ) if on) for r in self.requests.values())
        step = frozenset(name for name, on in (("multi", len(self.requests) > 1), ("abort", self._aborted)) if on)
        self._aborted = False
        return self.coverage.enter(step, reqs)

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
        """Room for `n` new pages (and, for a windowed model, their window pages), evicting
        least recently used cached pages, and then cached windows alone (tombstones), if short."""
        short = n - self.pool.free_pages
        if short > 0 and self.tree is not None:
            evicted = self.tree.evict(short, ignore_locks=self._has("evict-in-use"))
            self.stats.evicted_tokens += evicted * self.args.page_size
        window_short = 0 if self.window is None else n - self.window.free_pages
        if window_short > 0 and isinstance(self.tree, WindowRadixCache):
            self.stats.swa_evicted_tokens += self.tree.evict_windows(window_short) * self.args.page_size
        if (short > 0 or window_short > 0) and len(self.requests) > 1:
            self._saturated = True
        return self.pool.free_pages >= n and (self.window is None or self.window.free_pages >= n)

    def _alloc(self, n: int) -> list[int]:
        """`n` pages (each with its window page, for a windowed model); `_ensure_free_pages(n)` first."""
        pages = self.pool.alloc(n) or []
        if self.window is not None and pages and not self.window.alloc_for(pages):
            raise RuntimeError("no free window page (the scheduler must make room first)")
        return pages

    def _slide(self, s: Seq, end: int) -> None:
        """Positions up to `end` computed: give back the window pages no later query can see."""
        if self.window is None:
            return
        upto = min(first_needed(end, self.model.config.window, self.args.page_size), len(s.pages))
        if upto > s.win_from:
            self.window.release(s.pages[s.win_from : upto])
            s.win_from = upto

    def _release_window(self, s: Seq) -> None:
        if self.window is not None:
            self.window.release(s.pages[s.win_from :])
        s.win_from = 0

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
            s.pages += self._alloc(need)
            items.append(self._extend_item(s, end))
            items[-1].resumed = True
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
        if fresh and self.received is not None and s.req.transfer_in is not None and s.index == 0:
            if s.transferred is None:
                s.transferred = self.received.take(s.req.transfer_in)
            if s.transferred is not None:
                return self._admit_transferred(s, s.transferred, budget, reserve, siblings)
        stale = fresh and self._fault_stale_slot(s)
        prefix: list[int] = []
        node = None
        if self.tree is not None:
            match = self.tree.match_prefix(
                s.tokens, (len(s.tokens) - 1) // ps, salt=self._cache_key(s.req),
                boundary_fast_path=self._has("page-boundary-prefix"), salt_blind=self._has("salt-ignored"),
            )
            if isinstance(self.tree, WindowRadixCache) and not self._has("window-ring-stale"):
                # A windowed model's hit must still have the window KV of its last `window`
                # tokens; a longer match whose windows are gone is cut to one that has them.
                # FAULT window-ring-stale (models SGLang PR #32759, a stale sliding-window ring
                # read on radix reuse): the cut is skipped, and the windowed layers read the hit's
                # slid-out pages through the window pages they last had (`WindowPool.slots`,
                # stale), which the pool gave back and may have handed to another request since.
                # Needs a cached prefix whose windows slid out (a prompt longer than the window,
                # or a long decode) and a later request that hits it: never one request alone.
                match = self.tree.usable(match)
            prefix, node = match.pages, match.node
        restore: int | None = None
        if self.states is not None:
            # A recurrent state to start from: a slot of its own, then the hit cut back to its
            # deepest checkpoint (taking the slot may have evicted one).
            s.state_slot = self.states.alloc()
            if s.state_slot is None:
                return None
            if self.tree is not None:
                hit = self.states.usable(match)
                prefix, node, restore = hit.pages, hit.node, hit.slot
                if self._has("state-n-minus-1"):
                    restore = self._fault_whole_prompt_state(s) or restore
        # Pages the host tier holds past the device match (loaded back below, once there is room).
        hosted = [] if self.host is None or node is None else self.host.lookup(
            node, s.tokens, len(prefix), (len(s.tokens) - 1) // ps, self._cache_key(s.req))
        start = (len(prefix) + len(hosted)) * ps
        end = min(len(s.tokens), start + budget)
        need = math.ceil(end / ps) - len(prefix)
        # Hold the matched prefix *before* making room: eviction must not take it from under us.
        self.pool.retain(prefix)
        win_from = 0
        if self.window is not None:
            win_from = min(first_needed(start, self.model.config.window, ps), len(prefix))
            self.window.retain(prefix[win_from:])
        if self.tree is not None and node is not None and prefix:
            self.tree.lock(node)
        if not self._ensure_free_pages(need + reserve):
            self.pool.release(prefix)
            if self.window is not None:
                self.window.release(prefix[win_from:])
            if self.tree is not None and node is not None and prefix:
                self.tree.unlock(node)
            if self.states is not None:
                self.states.free(s.state_slot)
                s.state_slot = None
            return None
        if hosted:
            loaded = self._load_back(s, prefix, node, hosted)  # type: ignore[arg-type]
            prefix, node = prefix + loaded, s.node
            start = len(prefix) * ps  # less than planned where the host dropped a page meanwhile
            end = min(len(s.tokens), start + budget)
            need = math.ceil(end / ps) - len(prefix)
        elif prefix:
            s.node = node
        if self.states is not None:
            assert s.state_slot is not None
            self.states.data[s.state_slot] = 0.0 if restore is None else self.states.data[restore]
            self.stats.state_restores += restore is not None
        handed = self._alloc(need)
        s.pages = prefix + handed
        self._handed.append((s, handed))
        s.win_from = win_from
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

    def _admit_transferred(self, s: Seq, t: Transfer, budget: int, reserve: int, siblings: list[Seq]) -> _ExtendItem | None:
        """A decode server's admission of a request whose prompt KV a prefill server computed:
        the transferred KV is copied into fresh pages, and the prefill goes on from there (the
        last prompt token, computed here). The decode server's own cache is not looked up: the
        prompt was the prefill server's to cache, and its hit is what the request reports."""
        ps, start = self.args.page_size, t.tokens
        end = min(len(s.tokens), start + budget)
        need = math.ceil(end / ps)
        if not self._ensure_free_pages(need + reserve):
            return None
        s.pages = self._alloc(need)
        self._handed.append((s, s.pages))
        s.row = self.rows.alloc()
        for sib in siblings:
            sib.row = self.rows.alloc()
        slots = self.pool.slots(s.pages, 0, start)
        for layer, block in enumerate(t.kv):
            self.pool.kv[layer][slots] = block
        self.rows.write(s.row, 0, slots)
        s.kv_len, s.state, s.admitted, s.transferred = start, _State.PREFILL, True, None
        s.req.cached_tokens = t.cached_tokens
        self.stats.prompt_tokens += len(s.tokens)
        return self._extend_item(s, end)

    def _export(self, s: Seq) -> None:
        """A prefill server's finished request: the KV of its prompt but the last token, kept
        for the decode server to pull (the decode server computes that token itself)."""
        assert self.outbox is not None and s.req.transfer_out is not None
        slots = self.pool.slots(s.pages, 0, len(s.req.prompt) - 1)
        kv = np.stack([layer[slots] for layer in self.pool.kv])
        self.outbox.put(s.req.transfer_out, Transfer(s.req.prompt, s.req.cached_tokens, kv))

    def _fault_whole_prompt_state(self, s: Seq) -> int | None:
        # FAULT state-n-minus-1 (models LMCache #4614, the root cause of vLLM #52617): where the
        # whole prompt is cached with a checkpoint at its end (its length a multiple of the
        # interval, cached by an earlier request), the hit the scheduler takes stops short of it,
        # as it must, to compute the last tokens again; but the state is retrieved for the whole
        # prompt, so those tokens enter the state twice. Needs a checkpoint an earlier request
        # left: one request alone on a flushed server never has one.
        assert self.tree is not None and self.states is not None
        ps = self.args.page_size
        if len(s.tokens) % self.states.interval:
            return None
        whole = self.tree.match_prefix(s.tokens, len(s.tokens) // ps, salt=self._cache_key(s.req))
        return self.states.checkpoint(whole.node) if len(whole.pages) * ps == len(s.tokens) else None

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
        self.stats.chunked_cuts += 0 if final else 1
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
                s.pages += self._alloc(1)
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
        s.req.retracted = True
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
        router = self._router_offsets(batch)
        wanted = self._checkpoints_wanted(items)
        taken: list[list[list[np.ndarray]]] = []  # per recurrent layer, per item, its checkpoints
        stale = self._fault_stale_states(items, wanted)
        for layer, kind in enumerate(m.config.kinds):
            if kind == LINEAR:
                o, snaps = self._linear_mix(layer, h, [(a, b) for _, a, b in spans],
                                            [it.seq.state_slot for it in items], adapters, wanted)
                taken.append(snaps)
                h = m.post_attention(layer, h, o, router if layer == m.config.n_layers - 1 else None)
                continue
            q, k, v = self._qkv(layer, h, positions, adapters)
            out = np.empty_like(q)
            for it, a, b in spans:
                # Prefix KV is gathered from the pool through the row, read now; the new tokens'
                # KV comes straight from this batch, as in a ragged extend kernel. The batch's
                # writes land after every request has gathered its prefix. A sliding-window
                # layer gathers only what its first query sees, from the window pool.
                lo = 0
                if self.window is not None and m.config.windowed(layer):
                    lo = max(0, it.start - m.config.window + 1)
                    prefix_k, prefix_v = self.window.gather(
                        layer, self.rows.table[it.row, lo : it.start], stale=self._has("window-ring-stale"))
                else:
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
                out[a:b] = m.attention(layer, q[a:b], keys, values, it.start, lo)
            for it, a, b in spans:
                slots = self.rows.table[it.row, it.start : it.end]
                if self.window is not None and m.config.windowed(layer) and self._fault_strided(it):
                    self._write_strided(layer, it, k[a:b], v[a:b])
                elif self._has("chunk-boundary") and len(items) > 1 and not it.final:
                    # FAULT chunk-boundary (models SGLang #22291 / PR #17850): a chunk cut at the
                    # batch's token budget next to other requests takes its keys one row early
                    # in the batch's ragged K (its values from the right rows), so every later
                    # read pairs each token's value with the previous token's key, the first
                    # with the previous request's last key (a > 0: a cut chunk is never first
                    # in a shared batch). Shifting whole entries would be nearly harmless:
                    # attention over a cached prefix ignores where an entry sits (RoPE is in
                    # the key), and a lost entry is one among hundreds.
                    self._write(layer, slots, k[a - 1 : b - 1], v[a:b])
                else:
                    self._write(layer, slots, k[a:b], v[a:b])
            h = m.post_attention(layer, h, out, router if layer == m.config.n_layers - 1 else None)
        if taken:
            self._take_checkpoints(items, wanted, taken, stale)
        last = [b - 1 for it, _, b in spans if it.final]
        return m.logits(h[last])

    # -- a hybrid model's recurrent state ------------------------------------------------------

    def _checkpoints_wanted(self, items: Sequence[_ExtendItem]) -> list[list[int]]:
        """Per item, the token counts after which its state is checkpointed (none without a
        radix cache to keep them, or for a dense model): each multiple of the interval the
        chunk passes, as counts of the chunk's own tokens."""
        if self.states is None or self.tree is None:
            return [[] for _ in items]
        return [[p - it.start for p in self.states.boundaries(it.start, it.end)] for it in items]

    def _linear_mix(self, layer: int, h: np.ndarray, spans: list[tuple[int, int]], slots: Sequence[int | None],
                    adapters: Sequence[str | None], wanted: Sequence[Sequence[int]]
                    ) -> tuple[np.ndarray, list[list[np.ndarray]]]:
        """A linear-attention layer over a batch: each sequence's rows h[a:b] from its state in
        its slot (None: a padding row, from the scratch slot, kept nowhere), which is replaced by
        its state after them. The rows of each adapter go through that adapter's weights (as
        `_qkv`). Returns the outputs and each sequence's checkpoints (copies of its state after
        each count in `wanted[i]`)."""
        assert self.states is not None
        li = self.model.config.recurrent_layers.index(layer)
        data = self.states.data
        out = np.empty((len(h), *data.shape[2:4]))
        snaps: list[list[np.ndarray]] = [[] for _ in spans]
        by_adapter: dict[str | None, list[int]] = {}
        for i, (a, _) in enumerate(spans):
            by_adapter.setdefault(adapters[a] if a < len(adapters) else None, []).append(i)
        for name, idx in by_adapter.items():
            rows = np.concatenate([np.arange(*spans[i]) for i in idx])
            local, at = [], 0
            for i in idx:
                local.append((at, at + spans[i][1] - spans[i][0]))
                at = local[-1][1]
            held = np.array([SCRATCH_SLOT if slots[i] is None else slots[i] for i in idx], dtype=np.intp)
            states = data[held, li]
            model = self.model if name is None else self.loras[name]
            o, got = model.linear_mix(layer, h[rows], local, states, [wanted[i] for i in idx])
            out[rows] = o
            for j, i in enumerate(idx):
                snaps[i] = got[j]
                slot = slots[i]
                if slot is not None:
                    data[slot, li] = states[j]
        return out, snaps

    def _take_checkpoints(self, items: Sequence[_ExtendItem], wanted: Sequence[Sequence[int]],
                          taken: Sequence[Sequence[Sequence[np.ndarray]]], stale: dict[int, np.ndarray]) -> None:
        """Each item's checkpoints, every recurrent layer's state at each wanted count, into
        slots of their own, pending until their pages enter the radix tree. A checkpoint with
        no slot to hold it is not taken: a later hit stops at an earlier one."""
        assert self.states is not None
        data = self.states.data
        shared = len({id(it.seq.req) for it in items}) > 1
        for i, it in enumerate(items):
            for j, count in enumerate(wanted[i]):
                slot = self.states.alloc()
                if slot is None:
                    continue
                if i in stale:
                    data[slot] = stale[i]  # FAULT stale-state-donated (see _fault_stale_states)
                elif self._has("ssm-checkpoint-batch") and shared and i > 0:
                    # FAULT ssm-checkpoint-batch (models SGLang PR #37836): the track slots of a
                    # multi-request prefill batch are indexed from the batch's first request, so
                    # requests 2..n checkpoint that request's state slot, not their own. The
                    # checkpoint is kept under their own prefix, and a later hit on it restores
                    # another prompt's state. One request alone is always the first.
                    data[slot] = data[items[0].seq.state_slot]
                elif self._has("unwritten-state-published") and j < len(wanted[i]) - 1:
                    # FAULT unwritten-state-published (models vLLM #53084; LMCache #4984): only the
                    # last checkpoint a chunk passes is written, but a key is published for every
                    # one, each with a slot never written (zeros after a flush, or whatever its
                    # previous occupant left). A later request whose hit stops at one of the
                    # earlier ones restores a state that belongs to no prompt.
                    pass
                else:
                    data[slot] = np.stack([layer[i][j] for layer in taken])
                it.seq.pending.append((it.start + count, slot))

    def _fault_stale_states(self, items: Sequence[_ExtendItem], wanted: Sequence[Sequence[int]]) -> dict[int, np.ndarray]:
        """FAULT stale-state-donated (models SGLang #39342, --enable-mixed-chunk with the mamba
        extra buffer): a later chunk of a cut prefill, run in a batch it shares with another
        request, loses its track index, so the checkpoints it passes are donated from its slot
        before the chunk updates it: the state at the chunk's start. Per such item, that state.
        A prompt prefilled alone, or in one chunk, donates the right one."""
        if not self._has("stale-state-donated") or self.states is None or len({id(it.seq.req) for it in items}) < 2:
            return {}
        return {i: self.states.data[it.seq.state_slot].copy() for i, it in enumerate(items)
                if it.resumed and wanted[i] and it.seq.state_slot is not None}

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
        router = self._router_offsets(batch)
        if self.window is not None:
            # A sliding-window layer reads the last `window` positions of each row: (p - window, p].
            w = m.config.window
            cols = lens[:, None] - w + np.arange(w)[None, :]
            window_valid = (cols >= 0)[:, None, None, :]
            window_cols = np.maximum(cols, 0)
        state_slots = [it.seq.state_slot for it in items] + [None] * (len(ids) - raw)
        for layer, kind in enumerate(m.config.kinds):
            if kind == LINEAR:
                # Padding rows run from the scratch slot; their outputs are never read.
                o, _ = self._linear_mix(layer, h, [(i, i + 1) for i in range(len(ids))], state_slots,
                                        adapters, [()] * len(ids))
                h = m.post_attention(layer, h, o, router if layer == m.config.n_layers - 1 else None)
                continue
            q, k, v = self._qkv(layer, h, positions, adapters)
            self._write(layer, slots, k, v)  # a paged decode kernel writes its token, then reads the row
            if self.window is not None and m.config.windowed(layer):
                keys, values = self.window.gather(layer, self.rows.table[rows[:, None], window_cols],
                                                  stale=self._has("window-ring-stale"))
                mask = window_valid
            else:
                keys, values = pool.gather(layer, self.rows.table[rows, :width])  # row read at execution time
                mask = valid
            keys, values = np.swapaxes(keys, 1, 2), np.swapaxes(values, 1, 2)  # [B, H, width, D]
            a = attend(q[:, :, None, :], keys, values, mask, m.attn_lut)[:, :, 0, :]
            h = m.post_attention(layer, h, a, router if layer == m.config.n_layers - 1 else None)
        if self.states is not None and self.tree is not None:
            self._decode_checkpoints(items)
        return m.logits(h[:raw])

    def _write(self, layer: int, slots: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Store K and V of tokens at these slots: a sliding-window layer's in the window pool."""
        if self.window is not None and self.model.config.windowed(layer):
            self.window.write(layer, slots, k, v)
        else:
            self.pool.write(layer, slots, k, v)

    def _fault_strided(self, it: _ExtendItem) -> bool:
        # FAULT window-modulo-after-saturation (models vLLM #50749 / #49716: padded, non-contiguous
        # page strides; the first tokens wrong when the prompt length modulo the block falls in a
        # range, and only once the pool has saturated): once either KV pool ran dry with more than
        # one request in the engine, a prompt's last chunk whose length modulo the page is in
        # 1..page/2 writes its partial last page's window KV one page past the window page before
        # it, as if the window pages lay in a row. On a pool that never saturated they mostly do,
        # and the page it writes is its own; after saturation the free list is scattered, so the
        # page it should have written keeps what it held before (and another page is overwritten):
        # the decode steps that still see those positions read stale window KV. Cured by a pool
        # that does not saturate (a larger --max-total-tokens), or by a page of one token.
        ps = self.args.page_size
        return (self._has("window-modulo-after-saturation") and self._saturated and it.final
                and it.end // ps > 0 and 1 <= it.end % ps <= ps // 2 and it.end // ps < len(it.seq.pages))

    def _write_strided(self, layer: int, it: _ExtendItem, k: np.ndarray, v: np.ndarray) -> None:
        """FAULT window-modulo-after-saturation's write: the last page's slots one window page past
        the window page of the page before it (see `_fault_strided`)."""
        assert self.window is not None
        ps, pages = self.args.page_size, it.seq.pages
        cut = (it.end // ps) * ps  # the partial last page starts here
        slots = self.rows.table[it.row, it.start : it.end]
        head = slots[: max(0, cut - it.start)]
        self.window.write(layer, head, k[: len(head)], v[: len(head)])
        before = int(self.window.of_full[pages[cut // ps - 1]])
        wrong = (before + 1) % self.window.pool.num_pages * ps + np.arange(max(it.start, cut), it.end) % ps
        self.window.pool.write(layer, wrong, k[len(head):], v[len(head):])

    def _router_offsets(self, batch: _Batch) -> np.ndarray | None:
        # FAULT router-tie-numerics (the benign class of vLLM #23138, as it shows in a mixture of
        # experts): the last layer's router scores are rounded by the batch's size, as a split-K
        # reduction chosen from it, so near-tied expert choices flip and every routing weight moves
        # a little; a batch of one is the reference order. The weights vanish at the top-k's edge
        # (experts.route), so a flipped choice moves the answer no more than the rounding did. In
        # the last layer only: a flip there moves that token's logits alone; in an earlier one it
        # would move the KV every later token reads, which this model's sharp heads amplify into
        # flips far from any tie (routing amplification, which real engines do show, but not the
        # benign class this stands for). Cured by --enable-deterministic-inference.
        c = self.model.config
        if not (c.experts and self._has("router-tie-numerics")) or self.args.enable_deterministic_inference:
            return None
        return router_offsets(len({id(it.seq.req) for it in batch.items}), c.experts)

    def _decode_checkpoints(self, items: Sequence[_DecodeItem]) -> None:
        """A decode step that completes a multiple of the interval checkpoints the state there."""
        assert self.states is not None
        for it in items:
            s = it.seq
            if (it.position + 1) % self.states.interval or s.state_slot is None:
                continue
            slot = self.states.alloc()
            if slot is not None:
                self.states.data[slot] = self.states.data[s.state_slot]
                s.pending.append((it.position + 1, slot))

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
            self._slide(s, it.end)
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
                self._slide(it.seq, it.position + 1)
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
            if self.states is not None:
                sib.state_slot = self.states.alloc()
            if (rem and not self._ensure_free_pages(1)) or (self.states is not None and sib.state_slot is None):
                if self.states is not None:
                    self.states.free(sib.state_slot)
                    sib.state_slot = None
                self.rows.free(sib.row)  # type: ignore[arg-type]
                sib.row, sib.state = None, _State.WAITING
                self.waiting.appendleft(sib)  # prefill it on its own later (cache hit)
                continue
            if self.states is not None:
                self.states.data[sib.state_slot] = self.states.data[parent.state_slot]
            if rem:
                own = self._alloc(1)
                src, dst = self.pool.slots(parent.pages, full * ps, parent.kv_len), self.pool.slots(own, 0, rem)
                self.pool.copy_slots(src, dst)
                if self.window is not None:
                    self.window.copy(src, dst)
            self.pool.retain(parent.pages[:full])
            if self.window is not None:
                self.window.retain(parent.pages[parent.win_from : full])
            sib.pages, sib.win_from = parent.pages[:full] + own, parent.win_from
            assert sib.row is not None
            self.rows.write(sib.row, 0, self.pool.slots(sib.pages, 0, parent.kv_len))
            sib.kv_len = parent.kv_len
            if self.tree is not None and parent.node is not None:
                self.tree.lock(parent.node)
                sib.node = parent.node
            forked.append(sib)
        return forked

    def _cache(self, s: Seq, end: int) -> None:
        """Put the computed full pages in the radix tree, with the state checkpoints taken in
        them, and move this sequence's lock there."""
        if self.tree is None or not s.pages:
            return
        node = self.tree.insert(s.tokens[:end], s.pages, salt=self._cache_key(s.req))
        if isinstance(self.tree, WindowRadixCache):
            self.tree.adopt(node, s.pages, s.win_from)
        if s.pending:
            self._keep_checkpoints(s, node, min(end // self.args.page_size, len(s.pages)))
        if self.host is not None:
            self.host.write_through(node)  # write-through: the host gets each page as it is cached
        if node is not s.node and node is not self.tree.root:
            self.tree.lock(node)
            if s.node is not None:
                self.tree.unlock(s.node)
            s.node = node

    def _keep_checkpoints(self, s: Seq, node: RadixNode, depth: int) -> None:
        """Store each pending checkpoint that ends within the `depth` pages cached down to
        `node` with the node of its last page; the others wait for more pages."""
        assert self.states is not None
        ps, later = self.args.page_size, []
        for position, slot in s.pending:
            if position > depth * ps:
                later.append((position, slot))
                continue
            at = node
            for _ in range(depth - position // ps):
                assert at.parent is not None
                at = at.parent
            if not self.states.keep(at, slot):
                self.states.free(slot)  # the node has one: the same state, by exactness
        s.pending = later

    def _release(self, s: Seq) -> None:
        if s.row is not None:
            self.rows.free(s.row)
            s.row = None
        self._cache(s, min(s.kv_len, len(s.tokens)))
        if self.states is not None:
            for _, slot in s.pending:
                self.states.free(slot)
            self.states.free(s.state_slot)
            s.pending, s.state_slot = [], None
        if s.node is not None and self.tree is not None:
            self.tree.unlock(s.node)
        s.node = None
        self._release_window(s)
        self.pool.release(s.pages)
        s.pages = []

    def _finish(self, s: Seq, reason: FinishReason) -> None:
        s.state = _State.DONE
        if self.outbox is not None and s.req.transfer_out is not None and reason.kind != "abort" and s.index == 0:
            self._export(s)
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
        if self.window is not None:
            st.swa_token_usage = 1.0 - self.window.free_pages / self.window.usable_pages
        if self.states is not None:
            st.state_evictions = self.states.evicted
