"""Sliding-window attention and the window KV pool, shaped like SGLang's SWA memory pool.

A windowed model (Gemma 3, GPT-OSS) interleaves two kinds of attention layer
(`ModelConfig.layer_types`): a global layer attends to every earlier token, a windowed one
(`"sliding_attention"`) only to the last `window` tokens: the query at position p sees the keys
j with p - window < j <= p, as transformers' sliding mask has it.

    >>> [visible(p, 4) for p in (0, 3, 9)]
    [range(0, 1), range(0, 4), range(6, 10)]

Global layers keep their KV in the paged pool (`kvpool.KVPool`), as a dense model does. Windowed
layers keep theirs in a pool of their own (`WindowPool`), so that KV which has slid out of every
window can be given back while the global layers still hold the whole sequence: SGLang's
`SWATokenToKVPoolAllocator` (a second, smaller pool, `--swa-full-tokens-ratio` of the first, and
a map from full-pool indices to its own), and what vLLM's sliding-window KV manager does with its
null blocks. Here the map is per page: each page of the paged pool that still holds window KV has
one window page (`WindowPool.of_full`), allocated with it and given back once no holder needs it.

Who holds a window page: a running sequence, for its pages that some later query of its may still
see (`Seq.win_from` on: the pages before it have slid out, `first_needed`), and the radix tree,
for the pages it adopted while their window was still held (`WindowRadixCache`). A page the tree
holds without its window is a *tombstone* (SGLang's word): its global KV is cached, its window KV
is gone. A prefix hit must find the window of its last `window` tokens (`WindowRadixCache.usable`:
the longest hit whose windowed layers' keys are all still there, else a shorter one, recomputed
from there), as SGLang's SWARadixCache and vLLM's sliding-window cache hit do.

    >>> pool = WindowPool(n_layers=1, n_heads=1, head_dim=2, total_tokens=64, page_size=4, full_pages=16)
    >>> pool.alloc_for([3, 5]), pool.of_full[[3, 5]].tolist(), pool.free_pages
    (True, [1, 2], 13)
    >>> pool.release([3]); pool.has(3), int(pool.last_of_full[3]), pool.free_pages   # slid out: page 1 freed
    (False, 1, 14)
    >>> first_needed(end=10, window=4, page_size=4)   # the next query (at 10) sees 7..10: pages 0 and 1 are out
    1
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

import numpy as np

from servefuzz.reference.kvpool import KVPool
from servefuzz.reference.radix import PrefixMatch, RadixCache, RadixNode

__all__ = [
    "WindowPool",
    "WindowRadixCache",
    "first_needed",
    "visible",
]

def visible(position: int, window: int) -> range:
    """The key positions a query at `position` attends to in a windowed layer."""
    return range(max(0, position - window + 1), position + 1)


def first_needed(end: int, window: int, page_size: int) -> int:
    """The first page that a query at `end` or later may still see in a windowed layer: every
    page before it lies wholly at or before end - window."""
    return max(0, (end - window + 1) // page_size)


class WindowPool:
    """The windowed layers' KV: a paged pool of its own (`pool`, a `KVPool` indexed by the model's
    layer, whose global layers' arrays stay untouched) and the map from each page of the paged
    pool to its window page (`of_full`, 0 where it has none: page 0 is the null page, which
    padded decode rows write and read, as the paged pool's).

    `last_of_full` remembers the window page a full page last had, after it was given back: only
    the planted window-ring-stale fault reads it (a slot map that kept freed indices)."""

    def __init__(self, n_layers: int, n_heads: int, head_dim: int, total_tokens: int, page_size: int,
                 full_pages: int) -> None:
        self.pool = KVPool(n_layers, n_heads, head_dim, total_tokens, page_size)
        self.page_size = page_size
        self.of_full = np.zeros(full_pages, dtype=np.int64)
        self.last_of_full = np.zeros(full_pages, dtype=np.int64)

    @property
    def free_pages(self) -> int:
        return self.pool.free_pages

    @property
    def usable_pages(self) -> int:
        return self.pool.usable_pages

    def has(self, full_page: int) -> bool:
        return bool(self.of_full[full_page])

    def alloc_for(self, full_pages: Sequence[int]) -> bool:
        """A window page for each of these freshly allocated full pages, one reference each; False
        (and nothing taken) if too few are free."""
        got = self.pool.alloc(len(full_pages))
        if got is None:
            return False
        self.of_full[list(full_pages)] = got
        self.last_of_full[list(full_pages)] = got
        return True

    def retain(self, full_pages: Iterable[int]) -> None:
        """One more reference on the window page of each of these full pages that has one."""
        self.pool.retain(int(w) for w in self.of_full[list(full_pages)] if w)

    def release(self, full_pages: Iterable[int]) -> None:
        """Drop one reference from the window page of each of these full pages that has one; a
        window page no one holds any more is freed, and its full page has no window from then on."""
        for p in full_pages:
            w = int(self.of_full[p])
            if not w:
                continue
            self.pool.release([w])
            if self.pool.refcount(w) == 0:
                self.of_full[p] = 0

    def slots(self, full_slots: np.ndarray, *, stale: bool = False) -> np.ndarray:
        """The window slots of these slots of the paged pool (any shape). A full page without a
        window maps to the null page, unless `stale` (FAULT window-ring-stale) maps it to the
        window page it last had."""
        ps = self.page_size
        page = self.of_full[full_slots // ps]
        if stale:
            page = np.where(page == 0, self.last_of_full[full_slots // ps], page)
        return page * ps + full_slots % ps

    def write(self, layer: int, full_slots: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        self.pool.write(layer, self.slots(full_slots), k, v)

    def gather(self, layer: int, full_slots: np.ndarray, *, stale: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """As `KVPool.gather` (views of a workspace the next gather overwrites), through the map."""
        return self.pool.gather(layer, self.slots(full_slots, stale=stale))

    def copy(self, src_full: np.ndarray, dst_full: np.ndarray) -> None:
        self.pool.copy_slots(self.slots(src_full), self.slots(dst_full))

    def clear(self) -> None:
        """Every window page free and zero, no full page with a window (a flush of an idle engine)."""
        self.pool.clear()
        self.of_full[:] = 0
        self.last_of_full[:] = 0


class WindowRadixCache(RadixCache):
    """The radix cache of a windowed model: a `RadixCache` over full pages that also holds the
    window pages of some of them (`held`, by full page: each full page is at most one node).

    The tree adopts a page's window when the sequence that caches the page still holds it
    (`adopt`, which also recovers a tombstone); pages whose window had slid out of the sequence
    before are cached as tombstones.
    Evicting a node gives back both; under window pressure alone the least recently used windows
    go first and their nodes stay as tombstones (`evict_windows`, as SGLang's SWA eviction), locks
    or not: a running sequence holds its own references on the windows it still needs."""

    def __init__(self, pool: KVPool, window: WindowPool, width: int) -> None:
        super().__init__(pool)
        self.window = window
        self.width = width  # the model's sliding window, in tokens
        self.held: set[int] = set()

    def adopt(self, node: RadixNode, pages: Sequence[int], held_from: int) -> None:
        """After inserting a sequence's pages (`node` the deepest cached one): hold the window of
        each cached page from `held_from` on that the sequence still holds. Where the tree has
        another page there (computed by an earlier request) whose window is gone, the node takes
        the sequence's page instead, as SGLang's SWA radix insert recovers a tombstone with the
        newcomer's indices: the same tokens after the same prefix, so the same KV, bit for bit."""
        path = []
        while node is not self.root and node is not None:
            path.append(node)
            node = node.parent  # type: ignore[assignment]
        for i, n in enumerate(reversed(path)):
            if i < held_from or i >= len(pages) or n.page in self.held or not self.window.has(pages[i]):
                continue
            if n.page != pages[i]:  # a tombstone of another page: take this one
                self.pool.retain([pages[i]])
                self.pool.release([n.page])
                n.page = pages[i]
            self.window.retain([n.page])
            self.held.add(n.page)

    def usable(self, match: PrefixMatch) -> PrefixMatch:
        """The longest part of `match` whose last `width` tokens' window KV is all still there:
        a hit of k pages needs the windows of pages first_needed(k * page_size) .. k - 1."""
        ps = self.page_size
        k = len(match.pages)
        node = match.node
        while k > 0 and not all(self.window.has(p) for p in match.pages[first_needed(k * ps, self.width, ps) : k]):
            k -= 1
            node = node.parent  # type: ignore[assignment]
        return match if k == len(match.pages) else PrefixMatch(match.pages[:k], node)

    def evict_windows(self, n_pages: int) -> int:
        """Give back the windows of up to `n_pages` least recently used cached pages, keeping
        their nodes (tombstones); returns how many window pages that freed."""
        before = self.window.free_pages
        ages = [(n.last_access, n.page) for n in self._nodes() if n.page in self.held]
        heapq.heapify(ages)
        while ages and self.window.free_pages - before < n_pages:
            _, page = heapq.heappop(ages)
            self.held.discard(page)
            self.window.release([page])
        return self.window.free_pages - before

    def _drop(self, node: RadixNode, ignore_locks: bool) -> None:
        if node.page in self.held:
            self.held.discard(node.page)
            self.window.release([node.page])
        super()._drop(node, ignore_locks)

    def reset(self) -> None:
        super().reset()
        self.held = set()
