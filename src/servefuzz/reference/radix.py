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

A tenant's `salt` (vLLM's and SGLang's `cache_salt`) is hashed into the key of the first page
only, as vLLM hashes it into the first block: every later key hangs below that page, so two
salts share no page at all, and one salt (or none) shares as before.

    >>> salted = pool.alloc(1)
    >>> _ = tree.insert([1, 2, 3, 4, 5], salted, salt="tenant-a")
    >>> tree.match_prefix([1, 2, 3, 4, 0], 1, salt="tenant-a").pages == salted
    True
    >>> tree.match_prefix([1, 2, 3, 4, 0], 1, salt="tenant-b").pages, tree.match_prefix([1, 2, 3, 4, 0], 1).pages
    ([], [])
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servefuzz.reference.kvpool import KVPool

__all__ = ["PrefixMatch", "RadixCache", "RadixNode", "salt_tag"]


def salt_tag(salt: str | None) -> tuple[int, ...]:
    """What a salt adds in front of the first page's key: () for none, else one negative
    integer from its SHA-256, which no token id (>= 0) can equal.

    >>> salt_tag(None), salt_tag("a") == salt_tag("a"), salt_tag("a") != salt_tag("b"), salt_tag("a")[0] < 0
    ((), True, True, True)
    """
    if salt is None:
        return ()
    return (-1 - int.from_bytes(hashlib.sha256(salt.encode()).digest()[:8], "big"),)


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
        # Called with each node `evict` removes, before its page is released: a hybrid model's state
        # checkpoint goes with it (`statecache`), the host tier (`hosttier.HostTier`) keeps a copy of
        # what leaves the device. None: nothing below.
        self.on_evict: Callable[[RadixNode], None] | None = None

    def _chunk(self, tokens: Sequence[int], i: int, salt: str | None = None) -> tuple[int, ...]:
        page = tuple(tokens[i * self.page_size : (i + 1) * self.page_size])
        return salt_tag(salt) + page if i == 0 else page

    def match_prefix(
        self,
        tokens: Sequence[int],
        max_pages: int,
        *,
        salt: str | None = None,
        boundary_fast_path: bool = False,
        salt_blind: bool = False,
    ) -> PrefixMatch:
        """The longest cached prefix of `tokens` under `salt`, in whole pages, at most
        `max_pages` of them.

        Pages whose KV is not written yet (not `ready`) end the match. `boundary_fast_path` is
        the planted page-boundary-prefix fault and `salt_blind` the planted salt-ignored fault
        (see faults.py); both are off in a clean engine.
        """
        node, path = self.root, []
        for i in range(max_pages):
            child = node.children.get(self._chunk(tokens, i, salt))
            if child is None and i == 0 and salt_blind:
                child = self._first_page_any_salt(self._chunk(tokens, 0))
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

    def _first_page_any_salt(self, page: tuple[int, ...]) -> RadixNode | None:
        # FAULT salt-ignored (models SGLang #37160, where the LMCache lookup drops the salt; the
        # class of vLLM CVE-2025-46570): when the salted lookup of the first page misses, a second
        # lookup path keyed on the tokens alone, as an external KV store keyed by token hashes
        # is, takes that page from whichever tenant cached it. The pages hold the right KV for
        # these tokens, so the answer is still exact: only cached_tokens and the time to the
        # first token show another tenant's cache was read.
        width = len(page)
        return next((c for k, c in self.root.children.items()
                     if len(k) - width in (0, 1) and k[len(k) - width:] == page and c.ready), None)

    def insert(
        self, tokens: Sequence[int], pages: Sequence[int], *, ready: bool = True, salt: str | None = None
    ) -> RadixNode:
        """Cache the full pages of `tokens` under `salt` (page i of tokens lives in `pages[i]`).

        Pages already cached under the same key stay as they are (the caller keeps its own
        copy and its own reference). Returns the deepest node covering the full pages.
        """
        node = self.root
        tick = next(self._clock)
        for i in range(min(len(tokens) // self.page_size, len(pages))):
            key = self._chunk(tokens, i, salt)
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
            if self.on_evict is not None:
                self.on_evict(node)
            del parent.children[node.key]
            self.cached_pages -= 1
            evicted += 1
            self._drop(node, ignore_locks)
            if evictable(parent):
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        return evicted

    def _drop(self, node: RadixNode, ignore_locks: bool) -> None:
        """Give back what an evicted node held (a subclass that holds more gives that back too)."""
        if self.on_evict is not None:
            self.on_evict(node)
        if ignore_locks:
            # FAULT evict-in-use (models vLLM #37076 / #50702): the tree believes it is the
            # page's only owner and frees it outright, under any request still reading it.
            self.pool.force_free([node.page])
        else:
            self.pool.release([node.page])

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
