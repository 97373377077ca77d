"""The paged KV pool, its page allocator and the request-to-token map, shaped like SGLang's.

Slots hold one token's K and V for every layer; slots come in pages of `page_size`. Page 0 is
reserved: padded decode rows write there and read from there, as SGLang's dummy slot 0.

    >>> pool = KVPool(n_layers=2, n_heads=4, head_dim=32, total_tokens=1024, page_size=64)
    >>> pages = pool.alloc(2)
    >>> pages, pool.free_pages
    ([1, 2], 13)
    >>> pool.retain(pages); pool.release(pages); pool.free_pages   # still held once
    13
    >>> pool.release(pages); pool.free_pages
    15

Pages are reference counted: a running sequence holds one reference per page of its page
table, the radix cache one per page it stores, and `n > 1` choices share the prompt's pages.
A page returns to the free list when its count reaches 0. Free pages are handed out lowest id
first (SGLang keeps its free list sorted), so a freed page is reused promptly.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["PADDING_SLOT", "KVPool", "ReqToTokenPool"]

PADDING_SLOT = 0  # inside reserved page 0


class KVPool:
    """K and V storage for `total_tokens` slots, plus the page allocator over them.

    K and V values are integers bounded by the model's clip (< 2**15), so int16 storage is
    exact and keeps the decode gather small.
    """

    def __init__(self, n_layers: int, n_heads: int, head_dim: int, total_tokens: int, page_size: int) -> None:
        if page_size < 1:
            raise ValueError("page_size must be >= 1")
        self.page_size = page_size
        self.num_pages = total_tokens // page_size
        if self.num_pages < 2:
            raise ValueError("the pool needs at least two pages (page 0 is reserved)")
        self.num_slots = self.num_pages * page_size
        # K and V side by side per slot: one gather fetches both, and converting the gathered
        # block to float64 in one contiguous pass is what keeps decode fast.
        self.kv = [np.zeros((self.num_slots, 2, n_heads, head_dim), dtype=np.int16) for _ in range(n_layers)]
        self._raw = np.empty((0, 2, n_heads, head_dim), dtype=np.int16)  # gather workspace
        self._wide = np.empty((0, 2, n_heads, head_dim), dtype=np.float64)
        self._refs = np.zeros(self.num_pages, dtype=np.int64)
        self._free: list[int] = list(range(1, self.num_pages))  # a sorted list is a valid heap
        self._touched = 1  # pages [0, _touched) may hold KV written since the last clear

    @property
    def usable_pages(self) -> int:
        return self.num_pages - 1

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def alloc(self, n: int) -> list[int] | None:
        """`n` pages with one reference each, or None (and nothing taken) if too few are free."""
        if n > len(self._free):
            return None
        pages = [heapq.heappop(self._free) for _ in range(n)]
        self._refs[pages] = 1
        self._touched = max(self._touched, pages[-1] + 1) if pages else self._touched
        return pages

    def retain(self, pages: Iterable[int]) -> None:
        for p in pages:
            self._refs[p] += 1

    def release(self, pages: Iterable[int]) -> None:
        """Drop one reference from each page; pages that reach 0 go back to the free list."""
        for p in pages:
            if self._refs[p] <= 0:
                continue  # already free: only a planted use-after-free fault gets here
            self._refs[p] -= 1
            if self._refs[p] == 0:
                heapq.heappush(self._free, p)

    def force_free(self, pages: Iterable[int]) -> None:
        """Put pages on the free list whoever still holds them. Only planted faults call this."""
        for p in pages:
            if self._refs[p] > 0:
                self._refs[p] = 0
                heapq.heappush(self._free, p)

    def clear(self) -> None:
        """Every page free again and zero, as on a fresh start (a flush of an idle engine).

        SGLang's allocator clear frees the pages and leaves their old KV in place; a fresh
        SGLang starts from zeroed buffers (torch.zeros). Zeroing what was written makes a
        flushed reference engine bit for bit a freshly started one, so that every replay after
        a flush starts from one defined state: a bug that reads a page before it is written
        then reads the same zeros every time, instead of whatever the previous identical
        replay wrote there (which was the right KV, and hid the bug).
        """
        self._refs[:] = 0
        self._free = list(range(1, self.num_pages))
        for kv in self.kv:
            kv[: self._touched * self.page_size] = 0
        self._touched = 1  # page 0 (padding) is written by every padded decode

    def refcount(self, page: int) -> int:
        return int(self._refs[page])

    def slots(self, pages: Sequence[int], start: int, end: int) -> np.ndarray:
        """Slot ids of token positions [start, end) of a sequence whose page table is `pages`."""
        pos = np.arange(start, end)
        table = np.asarray(pages, dtype=np.int64)
        return table[pos // self.page_size] * self.page_size + pos % self.page_size

    def write(self, layer: int, slots: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Store K and V ([T, H, D] each) of T tokens into `slots`."""
        self.kv[layer][slots, 0] = k
        self.kv[layer][slots, 1] = v

    def gather(self, layer: int, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """K and V of `slots` (any shape S) as float64 arrays of shape [*S, H, D].

        They are views of a workspace that the next gather overwrites, as a GPU kernel's
        workspace is: use them (or copy them) before gathering again. Reusing the workspace
        saves decode the cost of fresh multi-megabyte buffers every layer of every step.
        """
        n, per_slot = slots.size, self.kv[layer].shape[1:]
        if len(self._raw) < n:
            self._raw = np.empty((2 * n, *per_slot), dtype=np.int16)
            self._wide = np.empty((2 * n, *per_slot), dtype=np.float64)
        raw = self._raw[:n].reshape(*slots.shape, *per_slot)
        wide = self._wide[:n].reshape(raw.shape)
        np.take(self.kv[layer], slots, axis=0, out=raw)
        np.copyto(wide, raw)
        return wide[..., 0, :, :], wide[..., 1, :, :]

    def copy_slots(self, src: np.ndarray, dst: np.ndarray) -> None:
        for kv in self.kv:
            kv[dst] = kv[src]


class ReqToTokenPool:
    """Rows of slot ids, one row per running sequence, `context_length` columns.

    The forward pass reads a sequence's KV through its row *when it runs*, so whoever rewrites
    a row before that moment changes what the forward reads (the overlap hazard). The last row
    is the padding row: all zeros, used by padded decode entries.
    """

    def __init__(self, rows: int, context_length: int) -> None:
        self.table = np.zeros((rows + 1, context_length), dtype=np.int64)
        self.padding_row = rows
        # A stack: the most recently freed row is reused first, as a free list does.
        self._free: list[int] = []
        self.clear()

    @property
    def free_rows(self) -> int:
        return len(self._free)

    def alloc(self) -> int:
        if not self._free:
            raise RuntimeError("no free req_to_token row (the scheduler must check first)")
        return self._free.pop()

    def free(self, row: int) -> None:
        self._free.append(row)

    def clear(self) -> None:
        self._free = list(range(len(self.table) - 2, -1, -1))

    def write(self, row: int, start: int, slots: np.ndarray) -> None:
        self.table[row, start : start + len(slots)] = slots
