"""The host tier: a second, larger KV pool in host memory behind the radix cache, shaped like
SGLang's HiCache (`--enable-hierarchical-cache`; here `--host-tier-tokens N`, off by default).

Write policy: **write-through**, SGLang's default (`--hicache-write-policy write_through`) and
what vLLM's offloading connector does (it stores each computed block): a page is copied to the
host as it enters the radix tree, so eviction from the device only drops the device copy. A
page whose host copy the host's own LRU already dropped is written once more as it leaves the
device (the write-back of that one page), so the host keeps what the device lost while it has
room. Write-through is the policy whose flaw a device-only flush shows at once: the host holds
every prefix just served, so a "cold" reference after such a flush is a host hit
(`--flush-device-only`, vLLM's `/reset_prefix_cache` without `reset_external`, vllm#57727).

Load-back: a prompt whose device match ends where the host still holds the next pages gets
fresh device pages, the host pages are copied into them, and they enter the radix tree as if
computed there; the request reports them in `cached_tokens` (as SGLang counts host hits). The
host pool has its own capacity and its own LRU over its leaves.

    >>> from servefuzz.reference.kvpool import KVPool
    >>> from servefuzz.reference.radix import RadixCache
    >>> pool = KVPool(n_layers=1, n_heads=1, head_dim=2, total_tokens=16, page_size=4)
    >>> tree = RadixCache(pool)
    >>> host = HostTier(pool, tree, tokens=32)
    >>> pages = pool.alloc(2)
    >>> pool.kv[0][pool.slots(pages, 0, 8), 0, 0, 0] = range(1, 9)   # the KV of 8 tokens
    >>> host.write_through(tree.insert(list(range(10, 19)), pages)); pool.release(pages)
    >>> host.used_pages, tree.evict(2), host.used_pages     # evicted from the device, kept on host
    (2, 2, 2)
    >>> found = host.lookup(tree.root, list(range(10, 19)), 0, 2, None); len(found)
    2
    >>> loaded = pool.alloc(2)
    >>> _ = host.copy_in(found, loaded)
    >>> [int(v) for v in pool.kv[0][pool.slots(loaded, 0, 8), 0, 0, 0]]   # loaded back, bit for bit
    [1, 2, 3, 4, 5, 6, 7, 8]

The faults of this tier (faults.py: `host-loadback-stale-pages`, `host-key-no-salt`,
`host-loadback-race`) are marked `FAULT <name>` in place below.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from servefuzz.reference.kvpool import KVPool
from servefuzz.reference.radix import RadixCache, RadixNode, salt_tag

__all__ = ["HostEntry", "HostStats", "HostTier"]


class HostEntry:
    """One page held in host memory: its key (as the radix tree keys it, or without the tenant's
    tag under the host-key-no-salt fault), its host page and its place in the host's own trie."""

    __slots__ = ("children", "key", "last_access", "page", "parent")

    def __init__(self, key: tuple[int, ...], page: int, parent: HostEntry | None) -> None:
        self.key, self.page, self.parent = key, page, parent
        self.children: dict[tuple[int, ...], HostEntry] = {}
        self.last_access = 0


@dataclass
class HostStats:
    """The tier's counters behind /metrics, in tokens (SGLang's names: `server.py`)."""

    backup_tokens: int = 0  # device -> host copies (hicache_backup_tokens_total)
    load_back_tokens: int = 0  # host -> device copies (load_back_tokens_total)
    host_hit_tokens: int = 0  # of admitted prompts' cached tokens, those loaded back (cached_tokens{host})
    dropped_tokens: int = 0  # device evictions with no host copy to keep (hicache_dropped_tokens_total)


@dataclass(eq=False)
class _Pending:
    """FAULT host-loadback-race: a load-back copy that lands after the forward that reads it."""

    src: list[int]
    dst: list[int]
    reader: object  # the sequence whose batch lands it


@dataclass
class HostTier:
    """The host pool (K and V per layer, int16 as the device pool), its free list, its trie of
    entries and its LRU. The engine calls `write_through` as pages enter the radix tree,
    `on_device_evict` as they leave it, `lookup` and `copy_in` on admission, `clear` on a flush."""

    pool: KVPool
    tree: RadixCache
    tokens: int
    key_no_salt: bool = False  # FAULT host-key-no-salt
    stats: HostStats = field(default_factory=HostStats)

    def __post_init__(self) -> None:
        ps = self.pool.page_size
        self.num_pages = self.tokens // ps
        if self.num_pages < 1:
            raise ValueError("the host tier needs at least one page")
        per_slot = self.pool.kv[0].shape[1:]
        self.kv = [np.zeros((self.num_pages * ps, *per_slot), dtype=np.int16) for _ in self.pool.kv]
        self.root = HostEntry((), -1, None)
        self._free = list(range(self.num_pages))
        self._touched = 0  # host pages [0, _touched) may hold KV written since the last clear
        self._clock = itertools.count(1)
        self.pending: list[_Pending] = []
        self.tree.on_evict = self.on_device_evict

    @property
    def used_pages(self) -> int:
        return self.num_pages - len(self._free)

    # -- keys ----------------------------------------------------------------------------------

    def _key(self, key: tuple[int, ...], depth: int) -> tuple[int, ...]:
        if self.key_no_salt and depth == 0:
            # FAULT host-key-no-salt (models the host/storage keys of HiCache and KV connectors that
            # hash the tokens alone, the class of SGLang #37160 and vLLM CVE-2025-46570 on the
            # host tier): the host entry of a first page is keyed on its tokens, without the
            # tenant's salt or adapter tag the radix tree puts in front. Another tenant's (or
            # adapter's) device miss then finds it on the host and loads it back: KV computed
            # under another adapter, or a cross-tenant hit. Needs another tenant's request first.
            return key[-self.pool.page_size:] if len(key) > self.pool.page_size else key
        return key

    def _chunk(self, tokens: Sequence[int], i: int, cache_key: str | None) -> tuple[int, ...]:
        ps = self.pool.page_size
        page = tuple(tokens[i * ps : (i + 1) * ps])
        return self._key(salt_tag(cache_key) + page if i == 0 else page, i)

    @staticmethod
    def _path(node: RadixNode) -> list[RadixNode]:
        path = []
        while node.parent is not None:
            path.append(node)
            node = node.parent
        return path[::-1]

    # -- device -> host --------------------------------------------------------------------------

    def write_through(self, node: RadixNode) -> None:
        """Copy every page on the path to `node` that the host lacks (written pages only: a
        not-ready page is copied once its KV is written and it is inserted again)."""
        entry, tick = self.root, next(self._clock)
        for depth, n in enumerate(self._path(node)):
            if not n.ready:
                return
            key = self._key(n.key, depth)
            child = entry.children.get(key)
            if child is None:
                page = self._alloc(protect=entry)
                if page is None:
                    return  # the host is full of what it may not drop: the rest stays device-only
                child = HostEntry(key, page, entry)
                entry.children[key] = child
                self._copy(self.pool.kv, self.pool.slots([n.page], 0, self.pool.page_size),
                           self.kv, self._slots([page]))
                self.stats.backup_tokens += self.pool.page_size
            child.last_access = tick
            entry = child

    def on_device_evict(self, node: RadixNode) -> None:
        """A device page leaves the radix tree: keep it on the host if it is not there yet."""
        before = self.stats.backup_tokens
        had = self._entry_of(node) is not None
        if not had:
            self.write_through(node)
        if not had and self.stats.backup_tokens == before:
            self.stats.dropped_tokens += self.pool.page_size

    def _entry_of(self, node: RadixNode) -> HostEntry | None:
        entry: HostEntry | None = self.root
        for depth, n in enumerate(self._path(node)):
            assert entry is not None
            entry = entry.children.get(self._key(n.key, depth))
            if entry is None:
                return None
        return entry

    def _alloc(self, protect: HostEntry) -> int | None:
        """One free host page, evicting the least recently used host leaf if none is free
        (never `protect` or its ancestors: the path being written)."""
        if not self._free:
            keep = set()
            e: HostEntry | None = protect
            while e is not None:
                keep.add(id(e))
                e = e.parent
            leaves = [x for x in self._entries() if not x.children and id(x) not in keep]
            if not leaves:
                return None
            victim = min(leaves, key=lambda x: x.last_access)
            assert victim.parent is not None
            del victim.parent.children[victim.key]
            heapq.heappush(self._free, victim.page)
        page = heapq.heappop(self._free)
        self._touched = max(self._touched, page + 1)
        return page

    def _entries(self) -> list[HostEntry]:
        out, stack = [], list(self.root.children.values())
        while stack:
            e = stack.pop()
            out.append(e)
            stack.extend(e.children.values())
        return out

    # -- host -> device --------------------------------------------------------------------------

    def lookup(self, matched: RadixNode, tokens: Sequence[int], device_pages: int, max_pages: int,
               cache_key: str | None) -> list[HostEntry]:
        """The host entries that continue a device match of `device_pages` pages ending at node
        `matched`, up to `max_pages` pages in all: the host must hold the matched pages too (its
        trie is walked from the root), and where the device tree has a node for the next page
        (one whose KV is not written yet) nothing is loaded over it. Touched, so that the host's
        LRU drops others first until they are loaded."""
        entry: HostEntry | None = self.root
        tick = next(self._clock)
        found: list[HostEntry] = []
        for i in range(max_pages):
            assert entry is not None
            entry = entry.children.get(self._chunk(tokens, i, cache_key))
            if entry is None:
                break
            entry.last_access = tick
            if i == device_pages:
                ps = self.pool.page_size
                device_key = (salt_tag(cache_key) if i == 0 else ()) + tuple(tokens[i * ps : (i + 1) * ps])
                if device_key in matched.children:
                    break
            if i >= device_pages:
                found.append(entry)
        return found

    def still_held(self, entries: Sequence[HostEntry]) -> list[HostEntry]:
        """`entries` up to the first the host has dropped since `lookup` (its LRU, while the
        admission made room on the device)."""
        kept = []
        for e in entries:
            if e.parent is None or e.parent.children.get(e.key) is not e:
                break
            kept.append(e)
        return kept

    def copy_in(self, entries: Sequence[HostEntry], pages: Sequence[int], *, defer_for: object = None) -> np.ndarray:
        """Copy the host pages of `entries` into device `pages`; returns the device slots.
        `defer_for`: FAULT host-loadback-race, the copy lands after `defer_for`'s next forward."""
        src = [e.page for e in entries]
        dst = list(pages)
        self.stats.load_back_tokens += len(dst) * self.pool.page_size
        slots = self.pool.slots(dst, 0, len(dst) * self.pool.page_size)
        if defer_for is not None:
            self.pending.append(_Pending(src, dst, defer_for))
        else:
            self._copy(self.kv, self._slots(src), self.pool.kv, slots)
        return slots

    def landed(self, readers: Sequence[object]) -> None:
        """FAULT host-loadback-race: a forward that read `readers`' pages has run; their copies land now."""
        ids = {id(r) for r in readers}
        for p in [p for p in self.pending if id(p.reader) in ids]:
            self._copy(self.kv, self._slots(p.src), self.pool.kv, self.pool.slots(p.dst, 0, len(p.dst) * self.pool.page_size))
            self.pending.remove(p)

    # -- flush -------------------------------------------------------------------------------------

    def clear(self) -> None:
        """Every host page free and zero (a flush reaches the host tier too, as SGLang's does)."""
        self.root = HostEntry((), -1, None)
        self._free = list(range(self.num_pages))
        for kv in self.kv:
            kv[: self._touched * self.pool.page_size] = 0
        self._touched = 0
        self.pending = []

    # -- copies ----------------------------------------------------------------------------------

    def _slots(self, pages: Sequence[int]) -> np.ndarray:
        ps = self.pool.page_size
        return (np.asarray(pages, dtype=np.int64)[:, None] * ps + np.arange(ps)).reshape(-1)

    @staticmethod
    def _copy(src: list[np.ndarray], src_slots: np.ndarray, dst: list[np.ndarray], dst_slots: np.ndarray) -> None:
        for a, b in zip(src, dst, strict=True):
            b[dst_slots] = a[src_slots]
