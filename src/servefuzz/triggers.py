"""Trigger features: what about a workload may have set a bug off, each with the fact that shows it.

One definition serves two readers: a finding's dedup signature (`Finding.signature`, which keeps
the `SIGNATURE` subset) and the known-issue matcher (`servefuzz.known_issues`, which adds the
server's settings), so that the two can never describe one finding differently.

    >>> from servefuzz.workload import RequestSpec, Scenario
    >>> sc = Scenario(1, (RequestSpec("r01", 0.0, tuple(range(3, 80)), 4, "p", 64),
    ...                   RequestSpec("r02", 1.0, tuple(range(3, 70)), 4, "p", 64)))
    >>> sorted(load_features(sc, ["r02"], 64))
    ['burst', 'concurrent', 'prefix=page-aligned', 'prefix=shared']
    >>> signature_features(load_features(sc, ["r02"], 64))
    ['prefix=page-aligned']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from servefuzz.terms import BURST_GAP_MS, bursts, page_class
from servefuzz.workload import RequestSpec, Scenario

__all__ = [
    "FEATURES",
    "SIGNATURE",
    "HIGH_CONCURRENCY",
    "request_features",
    "scenario_features",
    "load_features",
    "signature_features",
]

# The trigger features a finding can show, and what each means.
FEATURES: Mapping[str, str] = {
    "prefix=page-aligned": "a diverging request's shared prefix is a whole number of KV pages",
    "prefix=mid-page": "a diverging request's shared prefix ends inside a KV page",
    "prefix=shared": "a diverging request shares a prefix with other requests",
    "prefix=none": "a diverging request shares no prefix with any other request",
    "prefix=full": "a diverging request's whole prompt was sent before (fully cached)",
    "burst": f"a diverging request leaves in one burst with others (each at most {BURST_GAP_MS:g} ms after the one before)",
    "concurrent": "more than one request is in flight",
    "high-concurrency": "32 or more requests leave within one second",
    "n>1": "a diverging request asks for several choices",
    "stream": "a diverging request streams",
    "seeded-sampling": "a diverging request samples (temperature > 0) under a per-request seed",
    "structured-output": "a diverging request is constrained to a set of choices (structured output)",
    "abort": "a request of the scenario is cancelled mid-flight",
    "chunked-prefill": "a prompt is longer than the chunked-prefill budget",
    "eviction": "the scenario needs more KV than the pool holds",
    "radix-cache": "the server runs SGLang's radix prefix cache",
    "prefix-caching": "the server caches prompt prefixes (vLLM prefix caching, llama.cpp cache_prompt)",
    "overlap": "the server runs SGLang's overlap scheduler",
    "cuda-graph": "the server replays padded CUDA graphs for decode",
    "deterministic": "the server runs in its deterministic (batch-invariant) mode",
    "cache-salt": "requests of the scenario carry tenants' prefix-cache salts (cache_salt)",
    "lora": "requests of the scenario run under LoRA adapters",
    "recurrent-state": "the served model keeps a recurrent state per request (linear-attention or Mamba layers)",
    "sliding-window": "the served model has sliding-window attention layers (their KV kept only a window back)",
}

# The features a finding's dedup signature keys on: the shape of the requests that diverged,
# whether anything was cut, and whether LoRA adapters were in play (a LoRA finding is another bug
# than a base-model one of the same shape; scenarios without adapters keep their signatures).
# (How many requests or how dense is not: a shrunk finding of one bug is denser or sparser than
# the original and must keep its signature.)
SIGNATURE = ("prefix=none", "prefix=shared", "prefix=page-aligned", "prefix=mid-page", "n>1", "stream", "abort",
             "seeded-sampling", "structured-output", "lora")

HIGH_CONCURRENCY = 32


def request_features(scenario: Scenario, spec: RequestSpec, page: int | None) -> dict[str, str]:
    """Features of one diverging request: its shared prefix against the page, its neighbours."""
    feats: dict[str, str] = {}
    rid, requests = spec.id, scenario.requests
    if spec.prefix_len == 0:
        feats["prefix=none"] = f"{rid} shares no prefix with other requests"
    else:
        feats["prefix=shared"] = f"{rid} shares a {spec.prefix_len}-token prefix with other requests"
        # `terms.page_class`: no page known, or a page of one token (SGLang's default), on which
        # every prefix is "aligned", says nothing; "shared" then stands alone.
        where = page_class(spec.prefix_len, page if isinstance(page, int) else None)
        if where == "aligned":
            feats["prefix=page-aligned"] = (
                f"the diverging request {rid}'s prefix_len {spec.prefix_len} is a multiple of the page size {page}"
            )
        elif where == "mid-page" and isinstance(page, int):
            feats["prefix=mid-page"] = (
                f"the diverging request {rid}'s prefix_len {spec.prefix_len} ends inside a page of {page} "
                f"({_count(spec.prefix_len // page, 'full page')} shared)"
            )
    # Its whole prompt sent before it (or with it): the engine can serve it entirely from cache.
    covered = [
        r.id for r in requests if r.id != rid and r.offset_ms <= spec.offset_ms and (
            r.prompt_ids == spec.prompt_ids
            or (spec.prefix_len == spec.prompt_len and r.prefix_name == spec.prefix_name and r.prefix_len >= spec.prefix_len)
        )
    ]
    if covered:
        feats["prefix=full"] = f"{rid}'s whole prompt was sent before it, by {covered[0]}"
    close = _burst_of(requests, rid)
    if close:
        feats["burst"] = f"{rid} leaves in one burst with {', '.join(close[:3])} (gaps of {BURST_GAP_MS:g} ms at most)"
    if spec.n > 1:
        feats["n>1"] = f"{rid} asks for n={spec.n} choices"
    if spec.stream:
        feats["stream"] = f"{rid} streams"
    if spec.seeded:
        feats["seeded-sampling"] = f"{rid} samples at temperature {spec.temperature:g} with seed {spec.seed}"
    if spec.choices is not None:
        feats["structured-output"] = f"{rid} is constrained to {len(spec.choices)} choices"
    return feats


def scenario_features(scenario: Scenario) -> dict[str, str]:
    """Features of the whole load: how many requests, how dense, whether some are cut."""
    feats: dict[str, str] = {}
    requests = scenario.requests
    if len(requests) > 1:
        span = scenario.duration_ms
        feats["concurrent"] = f"{len(requests)} requests leave " + (f"within {span:.0f} ms" if span >= 0.5 else "at once")
    busiest = max((sum(1 for r in requests if 0 <= r.offset_ms - s.offset_ms < 1000) for s in requests), default=0)
    if busiest >= HIGH_CONCURRENCY:
        feats["high-concurrency"] = f"{busiest} requests leave within one second"
    salts = sorted({r.cache_salt for r in requests if r.cache_salt is not None})
    if salts:
        feats["cache-salt"] = f"{len(salts)} tenant salt{'' if len(salts) == 1 else 's'} among the requests"
    adapters = sorted({r.adapter for r in requests if r.adapter is not None})
    if adapters:
        base = sum(1 for r in requests if r.adapter is None)
        feats["lora"] = f"{len(adapters)} LoRA adapter{'' if len(adapters) == 1 else 's'} ({', '.join(adapters)})" + (
            f" and {_count(base, 'base-model request')}" if base else "")
    cancelled = [r for r in requests if r.cancelled]
    if cancelled:
        feats["abort"] = f"{cancelled[0].id} is cancelled after {cancelled[0].cancel_after_ms:g} ms"
    return feats


def load_features(scenario: Scenario, involved: Iterable[str], page: int | None) -> dict[str, str]:
    """The features of the requests `involved` (the first one with a feature tells its fact)
    and of the whole scenario."""
    specs = scenario.by_id()
    feats: dict[str, str] = {}
    for rid in involved:
        if rid in specs:
            for feature, reason in request_features(scenario, specs[rid], page).items():
                feats.setdefault(feature, reason)
    return {**feats, **scenario_features(scenario)}


def signature_features(feats: Mapping[str, str]) -> list[str]:
    """The signature's part of `feats`, sorted; a shared prefix placed against the page says
    more than "shared", so "shared" stands alone only when the page size is unknown (or one)."""
    kept = [f for f in SIGNATURE if f in feats]
    if "prefix=page-aligned" in kept or "prefix=mid-page" in kept:
        kept.remove("prefix=shared")
    return sorted(kept)


def _burst_of(requests: Sequence[RequestSpec], rid: str) -> list[str]:
    """The other requests of `rid`'s burst (`terms.bursts`): they reach the scheduler with it."""
    for group in bursts([r.offset_ms for r in requests]):
        ids = [requests[i].id for i in group]
        if rid in ids:
            return [i for i in ids if i != rid]
    return []


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
