"""Strategies: small classes that each generate scenarios aimed at one bug class.

A strategy sees only a `TargetShape` (what the server said about itself: page size, pool size,
chunked-prefill budget, padded batch sizes, context, vocabulary) and a seeded `random.Random`;
it returns a `Scenario`. Same seed, same shape: same scenario, byte for byte, so any finding can
be regenerated from its seed.

    >>> import random
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
| window-edge     | prompts at the sliding window +-1, the window crossed mid-decode | window-modulo-after-saturation |
| window-prefix   | prefix hits longer than the window, and one a window stale | window-ring-stale |
| state-restore   | hits at exactly a cached prompt's length, and at all but its last token | (state-checkpoint bugs) |
| prefill-abort   | streams cut in the middle of a chunked prefill, then retried | (cut-prefill reuse) |
| expert-batch    | a decode whose batch grows and shrinks, beside its own copies | router-tie-numerics |
| retraction      | decodes that outgrow a small pool, each with state to restore (seed, adapter, forks) | (state lost on retraction) |
| host-tier-return | a prefix pushed out to the host tier, then sent again | host-loadback-stale-pages, -race, host-key-no-salt |
| spec-echo       | long greedy decodes of repeated motifs, together: drafts the model accepts | (spec-decoding bugs) |

A strategy that needs something not every target has declares it in `needs`: a capability
(`salts`, `seeds`, `choices`, `adapters`, `host_tier`, `speculative`) or a trait of the served
model (`window`, `state`, `stateful` (either), `experts`). `offered` leaves it out of the mix where
the target lacks one (tenant-salt where the dialect sends no salt, seeded-sampling where the
engine promises no per-request seeds, structured-burst where the dialect sends no choice
constraint, lora-alternation where the server lists no LoRA adapter, host-tier-return where the
server has no host tier, spec-echo where the server does not speculate, window-edge to
expert-batch where the served model has no such trait, known where servefuzz launched the model
and read its config.json, retraction where the server states no pool a scenario can fill:
`small-pool`, `TargetShape.conditions`); `left_out` says why, once per campaign.

The package, one module per family, imports pointing one way:

    shape     TargetShape, the Strategy protocol, Draft, the burst timing helpers
    prefix    page-boundary, tile-boundary, burst-reuse, eviction, cancel-storm
    batch     batch-sweep, chunk-boundary, long-decode, n-mix, random
    features  tenant-salt, seeded-sampling, structured-burst, lora-alternation, retraction
    state     window-edge, window-prefix, state-restore, prefill-abort, expert-batch
    tiers     host-tier-return
    speculative  spec-echo
    offer     STRATEGIES, DEFAULT_MIX, offered, left_out, shape_aims, aimed_first
"""

from __future__ import annotations

from servefuzz.strategies.batch import BatchSweep, ChunkBoundary, LongDecodes, NChoices, RandomLoad
from servefuzz.strategies.features import (
    LoraAlternation,
    RetractionPressure,
    SeededSampling,
    StructuredBurst,
    TenantSalt,
    draw_choices,
    seeded_draw,
    tenant_salt,
)
from servefuzz.strategies.offer import (
    DEFAULT_MIX,
    STRATEGIES,
    aimed_first,
    get_strategies,
    get_strategy,
    left_out,
    offered,
    shape_aims,
)
from servefuzz.strategies.prefix import (
    BurstReuse,
    CancellationStorm,
    EvictionPressure,
    PageBoundaryBursts,
    TileBoundaryPrefixes,
)
from servefuzz.strategies.shape import (
    CACHED_BY_MS,
    COMMON_PAGE_SIZES,
    DEFAULT_CAPTURE_SIZES,
    PRESSURE_TOKENS,
    STRAGGLER_MS,
    TILE_SIZES,
    Draft,
    Strategy,
    TargetShape,
    boundary_lengths,
)
from servefuzz.strategies.speculative import SpecEcho
from servefuzz.strategies.state import ExpertBatch, PrefillAbort, StateRestore, WindowEdge, WindowPrefix
from servefuzz.strategies.tiers import HostTierReturn

__all__ = [
    "CACHED_BY_MS",
    "COMMON_PAGE_SIZES",
    "DEFAULT_CAPTURE_SIZES",
    "DEFAULT_MIX",
    "PRESSURE_TOKENS",
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
    "HostTierReturn",
    "LongDecodes",
    "LoraAlternation",
    "NChoices",
    "PageBoundaryBursts",
    "PrefillAbort",
    "RandomLoad",
    "RetractionPressure",
    "SeededSampling",
    "SpecEcho",
    "StateRestore",
    "Strategy",
    "StructuredBurst",
    "TargetShape",
    "TenantSalt",
    "TileBoundaryPrefixes",
    "WindowEdge",
    "WindowPrefix",
    "aimed_first",
    "boundary_lengths",
    "draw_choices",
    "get_strategies",
    "get_strategy",
    "left_out",
    "offered",
    "seeded_draw",
    "shape_aims",
    "tenant_salt",
]
