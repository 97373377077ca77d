"""Strategies: small classes that each generate scenarios aimed at one bug class.

A strategy sees only a `TargetShape` (what the server said about itself: page size, pool size,
chunked-prefill budget, padded batch sizes, context, vocabulary) and a seeded `random.Random`;
it returns a `Scenario`. Same seed, same shape: same scenario, byte for byte, so any finding can
be regenerated from its seed.

    >>> s = PageBoundaryBursts().generate(random.Random(1), TargetShape(page_size=64), seed=1)
    >>> any(r.prefix_len == 64 for r in s.requests)
    True
    >>> sorted(DEFAULT_MIX)[:3]
    ['batch-sweep', 'burst-reuse', 'cancel-storm']

Most aimed workloads need several requests to reach the engine *together*, in one scheduling
round. A burst a few milliseconds wide is not enough against an idle engine (it admits the first
arrival at once), so bursts ride behind a *blocker*: a plain request with a long prompt sent a
few milliseconds earlier, whose prefill keeps the scheduler busy while the burst queues up.

| strategy        | aims at                                       | zoo fault it should find  |
|-----------------|-----------------------------------------------|---------------------------|
| page-boundary   | shared prefixes of k * page (and +-1)         | page-boundary-prefix      |
| tile-boundary   | prefixes and extends at attention tiles +-1   | (real kernels' tile bugs) |
| burst-reuse     | a prefix cached and reused in the same burst  | page-boundary-prefix      |
| batch-sweep     | decode batches shrinking across padded sizes  | stale-padding             |
| chunk-boundary  | prompts split at the chunked-prefill budget   | chunk-boundary            |
| eviction        | load sized past the KV pool                   | evict-in-use              |
| cancel-storm    | cancel after k tokens, bystanders, retries    | abort-reuse               |
| long-decode     | admissions in a request's last decode step    | overlap-war               |
| n-mix           | n > 1 choices next to shared prefixes         | (forking bugs)            |
| random          | unaimed load, as a benchmark tool sends it    | batch-variant-numerics    |
| tenant-salt     | one prefix under two tenants' cache salts     | salt-ignored              |
| seeded-sampling | seeded draws (temperature > 0) decoding together | shared-sampler-rng     |
| structured-burst | constrained requests decoding together       | bitmask-row-skip          |
| lora-alternation | adapters (and base) alternating over shared prefixes | lora-prefix-shared   |
| window-edge     | prompts at the sliding window +-1, the window crossed mid-decode | (ring/window bugs) |
| window-prefix   | prefix hits longer than the window, and one a window stale | (window-cache bugs) |
| state-restore   | hits at exactly a cached prompt's length, and at all but its last token | (state-checkpoint bugs) |
| prefill-abort   | streams cut in the middle of a chunked prefill, then retried | (cut-prefill reuse) |
| expert-batch    | a decode whose batch grows and shrinks, beside its own copies | (batch-variant routing) |

A strategy that needs something not every target has says so (`needs_salts`, `needs_seeds`,
`needs_choices`, `needs_adapters`); `offered` leaves it out of the mix where the target lacks it
(tenant-salt where the dialect sends no salt, seeded-sampling where the engine promises no
per-request seeds, structured-burst where the dialect sends no choice constraint,
lora-alternation where the server lists no LoRA adapter). The last five need a trait of the
served model (`TargetShape.model`: `needs_window`, `needs_state`, `needs_stateful` (either),
`needs_experts`), known where servefuzz launched the model and read its config.json; elsewhere
`offered` leaves them out and `left_out` says why, once per campaign.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, Protocol, TypedDict

from servefuzz.errors import UsageError
from servefuzz.model_facts import TRAITS, ModelFacts
from servefuzz.terms import known_page, page_unit
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario, TextSource, TokenIds, choice_text

__all__ = [
    "CACHED_BY_MS",
    "COMMON_PAGE_SIZES",
    "DEFAULT_CAPTURE_SIZES",
    "DEFAULT_MIX",
    "STRAGGLER_MS",
    "STRATEGIES",
    "TILE_SIZES",
    "BatchSweep",
    "BurstReuse",
    "CancellationStorm",
    "ChunkBoundary",
    "Draft",
    "EvictionPressure",
    "ExpertBatch",
    "LoraAlternation",
    "LongDecodes",
    "NChoices",
    "PageBoundaryBursts",
    "PrefillAbort",
    "RandomLoad",
    "SeededSampling",
    "StateRestore",
    "StructuredBurst",
    "Strategy",
    "TargetShape",
    "TenantSalt",
    "WindowEdge",
    "WindowPrefix",
    "aimed_first",
    "TileBoundaryPrefixes",
    "boundary_lengths",
    "draw_choices",
    "seeded_draw",
    "tenant_salt",
    "get_strategies",
    "get_strategy",
    "left_out",
    "offered",
    "shape_aims",
]

# Page sizes swept when the server does not say which one it uses.
COMMON_PAGE_SIZES: tuple[int, ...] = (16, 32, 64, 128, 256)
# KV tile widths of common attention kernels: a split that depends on the length modulo the tile
# (not the page) is its own bug class (SGLang PR #33417: FA4 splits on seqlen_q mod tile_n).
TILE_SIZES: tuple[int, ...] = (16, 32, 64, 128, 256)
# SGLang's default CUDA-graph capture sizes; used when the server does not list its own.
DEFAULT_CAPTURE_SIZES: tuple[int, ...] = (1, 2, 4, 8, *range(16, 257, 8))
# Prompt tokens a blocker sends: enough prefill to hold a scheduler for a burst's few ms.
BLOCKER_TOKENS = 384


@dataclass(frozen=True)
class TargetShape:
    """The facts about a target that shape a workload. Unknowns are None."""

    page_size: int | None = None
    context_length: int = 4096
    vocab: range = range(3, 1024)
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = None
    capture_sizes: tuple[int, ...] = DEFAULT_CAPTURE_SIZES
    max_running_requests: int | None = None
    salts: bool = False  # the dialect sends per-request cache salts (its spec's `salts`)
    # Whether the engine promises a seeded request the same draws alone and under load (vLLM's
    # per-request generators, the reference engine); llama.cpp makes no such promise across its
    # slots (docs/engines.md, Seeds), so there sampled traffic would prove nothing.
    seeded_sampling: bool = False
    choices: bool = False  # the dialect sends choice constraints (its spec's `choices`)
    # The LoRA adapters the server serves (TargetInfo.adapters) where its dialect names them.
    adapters: tuple[str, ...] = ()
    # Natural text in the target's tokens for the prompts (`servefuzz.natural`); None: random ids.
    text: TextSource | None = None
    # The served model's sliding window, recurrent state and experts (`model_facts`), where
    # servefuzz launched it and read its config; empty (no trait) otherwise.
    model: ModelFacts = ModelFacts()

    @property
    def capabilities(self) -> frozenset[str]:
        """The per-request capabilities this target takes, by their `EngineSpec` names: `salts`,
        `seeds` (per-request seeds it promises), `choices`, `adapters` (some served). A strategy
        that `needs_<name>` one, and a coverage dimension that needs one, exist only where it is.

        >>> sorted(TargetShape(salts=True, adapters=("a",)).capabilities)
        ['adapters', 'salts']
        """
        have = {"salts": self.salts, "seeds": self.seeded_sampling, "choices": self.choices,
                "adapters": bool(self.adapters)}
        return frozenset(k for k, v in have.items() if v)

    @property
    def pages(self) -> tuple[int, ...]:
        """The page sizes to aim lengths at: the server's, or the common ones where it gives none
        worth aiming at (unknown, or one token: SGLang's default, whose pages have no inside)."""
        page = known_page(self.page_size)
        return (page,) if page is not None else COMMON_PAGE_SIZES

    @property
    def unit(self) -> int:
        """The one length unit where a strategy needs a single one: the page, else 64
        (`terms.page_unit`, the unit coverage and feedback measure against too)."""
        return page_unit(self.page_size)

    @property
    def pool_tokens(self) -> int:
        """Tokens one request may hold (prompt + output): the context, or less on a small pool."""
        if self.max_total_tokens is None:
            return self.context_length
        # Two pages of slack: the page rounding of prompt + output, and a reserved page.
        return max(16, min(self.context_length, self.max_total_tokens - 2 * (self.page_size or 64)))


class Strategy(Protocol):
    @property
    def name(self) -> str: ...

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario: ...


def boundary_lengths(unit: int, multiples: Sequence[int]) -> list[int]:
    """Multiples of `unit` and their +-1 neighbours: where boundary bugs live.

    >>> boundary_lengths(64, [1, 2])
    [63, 64, 65, 127, 128, 129]
    """
    return [m * unit + d for m in multiples for d in (-1, 0, 1) if m * unit + d > 0]


class Draft:
    """A scenario being written: ids `r01, r02, ...` in order of writing, prompts from one
    `PromptBuilder` (so shared prefixes are shared exactly), lengths clamped to what the target
    can hold."""

    def __init__(self, seed: int, shape: TargetShape) -> None:
        self.seed, self.shape = seed, shape
        self.builder = PromptBuilder(seed, shape.vocab, shape.text)
        self.specs: list[RequestSpec] = []

    def add(
        self,
        offset_ms: float,
        prompt_len: int,
        max_tokens: int,
        *,
        prefix: str | None = None,
        prefix_len: int = 0,
        n: int = 1,
        stream: bool = False,
        cancel_after_ms: float | None = None,
        prompt_ids: TokenIds | None = None,
        cache_salt: str | None = None,
        temperature: float = 0.0,
        seed: int | None = None,
        choices: tuple[str, ...] | None = None,
        adapter: str | None = None,
    ) -> RequestSpec:
        """Append one request; `prompt_ids` resends an earlier prompt exactly (a retry)."""
        max_tokens = max(1, min(max_tokens, self.shape.pool_tokens // 2))
        if prompt_ids is None:
            prompt_len = max(1, min(prompt_len, (self.shape.pool_tokens - max_tokens * n) - 1))
            prefix_len = min(prefix_len, prompt_len) if prefix else 0
            prompt_ids = self.builder.prompt(prefix if prefix_len else None, prefix_len, prompt_len)
        spec = RequestSpec(
            f"r{len(self.specs) + 1:02d}", round(max(0.0, offset_ms), 1), prompt_ids, max_tokens,
            prefix if prefix_len else None, prefix_len, n=n, stream=stream,
            cancel_after_ms=None if cancel_after_ms is None else round(cancel_after_ms, 1), cache_salt=cache_salt,
            temperature=temperature, seed=seed, choices=choices, ignore_eos=choices is None, adapter=adapter,
        )
        self.specs.append(spec)
        return spec

    def blocker(self, offset_ms: float, max_tokens: int = 8) -> RequestSpec:
        """A plain long prompt that keeps the scheduler busy while a burst behind it queues up."""
        return self.add(offset_ms, BLOCKER_TOKENS, max_tokens)

    def scenario(self, strategy: str, **meta: object) -> Scenario:
        return Scenario(seed=self.seed, requests=tuple(self.specs), meta={"strategy": strategy, **meta})


def _bystanders(d: Draft, rng: random.Random, count: int, within_ms: float, unit: int) -> None:
    """Requests with no shared prefix, some long enough to keep the engine busy."""
    for _ in range(count):
        d.add(rng.uniform(0, within_ms), rng.choice([unit, 2 * unit, 4 * unit, 8 * unit]), 32)


def _prefix_burst(
    d: Draft, rng: random.Random, prefix: str, prefix_len: int, at_ms: float, size: int, suffix: int
) -> None:
    """A blocker, then `size` requests sharing `prefix_len` tokens of `prefix` a few ms later,
    so that the prefix is allocated and reused inside one scheduling round (the seed's wave 1).

    The burst leaves 6-11 ms after the blocker: a client on a busy machine sends its first
    request of a run a few ms late (p90 3 ms, up to 6 ms measured on two shared cores), and a
    burst that caught up with its blocker would reach the scheduler in the round that admits
    the blocker, one request before the others. Within the burst the requests leave in order,
    0.3-1 ms apart, so the one that allocates the prefix (the first) is the same in every
    replay and the others read it in the same round.
    """
    d.blocker(at_ms)
    t = at_ms + rng.uniform(6, 10)
    for _ in range(size):
        t += rng.uniform(0.3, 1.0)  # drawn before the length, as ever: seeds keep their scenarios
        d.add(t, prefix_len + rng.randint(1, suffix), 32, prefix=prefix, prefix_len=prefix_len)


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

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        d = Draft(seed, shape)
        t0 = rng.uniform(0, 40)
        _prefix_burst(d, rng, "p0", page, t0, rng.randint(2, 4), 2 * page)
        aims = [page]
        if rng.random() < 0.5:
            aim = rng.choice(boundary_lengths(page, [rng.choice([1, 1, 2, 2, 3, 4])]))
            aims.append(aim)
            _prefix_burst(d, rng, "p1", aim, t0 + rng.uniform(60, 160), rng.randint(2, 3), 2 * page)
        # Wave 2: longer variants of the same prefixes, after the first waves have settled.
        for g, aim in enumerate(aims):
            for _ in range(rng.randint(0, 2)):
                d.add(rng.uniform(250, 550), aim + rng.randint(page, 8 * page), 32, prefix=f"p{g}", prefix_len=aim)
        _bystanders(d, rng, rng.randint(1, 3), 550, page)
        return d.scenario(self.name, page_size=page, aims=aims)


@dataclass(frozen=True)
class TileBoundaryPrefixes:
    """Prefixes and extend lengths at attention-tile multiples +-1, reused within a burst.

    Kernels that split work by KV tile compute a prefix-cache hit (a suffix-only query over a
    cached prefix) differently from a full prefill when the split lands on a tile edge.
    """

    name: str = "tile-boundary"

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
class BatchSweep:
    """A decode batch just above a padded size whose requests finish one by one.

    `max_tokens` are staggered, so the running batch shrinks a request at a time and crosses
    every padding bucket below its start (e.g. 5 -> 4 running requests: bucket 8 -> 4).
    """

    name: str = "batch-sweep"

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
class EvictionPressure:
    """Holders of a cached prefix decode while new prompts demand more KV than the pool has.

    Sized from the pool the server reports (1.1x to 1.6x of it; capped, so that a huge pool
    gives heavy load rather than a scenario that runs for minutes). A later wave hits the
    holders' prefix again.
    """

    name: str = "eviction"
    cap_tokens: int = 12288

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
    max_tokens: int = 32
    rate_per_s: float = 40.0

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        d = Draft(seed, shape)
        t = 0.0
        for _ in range(rng.randint(4, 12)):
            t += rng.expovariate(self.rate_per_s) * 1000.0
            d.add(t, rng.randint(8, min(1024, shape.pool_tokens - self.max_tokens - 1)), self.max_tokens)
        return d.scenario(self.name)


@dataclass(frozen=True)
class TenantSalt:
    """Tenant isolation (the paired assertion, `oracles.tenancy`): tenant A primes a long prefix
    under its salt; then A sends the prefix again (same salt: must reuse), tenant B sends it
    (another salt: must not), and a third tenant sends a fresh prefix of the same shape, B's cold
    twin for the timing channel; unsalted background load runs throughout. Salts are drawn per
    scenario, so no two scenarios' tenants share a cache either."""

    name: str = "tenant-salt"
    needs_salts: ClassVar[bool] = True

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        d = Draft(seed, shape)
        a, b, c = (tenant_salt(rng, x) for x in "abc")
        # Whole pages, long enough that a hit saves a visible prefill (the timing channel).
        prefix_len = page * rng.randint(max(2, 128 // page), max(4, 512 // page))
        prompt = prefix_len + rng.randint(4, 32)
        d.add(0, prompt, 4, prefix="tenant", prefix_len=prefix_len, stream=True, cache_salt=a)  # cached at its first token
        for _ in range(rng.randint(2, 5)):
            d.add(rng.uniform(0, 400), rng.choice([1, 2, 4]) * page + rng.randint(1, page), rng.randint(8, 32))
        # The prime's prefill is done by then on the engines measured; a probe sent before it is
        # no opportunity for either half, and the check says so.
        t = rng.uniform(150, 250)
        gap = rng.uniform(40, 80)
        # Streamed: the runner times the first token only where it arrives on its own. The twin
        # goes first: a later request meets more queued load (a clean engine answered a twin
        # sent after the probe 39-85 ms later), so the order can only hide a hit, never fake one.
        d.add(t, prompt, 4, prefix="tenant", prefix_len=prefix_len, stream=True, cache_salt=a)
        twin = d.add(t + gap, prompt, 4, prefix="cold", prefix_len=prefix_len, stream=True, cache_salt=c)
        probe = d.add(t + 2 * gap, prompt, 4, prefix="tenant", prefix_len=prefix_len, stream=True, cache_salt=b)
        return d.scenario(self.name, page_size=page, twins={probe.id: twin.id})


@dataclass(frozen=True)
class SeededSampling:
    """Seeded sampled requests decoding together: each must draw alone what it draws under load.

    A few requests at temperature > 0, each with its own seed, leave within a few milliseconds
    (so they sample in the same steps), some on a shared prefix, with n of 1 to 3, beside a
    greedy bystander now and then. Offered only where the engine promises per-request seeds
    (`needs_seeds`, `TargetShape.seeded_sampling`).
    """

    name: str = "seeded-sampling"
    needs_seeds: ClassVar[bool] = True

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        d = Draft(seed, shape)
        prefix_len = rng.choice([page // 2, page, page + rng.randint(1, 16)])
        for _ in range(rng.randint(3, 6)):
            shared = rng.random() < 0.5
            d.add(rng.uniform(0, 8), prefix_len + rng.randint(4, 48), rng.randint(8, 32),
                  prefix="p0" if shared else None, prefix_len=prefix_len if shared else 0,
                  n=rng.choice([1, 1, 2, 3]), **seeded_draw(rng))
        if rng.random() < 0.5:
            d.add(rng.uniform(0, 8), rng.randint(16, 64), rng.randint(8, 24))  # a greedy bystander
        return d.scenario(self.name, page_size=page)


@dataclass(frozen=True)
class StructuredBurst:
    """Structured outputs decoding together (vLLM #19493: one step's grammar bitmask across
    rows): three to six requests, each constrained to its own two to five choices (now and then
    two share one), leave within a few milliseconds, some on a shared prefix, n of 1 or 2, beside
    an unconstrained neighbour or two. Every answer must be one of its own choices
    (`oracles.constraint`). Choices are spelt ' w<t>' per token (`workload.choice_text`): the
    reference engine reads them as those tokens, a real engine as plain text. Offered only where
    the dialect sends a constraint (`needs_choices`)."""

    name: str = "structured-burst"
    needs_choices: ClassVar[bool] = True

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        d = Draft(seed, shape)
        prefix_len = rng.choice([page // 2, page, page + rng.randint(1, 16)])
        last = draw_choices(rng, shape.vocab)
        for _ in range(rng.randint(3, 6)):
            shared = rng.random() < 0.5
            last = last if rng.random() < 0.2 else draw_choices(rng, shape.vocab)
            # Room to finish: a real engine's tokenizer may spell one ' w<t>' word in a few tokens.
            d.add(rng.uniform(0, 8), prefix_len + rng.randint(4, 48), 24,
                  prefix="p0" if shared else None, prefix_len=prefix_len if shared else 0,
                  n=rng.choice([1, 1, 1, 2]), choices=last)
        for _ in range(rng.randint(0, 2)):
            d.add(rng.uniform(0, 8), rng.randint(16, 64), rng.randint(8, 24))  # unconstrained neighbours
        return d.scenario(self.name, page_size=page)


def tenant_salt(rng: random.Random, tenant: str) -> str:
    """A cache salt for `tenant`, drawn per scenario (no two scenarios' tenants share a cache)."""
    return f"tenant-{tenant}-{rng.getrandbits(32):08x}"


class SeededDraw(TypedDict):
    temperature: float
    seed: int


def seeded_draw(rng: random.Random) -> SeededDraw:
    """A sampled request's temperature and its own seed, as `Draft.add` takes them."""
    return {"temperature": rng.choice([0.3, 0.6, 0.8, 1.0]), "seed": rng.randrange(2**31)}


def draw_choices(rng: random.Random, vocab: range) -> tuple[str, ...]:
    """A choice constraint: two to five distinct choices of one to three tokens each, spelt as
    the reference engine reads them (`workload.choice_text`)."""
    words = {choice_text(rng.choice(vocab) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(2, 5))}
    return tuple(sorted(words))


@dataclass(frozen=True)
class LoraAlternation:
    """Rapid alternation of LoRA adapters and the base model over shared prefixes (vLLM #38606:
    7-9 of 10 runs diverged there). Waves of requests leave a few milliseconds apart, each wave
    on one or two prefixes of whole pages (and +1), each request under an adapter or the base
    model chosen in turn, so that an adapter's request meets pages another adapter computed for
    the same tokens, in the same batch and in the next one. Each request's answer alone, under
    its own adapter, is the reference. Offered only where the server lists adapters
    (`needs_adapters`, `TargetShape.adapters`).
    """

    name: str = "lora-alternation"
    needs_adapters: ClassVar[bool] = True

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        d = Draft(seed, shape)
        # Two adapters at most and the base: the alternation, not the number of adapters, is
        # what the cousin needs (and a server holds few at once: vLLM's --max-loras).
        cast: list[str | None] = [None, *rng.sample(shape.adapters, min(2, len(shape.adapters)))]
        prefixes = {f"p{i}": page * rng.randint(1, max(1, 256 // page)) + rng.choice([0, 0, 1]) for i in range(2)}
        t, turn = 0.0, rng.randrange(len(cast))
        for _ in range(rng.randint(2, 4)):
            for _ in range(rng.randint(2, 4)):
                name = rng.choice(list(prefixes))
                d.add(t + rng.uniform(0, 3), prefixes[name] + rng.randint(4, 24), rng.randint(6, 16),
                      prefix=name, prefix_len=prefixes[name], adapter=cast[turn % len(cast)])
                turn += 1
            t += rng.uniform(20, 120)  # the next wave meets pages the last one cached
        return d.scenario(self.name, page_size=page)



# --- the state the architectures keep (issue 42): a sliding window, a recurrent state, experts ---
#
# Each needs a trait of the served model (`TargetShape.model`, `model_facts.ModelFacts.traits`):
# where the model lacks it the strategy would aim at nothing, so `offered` leaves it out and the
# campaign says so once (`left_out`). Lengths are aimed at the model's own window and state chunk.

# A prompt cached on its own is done on the engines measured (llama-server: a 300-token prompt in
# under 0.1 s; the reference engine: about as long) before a hit 150-250 ms later: the hit reads
# it cached, not in flight.
CACHED_BY_MS = (150.0, 250.0)
# A loaded engine is ten times slower (two shared cores at a load average of 18: that 300-token
# prompt took 1.8 s, and a 40-request campaign's hits found nothing cached): one more hit per
# cached prompt this late, so the trigger happens there too, alone in its batch.
STRAGGLER_MS = (1200.0, 2000.0)


def _window(shape: TargetShape) -> int:
    """The model's sliding window, or the strategies' unit where it states none."""
    return shape.model.window or shape.unit


def _state_chunk(shape: TargetShape) -> int:
    """The chunk the model scans its recurrent state in, or the strategies' unit where unknown."""
    return shape.model.state_chunk or shape.unit


@dataclass(frozen=True)
class WindowEdge:
    """Prompt lengths at multiples of the sliding window and +-1 (the length modulo the window),
    and decodes that cross a multiple of it in the middle of decoding, in one burst behind a
    blocker; a long decode crosses a whole window while newcomers join its batch. A ring buffer
    or a freed out-of-window page indexed off by one shows there first."""

    name: str = "window-edge"
    needs_window: ClassVar[bool] = True

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        w = _window(shape)
        d = Draft(seed, shape)
        d.blocker(0)
        at = rng.uniform(6, 10)
        for _ in range(rng.randint(2, 4)):  # prompts on the window's edge
            d.add(at + rng.uniform(0, 2), rng.choice(boundary_lengths(w, [1, 2, 3])), rng.randint(4, 16))
        for _ in range(rng.randint(2, 3)):  # the window crossed in the middle of decoding
            back = rng.randint(1, max(1, min(16, w - 1)))
            d.add(at + rng.uniform(0, 2), rng.choice([1, 2]) * w - back, back + rng.randint(2, 24))
        d.add(at + rng.uniform(0, 2), rng.randint(4, max(4, w // 2)), w + rng.randint(8, 32))  # a whole window
        for _ in range(rng.randint(1, 3)):  # newcomers while it decodes
            d.add(at + rng.uniform(20, 120), rng.choice(boundary_lengths(w, [1, 2])), rng.randint(4, 12))
        return d.scenario(self.name, window=w)


@dataclass(frozen=True)
class WindowPrefix:
    """Prefix hits longer than the sliding window. A prompt of L > window tokens is cached on its
    own; then, in one burst, requests extend it by a few tokens (a hit of L: the windowed layers
    must see exactly the last window of it), one shares only a part that ends more than a window
    before L (the window the engine kept ends elsewhere: it must recompute or restore, never
    reuse), and one shares exactly a window; a straggler extends it again 1.2-2 s in, for an
    engine too slow to have cached it by then."""

    name: str = "window-prefix"
    needs_window: ClassVar[bool] = True

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        w = _window(shape)
        d = Draft(seed, shape)
        cached = w * rng.randint(2, 4) + rng.choice([-1, 0, 1, rng.randint(2, max(2, w - 1))])
        cached = d.add(0, cached, rng.randint(2, 8), prefix="p0", prefix_len=cached).prompt_len  # all of it the prefix
        t = rng.uniform(*CACHED_BY_MS)
        d.blocker(t)
        at = t + rng.uniform(6, 10)
        for _ in range(rng.randint(2, 3)):
            d.add(at + rng.uniform(0, 2), cached + rng.randint(1, w), rng.randint(8, 24), prefix="p0", prefix_len=cached)
        stale = cached - w - rng.randint(1, w)
        if stale > 0:
            d.add(at + rng.uniform(0, 2), stale + rng.randint(1, w), rng.randint(8, 24), prefix="p0", prefix_len=stale)
        d.add(at + rng.uniform(0, 2), w + rng.randint(1, w), rng.randint(8, 24), prefix="p0", prefix_len=w)
        d.add(rng.uniform(*STRAGGLER_MS), cached + rng.randint(1, w), rng.randint(8, 24), prefix="p0", prefix_len=cached)
        return d.scenario(self.name, window=w, aims=[cached])


@dataclass(frozen=True)
class StateRestore:
    """Prefix hits that must restore a recurrent state at exactly the cached length. Two prompts
    are cached on their own, their lengths at multiples of the state chunk and +-1 or anywhere.
    Each is then hit three ways: a prompt that extends it by a few tokens (the state at exactly
    its length), the whole prompt but its last token (the state one token before the cached one:
    only a checkpoint or a recompute has it), and the same prompt again (a full hit, its last
    token computed anew). One hit of each prompt goes in one burst behind a blocker (two restores
    in one batch); the others follow one at a time, later (an engine that keeps one state per
    slot, as llama-server, restores for one request of a prompt at a time); a straggler extends
    each 1.2-2 s in, for an engine too slow to have cached them by then."""

    name: str = "state-restore"
    needs_state: ClassVar[bool] = True

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        c = _state_chunk(shape)
        d = Draft(seed, shape)
        lengths = [rng.choice([*boundary_lengths(c, [1, 2, 3, 4]), rng.randint(c, 6 * c)]) for _ in range(2)]
        primers = [d.add(i * rng.uniform(0.3, 1.0), n, rng.randint(2, 8), prefix=f"p{i}", prefix_len=n)
                   for i, n in enumerate(lengths)]
        lengths = [p.prompt_len for p in primers]  # as the target can hold them
        t = rng.uniform(*CACHED_BY_MS)
        d.blocker(t)
        at, later = t + rng.uniform(6, 10), t + rng.uniform(300, 400)
        for i, (n, primer) in enumerate(zip(lengths, primers, strict=True)):
            kinds = ["extend", "all-but-last", "again"] if n > 1 else ["extend", "again"]
            rng.shuffle(kinds)
            for k, kind in enumerate(kinds):
                when = at + rng.uniform(0, 2) if k == 0 else later + rng.uniform(0, 20)
                later += rng.uniform(60, 120) if k else 0
                p, max_tokens = f"p{i}", rng.randint(8, 24)
                if kind == "extend":
                    d.add(when, n + rng.randint(1, c), max_tokens, prefix=p, prefix_len=n)
                elif kind == "all-but-last":
                    d.add(when, n, max_tokens, prefix=p, prefix_len=n - 1)
                else:  # the very prompt: only its output must fit beside it
                    d.add(when, 0, max(1, min(max_tokens, shape.pool_tokens - n)), prefix=p, prefix_len=n,
                          prompt_ids=primer.prompt_ids)
        for i, n in enumerate(lengths):
            d.add(rng.uniform(*STRAGGLER_MS) + i * 100, n + rng.randint(1, c), rng.randint(8, 24), prefix=f"p{i}", prefix_len=n)
        return d.scenario(self.name, state_chunk=c, aims=lengths)


@dataclass(frozen=True)
class PrefillAbort:
    """Requests cut in the middle of a chunked prefill, and retried at once. Long prompts (three
    to six steps of the step budget, sharing a prefix) are streamed and cancelled 5-120 ms in,
    beside another long prompt that shares the step budget; each is sent again 5-60 ms after its
    cut (the client's retry: whatever the engine kept of the cut prefill, a recurrent state or a
    window at the cut, is what the retry reuses), and a longer prompt hits their prefix later.

    Where the engine reports its prefill's progress (llama-server's `return_progress`, which the
    adapter asks for on a stream it will cut), the cut is placed in the prefill instead of on the
    clock (`RequestSpec.cancel_at_prefill`): once the prompt's first 1 to (steps - 3) steps are
    in the slot. llama-server notices the client gone at its next write, after one more step, and
    stops before the next, so the cut leaves the prompt's last steps uncomputed however loaded
    the machine, unless the client takes more than a step to close (a clock's cut landed before
    the slot started on a quiet box and after the whole prefill on a busy one). Elsewhere the
    clock cuts, as the engine's speed has it."""

    name: str = "prefill-abort"
    needs_stateful: ClassVar[bool] = True

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        room = shape.pool_tokens - 96
        chunk = shape.chunked_prefill_size or rng.choice([256, 512])
        d = Draft(seed, shape)
        d.add(0, min(room, rng.randint(chunk, 2 * chunk)), rng.randint(4, 16))  # shares the step budget
        # Three to six steps of the budget: a cut 5-120 ms in lands between two of them on an
        # engine of any speed here (a step of 64 tokens took 45 ms on an idle core, 400 ms loaded).
        shared = max(1, min(room - 64, chunk * rng.randint(3, 6) + rng.choice([-1, 0, 1, rng.randint(2, 63)])))
        last = 0.0
        for _ in range(rng.randint(1, 2)):
            at, cut = rng.uniform(1, 3), rng.uniform(5, 120)
            victim = d.add(at, shared + rng.randint(1, 64), rng.randint(16, 64), prefix="p0", prefix_len=shared,
                           stream=True, cancel_after_ms=cut)
            steps = -(-victim.prompt_len // chunk)
            victim = d.specs[-1] = replace(victim, cancel_at_prefill=chunk * rng.randint(1, max(1, steps - 3)))
            retry = at + cut + rng.uniform(5, 60)
            d.add(retry, 0, max(1, min(rng.randint(8, 24), shape.pool_tokens - victim.prompt_len)), prefix="p0",
                  prefix_len=victim.prefix_len, prompt_ids=victim.prompt_ids)
            last = max(last, retry)
        d.add(last + rng.uniform(*CACHED_BY_MS), shared + rng.randint(65, 128), rng.randint(8, 24),
              prefix="p0", prefix_len=shared)
        return d.scenario(self.name, chunk=chunk, cancelled=sum(1 for r in d.specs if r.cancel_after_ms is not None))


@dataclass(frozen=True)
class ExpertBatch:
    """Mixture-of-experts routing under batch changes: a probe decodes while the batch around it
    grows and shrinks (waves of newcomers with short decodes), with copies of the probe in the
    same burst (identical tokens in one step must be routed alike). A router or expert kernel
    whose result depends on the batch's size or its other rows' tokens shows in the probe's
    answer against its answer alone."""

    name: str = "expert-batch"
    needs_experts: ClassVar[bool] = True

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        d = Draft(seed, shape)
        probe = d.add(0, rng.randint(16, 128), rng.randint(48, 96))
        for _ in range(rng.randint(1, 2)):
            d.add(rng.uniform(0.3, 2), 0, probe.max_tokens, prompt_ids=probe.prompt_ids)
        t = 0.0
        for _ in range(rng.randint(3, 5)):  # each wave joins, decodes a few steps and leaves
            t += rng.uniform(15, 60)
            for _ in range(rng.randint(1, 4)):
                d.add(t + rng.uniform(0, 2), rng.randint(8, 256), rng.randint(2, 12))
        return d.scenario(self.name, experts=shape.model.experts)


def left_out(strategies: Sequence[Strategy], shape: TargetShape) -> dict[str, str]:
    """The strategies `offered` leaves out for a trait the served model lacks, each with why, in
    words: what the campaign says once.

    >>> left_out([WindowEdge(), RandomLoad()], TargetShape())
    {'window-edge': 'needs a sliding window: the served model has none known'}
    """
    words = {"window": "a sliding window", "state": "a recurrent state",
             "stateful": "a sliding window or a recurrent state", "experts": "experts"}
    have = shape.model.traits
    out = {}
    for s in strategies:
        lacking = [t for t in words if getattr(s, f"needs_{t}", False) and t not in have]
        if lacking:
            out[s.name] = f"needs {' and '.join(words[t] for t in lacking)}: the served model has none known"
    return out

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        PageBoundaryBursts(), BatchSweep(), LongDecodes(), CancellationStorm(), BurstReuse(), NChoices(),
        RandomLoad(), TenantSalt(), SeededSampling(), StructuredBurst(), LoraAlternation(), TileBoundaryPrefixes(),
        ChunkBoundary(), EvictionPressure(), WindowEdge(), WindowPrefix(), StateRestore(), PrefillAbort(),
        ExpertBatch(),
    )
}
# What `servefuzz fuzz` mixes by default, in the order of its first round: the seed's bug class
# first, so that the embedded default's first finding is the one-page prefix; then the cheap
# scenarios before the ones whose long prompts cost seconds per run (tenant-salt, added last,
# goes before those: behind them its first scenario came 133 s into seed 0's campaign).
DEFAULT_MIX: tuple[str, ...] = tuple(STRATEGIES)


def offered(strategies: Sequence[Strategy], shape: TargetShape) -> tuple[Strategy, ...]:
    """The strategies this target can run: those needing cache salts only where it sends them,
    those needing per-request seeds only where the engine promises them, those needing choice
    constraints only where the dialect sends them, those needing LoRA adapters only where the
    server lists some, those needing a trait of the model (a window, a recurrent state,
    experts) only where the served model has it.

    >>> [s.name for s in offered([RandomLoad(), TenantSalt(), SeededSampling()], TargetShape())]
    ['random']
    >>> [s.name for s in offered([RandomLoad(), TenantSalt()], TargetShape(salts=True))]
    ['random', 'tenant-salt']
    >>> [s.name for s in offered([SeededSampling()], TargetShape(seeded_sampling=True))]
    ['seeded-sampling']
    >>> [[s.name for s in offered([StructuredBurst()], TargetShape(choices=c))] for c in (False, True)]
    [[], ['structured-burst']]
    >>> lora = [LoraAlternation()]
    >>> [s.name for s in offered(lora, TargetShape())], [s.name for s in offered(lora, TargetShape(adapters=("a",)))]
    ([], ['lora-alternation'])
    >>> state = [WindowPrefix(), StateRestore(), PrefillAbort()]
    >>> [s.name for s in offered(state, TargetShape(model=ModelFacts(recurrent=True, state_chunk=32)))]
    ['state-restore', 'prefill-abort']
    """
    have = shape.capabilities | shape.model.traits
    return tuple(s for s in strategies
                 if all(c in have for c in ("salts", "seeds", "choices", "adapters", *TRAITS) if getattr(s, f"needs_{c}", False)))


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise UsageError(f"unknown strategy {name!r}; known: mix, {', '.join(sorted(STRATEGIES))}") from None


def get_strategies(spec: str) -> tuple[Strategy, ...]:
    """`"mix"` (every strategy) or a comma-separated list of names, in that order."""
    names = DEFAULT_MIX if spec == "mix" else tuple(n.strip() for n in spec.split(",") if n.strip())
    if not names:
        raise UsageError("--strategy needs a name (or 'mix')")
    return tuple(get_strategy(n) for n in dict.fromkeys(names))


def shape_aims(shape: TargetShape) -> tuple[str, ...]:
    """The strategies a target's shape points at, for the first round: `lora-alternation` where
    adapters are served; `eviction` where the paged pool holds fewer than four full-context
    requests (a few long requests make it evict, and a small pool is what a user who sets one
    means to test); `chunk-boundary` where the step's prefill budget is at most a quarter of the
    context (an ordinary long prompt is split). The embedded default (a 131,072-token pool, a
    2,048-token budget for 4,096 tokens of context) points at none, so its first round keeps
    the default mix's order. The served model's traits point at the strategies aimed at them
    (a recurrent state at `state-restore`, a window at `window-prefix` and `window-edge`, either
    at `prefill-abort`, experts at `expert-batch`).

    >>> shape_aims(TargetShape(page_size=64, max_total_tokens=131072, chunked_prefill_size=2048))
    ()
    >>> shape_aims(TargetShape(page_size=64, max_total_tokens=4096, chunked_prefill_size=512, adapters=("a",)))
    ('lora-alternation', 'eviction', 'chunk-boundary')
    >>> shape_aims(TargetShape(max_total_tokens=4096))  # no pages: one slot per request (llama-server)
    ()
    >>> shape_aims(TargetShape(model=ModelFacts(window=64, experts=8, experts_per_token=2)))
    ('window-prefix', 'window-edge', 'prefill-abort', 'expert-batch')
    """
    aims: list[str] = []
    if shape.adapters:
        aims.append(LoraAlternation.name)
    if shape.page_size and shape.max_total_tokens is not None and shape.max_total_tokens < 4 * shape.context_length:
        aims.append(EvictionPressure.name)
    if shape.chunked_prefill_size is not None and 4 * shape.chunked_prefill_size <= shape.context_length:
        aims.append(ChunkBoundary.name)
    traits = shape.model.traits  # the state the served model keeps: the workloads aimed at it
    aims += [name for name, trait in _TRAIT_AIMS if trait in traits]
    return tuple(aims)


# The strategies a model's trait points at, first-round order (`shape_aims`).
_TRAIT_AIMS = ((StateRestore.name, "state"), (WindowPrefix.name, "window"), (WindowEdge.name, "window"),
               (PrefillAbort.name, "stateful"), (ExpertBatch.name, "experts"))


def aimed_first(strategies: Sequence[Strategy], aims: Sequence[str]) -> tuple[Strategy, ...]:
    """`strategies` with those named in `aims` first, in the order of `aims`, the rest as they
    were: the campaign's first round runs each strategy once in this order, so a target whose
    risky feature is known (a feature profile) meets the workloads aimed at it first.

    >>> [s.name for s in aimed_first(get_strategies("page-boundary,burst-reuse,eviction"), ("eviction", "n-mix"))]
    ['eviction', 'page-boundary', 'burst-reuse']
    """
    rank = {name: i for i, name in enumerate(dict.fromkeys(aims))}  # a name aimed twice: its first place
    return tuple(sorted(strategies, key=lambda s: rank.get(s.name, len(rank))))
