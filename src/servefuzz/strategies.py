"""Strategies: small classes that each generate scenarios aimed at one bug class.

A strategy sees only a `TargetShape` (what the server said about itself: page size, context,
vocabulary) and a seeded `random.Random`; it returns a `Scenario`. Same seed, same shape: same
scenario, byte for byte, so any finding can be regenerated from its seed.

    >>> s = PageBoundaryBursts().generate(random.Random(1), TargetShape(page_size=64), seed=1)
    >>> any(r.prefix_len == 64 for r in s.requests)
    True
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

__all__ = ["TargetShape", "Strategy", "PageBoundaryBursts", "RandomLoad", "STRATEGIES", "get_strategy"]

# Page sizes swept when the server does not say which one it uses (issue 5 uses all of them).
COMMON_PAGE_SIZES: tuple[int, ...] = (16, 32, 64, 128, 256)


@dataclass(frozen=True)
class TargetShape:
    """The facts about a target that shape a workload. Unknowns are None."""

    page_size: int | None = None
    context_length: int = 4096
    vocab: range = range(3, 1024)
    max_total_tokens: int | None = None

    @property
    def pages(self) -> tuple[int, ...]:
        return (self.page_size,) if self.page_size else COMMON_PAGE_SIZES


class Strategy(Protocol):
    name: str

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario: ...


def _boundary_lengths(page: int, multiples: Sequence[int]) -> list[int]:
    """Page multiples and their +-1 neighbours: where page-boundary bugs live."""
    return [m * page + d for m in multiples for d in (-1, 0, 1) if m * page + d > 0]


@dataclass(frozen=True)
class PageBoundaryBursts:
    """Two burst waves; requests share named prefixes whose lengths sit on page boundaries.

    Shaped after the seed finding (SGLang #22819): a first wave in which a page-aligned prefix is
    allocated and reused within the same burst, a second wave of longer variants a few hundred
    milliseconds later, and bystanders with no shared prefix. The smallest page multiple is drawn
    most often: the simplest trigger is the one a maintainer wants to see first.
    """

    name: str = "page-boundary"
    max_tokens: int = 32

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        builder = PromptBuilder(seed, shape.vocab)
        multiples = [1] * 6 + [2] * 2 + [3]
        groups = rng.randint(1, 2)
        specs: list[RequestSpec] = []
        room = shape.context_length - self.max_tokens - 1

        def add(rid: str, offset: float, prefix: str | None, prefix_len: int, prompt_len: int) -> None:
            prompt_len = max(1, min(prompt_len, room))
            prefix_len = min(prefix_len, prompt_len)
            ids = builder.prompt(prefix if prefix_len else None, prefix_len, prompt_len)
            specs.append(RequestSpec(rid, round(offset, 1), ids, self.max_tokens,
                                     prefix if prefix_len else None, prefix_len))

        n = 0
        for g in range(groups):
            prefix = f"p{g}"
            lengths = _boundary_lengths(page, [rng.choice(multiples)])
            # Wave 1: a tight burst (a few ms wide), so the prefix's pages are allocated and
            # reused inside one scheduling round, as in the seed's first wave.
            t0 = rng.uniform(0, 60)
            for _ in range(rng.randint(2, 4)):
                n += 1
                plen = rng.choice(lengths)
                add(f"r{n:02d}", t0 + rng.uniform(0, 3), prefix, plen, plen + rng.randint(1, 2 * page))
            # Wave 2: longer variants of the same prefix, after the first wave has settled.
            for _ in range(rng.randint(0, 3)):
                n += 1
                plen = rng.choice(lengths)
                add(f"r{n:02d}", rng.uniform(250, 550), prefix, plen, plen + rng.randint(page, 8 * page))
        # Bystanders: no shared prefix, some long enough to keep the engine busy.
        for _ in range(rng.randint(1, 4)):
            n += 1
            add(f"r{n:02d}", rng.uniform(0, 550), None, 0, rng.choice([page, 2 * page, 4 * page, 16 * page]))
        return Scenario(seed=seed, requests=tuple(specs), meta={"strategy": self.name, "page_size": page})


@dataclass(frozen=True)
class RandomLoad:
    """Unaimed load as a benchmark tool would send it: random lengths, Poisson arrivals."""

    name: str = "random"
    max_tokens: int = 32
    rate_per_s: float = 40.0

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        builder = PromptBuilder(seed, shape.vocab)
        t = 0.0
        specs = []
        for i in range(rng.randint(4, 12)):
            t += rng.expovariate(self.rate_per_s) * 1000.0
            plen = rng.randint(8, min(1024, shape.context_length - self.max_tokens - 1))
            specs.append(RequestSpec(f"r{i + 1:02d}", round(t, 1), builder.prompt(None, 0, plen), self.max_tokens))
        return Scenario(seed=seed, requests=tuple(specs), meta={"strategy": self.name})


STRATEGIES: dict[str, Strategy] = {s.name: s for s in (PageBoundaryBursts(), RandomLoad())}


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        from servefuzz.errors import UsageError

        raise UsageError(f"unknown strategy {name!r}; known: {', '.join(sorted(STRATEGIES))}") from None
