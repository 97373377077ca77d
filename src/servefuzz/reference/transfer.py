"""The prefill/decode KV transfer: its wire format, the prefill side's outbox and the decode
side's receive buffer (where the planted transfer fault lives).

A prefill server computes a prompt's KV and keeps the KV of all its tokens but the last in its
`Outbox` under a transfer id; the decode server pulls it (`GET /kv_transfer/ID` on 127.0.0.1,
vLLM's NIXL READ shape), stages it in its `ReceiveBuffer`, and its engine takes it when it admits
the request: it computes the last prompt token itself, as vLLM's decode side does, so the first
token and its logprobs come from the decode server.

    >>> import numpy as np
    >>> kv = np.arange(2 * 5 * 2 * 1 * 2, dtype=np.int16).reshape(2, 5, 2, 1, 2)
    >>> t = Transfer((7, 8, 9, 10, 11, 12), 64, kv)
    >>> back = Transfer.decode(t.encode())
    >>> back.prompt, back.cached_tokens, bool((back.kv == kv).all())
    ((7, 8, 9, 10, 11, 12), 64, True)
    >>> buf = ReceiveBuffer(page_size=2, dedupe_by_base=False)
    >>> buf.stage("a", t); buf.in_flight
    1
    >>> bool((buf.take("a").kv == kv).all()), buf.in_flight, buf.take("a")
    (True, 0, None)
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

__all__ = ["TRANSFER_ID", "Outbox", "ReceiveBuffer", "Transfer", "TransferError", "TransferStats"]

# A transfer id: what a prefill server hands out and a decode server's request may name.
TRANSFER_ID = re.compile(r"[0-9a-f]{32}")
_MAX_HEADER = 1 << 20


class TransferError(ValueError):
    """A transfer that cannot be used; the message is one line for the client (HTTP 400)."""


@dataclass(frozen=True)
class Transfer:
    """The KV of a prompt's first `len(prompt) - 1` tokens ([layers, tokens, 2, heads, dim],
    int16 as the pool stores it), and the prefix-cache hit its prefill server had."""

    prompt: tuple[int, ...]
    cached_tokens: int
    kv: np.ndarray

    @property
    def tokens(self) -> int:
        return int(self.kv.shape[1])

    def encode(self) -> bytes:
        """One JSON header line, then the KV's bytes (little-endian int16, C order)."""
        head = {"prompt": list(self.prompt), "cached_tokens": self.cached_tokens, "shape": list(self.kv.shape)}
        return json.dumps(head).encode() + b"\n" + np.ascontiguousarray(self.kv, dtype="<i2").tobytes()

    @classmethod
    def decode(cls, data: bytes) -> Transfer:
        """The transfer `data` holds; TransferError for anything malformed (the peer is untrusted
        as any client is: the header is checked whole before a byte of KV is read)."""
        line, sep, body = data.partition(b"\n")
        try:
            head = json.loads(line[:_MAX_HEADER]) if sep else None
        except ValueError:
            head = None
        if not isinstance(head, dict):
            raise TransferError("transfer: no header")
        prompt, cached, shape = head.get("prompt"), head.get("cached_tokens"), head.get("shape")
        if not (isinstance(prompt, list) and all(type(t) is int for t in prompt) and type(cached) is int
                and isinstance(shape, list) and len(shape) == 5 and all(type(d) is int and d >= 0 for d in shape)):
            raise TransferError("transfer: malformed header")
        if len(body) != 2 * int(np.prod(shape)):
            raise TransferError("transfer: its KV is not the size its header says")
        kv = np.frombuffer(body, dtype="<i2").reshape(shape).astype(np.int16)
        return cls(tuple(prompt), cached, kv)


@dataclass
class TransferStats:
    """Counters behind /metrics: transfers done, and the pages and bytes they moved."""

    transfers: int = 0
    pages: int = 0
    bytes: int = 0
    # FAULT transfer-region-dedupe: pages the receive buffer dropped as already registered.
    deduped_pages: int = 0

    def count(self, t: Transfer, page_size: int) -> None:
        self.transfers += 1
        self.pages += -(-t.tokens // page_size)
        self.bytes += t.kv.nbytes


class Outbox:
    """A prefill server's finished transfers, held until their decode server pulls them (at most
    `limit`: a transfer nobody pulls, its decode request lost, is dropped oldest first)."""

    def __init__(self, page_size: int, limit: int = 256) -> None:
        self._held: OrderedDict[str, Transfer] = OrderedDict()
        self._lock = threading.Lock()
        self._limit = limit
        self.page_size = page_size
        self.stats = TransferStats()

    def put(self, tid: str, t: Transfer) -> None:  # engine thread
        with self._lock:
            self._held[tid] = t
            while len(self._held) > self._limit:
                self._held.popitem(last=False)

    def pull(self, tid: str) -> Transfer | None:  # HTTP thread: handed over once
        with self._lock:
            t = self._held.pop(tid, None)
            if t is not None:
                self.stats.count(t, self.page_size)
            return t

    def clear(self) -> None:
        with self._lock:
            self._held.clear()


class ReceiveBuffer:
    """A decode server's transfers in flight: staged by the HTTP side when pulled, taken by the
    engine when it admits their request.

    The buffer is made of page-sized regions. A clean buffer keys each region by its transfer
    and page. `dedupe_by_base` is the planted transfer-region-dedupe fault.
    """

    def __init__(self, page_size: int, *, dedupe_by_base: bool) -> None:
        self.page_size = page_size
        self._dedupe = dedupe_by_base
        self._staged: dict[str, Transfer] = {}
        # FAULT transfer-region-dedupe: regions by base address alone (page i of any transfer).
        self._regions: dict[int, tuple[str, np.ndarray]] = {}
        self._lock = threading.Lock()
        self.stats = TransferStats()

    @property
    def in_flight(self) -> int:
        return len(self._staged)

    def stage(self, tid: str, t: Transfer) -> None:  # HTTP thread
        with self._lock:
            self._staged[tid] = t
            self.stats.count(t, self.page_size)
            if self._dedupe:
                self._register(tid, t)

    def _register(self, tid: str, t: Transfer) -> None:
        # FAULT transfer-region-dedupe (models vLLM #57661, where NIXL dedupes the regions it
        # registers by base address, and #52627's 1P1D corruption under sustained load): each
        # staged page is registered as a region at its base address, page i's offset in the
        # buffer, whichever transfer it belongs to; a region whose base is already registered
        # counts as the same region and is not written again. With one transfer in flight nothing
        # collides; with two, the later one's pages at bases the earlier one holds are dropped and
        # it reads the earlier prompt's KV there (zeros once that one was taken). Needs two
        # transfers in flight at once: one request alone never has that. Cured by one server
        # (--disaggregation-mode null: no transfer at all).
        ps = self.page_size
        for i in range(-(-t.tokens // ps)):
            if i in self._regions:
                self.stats.deduped_pages += 1
                continue
            self._regions[i] = (tid, t.kv[:, i * ps:(i + 1) * ps])

    def take(self, tid: str) -> Transfer | None:  # engine thread
        with self._lock:
            t = self._staged.pop(tid, None)
            if t is None or not self._dedupe:
                return t
            ps, kv = self.page_size, np.zeros_like(t.kv)
            for i in range(-(-t.tokens // ps)):
                region = self._regions.get(i)
                if region is not None:
                    n = min(region[1].shape[1], kv[:, i * ps:(i + 1) * ps].shape[1])
                    kv[:, i * ps:i * ps + n] = region[1][:, :n]
            self._regions = {i: r for i, r in self._regions.items() if r[0] != tid}
            return Transfer(t.prompt, t.cached_tokens, kv)

    def discard(self, tid: str) -> None:
        """A staged transfer whose request went away before it was admitted."""
        with self._lock:
            self._staged.pop(tid, None)
            self._regions = {i: r for i, r in self._regions.items() if r[0] != tid}

    def clear(self) -> None:
        with self._lock:
            self._staged.clear()
            self._regions.clear()
