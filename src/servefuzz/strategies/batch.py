"""Strategies aimed at the scheduler: padded decode batches, the chunked-prefill budget, admissions
in a finishing step, n > 1 forks, and unaimed load."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from servefuzz.strategies.shape import Draft, TargetShape, boundary_lengths
from servefuzz.workload import Scenario

__all__ = [
    "BatchSweep",
    "ChunkBoundary",
    "LongDecodes",
    "NChoices",
    "RandomLoad",
]


@dataclass(frozen=True)
class BatchSweep:
    """A decode batch just above a padded size whose requests finish one by one.

    `max_tokens` are staggered, so the running batch shrinks a request at a time and crosses
    every padding bucket below its start (e.g. 5 -> 4 running requests: bucket 8 -> 4).
    """

    name: str = "batch-sweep"
    needs: ClassVar[frozenset[str]] = frozenset()

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        limit = shape.max_running_requests or 256
        buckets = [b for b in shape.capture_sizes if 1 < b < min(limit, 40)] or [2]
        bucket = rng.choice(buckets[:6])
        size = min(limit, bucket + rng.randint(1, 2))
        base, gap = rng.randint(4, 24), rng.randint(1, 5)
        d = Draft(seed, shape)
        t0 = rng.uniform(0, 20)
        for i in range(size):
            d.add(t0 + rng.uniform(0, 3), rng.randint(8, 96), base + i * gap)
        for _ in range(rng.randint(0, 3)):  # newcomers that grow the batch again mid-way
            d.add(t0 + rng.uniform(20, 200), rng.randint(8, 64), rng.randint(4, 24))
        return d.scenario(self.name, bucket=bucket, batch=size)



@dataclass(frozen=True)
class ChunkBoundary:
    """Prompts split at the chunked-prefill budget, next to other prefills and running decodes.

    The budget is split across one extend batch: a short request first, then one whose length
    makes the batch total a multiple of the budget +-1 (or a few tokens past it), so the long
    one is cut at the budget with another request beside it. The two are sent at the same
    instant behind a blocker: a scheduling round between their arrivals would give each its own
    batch. Decoders run throughout.
    """

    name: str = "chunk-boundary"
    needs: ClassVar[frozenset[str]] = frozenset()

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        room = shape.pool_tokens - 64
        chunk = shape.chunked_prefill_size or rng.choice([c for c in (512, 1024, 2048) if c < room] or [room // 2])
        d = Draft(seed, shape)
        for _ in range(rng.randint(1, 3)):  # running decodes
            d.add(rng.uniform(0, 10), rng.randint(16, 128), rng.randint(64, 160))
        t = rng.uniform(20, 60)
        d.blocker(t)
        total = chunk * rng.choice([m for m in (1, 2) if m * chunk + 64 < room] or [1])
        total += rng.choice([-1, 0, 1, 1, 2, rng.randint(3, 64)])
        first = rng.randint(16, max(17, min(chunk // 2, room)))
        second = max(1, min(total - first, room))
        at = t + rng.uniform(2, 4)
        d.add(at, first, rng.randint(8, 32))
        d.add(at, second, rng.randint(8, 32))
        if rng.random() < 0.3:  # a second long prompt: the first one's tail shares its batch
            d.add(t + rng.uniform(6, 8), min(room, rng.choice(boundary_lengths(chunk, [1]))), 16)
        return d.scenario(self.name, chunk=chunk, batch_total=first + second)



@dataclass(frozen=True)
class LongDecodes:
    """Requests admitted in the very round in which another one's last decode step runs.

    Two shapes. *Saturated* (when the server says it runs at most R requests at once): one
    request whose n = R - 1 choices hold every row but one, a short *victim* that takes the
    last, and a *newcomer* that must wait for a row. The victim finishes first, and the
    newcomer is admitted exactly when its row comes free, whatever the timing: a server at its
    concurrency limit recycles a finishing request's row at once, the moment SGLang's overlap
    race (#18744, PR #26380) needs. The newcomer's prompt outlasts the victim's whole context,
    so a row handed over too early is overwritten wherever the victim reads it: the finding
    comes back in every replay. *Trickle* (a server that does not say R, or runs too many at
    once to fill): long decodes with staggered ends and short newcomers every few ms, so that
    one is nearly always waiting when a step is scheduled; which request gets hit, and whether
    any does, follows the timing (measured on the reference engine: 1 to 9 replays in 10).
    """

    name: str = "long-decode"
    needs: ClassVar[frozenset[str]] = frozenset()
    # Rows a saturated scenario may fill: decode batches of this many rows cost the reference
    # engine about 0.3 s a step on two shared cores; larger limits get the trickle.
    saturate_max: int = 128

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        limit = shape.max_running_requests
        if limit is not None and 1 <= limit <= self.saturate_max:
            saturated = self._saturated(rng, shape, seed, limit)
            if saturated is not None:
                return saturated
        d = Draft(seed, shape)
        for _ in range(rng.randint(2, 6)):
            d.add(rng.uniform(0, 5), rng.randint(16, 128), rng.randint(48, 256))
        # The trickle: short requests every few ms, so one is nearly always waiting when a step
        # is scheduled; their own short decodes end at staggered steps too.
        t, gap = rng.uniform(10, 150), rng.uniform(5, 40)
        for _ in range(rng.randint(10, 30)):
            d.add(t, rng.randint(8, 64), rng.randint(2, 16))
            t += rng.expovariate(1 / gap)
        return d.scenario(self.name, gap_ms=round(gap, 1))

    def _saturated(self, rng: random.Random, shape: TargetShape, seed: int, limit: int) -> Scenario | None:
        d = Draft(seed, shape)
        page = shape.unit
        fillers = limit - 1
        if shape.max_total_tokens is not None and (fillers + 4) * 2 * page > shape.max_total_tokens:
            return None  # the choices alone would press the pool: that is the eviction strategy's job
        victim_prompt, victim_tokens = rng.randint(8, 40), rng.randint(2, 4)
        t0 = rng.uniform(0, 10)
        if fillers:
            # Long enough to outlive the victim's admission (the next round) and its decode steps.
            # Their prompt starts with a page the newcomer shares: when the newcomer takes the
            # victim's row too early, the victim reads that cached page, real KV of the fillers'
            # text (not unwritten slots), so what it answers depends on its neighbours' content.
            d.add(t0, page + rng.randint(1, 8), victim_tokens + rng.randint(4, 8), prefix="p0", prefix_len=page,
                  n=fillers)
        d.add(t0 + rng.uniform(1, 3), victim_prompt, victim_tokens)
        newcomer = max(page, victim_prompt + victim_tokens) + rng.randint(8, 64)
        d.add(t0 + rng.uniform(4, 6), newcomer, rng.randint(2, 8), prefix="p0" if fillers else None,
              prefix_len=page if fillers else 0)
        return d.scenario(self.name, saturated=limit, page_size=page)



@dataclass(frozen=True)
class NChoices:
    """n > 1 requests (forked from one prefill) beside shared-prefix and plain requests."""

    name: str = "n-mix"
    needs: ClassVar[frozenset[str]] = frozenset()

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        d = Draft(seed, shape)
        prefix_len = rng.choice(boundary_lengths(page, [1, 2]))
        d.blocker(0)
        for _ in range(rng.randint(2, 5)):
            shared = rng.random() < 0.6
            d.add(rng.uniform(2, 40), prefix_len + rng.randint(1, 2 * page), rng.randint(8, 48),
                  prefix="p0" if shared else None, prefix_len=prefix_len if shared else 0,
                  n=rng.choice([1, 2, 2, 3, 4]), stream=rng.random() < 0.3)
        return d.scenario(self.name, page_size=page)



@dataclass(frozen=True)
class RandomLoad:
    """Unaimed load as a benchmark tool would send it: random lengths, Poisson arrivals."""

    name: str = "random"
    needs: ClassVar[frozenset[str]] = frozenset()
    max_tokens: int = 32
    rate_per_s: float = 40.0

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        d = Draft(seed, shape)
        t = 0.0
        for _ in range(rng.randint(4, 12)):
            t += rng.expovariate(self.rate_per_s) * 1000.0
            d.add(t, rng.randint(8, min(1024, shape.pool_tokens - self.max_tokens - 1)), self.max_tokens)
        return d.scenario(self.name)


