"""Choosing an iteration's scenario: its seed (`derive_seed`), what the strategies may assume
about the target (`shape_of`), and the schedule's choice made concrete (`next_scenario`)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from servefuzz.corpus import Corpus, CorpusEntry, Schedule
from servefuzz.engines.registry import spec_of
from servefuzz.engines.spec import Feature
from servefuzz.exercise import settings_of
from servefuzz.mutators import Mutator, mutate
from servefuzz.server_facts import TargetInfo
from servefuzz.strategies import DEFAULT_CAPTURE_SIZES, Strategy, TargetShape
from servefuzz.workload import Scenario

__all__ = [
    "SourceFailure",
    "derive_seed",
    "next_scenario",
    "shape_of",
]


def derive_seed(campaign_seed: int, iteration: int) -> int:
    """The scenario seed of an iteration: stable across Python versions and platforms."""
    return random.Random(f"servefuzz:{campaign_seed}:{iteration}").getrandbits(31)


def shape_of(info: TargetInfo) -> TargetShape:
    """What the strategies may assume about this target: its facts (`TargetInfo.facts`, read by
    its engine's module), with servefuzz's defaults where the server does not tell."""
    facts = info.facts
    spec = spec_of(info.engine)
    return TargetShape(
        page_size=info.page_size,
        context_length=facts.context_length or 4096,
        vocab=range(3, info.vocab_size or 1024),
        max_total_tokens=info.max_total_tokens,
        chunked_prefill_size=facts.chunk_budget,
        capture_sizes=facts.capture_sizes or DEFAULT_CAPTURE_SIZES,
        max_running_requests=facts.max_running,
        # What the engine's dialect sends and promises, from its spec (an unknown engine: none),
        # less what this server was started without.
        salts=spec.salts,
        seeded_sampling=spec.seeds,
        choices=spec.choices and facts.constraints is not False,
        adapters=info.adapters if spec.adapters else (),
        host_tier=bool(facts.host_tier),
        host_tier_tokens=facts.host_tier_tokens,
        # On by a switch of its args (SGLang's speculative_algorithm) or aimed at by its profile.
        speculative=any(s.feature is Feature.SPECULATIVE and (s.on or s.aimed) for s in settings_of(info)),
        model=info.architecture,
    )

def next_scenario(
    rng: random.Random,
    turn: int,
    seed: int,
    schedule: Schedule,
    corpus: Corpus,
    strategies: Mapping[str, Strategy],
    shape: TargetShape,
    extra: Sequence[Mutator] = (),
) -> tuple[Scenario, str]:
    """The schedule's choice made concrete: a mutated corpus entry or a fresh scenario."""
    _, what = schedule.next(rng, turn, corpus)
    try:
        if isinstance(what, CorpusEntry):
            return mutate(what.scenario, rng, shape, seed=seed, extra=extra), f"mutate:{what.id}"
        return strategies[what].generate(rng, shape, seed=seed), what
    except Exception as e:  # noqa: BLE001 - any bug of a generator; reported, never a finding
        error = f"{type(e).__name__}: {e}"
        if isinstance(what, CorpusEntry):
            raise SourceFailure(f"mutating corpus entry {what.id}", error, None) from e
        raise SourceFailure(f"strategy {what}", error, what) from e


class SourceFailure(Exception):
    """A strategy or a mutation raised instead of giving a scenario."""

    def __init__(self, source: str, error: str, strategy: str | None) -> None:
        super().__init__(f"{source}: {error}")
        self.source, self.error, self.strategy = source, error, strategy
