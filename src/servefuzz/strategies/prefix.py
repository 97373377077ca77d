"""Strategies aimed at the shared prefix cache and the paged KV pool: pages, tiles, reuse within
one burst, pressure past the pool, cancelled holders."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from servefuzz.strategies.shape import PRESSURE_TOKENS, TILE_SIZES, Draft, TargetShape, boundary_lengths, bystanders, prefix_burst
from servefuzz.workload import Scenario

__all__ = [
    "BurstReuse",
    "CancellationStorm",
    "EvictionPressure",
    "PageBoundaryBursts",
    "TileBoundaryPrefixes",
]


@dataclass(frozen=True)
class PageBoundaryBursts:
    """Burst waves sharing prefixes whose lengths sit on page boundaries.

    Shaped after the seed finding (SGLang #22819). Group `p0` is always the simplest trigger, a
    prefix of exactly one page, allocated and reused within one burst: the first finding a
    maintainer sees should be that one. A second group aims at other multiples and the +-1
    neighbours (smaller multiples more often); a later wave sends longer variants; bystanders
    share nothing.
    """

    name: str = "page-boundary"
    needs: ClassVar[frozenset[str]] = frozenset()

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        d = Draft(seed, shape)
        t0 = rng.uniform(0, 40)
        prefix_burst(d, rng, "p0", page, t0, rng.randint(2, 4), 2 * page)
        aims = [page]
        if rng.random() < 0.5:
            aim = rng.choice(boundary_lengths(page, [rng.choice([1, 1, 2, 2, 3, 4])]))
            aims.append(aim)
            prefix_burst(d, rng, "p1", aim, t0 + rng.uniform(60, 160), rng.randint(2, 3), 2 * page)
        # Wave 2: longer variants of the same prefixes, after the first waves have settled.
        for g, aim in enumerate(aims):
            for _ in range(rng.randint(0, 2)):
                d.add(rng.uniform(250, 550), aim + rng.randint(page, 8 * page), 32, prefix=f"p{g}", prefix_len=aim)
        bystanders(d, rng, rng.randint(1, 3), 550, page)
        return d.scenario(self.name, page_size=page, aims=aims)



@dataclass(frozen=True)
class TileBoundaryPrefixes:
    """Prefixes and extend lengths at attention-tile multiples +-1, reused within a burst.

    Kernels that split work by KV tile compute a prefix-cache hit (a suffix-only query over a
    cached prefix) differently from a full prefill when the split lands on a tile edge.
    """

    name: str = "tile-boundary"
    needs: ClassVar[frozenset[str]] = frozenset()

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        tile = rng.choice(TILE_SIZES)
        d = Draft(seed, shape)
        prefix_len = rng.choice(boundary_lengths(tile, [1, 2, 4, 8]))
        d.blocker(0)
        at = rng.uniform(2, 6)
        for _ in range(rng.randint(2, 4)):
            extend = rng.choice(boundary_lengths(tile, [1, 2]))
            d.add(at + rng.uniform(0, 2), prefix_len + extend, 32, prefix="p0", prefix_len=prefix_len)
        for _ in range(rng.randint(1, 3)):  # hits on the now-cached prefix, alone in their batch
            d.add(rng.uniform(200, 400), prefix_len + rng.choice(boundary_lengths(tile, [1, 3])), 32,
                  prefix="p0", prefix_len=prefix_len)
        return d.scenario(self.name, tile=tile, aims=[prefix_len])



@dataclass(frozen=True)
class BurstReuse:
    """Waves in which a new prefix is cached and reused inside one burst, while the previous
    wave's prefix (now cached) is hit at the same time. Prefix lengths are not aligned."""

    name: str = "burst-reuse"
    needs: ClassVar[frozenset[str]] = frozenset()

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        d = Draft(seed, shape)
        t = rng.uniform(0, 30)
        lengths: list[int] = []
        for w in range(rng.randint(2, 4)):
            lengths.append(rng.randint(page, 4 * page))
            d.blocker(t)
            burst = t + rng.uniform(2, 6)
            for _ in range(rng.randint(2, 3)):
                d.add(burst + rng.uniform(0, 2), lengths[w] + rng.randint(1, page), 32,
                      prefix=f"p{w}", prefix_len=lengths[w])
            if w:
                d.add(burst + rng.uniform(0, 2), lengths[w - 1] + rng.randint(1, page), 32,
                      prefix=f"p{w - 1}", prefix_len=lengths[w - 1])
            t += rng.uniform(120, 300)
        return d.scenario(self.name, page_size=page, aims=lengths)



@dataclass(frozen=True)
class EvictionPressure:
    """Holders of a cached prefix decode while new prompts demand more KV than the pool has.

    Sized from the pool the server reports (1.1x to 1.6x of it; capped, so that a huge pool
    gives heavy load rather than a scenario that runs for minutes). A later wave hits the
    holders' prefix again.
    """

    name: str = "eviction"
    needs: ClassVar[frozenset[str]] = frozenset()
    cap_tokens: int = PRESSURE_TOKENS

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        pool = shape.max_total_tokens or 8192
        want = min(int(pool * rng.uniform(1.1, 1.6)), self.cap_tokens)
        d = Draft(seed, shape)
        prefix_len = rng.randint(2, 6) * page + rng.choice([0, 0, 1, rng.randint(2, page)])
        used = 0
        for _ in range(rng.randint(2, 4)):
            spec = d.add(rng.uniform(0, 3), prefix_len + rng.randint(1, page), rng.randint(64, 192),
                         prefix="p0", prefix_len=prefix_len)
            used += spec.prompt_len + spec.max_tokens
        t = rng.uniform(30, 120)
        # Prefill cost grows faster than length: many mid-sized prompts make pressure cheapest.
        biggest = max(page, min(shape.pool_tokens - 64, pool // 3, 1024))
        while used < want:
            spec = d.add(t, rng.randint(biggest // 3, biggest), rng.randint(8, 48))
            used += spec.prompt_len + spec.max_tokens
            t += rng.uniform(0, 20)
        for _ in range(rng.randint(1, 2)):
            d.add(t + rng.uniform(100, 300), prefix_len + rng.randint(1, page), 32, prefix="p0", prefix_len=prefix_len)
        return d.scenario(self.name, page_size=page, pool=pool, load_tokens=used)



@dataclass(frozen=True)
class CancellationStorm:
    """Requests on a shared prefix cancelled after some tokens, bystanders that take the freed
    memory, then the cancelled prompts sent again (the client's retry) and fresh hits."""

    name: str = "cancel-storm"
    needs: ClassVar[frozenset[str]] = frozenset()

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        d = Draft(seed, shape)
        prefix_len = rng.randint(1, 4) * page + rng.choice([0, 0, rng.randint(1, page - 1)])
        victims = []
        for _ in range(rng.randint(1, 3)):
            cut = rng.uniform(30, 250)
            victims.append((d.add(rng.uniform(0, 10), prefix_len + rng.randint(1, 2 * page), 256,
                                  prefix="p0", prefix_len=prefix_len, cancel_after_ms=cut), cut))
        last_cut = max(cut for _, cut in victims)
        for _ in range(rng.randint(2, 5)):
            d.add(last_cut + rng.uniform(5, 60), rng.choice([page, 2 * page, 4 * page]) + rng.randint(0, page), 16)
        for spec, _ in victims:
            d.add(last_cut + rng.uniform(100, 400), 0, 32, prefix="p0", prefix_len=prefix_len, prompt_ids=spec.prompt_ids)
        d.add(last_cut + rng.uniform(100, 400), prefix_len + rng.randint(1, page), 32, prefix="p0", prefix_len=prefix_len)
        return d.scenario(self.name, page_size=page, cancelled=len(victims))


