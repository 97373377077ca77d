"""A radix prefix cache over KV pages, shaped like SGLang's RadixCache with a page size.

Each node stands for one full page: its key is the page's `page_size` token ids, its value the
page id holding their KV. The tree holds one pool reference per page. A running sequence that
uses a cached path *locks* its deepest node (`lock_ref` counts along the path to the root), so
that eviction, which removes least-recently-used unlocked leaves, leaves it alone.

    >>> from servefuzz.reference.kvpool import KVPool
    >>> pool = KVPool(n_layers=1, n_heads=1, head_dim=2, total_tokens=64, page_size=4)
    >>> tree = RadixCache(pool)
    >>> pages = pool.alloc(2)
    >>> _ = tree.insert([1, 2, 3, 4, 5, 6, 7, 8, 9], pages)  # two full pages; token 9 ignored
    >>> tree.match_prefix([1, 2, 3, 4, 5, 6, 7, 0], max_pages=2).pages
    [1]
    >>> pool.release(pages); tree.evict(2), pool.free_pages   # the tree's references go too
    (2, 15)
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from servefuzz.reference.kvpool import KVPool

__all__ = ["PrefixMatch", "RadixCache", "RadixNode"]


class RadixNode:
    """One cached page. `ready` is False only for pages a planted fault inserted early."""

    __slots__ = ("children", "key", "last_access", "lock_ref", "page", "parent", "ready")

    def __init__(self, key: tuple[int, ...], page: int, parent: RadixNode | None, ready: bool = True) -> None:
        self.key = key
        self.page = page
        self.parent = parent
        self.children: dict[tuple[int, ...], RadixNode] = {}
        self.lock_ref = 0
        self.last_access = 0
        self.ready = ready


@dataclass(frozen=True)
class PrefixMatch:
    """Pages of the matched prefix (in order) and the deepest matched node (root if none)."""

    pages: list[int]
    node: RadixNode


class RadixCache:
    def __init__(self, pool: KVPool) -> None:
        self.pool = pool
        self.page_size = pool.page_size
        self.root = RadixNode((), -1, None)
        self.root.lock_ref = 1  # never evicted
        self._clock = itertools.count(1)
        self.cached_pages = 0

    def _chunk(self, tokens: Sequence[int], i: int) -> tuple[int, ...]:
        return tuple(tokens[i * self.page_size : (i + 1) * self.page_size])

    def match_prefix(self, tokens: Sequence[int], max_pages: int, *, boundary_fast_path: bool = False) -> PrefixMatch:
        """The longest cached prefix of `tokens`, in whole pages, at most `max_pages` of them.

        Pages whose KV is not written yet (not `ready`) end the match. `boundary_fast_path` is
        the planted page-boundary-prefix fault (see faults.py) and is off in a clean engine.
        """
        node, path = self.root, []
        for i in range(max_pages):
            child = node.children.get(self._chunk(tokens, i))
            if child is None:
                break
            path.append(child)
            node = child
        usable = next((i for i, n in enumerate(path) if not n.ready), len(path))
        if boundary_fast_path and usable < len(path):
            # FAULT page-boundary-prefix (models SGLang #22819): when the request's next token
            # starts no child of the last matched node, the match "ends cleanly at a page
            # boundary" and a fast path returns it without checking that its pages are written.
            nxt = len(path) * self.page_size
            if nxt < len(tokens) and all(key[0] != tokens[nxt] for key in node.children):
                usable = len(path)
        path = path[:usable]
        tick = next(self._clock)
        for n in path:
            n.last_access = tick
        return PrefixMatch([n.page for n in path], path[-1] if path else self.root)

    def insert(self, tokens: Sequence[int], pages: Sequence[int], *, ready: bool = True) -> RadixNode:
        """Cache the full pages of `tokens` (page i of tokens lives in `pages[i]`).

        Pages already cached under the same key stay as they are (the caller keeps its own
        copy and its own reference). Returns the deepest node covering the full pages.
        """
        node = self.root
        tick = next(self._clock)
        for i in range(min(len(tokens) // self.page_size, len(pages))):
            key = self._chunk(tokens, i)
            child = node.children.get(key)
            if child is None:
                child = RadixNode(key, pages[i], node, ready)
                node.children[key] = child
                self.pool.retain([pages[i]])
                self.cached_pages += 1
            elif ready and not child.ready and child.page == pages[i]:
                child.ready = True  # the early-inserted page's KV is now written
            child.last_access = tick
            node = child
        return node

    def lock(self, node: RadixNode) -> None:
        while node is not self.root and node is not None:
            node.lock_ref += 1
            node = node.parent  # type: ignore[assignment]

    def unlock(self, node: RadixNode) -> None:
        while node is not self.root and node is not None:
            node.lock_ref -= 1
            node = node.parent  # type: ignore[assignment]

    def evict(self, n_pages: int, *, ignore_locks: bool = False) -> int:
        """Remove up to `n_pages` least-recently-used leaves; returns how many were removed.

        A clean engine evicts only unlocked leaves and drops the tree's reference (the page is
        freed once nobody else holds it). `ignore_locks` is the planted evict-in-use fault.
        """

        def evictable(n: RadixNode) -> bool:
            return n is not self.root and not n.children and (ignore_locks or n.lock_ref == 0)

        heap = [(n.last_access, id(n), n) for n in self._nodes() if evictable(n)]
        heapq.heapify(heap)
        evicted = 0
        while heap and evicted < n_pages:
            _, _, node = heapq.heappop(heap)
            parent = node.parent
            assert parent is not None
            del parent.children[node.key]
            self.cached_pages -= 1
            evicted += 1
            if ignore_locks:
                # FAULT evict-in-use (models vLLM #37076 / #50702): the tree believes it is the
                # page's only owner and frees it outright, under any request still reading it.
                self.pool.force_free([node.page])
            else:
                self.pool.release([node.page])
            if evictable(parent):
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        return evicted

    def reset(self) -> None:
        """Forget every cached page. The caller (a flush of an idle engine) clears the pool."""
        self.root.children = {}
        self.cached_pages = 0

    def _nodes(self) -> list[RadixNode]:
        out, stack = [], [self.root]
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(n.children.values())
        return out
