"""Which strategies a campaign runs, and in what order: the registry, the default mix, what a
target is offered (`needs` against what it has), and what its shape aims at first."""

from __future__ import annotations

from collections.abc import Sequence

from servefuzz.errors import UsageError
from servefuzz.strategies.batch import BatchSweep, ChunkBoundary, LongDecodes, NChoices, RandomLoad
from servefuzz.strategies.features import LoraAlternation, RetractionPressure, SeededSampling, StructuredBurst, TenantSalt
from servefuzz.strategies.prefix import (
    BurstReuse,
    CancellationStorm,
    EvictionPressure,
    PageBoundaryBursts,
    TileBoundaryPrefixes,
)
from servefuzz.strategies.shape import PRESSURE_TOKENS, Strategy, TargetShape
from servefuzz.strategies.speculative import SpecEcho
from servefuzz.strategies.state import ExpertBatch, PrefillAbort, StateRestore, WindowEdge, WindowPrefix
from servefuzz.strategies.tiers import HostTierReturn

__all__ = ["DEFAULT_MIX", "STRATEGIES", "aimed_first", "get_strategies", "get_strategy", "left_out", "offered", "shape_aims"]


def left_out(strategies: Sequence[Strategy], shape: TargetShape) -> dict[str, str]:
    """The strategies `offered` leaves out for a trait the served model lacks, each with why, in
    words: what the campaign says once.

    >>> left_out([WindowEdge(), RandomLoad()], TargetShape())
    {'window-edge': 'needs a sliding window: the served model has none known'}
    """
    words = {"window": "a sliding window", "state": "a recurrent state",
             "stateful": "a sliding window or a recurrent state", "experts": "experts"}
    have = shape.model.traits | shape.conditions
    out = {}
    for s in strategies:
        lacking = [t for t in words if t in s.needs - have]
        if lacking:
            out[s.name] = f"needs {' and '.join(words[t] for t in lacking)}: the served model has none known"
        elif "small-pool" in s.needs - have:
            out[s.name] = (f"needs a KV pool one scenario can fill past (at most {PRESSURE_TOKENS / 1.2:,.0f} tokens): "
                           "the server states " + (f"{shape.max_total_tokens:,}" if shape.max_total_tokens else "none"))
    return out

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        PageBoundaryBursts(), BatchSweep(), LongDecodes(), CancellationStorm(), BurstReuse(), NChoices(),
        RandomLoad(), TenantSalt(), SeededSampling(), StructuredBurst(), LoraAlternation(), TileBoundaryPrefixes(),
        ChunkBoundary(), EvictionPressure(), WindowEdge(), WindowPrefix(), StateRestore(), PrefillAbort(),
        ExpertBatch(), RetractionPressure(), HostTierReturn(), SpecEcho(),
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
    server lists some, those needing a host tier only where the server has one on, those needing
    drafts to verify only where the server speculates, those needing
    a trait of the model (a window, a recurrent state, experts) only where the served model has it.

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
    >>> [[s.name for s in offered([HostTierReturn()], TargetShape(host_tier=h))] for h in (False, True)]
    [[], ['host-tier-return']]
    >>> [[s.name for s in offered([SpecEcho()], TargetShape(speculative=v))] for v in (False, True)]
    [[], ['spec-echo']]
    >>> from servefuzz.model_facts import ModelFacts
    >>> state = [WindowPrefix(), StateRestore(), PrefillAbort()]
    >>> [s.name for s in offered(state, TargetShape(model=ModelFacts(recurrent=True, state_chunk=32)))]
    ['state-restore', 'prefill-abort']
    """
    have = shape.capabilities | shape.model.traits | shape.conditions
    return tuple(s for s in strategies if s.needs <= have)


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
    """The strategies a target's shape points at, for the first round: `spec-echo` where the
    server speculates; `host-tier-return` where the server has a host tier; `lora-alternation`
    where adapters are served; `eviction` where the paged pool holds fewer than four
    full-context requests (a few long requests make it evict, and a small pool is what a user who
    sets one means to test); `chunk-boundary` where the step's prefill budget is at most a
    quarter of the context (an ordinary long prompt is split).
    The embedded default (a 131,072-token pool, a 2,048-token budget for 4,096 tokens of context)
    points at none, so its first round keeps the default mix's order. The served model's traits point at the strategies aimed at them
    (a recurrent state at `state-restore`, a window at `window-prefix` and `window-edge`, either
    at `prefill-abort`, experts at `expert-batch`).

    >>> shape_aims(TargetShape(page_size=64, max_total_tokens=131072, chunked_prefill_size=2048))
    ()
    >>> shape_aims(TargetShape(page_size=64, max_total_tokens=4096, chunked_prefill_size=512, adapters=("a",)))
    ('lora-alternation', 'eviction', 'chunk-boundary')
    >>> shape_aims(TargetShape(max_total_tokens=4096))  # no pages: one slot per request (llama-server)
    ()
    >>> shape_aims(TargetShape(page_size=64, max_total_tokens=4096, host_tier=True))
    ('host-tier-return', 'eviction')
    >>> shape_aims(TargetShape(speculative=True))
    ('spec-echo',)
    >>> from servefuzz.model_facts import ModelFacts
    >>> shape_aims(TargetShape(model=ModelFacts(window=64, experts=8, experts_per_token=2)))
    ('window-prefix', 'window-edge', 'prefill-abort', 'expert-batch')
    """
    aims: list[str] = []
    if shape.speculative:
        aims.append(SpecEcho.name)
    if shape.host_tier:
        aims.append(HostTierReturn.name)
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
