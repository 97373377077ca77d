"""The planted-bug zoo: one fault per real corruption class, each behind `--fault NAME`.

Every fault models an upstream cousin, fires only under that cousin's concurrency, timing or
size condition (never for one request alone on a flushed server), and is cured by the server
flag that cures the cousin. The faulty code paths are small and marked `FAULT <name>` in place
(kvpool, radix, scheduler); the four of a hybrid model's state cache (`ssm-checkpoint-batch`,
`stale-state-donated`, `unwritten-state-published`, `state-n-minus-1`: `RECURRENT_FAULTS`) need
`--model-arch qwen3-next` and are refused on a dense model; so are the two of a sliding-window
KV pool (`window-ring-stale`, `window-modulo-after-saturation`: `WINDOW_FAULTS`, `--model-arch
gemma3`) and the one of a mixture of experts' router (`router-tie-numerics`: `EXPERT_FAULTS`,
`--model-arch qwen3-moe`, its offsets in `experts.py`); the one of the prefill/decode KV transfer
(`transfer-region-dedupe`: `TRANSFER_FAULTS`, `transfer.py`) fires only on `--disaggregation-mode pair`
(planted on one server it has no transfer to spoil: one server is its cure, as no host tier is the
host tier's faults').
This module holds the catalogue, which `docs/fault-zoo.md` mirrors, and the one fault that is pure arithmetic.

    >>> sorted(FAULTS)[:2]
    ['abort-reuse', 'batch-variant-numerics']
    >>> FAULTS["overlap-war"].cure
    '--disable-overlap-schedule'
    >>> int(abs(batch_variant_offsets(1, 8)).sum())   # a batch of one is the reference order
    0
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = [
    "EXPERT_FAULTS",
    "FAULTS",
    "LOSSY_STEP",
    "NUMERIC_DRIFT_UNITS",
    "RECURRENT_FAULTS",
    "TRANSFER_FAULTS",
    "WINDOW_FAULTS",
    "Fault",
    "batch_variant_offsets",
]


@dataclass(frozen=True)
class Fault:
    """One planted bug: what it models, what triggers it, which flag cures it."""

    name: str
    upstream: str
    component: str
    trigger: str
    cure: str
    symptom: str


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault(
            "page-boundary-prefix",
            "SGLang #22819",
            "radix cache",
            "two or more requests sharing a prefix of exactly k * page_size tokens land in the same "
            "extend batch: the second matches the first's pages before their KV is written",
            "--disable-radix-cache",
            "the later request reads a stale page (zeros or a previous occupant's KV)",
        ),
        Fault(
            "overlap-war",
            "SGLang PR #26380 (also #18744)",
            "overlap scheduler / req_to_token",
            "a request is admitted in the same scheduling round in which another request's last "
            "decode step is in flight: it reuses that request's req_to_token row too early",
            "--disable-overlap-schedule",
            "the finishing request's last token is computed over the newcomer's slots",
        ),
        Fault(
            "stale-padding",
            "SGLang #24361 / PR #24401",
            "CUDA-graph padded decode",
            "the decode batch shrinks across a capture-size boundary (e.g. 5 -> 4 running requests)",
            "--disable-cuda-graph",
            "the last real row decodes with the previous step's position and req_to_token row",
        ),
        Fault(
            "chunk-boundary",
            "SGLang #22291 / PR #17850 class",
            "chunked prefill",
            "a prompt split at the chunked-prefill budget in an extend batch holding more than one request",
            "--chunked-prefill-size -1",
            "the chunk's cached keys lag its values by one token: the next chunk and every decode "
            "step attend over mismatched key/value pairs",
        ),
        Fault(
            "abort-reuse",
            "SGLang #23392 / #24527, vLLM #37076 class",
            "abort path / page allocator",
            "a request holding cached-prefix pages is aborted, new traffic reuses the freed pages, "
            "and a later request hits that cached prefix",
            "--disable-radix-cache",
            "the later request reads another request's KV under a valid-looking cache hit",
        ),
        Fault(
            "evict-in-use",
            "vLLM #37076 / #50702 class",
            "radix cache eviction",
            "pool pressure (small --max-total-tokens) forces eviction while requests hold cached prefixes",
            "a larger --max-total-tokens",
            "a running request's pages are freed, reallocated and overwritten under it",
        ),
        Fault(
            "stale-slot-continuation",
            "llama.cpp #27148",
            "server prompt cache (idle slots)",
            "a request finishes while another is still running, and a later fresh request's own "
            "prompt misses the cache",
            "--disable-radix-cache",
            "the fresh request is served the finished request's prompt state: its answer is that "
            "request's solo continuation, with cached_tokens = 0",
        ),
        Fault(
            "salt-ignored",
            "SGLang #37160 (the LMCache path drops cache_salt); vLLM PR #17045 / CVE-2025-46570 class",
            "radix cache, tenant isolation (cache_salt)",
            "a tenant's request whose first page misses under its own salt while another tenant "
            "(or an unsalted request) has that page cached: a second, token-only lookup takes it",
            "--disable-radix-cache",
            "a cache hit across tenants: cached_tokens > 0 and a shorter time to first token for a "
            "salt that never sent the prefix; the answer itself stays exact",
        ),
        Fault(
            "shared-sampler-rng",
            "vLLM #1595 (fixed by per-request generators, PR #2514)",
            "sampler (per-request generators)",
            "choices of more than one sampled request draw in the same step (one request alone, "
            "whatever its n, keeps its choices' own generators)",
            "--max-running-requests 1",
            "a seeded request's tokens depend on which requests sampled beside it: under load it "
            "answers other than alone with the same seed, with the same logprobs where the tokens agree",
        ),
        Fault(
            "bitmask-row-skip",
            "vLLM #19493 (fixed by PR #19565)",
            "structured outputs (grammar bitmask across rows)",
            "rows of more than one constrained request take tokens in the same step (one request "
            "alone, whatever its n, masks every row)",
            "--max-running-requests 1",
            "a later constrained row's mask covers the low half of the vocabulary only: its answer "
            "breaks its own constraint under load and keeps it alone",
        ),
        Fault(
            "lora-prefix-shared",
            "vLLM #38606 (rapid LoRA alternation over shared prefixes diverges)",
            "radix cache x LoRA (the prefix-cache key)",
            "a request under one LoRA adapter (or the base model) whose prefix pages another "
            "adapter's request cached: the lookup keys on the tokens alone and takes them",
            "--disable-radix-cache",
            "the request decodes over KV computed under the other adapter: its answer differs "
            "from its answer alone, with cached_tokens > 0",
        ),
        Fault(
            "lossy-hit-reload",
            "vLLM #50702 (int8 KV with prefix caching), SGLang #38031 (host-tier load-back) class",
            "prefix cache x batched prefill (the cached pages' read path)",
            "a request whose prompt hits the prefix cache is admitted into an extend batch holding "
            "other requests: its cached pages are read through the batched path, which rounds them",
            "--disable-radix-cache",
            "the hit request's cached keys and values lose their low bits: its logprobs move by "
            "tenths of a nat, often with every token the same, and near-tied tokens flip",
        ),
        Fault(
            "window-ring-stale",
            "SGLang PR #32759 (stale sliding-window ring read on radix reuse)",
            "radix cache x sliding-window KV pool (a hit's window check)",
            "a windowed model: a request hits a cached prefix whose window KV has slid out (a prompt "
            "longer than the window, or a long decode), after the pool handed those window pages to "
            "other traffic",
            "--disable-radix-cache",
            "the hit is taken whole and its windowed layers read window pages that now hold another "
            "request's (or a later step's) KV: its answer differs from its answer alone, with "
            "cached_tokens > 0",
        ),
        Fault(
            "window-modulo-after-saturation",
            "vLLM #50749 / #49716 (padded non-contiguous page strides, only after pool saturation)",
            "sliding-window KV pool (the last partial page's write)",
            "a windowed model, once a KV pool has run dry under load: a prompt whose length modulo "
            "the page is in 1..page/2 is prefilled",
            "a larger --max-total-tokens",
            "the partial last page's window KV lands one window page past the page before it: the "
            "first decode steps read stale window KV there (and another page is overwritten)",
        ),
        Fault(
            "router-tie-numerics",
            "vLLM #23138 class, as a mixture of experts shows it (bfloat16 routing near-ties; benign class)",
            "batch-size-dependent reductions in the experts' router",
            "a mixture of experts: more than one request in a forward batch",
            "--enable-deterministic-inference",
            "near-tied expert choices flip and every routing weight moves a little: logprobs move by "
            "~0.01, near-tied tokens flip (margin < 0.05)",
        ),
        Fault(
            "ssm-checkpoint-batch",
            "SGLang PR #37836 (closes #31833)",
            "hybrid state cache (checkpoints of a multi-request prefill batch)",
            "a hybrid model's prefill batch holding more than one request, in which a request after the "
            "first passes a state checkpoint; then a later request hits that request's prefix",
            "--disable-radix-cache",
            "the checkpoints of requests 2..n are copied from the first request's state slot: a hit on "
            "their prefixes restores another prompt's recurrent state and answers wrongly from its first token",
        ),
        Fault(
            "stale-state-donated",
            "SGLang #39342 (--enable-mixed-chunk with the mamba extra buffer)",
            "hybrid state cache x chunked prefill (the state donated to the radix tree)",
            "a hybrid model's prompt prefilled in chunks, a later chunk of which shares its batch with "
            "another request and passes a state checkpoint; then a later request hits that prefix",
            "--chunked-prefill-size -1",
            "the checkpoint is the state from before the chunk (its track index dropped): a hit on that "
            "prefix restores a stale recurrent state",
        ),
        Fault(
            "unwritten-state-published",
            "vLLM #53084 (a store publishes keys for never-written recurrent blocks); LMCache #4984",
            "hybrid state cache (which checkpoints were written)",
            "a hybrid model's prefill chunk that passes more than one state checkpoint; then a later "
            "request whose prefix hit stops at one of the earlier ones",
            "--disable-radix-cache",
            "only the chunk's last checkpoint is written, the earlier ones are published with slots never "
            "written (zeros, or a previous occupant's state): a hit there restores a state that belongs to nothing",
        ),
        Fault(
            "state-n-minus-1",
            "LMCache #4614 (root cause of vLLM #52617: a full-prompt hit the scheduler treats as N-1)",
            "hybrid state cache (a hit on the whole prompt)",
            "a hybrid model's prompt whose whole length ends on a state checkpoint another request left "
            "(the same prompt again, or a longer one that began with it)",
            "--disable-radix-cache",
            "the hit keeps its last tokens to recompute, as it must, but restores the state after the "
            "whole prompt: the last tokens enter the recurrent state twice and the answer differs from its first token",
        ),
        Fault(
            "host-loadback-stale-pages",
            "SGLang #38031 / #39830 (HiCache host-tier load-back) class",
            "host tier (load-back into device pages)",
            "a prompt whose prefix other requests pushed out to the host tier comes back and is "
            "admitted in the same scheduling round as another new request: the load-back is given "
            "device pages that request was just handed",
            "--host-tier-tokens 0",
            "two requests share those pages and whichever writes last wins: the returning request "
            "decodes over another prompt's KV (and so does every later hit on that prefix), or the "
            "other request decodes over the loaded prefix",
        ),
        Fault(
            "host-key-no-salt",
            "SGLang #37160 / vLLM CVE-2025-46570 class, on the host tier (a host key of tokens alone)",
            "host tier (its keys: cache salt and adapter)",
            "a request under one tenant's salt or adapter misses on the device where another "
            "tenant (or adapter) has the same prefix on the host tier: the host entry, keyed on the "
            "tokens alone, is loaded back for it",
            "--host-tier-tokens 0",
            "the request decodes over KV computed under another adapter (its answer differs from "
            "its answer alone), or a cross-tenant hit (cached_tokens > 0 for a salt that never sent it)",
        ),
        Fault(
            "host-loadback-race",
            "SGLang HiCache load-back / load_cache_event class (a copy not waited on)",
            "host tier x overlap scheduler (the load-back's copy stream)",
            "a prompt whose prefix was pushed out to the host tier comes back while another request "
            "decodes (overlap mode: a decode batch in flight): its prefill reads the device pages "
            "before the host copy lands",
            "--disable-overlap-schedule",
            "the returning request's prefill reads zeros or a previous occupant's KV as its prefix: "
            "wrong from its first token; the copy lands after, so later hits read it right",
        ),
        Fault(
            "transfer-region-dedupe",
            "vLLM #57661 (NIXL dedupes registered regions by base address), #52627 (1P1D NIXL silent "
            "corruption under sustained load); SGLang #22716 class (transfer buffer index collision)",
            "prefill/decode KV transfer (the decode server's receive buffer)",
            "a prefill/decode pair: two or more transfers in flight at once (received, not yet "
            "admitted by the decode engine), their prompts different in a page both hold",
            "--disaggregation-mode null",
            "the later transfer's pages are deduped into the earlier's regions (same base address): "
            "its request decodes over the other prompt's KV (or zeros, once that one was taken): "
            "wrong from its first token",
        ),
        Fault(
            "batch-variant-numerics",
            "vLLM #23138, llama.cpp #7052 (benign class)",
            "batch-size-dependent reductions",
            "more than one request in a forward batch",
            "--enable-deterministic-inference",
            "near-tied tokens flip (logprob margin < 0.025); logprobs move by ~0.01 with batch size",
        ),
        Fault(
            "deterministic-decode-drift",
            "vLLM #51902, #47069 (FA3 decode under VLLM_BATCH_INVARIANT=1); SGLang #22819's thread (FA3 "
            "under --enable-deterministic-inference)",
            "the deterministic mode's batch-invariant path (prefill only, not decode)",
            "more than one request in a decode batch, with or without --enable-deterministic-inference",
            "--max-running-requests 1",
            "decode logprobs move by ~0.01 with the batch's size and near-tied tokens flip, as with "
            "batch-variant-numerics, but --enable-deterministic-inference does not remove it: benign "
            "drift in default mode, a contract violation under the mode",
        ),
    )
}

# The faults of a hybrid model's recurrent-state cache: planted only on a model that has one.
RECURRENT_FAULTS = frozenset({"ssm-checkpoint-batch", "stale-state-donated", "unwritten-state-published",
                              "state-n-minus-1"})
# The faults of a sliding-window KV pool, and of a mixture of experts' router: planted only on a
# model that has one.
WINDOW_FAULTS = frozenset({"window-ring-stale", "window-modulo-after-saturation"})
EXPERT_FAULTS = frozenset({"router-tie-numerics"})
# The faults of the prefill/decode KV transfer: they fire only on a pair (`--disaggregation-mode`).
TRANSFER_FAULTS = frozenset({"transfer-region-dedupe"})

# FAULT lossy-hit-reload: the grid the cached K and V are rounded to, in the pool's integer units
# (values reach some thousands): coarse enough to move a victim's logprobs by tenths of a nat,
# fine enough that many victims keep every token (measured: of four hits in one batch, one to
# two flip), the faults whose other victims are what issue 51's noise rule is about.
LOSSY_STEP = 32

# The perturbation is at most this many 1/1024-nat logit units (~0.012 nats): only tokens whose
# margin is under twice that can flip, which is what makes it *numeric drift*, not corruption.
NUMERIC_DRIFT_UNITS = 12


@lru_cache(maxsize=256)
def batch_variant_offsets(n_requests: int, vocab_size: int) -> np.ndarray:
    """FAULT batch-variant-numerics: integer logit offsets that depend on the batch's size.

    Models a split-K reduction whose split is chosen from the number of requests in the batch:
    a batch of one is the reference order (offset 0); any other size rounds a little
    differently, deterministically for that size. Choices of one request count as one request,
    so one request alone never drifts, whatever its `n`.
    """
    if n_requests <= 1:
        return np.zeros(vocab_size)
    rng = np.random.default_rng(0x5EED + n_requests)
    offsets = rng.integers(-NUMERIC_DRIFT_UNITS, NUMERIC_DRIFT_UNITS + 1, vocab_size).astype(np.float64)
    offsets.flags.writeable = False
    return offsets
