"""A hybrid model's recurrent states: a pool of state slots, and checkpoints kept with the prefix.

A linear-attention layer keeps one state per request, not per-token KV, so a cached prefix is
usable only where its state was kept. As SGLang's MambaRadixCache and vLLM's align mode do it,
the state is checkpointed every `interval` tokens (a multiple of the page) while a request is
computed, and a checkpoint is stored with the radix node of the page it ends; a prefix hit is
truncated to the deepest matched node that holds one, and the tokens after it are computed again.

Slots: slot 0 is scratch (padded decode rows read and write it); every running sequence holds
one slot (its working state) and every checkpoint one. When none is free, the least recently
used checkpoint is dropped (its node keeps its KV page: a hit then stops at an earlier
checkpoint), so the pool has its own pressure and eviction, apart from the KV pool's.

    >>> from servefuzz.reference.kvpool import KVPool
    >>> from servefuzz.reference.radix import RadixCache
    >>> tree = RadixCache(KVPool(n_layers=1, n_heads=1, head_dim=2, total_tokens=64, page_size=4))
    >>> states = StateCache((2, 2), slots=3, interval=8, page_size=4)
    >>> node = tree.insert(list(range(3, 15)), [1, 2, 3])      # three pages: 12 tokens
    >>> work = states.alloc()
    >>> states.data[work] = 7.0
    >>> states.keep(node.parent, work)                            # the state after 8 tokens
    True
    >>> hit = states.usable(tree.match_prefix(list(range(3, 16)), max_pages=3))
    >>> hit.pages, int(states.data[hit.slot][0, 0])               # truncated to the checkpoint
    ([1, 2], 7)
    >>> states.alloc(), states.alloc()                            # the last free slots
    (2, 3)
    >>> states.alloc(), states.kept, states.evicted               # none free: the checkpoint goes
    (1, 0, 1)
    >>> states.alloc() is None                                    # every slot a running one's
    True
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servefuzz.reference.radix import PrefixMatch, RadixNode

__all__ = ["SCRATCH_SLOT", "StateCache", "StateHit"]

SCRATCH_SLOT = 0


@dataclass(frozen=True)
class StateHit:
    """A prefix match cut back to its deepest checkpoint: its pages, that node (the tree's root
    when none), and the checkpoint's slot (None: start from the zero state)."""

    pages: list[int]
    node: RadixNode
    slot: int | None


class StateCache:
    def __init__(self, shape: Sequence[int], *, slots: int, interval: int, page_size: int) -> None:
        if interval % page_size:
            raise ValueError("the checkpoint interval must be a multiple of the page size")
        self.data = np.zeros((slots + 1, *shape))
        self.interval = interval
        self.page_size = page_size
        self._free = list(range(1, slots + 1))
        self._kept: dict[RadixNode, int] = {}  # the checkpoint stored with each node
        self.restored = 0  # checkpoints restored by prefix hits
        self.evicted = 0  # checkpoints dropped for want of a slot

    @property
    def slots(self) -> int:
        return len(self.data) - 1

    @property
    def free_slots(self) -> int:
        return len(self._free)

    @property
    def kept(self) -> int:
        return len(self._kept)

    def alloc(self, *, evict: bool = True) -> int | None:
        """A free slot (its content is whatever it held), evicting the least recently used
        checkpoint if none is free; None if none can be had."""
        if not self._free and evict and self._kept:
            self.evict(1)
        return heapq.heappop(self._free) if self._free else None

    def free(self, slot: int | None) -> None:
        if slot is not None and slot != SCRATCH_SLOT:
            heapq.heappush(self._free, slot)

    def evict(self, n: int) -> int:
        """Drop up to `n` checkpoints, least recently used first (their nodes stay cached)."""
        victims = heapq.nsmallest(n, self._kept, key=lambda node: node.last_access)
        for node in victims:
            self.free(self._kept.pop(node))
        self.evicted += len(victims)
        return len(victims)

    def keep(self, node: RadixNode, slot: int) -> bool:
        """Store the state in `slot` as `node`'s checkpoint (the state after the tokens of the
        path to `node`). False, and the slot stays the caller's, if the node has one already."""
        if node in self._kept or node.parent is None:
            return False
        self._kept[node] = slot
        return True

    def checkpoint(self, node: RadixNode) -> int | None:
        return self._kept.get(node)

    def forget(self, node: RadixNode) -> None:
        """The radix tree evicted `node`: its checkpoint goes with it."""
        slot = self._kept.pop(node, None)
        self.free(slot)

    def usable(self, match: PrefixMatch) -> StateHit:
        """`match` cut back to its deepest node that holds a checkpoint."""
        node, depth = match.node, len(match.pages)
        while depth and node not in self._kept:
            assert node.parent is not None
            node, depth = node.parent, depth - 1
        return StateHit(match.pages[:depth], node, self._kept.get(node) if depth else None)

    def boundaries(self, start: int, end: int) -> list[int]:
        """The checkpoint positions p with start < p <= end: the states to keep after a
        computation of tokens [start, end)."""
        first = start // self.interval + 1
        return list(range(first * self.interval, end + 1, self.interval))

    def clear(self) -> None:
        """Every slot free again and zero, as on a fresh start (a flush of an idle engine)."""
        self._kept.clear()
        self._free = list(range(1, self.slots + 1))
        self.data[:] = 0.0
