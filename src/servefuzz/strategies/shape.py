"""What every strategy is written with: the target's `TargetShape`, the `Strategy` protocol, the
`Draft` a scenario is written into, and the timing helpers that put a burst in one scheduling
round (a blocker, then requests a few milliseconds behind it).

A strategy that needs something not every target has declares it in `needs`: a capability of
the target (`salts`, `seeds`, `choices`, `adapters`, `host_tier`, `speculative`:
`TargetShape.capabilities`) or a trait of
the served model (`window`, `state`, `stateful`, `experts`: `model_facts.TRAITS`); `offer.offered`
runs it only where the target has all of them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from servefuzz.model_facts import ModelFacts
from servefuzz.terms import known_page, page_unit
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario, TextSource, TokenIds

__all__ = [
    "BLOCKER_TOKENS",
    "PRESSURE_TOKENS",
    "CACHED_BY_MS",
    "COMMON_PAGE_SIZES",
    "DEFAULT_CAPTURE_SIZES",
    "STRAGGLER_MS",
    "TILE_SIZES",
    "Draft",
    "Strategy",
    "TargetShape",
    "boundary_lengths",
    "bystanders",
    "prefix_burst",
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
# The most KV tokens one scenario sends to press a pool: a larger pool gets heavy load instead of
# a scenario that runs for minutes, and is not "small" (`TargetShape.conditions`).
PRESSURE_TOKENS = 12288
# A prompt cached on its own is done on the engines measured (llama-server: a 300-token prompt in
# under 0.1 s; the reference engine: about as long) before a hit 150-250 ms later: the hit reads
# it cached, not in flight.
CACHED_BY_MS = (150.0, 250.0)
# A loaded engine is ten times slower (two shared cores at a load average of 18: that 300-token
# prompt took 1.8 s, and a 40-request campaign's hits found nothing cached): one more hit per
# cached prompt this late, so the trigger happens there too, alone in its batch.
STRAGGLER_MS = (1200.0, 2000.0)


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
    # A second KV tier behind the pool (SGLang's HiCache, vLLM's CPU offloading), and its size in
    # tokens where the server's args say it (`ServerFacts.host_tier`, `host_tier_tokens`).
    host_tier: bool = False
    host_tier_tokens: int | None = None
    # Whether the server speculates (drafts tokens and verifies them): its switches or its
    # profile say so (`exercise.settings_of`); drafts it keeps need workloads of their own.
    speculative: bool = False
    # Natural text in the target's tokens for the prompts (`servefuzz.natural`); None: random ids.
    text: TextSource | None = None
    # The served model's sliding window, recurrent state and experts (`model_facts`), where
    # servefuzz launched it and read its config; empty (no trait) otherwise.
    model: ModelFacts = ModelFacts()

    @property
    def capabilities(self) -> frozenset[str]:
        """The per-request capabilities this target takes, by their `EngineSpec` names: `salts`,
        `seeds` (per-request seeds it promises), `choices`, `adapters` (some served); and
        `host_tier`, a second KV tier the server has on; `speculative`, drafts it verifies. A
        strategy whose `needs` names one, and a coverage dimension that needs one, exist only
        where it is.

        >>> sorted(TargetShape(salts=True, adapters=("a",), host_tier=True, speculative=True).capabilities)
        ['adapters', 'host_tier', 'salts', 'speculative']
        """
        have = {"salts": self.salts, "seeds": self.seeded_sampling, "choices": self.choices,
                "adapters": bool(self.adapters), "host_tier": self.host_tier, "speculative": self.speculative}
        return frozenset(k for k, v in have.items() if v)

    @property
    def conditions(self) -> frozenset[str]:
        """What the target's size allows beside its capabilities: `small-pool` where the server
        states a KV pool one scenario can fill past (at most `PRESSURE_TOKENS` / 1.2).

        >>> sorted(TargetShape(max_total_tokens=4096).conditions), sorted(TargetShape().conditions)
        (['small-pool'], [])
        """
        small = self.max_total_tokens is not None and self.max_total_tokens * 1.2 <= PRESSURE_TOKENS
        return frozenset({"small-pool"}) if small else frozenset()

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
    """Generates scenarios aimed at one bug class: same seed, same shape, same scenario."""

    @property
    def name(self) -> str: ...

    @property
    def needs(self) -> frozenset[str]:
        """The capabilities and model traits the target must have (empty: any target)."""
        ...

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


def bystanders(d: Draft, rng: random.Random, count: int, within_ms: float, unit: int) -> None:
    """Requests with no shared prefix, some long enough to keep the engine busy."""
    for _ in range(count):
        d.add(rng.uniform(0, within_ms), rng.choice([unit, 2 * unit, 4 * unit, 8 * unit]), 32)


def prefix_burst(
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
