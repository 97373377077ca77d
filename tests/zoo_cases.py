"""Hand-made scenarios that trigger each planted fault of the reference engine's zoo, padded
with bystanders: the flags the engine needs for the fault to fire, and the scenario. Shared by
the zoo's shrink-and-triage tests (tests/quality/test_shrink_triage_zoo.py) and the controls'
tests (tests/test_controls.py), each building them with `PromptBuilder(7, range(3, 1024))`; with
the page-boundary shape as a strategy drafts it (`page_boundary_scenario`, for the controls' and
the one rule's tests, tests/test_one_rule.py)."""

from __future__ import annotations

from collections.abc import Callable

from servefuzz.strategies import Draft, TargetShape
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

__all__ = ["CASES", "REFERENCE_SHAPE", "Case", "abort_reuse", "evict_in_use", "page_boundary_scenario"]

Case = tuple[list[str], Scenario]

# The reference engine's defaults, as the strategies see them (`servefuzz.strategies.Draft`).
REFERENCE_SHAPE = TargetShape(page_size=64, context_length=4096, vocab=range(3, 1024), max_total_tokens=131072,
                              chunked_prefill_size=2048, capture_sizes=(1, 2, 4, 8), max_running_requests=128)


def page_boundary_scenario() -> Scenario:
    """SGLang #22819's shape on the default engine, as a strategy drafts it: a blocker, then three
    requests sharing exactly one page (the controls' and the one rule's tests)."""
    d = Draft(7, REFERENCE_SHAPE)
    d.blocker(0)
    for k in range(3):
        d.add(4.0 + k * 0.2, 64 + 20 + k, 16, prefix="p0", prefix_len=64)
    return d.scenario("hand")


def page_boundary_prefix(b: PromptBuilder) -> Case:
    # A pool of three pages: two requests sharing exactly one page (64 tokens) wait for a short
    # request to finish, then enter one batch together, the first on the page the short one
    # freed; the second reads that page before the first has written it. They come 30 ms after
    # the short one: an idle engine waits up to 20 ms for the rest of a burst before its first
    # round, and the short request must be running on its own by then.
    return ["--max-total-tokens", "256"], Scenario(1, (
        RequestSpec("r01", 0.0, b.prompt(None, 0, 10), 40),
        RequestSpec("r02", 30.0, b.prompt("p0", 64, 70), 8, "p0", 64),
        RequestSpec("r03", 30.5, b.prompt("p0", 64, 75), 8, "p0", 64),
        RequestSpec("r04", 180.0, b.prompt(None, 0, 40), 8),
        RequestSpec("r05", 190.0, b.prompt(None, 0, 20), 8),
        RequestSpec("r06", 210.0, b.prompt("p0", 64, 90), 8, "p0", 64),
        RequestSpec("r07", 230.0, b.prompt(None, 0, 30), 8),
    ))


def overlap_war(b: PromptBuilder) -> Case:
    # One running request at a time: each newcomer waits for a free req_to_token row and is
    # admitted in the very round in which the previous request's last decode is in flight.
    return ["--max-running-requests", "1"], Scenario(2, (
        RequestSpec("r01", 0.0, b.prompt(None, 0, 40), 12),
        RequestSpec("r02", 0.5, b.prompt(None, 0, 30), 6),
        RequestSpec("r03", 2.0, b.prompt(None, 0, 50), 8),
        RequestSpec("r04", 3.0, b.prompt(None, 0, 20), 8),
        RequestSpec("r05", 150.0, b.prompt(None, 0, 60), 6),
        RequestSpec("r06", 200.0, b.prompt(None, 0, 30), 4),
    ))


def stale_padding(b: PromptBuilder) -> Case:
    # Five decodes with staggered lengths: the batch shrinks across padded sizes (8 -> 4 -> 2).
    burst = [RequestSpec(f"r{i + 1:02d}", i * 0.5, b.prompt(None, 0, 20 + 10 * i), 6 + 3 * i) for i in range(5)]
    return [], Scenario(3, (
        *burst,
        RequestSpec("r06", 300.0, b.prompt(None, 0, 50), 8),
        RequestSpec("r07", 350.0, b.prompt(None, 0, 30), 4),
    ))


def chunk_boundary(b: PromptBuilder) -> Case:
    # A 64-token prefill budget: a long prompt's last chunk leaves room for part of the next
    # prompt, which is cut at the budget beside it.
    return ["--chunked-prefill-size", "64"], Scenario(4, (
        RequestSpec("r01", 0.0, b.prompt(None, 0, 300), 4),
        RequestSpec("r02", 2.0, b.prompt(None, 0, 100), 8),
        RequestSpec("r03", 3.0, b.prompt(None, 0, 20), 8),
        RequestSpec("r04", 150.0, b.prompt(None, 0, 60), 8),
        RequestSpec("r05", 200.0, b.prompt(None, 0, 30), 8),
        RequestSpec("r06", 260.0, b.prompt(None, 0, 50), 4),
    ))


def abort_reuse(b: PromptBuilder) -> Case:
    # A request holding a cached prefix is cancelled; later requests hit that prefix.
    return [], Scenario(5, (
        RequestSpec("r01", 0.0, b.prompt("p0", 64, 80), 200, "p0", 64, cancel_after_ms=60.0),
        RequestSpec("r02", 5.0, b.prompt(None, 0, 30), 8),
        RequestSpec("r03", 120.0, b.prompt("p0", 64, 74), 8, "p0", 64),
        RequestSpec("r04", 130.0, b.prompt(None, 0, 40), 8),
        RequestSpec("r05", 200.0, b.prompt("p0", 64, 90), 8, "p0", 64),
        RequestSpec("r06", 210.0, b.prompt(None, 0, 20), 4),
    ))


def evict_in_use(b: PromptBuilder) -> Case:
    # A 256-token pool: a long prompt forces eviction while a request decodes on a cached prefix.
    return ["--page-size", "16", "--max-total-tokens", "256"], Scenario(6, (
        RequestSpec("r01", 0.0, b.prompt("p0", 32, 36), 40, "p0", 32),
        RequestSpec("r02", 1.0, b.prompt(None, 0, 20), 8),
        RequestSpec("r03", 15.0, b.prompt(None, 0, 180), 4),
        RequestSpec("r04", 16.0, b.prompt(None, 0, 10), 4),
        RequestSpec("r05", 300.0, b.prompt("p0", 32, 40), 8, "p0", 32),
        RequestSpec("r06", 310.0, b.prompt(None, 0, 30), 4),
    ))


def stale_slot_continuation(b: PromptBuilder) -> Case:
    # r01 finishes while r02 still decodes (its idle slot keeps r01's prompt state); r03 arrives
    # fresh later, its own prompt under one page: a cache miss, served r01's state.
    return [], Scenario(7, (
        RequestSpec("r01", 0.0, b.prompt(None, 0, 30), 8),
        RequestSpec("r02", 0.5, b.prompt(None, 0, 40), 40),
        RequestSpec("r03", 150.0, b.prompt(None, 0, 20), 8),
        RequestSpec("r04", 200.0, b.prompt(None, 0, 50), 8),
        RequestSpec("r05", 260.0, b.prompt(None, 0, 30), 8),
        RequestSpec("r06", 300.0, b.prompt(None, 0, 20), 4),
    ))


def salt_ignored(b: PromptBuilder) -> Case:
    # Tenant A caches a two-page prefix; tenant B sends the same prefix later under its own salt,
    # among unsalted neighbours: the token-only lookup hands B A's pages (cached_tokens > 0).
    return [], Scenario(8, (
        RequestSpec("r01", 0.0, b.prompt("p0", 128, 140), 4, "p0", 128, cache_salt="tenant-a"),
        RequestSpec("r02", 5.0, b.prompt(None, 0, 60), 16),
        RequestSpec("r03", 40.0, b.prompt(None, 0, 90), 8),
        RequestSpec("r04", 200.0, b.prompt("p0", 128, 140), 4, "p0", 128, cache_salt="tenant-b"),
        RequestSpec("r05", 210.0, b.prompt(None, 0, 30), 8),
        RequestSpec("r06", 260.0, b.prompt(None, 0, 20), 4),
    ))


def shared_sampler_rng(b: PromptBuilder) -> Case:
    # Two seeded draws decode in the same steps: with the fault, the second draws from the
    # first's generator and so leaves the tokens its own seed gives it alone. Greedy
    # bystanders come later.
    return [], Scenario(9, (
        RequestSpec("r01", 0.0, b.prompt(None, 0, 30), 12, temperature=1.0, seed=11),
        RequestSpec("r02", 0.5, b.prompt(None, 0, 40), 12, temperature=1.0, seed=22),
        RequestSpec("r03", 150.0, b.prompt(None, 0, 20), 8),
        RequestSpec("r04", 200.0, b.prompt(None, 0, 50), 8),
        RequestSpec("r05", 260.0, b.prompt(None, 0, 30), 8),
        RequestSpec("r06", 300.0, b.prompt(None, 0, 20), 4),
    ))


def bitmask_row_skip(b: PromptBuilder) -> Case:
    # Two constrained requests decode in the same steps: with the fault the second's mask misses
    # the upper half of the vocabulary, so it answers outside its own choices (which lie in the
    # lower half) whenever its best token lies up there. Free neighbours come later.
    return [], Scenario(10, (
        RequestSpec("r01", 0.0, b.prompt(None, 0, 30), 8, ignore_eos=False, choices=(" w5 w7", " w9", " w11 w12")),
        RequestSpec("r02", 0.5, b.prompt(None, 0, 40), 8, ignore_eos=False, choices=(" w20", " w21 w22", " w23")),
        RequestSpec("r03", 150.0, b.prompt(None, 0, 20), 8),
        RequestSpec("r04", 200.0, b.prompt(None, 0, 50), 8),
        RequestSpec("r05", 260.0, b.prompt(None, 0, 30), 8),
        RequestSpec("r06", 300.0, b.prompt(None, 0, 20), 4),
    ))


def lora_prefix_shared(b: PromptBuilder) -> Case:
    # r01 caches a two-page prefix under lora-a; r04 sends the same prefix later under lora-b,
    # among base-model neighbours: the adapter-blind lookup hands r04 lora-a's pages.
    return ["--lora", "lora-a=1", "--lora", "lora-b=2"], Scenario(10, (
        RequestSpec("r01", 0.0, b.prompt("p0", 128, 140), 4, "p0", 128, adapter="lora-a"),
        RequestSpec("r02", 5.0, b.prompt(None, 0, 60), 16),
        RequestSpec("r03", 40.0, b.prompt(None, 0, 90), 8),
        RequestSpec("r04", 200.0, b.prompt("p0", 128, 140), 8, "p0", 128, adapter="lora-b"),
        RequestSpec("r05", 210.0, b.prompt(None, 0, 30), 8),
        RequestSpec("r06", 260.0, b.prompt(None, 0, 20), 4),
    ))


def lossy_hit_reload(b: PromptBuilder) -> Case:
    # r01 caches a 256-token prefix; 150 ms later, when it is long done, five requests on it
    # arrive together and are prefilled in one extend batch (an idle engine waits for the rest of
    # a burst), each a hit read back rounded: some flip, the others keep their tokens with moved
    # logprobs (issue 51's other victims). r02 and r08 stand by. Two hits are the least it takes.
    return [], Scenario(3, (
        RequestSpec("r01", 0.0, b.prompt("p0", 256, 276), 2, "p0", 256),
        RequestSpec("r02", 10.0, b.prompt(None, 0, 40), 8),
        *(RequestSpec(f"r0{3 + k}", 150.0 + 0.2 * k, b.prompt("p0", 256, 266 + k), 12, "p0", 256) for k in range(5)),
        RequestSpec("r08", 400.0, b.prompt(None, 0, 30), 8),
    ))


# The hybrid model's state-cache faults: qwen3-next, its state checkpointed every 64 tokens.
HYBRID = ["--model-arch", "qwen3-next"]


def ssm_checkpoint_batch(b: PromptBuilder) -> Case:
    # r01 and r02 arrive together and are prefilled in one extend batch; r02, the second, passes
    # the checkpoints at 64, 128 and 192 and keeps r01's state there. r05 hits r02's prefix at
    # 192 once both are cached; r03, r04 and r06 stand by.
    return HYBRID, Scenario(11, (
        RequestSpec("r01", 0.0, b.prompt(None, 0, 130), 4),
        RequestSpec("r02", 0.5, b.prompt("p0", 192, 200), 4, "p0", 192),
        RequestSpec("r03", 20.0, b.prompt(None, 0, 40), 8),
        RequestSpec("r04", 300.0, b.prompt(None, 0, 30), 8),
        RequestSpec("r05", 400.0, b.prompt("p0", 192, 202), 12, "p0", 192),
        RequestSpec("r06", 420.0, b.prompt(None, 0, 20), 4),
    ))


def stale_state_donated(b: PromptBuilder) -> Case:
    # A 100-token budget: r01's last chunk [200, 260) passes the checkpoint at 256 beside the
    # first chunk of r02, and donates the state at 200 there. r04 hits r01's prefix at 256.
    return [*HYBRID, "--chunked-prefill-size", "100"], Scenario(12, (
        RequestSpec("r01", 0.0, b.prompt("p0", 256, 260), 4, "p0", 256),
        RequestSpec("r02", 0.5, b.prompt(None, 0, 300), 4),
        RequestSpec("r03", 30.0, b.prompt(None, 0, 40), 8),
        RequestSpec("r04", 600.0, b.prompt("p0", 256, 265), 12, "p0", 256),
        RequestSpec("r05", 620.0, b.prompt(None, 0, 30), 4),
        RequestSpec("r06", 700.0, b.prompt(None, 0, 50), 6),
    ))


def unwritten_state_published(b: PromptBuilder) -> Case:
    # r01's one prefill chunk passes the checkpoints at 64, 128 and 192; only the last is written.
    # r04 shares r01's first 150 tokens: its hit stops at the unwritten checkpoint at 128.
    return HYBRID, Scenario(13, (
        RequestSpec("r01", 0.0, b.prompt("p0", 150, 200), 4, "p0", 150),
        RequestSpec("r02", 10.0, b.prompt(None, 0, 40), 8),
        RequestSpec("r03", 250.0, b.prompt(None, 0, 30), 8),
        RequestSpec("r04", 300.0, b.prompt("p0", 150, 157), 12, "p0", 150),
        RequestSpec("r05", 320.0, b.prompt(None, 0, 20), 4),
        RequestSpec("r06", 400.0, b.prompt(None, 0, 50), 6),
    ))


def state_n_minus_1(b: PromptBuilder) -> Case:
    # r01 is 128 tokens, two checkpoints; r04 is the same prompt again, a hit on the whole of it.
    return HYBRID, Scenario(14, (
        RequestSpec("r01", 0.0, b.prompt("p0", 128, 128), 4, "p0", 128),
        RequestSpec("r02", 10.0, b.prompt(None, 0, 40), 8),
        RequestSpec("r03", 250.0, b.prompt(None, 0, 30), 8),
        RequestSpec("r04", 300.0, b.prompt("p0", 128, 128), 12, "p0", 128),
        RequestSpec("r05", 320.0, b.prompt(None, 0, 20), 4),
        RequestSpec("r06", 400.0, b.prompt(None, 0, 50), 6),
    ))


# The sliding-window faults: gemma3, a 64-token window over pages of 64.
WINDOWED = ["--model-arch", "gemma3"]


def window_ring_stale(b: PromptBuilder) -> Case:
    # r01's 300-token prefill slides the window off its pages 0-2 before they are cached; r03's
    # pages take the window pages r01 gave back; r04 shares r01's first two pages, a hit the clean
    # engine cuts (their windows are gone) and the faulty one takes, reading r03's window KV.
    return WINDOWED, Scenario(15, (
        RequestSpec("r01", 0.0, b.prompt("p0", 300, 300), 4, "p0", 300),
        RequestSpec("r02", 5.0, b.prompt(None, 0, 40), 8),
        RequestSpec("r03", 300.0, b.prompt(None, 0, 200), 4),
        RequestSpec("r04", 600.0, b.prompt("p0", 128, 138), 16, "p0", 128),
        RequestSpec("r05", 610.0, b.prompt(None, 0, 30), 8),
        RequestSpec("r06", 700.0, b.prompt(None, 0, 20), 4),
    ))


def window_modulo_after_saturation(b: PromptBuilder) -> Case:
    # A 512-token pool (8 pages, 6 window pages): r01 and r02 together need 9 (r02 waits, the
    # pool saturated with two requests in), and r02 is cached. r04 hits r02's first three pages
    # with 10 tokens more (202 tokens, 10 past a page edge): its partial page's window KV is
    # written one window page past r02's page 2, not into its own: a shrink to 3 requests (two
    # to saturate, one of them cached, and the hit). A 4,096-token pool under two 2,000-token
    # prompts showed the fault at 4 s a replay, shrunk in 153 s.
    return [*WINDOWED, "--max-total-tokens", "512"], Scenario(16, (
        RequestSpec("r01", 0.0, b.prompt(None, 0, 300), 4),
        RequestSpec("r02", 0.5, b.prompt("p0", 250, 250), 4, "p0", 250),
        RequestSpec("r03", 20.0, b.prompt(None, 0, 40), 8),
        RequestSpec("r04", 500.0, b.prompt("p0", 192, 202), 16, "p0", 192),
        RequestSpec("r05", 520.0, b.prompt(None, 0, 30), 4),
        RequestSpec("r06", 600.0, b.prompt(None, 0, 50), 4),
    ))


# The host-tier faults: a 1,024-token device pool (15 pages of 64) behind a 4,096-token host tier.
HOST = ["--max-total-tokens", "1024", "--host-tier-tokens", "4096"]


def pushed_out(b: PromptBuilder, first: str = "r01", adapter: str | None = None) -> tuple[RequestSpec, ...]:
    """r01 caches a 256-token prefix (written through to the host); 150 ms later five 300-token
    prompts (25 pages) push it out of the device. The prefix stays on the host."""
    return (RequestSpec(first, 0.0, b.prompt("p0", 256, 276), 2, "p0", 256, adapter=adapter),
            *(RequestSpec(f"r0{2 + k}", 150.0 + k, b.prompt(None, 0, 300), 8) for k in range(5)))


def host_loadback_stale_pages(b: PromptBuilder) -> Case:
    # The small pool of host_loadback_race below: r03 pushes r01's prefix out to the host and is
    # done, its pages cached. r04 (fresh) and r05 (the prefix again) arrive together: r05's
    # load-back is given pages r04 was just handed, and r04 writes over them. Four requests are
    # the least it takes (the prefix's owner, a pusher that is done, whose cached pages are the
    # only room a load-back can have, and the two admitted together), so the hand case has one
    # pusher: five 300-token pushers (25 pages against 15) left at least three after shrinking.
    return ["--max-total-tokens", "512", "--host-tier-tokens", "2048"], Scenario(11, (
        RequestSpec("r01", 0.0, b.prompt("p0", 128, 148), 2, "p0", 128),
        RequestSpec("r02", 10.0, b.prompt(None, 0, 30), 4),
        RequestSpec("r03", 100.0, b.prompt(None, 0, 384), 1),
        RequestSpec("r04", 300.0, b.prompt(None, 0, 100), 24),
        RequestSpec("r05", 300.5, b.prompt("p0", 128, 138), 12, "p0", 128),
        RequestSpec("r06", 320.0, b.prompt(None, 0, 20), 4),
    ))


def host_key_no_salt(b: PromptBuilder) -> Case:
    # r01 caches a 256-token prefix under lora-a (and the host keeps it, written through); r07 sends
    # it under lora-b among base-model neighbours: the host, keyed on the tokens alone, loads back
    # lora-a's KV for it.
    return [*HOST, "--lora", "lora-a=1", "--lora", "lora-b=2"], Scenario(12, (
        *pushed_out(b, adapter="lora-a"),
        RequestSpec("r07", 400.0, b.prompt("p0", 256, 266), 12, "p0", 256, adapter="lora-b"),
    ))


def host_loadback_race(b: PromptBuilder) -> Case:
    # After the push-out, r07 decodes 300 tokens; r08 returns to the prefix while it does: its
    # load-back is issued beside r07's decode in flight, and its prefill reads the pages early.
    return HOST, Scenario(13, (
        *pushed_out(b),
        RequestSpec("r07", 160.0, b.prompt(None, 0, 40), 300),
        RequestSpec("r08", 700.0, b.prompt("p0", 256, 266), 12, "p0", 256),
    ))


def transfer_region_dedupe(b: PromptBuilder) -> Case:
    # A prefill/decode pair: three different prompts at once put three transfers in the decode
    # server's receive buffer together; the bystanders come alone, one transfer at a time.
    return ["--disaggregation-mode", "pair"], Scenario(14, (
        RequestSpec("r01", 0.0, b.prompt(None, 0, 150), 8),
        RequestSpec("r02", 0.5, b.prompt(None, 0, 140), 8),
        RequestSpec("r03", 1.0, b.prompt(None, 0, 130), 8),
        RequestSpec("r04", 400.0, b.prompt(None, 0, 60), 8),
        RequestSpec("r05", 700.0, b.prompt(None, 0, 90), 8),
        RequestSpec("r06", 1000.0, b.prompt(None, 0, 40), 8),
    ))


CASES: dict[str, Callable[[PromptBuilder], Case]] = {
    "page-boundary-prefix": page_boundary_prefix,
    "overlap-war": overlap_war,
    "stale-padding": stale_padding,
    "chunk-boundary": chunk_boundary,
    "abort-reuse": abort_reuse,
    "evict-in-use": evict_in_use,
    "stale-slot-continuation": stale_slot_continuation,
    "salt-ignored": salt_ignored,
    "shared-sampler-rng": shared_sampler_rng,
    "bitmask-row-skip": bitmask_row_skip,
    "lora-prefix-shared": lora_prefix_shared,
    "lossy-hit-reload": lossy_hit_reload,
    "ssm-checkpoint-batch": ssm_checkpoint_batch,
    "stale-state-donated": stale_state_donated,
    "unwritten-state-published": unwritten_state_published,
    "state-n-minus-1": state_n_minus_1,
    "window-ring-stale": window_ring_stale,
    "window-modulo-after-saturation": window_modulo_after_saturation,
    "host-loadback-stale-pages": host_loadback_stale_pages,
    "host-key-no-salt": host_key_no_salt,
    "host-loadback-race": host_loadback_race,
    "transfer-region-dedupe": transfer_region_dedupe,
}
