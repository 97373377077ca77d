"""The fault zoo over real HTTP: each planted bug shows under its trigger, never for one request
alone on a flushed server, and the flag that cures its upstream cousin cures it.

Each trigger is a targeted burst. Batch composition depends on arrival timing, so a trigger is
retried up to three times (the fuzzer replays too); a cure or an isolated run must be exact
every time. "Wrong" means: differs from the plain single-sequence forward of the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from refclient import LORA_FLAGS, Answer, burst, flush, generate_body, metric, post, wrong_answers

from servefuzz.reference.faults import FAULTS
from servefuzz.reference.model import EOS_ID, TinyModel

Server = Callable[..., str]
Burst = list[tuple[str, float, dict[str, Any]]]


def toks(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 1024, n)]


def fires(model: TinyModel, url: str, trigger: Callable[[str], list[Answer]], tries: int = 3,
          judge: Callable[[TinyModel, Sequence[Answer]], dict[str, int]] = wrong_answers) -> dict[str, int]:
    """Wrong answers of the first run (of `tries`) that has any."""
    for _ in range(tries):
        flush(url)
        wrong = judge(model, trigger(url))
        if wrong:
            return wrong
    return {}


def exact(model: TinyModel, url: str, trigger: Callable[[str], list[Answer]],
          judge: Callable[[TinyModel, Sequence[Answer]], dict[str, int]] = wrong_answers) -> bool:
    flush(url)
    return judge(model, trigger(url)) == {}


# -- the triggers ------------------------------------------------------------------------------

PREFIX64 = toks(1, 64)


def page_boundary_burst(url: str) -> list[Answer]:
    # A long prefill keeps the engine busy while three requests sharing exactly one page
    # arrive: they are admitted together, in one extend batch.
    reqs: Burst = [("blocker", 0, generate_body(toks(2, 1000), 1))]
    reqs += [(name, 20 + i, generate_body(PREFIX64 + toks(3 + i, 64), 16)) for i, name in enumerate("ABC")]
    return burst(url, reqs)


def overlap_burst(url: str) -> list[Answer]:
    # With one running slot, B waits and is admitted exactly when A's last decode is in flight.
    return burst(url, [("A", 0, generate_body(toks(6, 100), 8)), ("B", 5, generate_body(toks(7, 300), 8))])


def shrinking_decode_burst(url: str) -> list[Answer]:
    # Five decoding requests (padded to 8) become four (padded to 4) when R0 finishes.
    reqs: Burst = [("R0", 0, generate_body(toks(10, 64), 8))]
    reqs += [(f"R{i}", 1, generate_body(toks(10 + i, 64), 24)) for i in range(1, 5)]
    return burst(url, reqs)


def chunked_burst(url: str) -> list[Answer]:
    # Six prompts of 300-700 tokens through a 256-token budget: each boundary between two
    # requests splits the second one in a multi-request batch.
    return burst(url, [(f"X{i}", i, generate_body(toks(20 + i, 300 + 80 * i), 12)) for i in range(6)])


PREFIX256 = toks(30, 256)


def abort_then_reuse(url: str) -> list[Answer]:
    import asyncio

    import aiohttp

    async def hang_up() -> None:  # prefill A (its prefix pages enter the cache), then abort it
        async with aiohttp.ClientSession() as s:
            resp = await s.post(
                url + "/generate", json={**generate_body(PREFIX256 + toks(31, 10), 500), "stream": True}
            )
            await resp.content.readline()
            resp.close()

    asyncio.run(hang_up())
    while metric(url, "num_running_reqs"):
        pass
    burst(url, [("C", 0, generate_body(toks(32, 300), 4))])  # new traffic takes the freed pages
    return burst(url, [("B", 0, generate_body(PREFIX256 + toks(33, 10), 16))])  # hits the prefix


def pool_pressure_burst(url: str) -> list[Answer]:
    # 10 requests on a warm 256-token prefix need ~34 pages; the pool has 15.
    burst(url, [("W", 0, generate_body(PREFIX256 + toks(41, 100), 4))])  # warm the shared prefix
    return burst(url, [(f"E{i}", i, generate_body(PREFIX256 + toks(50 + i, 100), 32)) for i in range(10)])


def many_requests_burst(url: str) -> list[Answer]:
    return burst(url, [(f"N{i}", i % 3, generate_body(toks(60 + i, 100), 32)) for i in range(30)])


def finished_then_fresh(url: str) -> list[Answer]:
    # S finishes while L still runs (its idle slot keeps S's prompt state); then F, whose own
    # prompt is under one page (a cache miss), arrives fresh.
    burst(url, [("S", 0, generate_body(toks(80, 40), 4)), ("L", 0, generate_body(toks(81, 40), 32))])
    return burst(url, [("F", 0, generate_body(toks(82, 40), 12))])


def tenant_b_after_tenant_a(url: str) -> list[Answer]:
    # Tenant A caches a 256-token prefix; tenant B (another salt) sends the same prefix. A clean
    # engine never lets B see A's pages; the faulty one hands them over on a token-only lookup.
    burst(url, [("A", 0, generate_body(PREFIX256 + toks(90, 20), 4, extra_key="tenant-a"))])
    return burst(url, [("B", 0, generate_body(PREFIX256 + toks(91, 20), 8, extra_key="tenant-b"))])


def cross_tenant_hits(model: TinyModel, answers: Sequence[Answer]) -> dict[str, int]:
    """salt-ignored's wrong answers: any cached token at all for tenant B, who never sent the
    prefix (its answer stays exact, which is checked too)."""
    assert wrong_answers(model, answers) == {}, "salt-ignored reads the right KV: answers stay exact"
    return {a.name: a.cached_tokens for a in answers if a.cached_tokens > 0}


# What counts as the fault showing: a wrong answer, except where the breach is in the cache
# state itself (a cross-tenant hit reads correct KV, so only cached_tokens shows it).
JUDGES: dict[str, Callable[[TinyModel, Sequence[Answer]], dict[str, int]]] = {"salt-ignored": cross_tenant_hits}


def seeded_burst(url: str) -> list[Answer]:
    # Three seeded sampled requests sent at once: admitted in one extend batch, they draw their
    # first token, and every later one, in the same steps. (n = 1: the cure's one running
    # request refuses more.)
    reqs: Burst = [(f"S{i}", 0, generate_body(toks(90 + i, 40), 12, temperature=1.0, seed=100 + i)) for i in range(3)]
    return burst(url, reqs)


# Each constrained request of the structured burst: its choices, as token ids.
CHOICES: dict[str, tuple[tuple[int, ...], ...]] = {
    f"G{i}": tuple(tuple(int(t) for t in np.random.default_rng(200 + 10 * i + k).integers(3, 512, 1 + k % 3))
                   for k in range(3))
    for i in range(4)
}


def constrained_body(name: str, prompt: list[int]) -> dict[str, Any]:
    """A /generate body constrained to `CHOICES[name]`: the regex the SGLang adapter sends."""
    body = generate_body(prompt, 8)
    regex = "(" + "|".join("".join(f" w{t}" for t in ch) for ch in CHOICES[name]) + ")"
    body["sampling_params"].update(regex=regex, ignore_eos=False)
    return body


def structured_burst(url: str) -> list[Answer]:
    # Four constrained requests sent at once decode in the same steps (their choices lie in the
    # low half of the vocabulary, so an unmasked upper token shows), with a free neighbour.
    reqs: Burst = [(name, 0, constrained_body(name, toks(210 + i, 30))) for i, name in enumerate(CHOICES)]
    reqs.append(("free", 0, generate_body(toks(220, 30), 8)))
    return burst(url, reqs)


def broken_constraints(model: TinyModel, answers: Sequence[Answer]) -> dict[str, int]:
    """Constrained answers that are not the masked greedy answer -> first bad step: at every
    step the token must be the argmax of the plain forward over the tokens that continue some
    choice (EOS once a choice is whole), written here from the constraint's definition. Free
    answers are held to the plain forward (`wrong_answers`)."""
    def choices(a: Answer) -> tuple[tuple[int, ...], ...] | None:
        return CHOICES.get(a.name.split("#")[0])  # choice i of an n > 1 request is 'name#i'

    bad = wrong_answers(model, [a for a in answers if choices(a) is None])
    for a in answers:
        mine = choices(a)
        if mine is None:
            continue
        logits = model.forward(list(a.prompt) + list(a.ids[:-1]))[len(a.prompt) - 1 :]
        for i, row in enumerate(logits):
            allowed = {ch[i] for ch in mine if len(ch) > i and ch[:i] == a.ids[:i]}
            allowed |= {EOS_ID for ch in mine if ch == a.ids[:i]}
            if a.ids[i] != max(sorted(allowed), key=lambda t: row[t]):
                bad[a.name] = i
                break
        else:
            if a.ids[-1] != EOS_ID:
                bad[a.name] = len(a.ids)  # a constrained answer ends at EOS (max_new_tokens 8 is room)
    return bad


# A constrained answer is right when it is the masked greedy answer, not the plain one.
JUDGES["bitmask-row-skip"] = broken_constraints


def alternating_adapters(url: str) -> list[Answer]:
    # lora-a computes and caches a 256-token prefix; then lora-b and the base model send the
    # same prefix at once. A clean engine keys the cached pages on the adapter too: no hit.
    burst(url, [("A", 0, generate_body(PREFIX256 + toks(95, 20), 4, lora_path="lora-a"))])
    return burst(url, [("B", 0, generate_body(PREFIX256 + toks(96, 20), 8, lora_path="lora-b")),
                       ("base", 0, generate_body(PREFIX256 + toks(97, 20), 8))])


def hits_in_one_batch(url: str) -> list[Answer]:
    # H caches a 256-token prefix; then, behind a long blocker, five requests on that prefix arrive
    # at once and are prefilled in one extend batch, each a hit. Their cached pages come back
    # rounded: most keep their tokens with moved logprobs, near-tied ones flip.
    burst(url, [("H", 0, generate_body(PREFIX256 + toks(100, 20), 2))])
    reqs: Burst = [("blocker", 0, generate_body(toks(101, 1000), 1))]
    reqs += [(f"V{i}", 20 + 0.2 * i, generate_body(PREFIX256 + toks(102 + i, 20), 12)) for i in range(5)]
    return burst(url, reqs)


# -- a hybrid model's state cache (qwen3-next: checkpoints every 64 tokens) ----------------------

HYBRID = ["--model-arch", "qwen3-next"]
PROMPT_X, PROMPT_Y = toks(110, 130), toks(111, 200)


def two_prefills_then_hits(url: str) -> list[Answer]:
    # X and Y, sent at once, are prefilled in one extend batch: Y, the second request, passes the
    # checkpoints at 64, 128 and 192. Then requests extend each prompt's prefix: Z hits Y's
    # checkpoint at 192, W hits X's at 128.
    burst(url, [("X", 0, generate_body(PROMPT_X, 4)), ("Y", 0.5, generate_body(PROMPT_Y, 4))])
    return burst(url, [("Z", 0, generate_body(PROMPT_Y[:192] + toks(112, 10), 12)),
                       ("W", 0, generate_body(PROMPT_X[:128] + toks(113, 6), 12))])


PROMPT_CHUNKED = toks(115, 260)


def chunk_shared_then_hit(url: str) -> list[Answer]:
    # With a 100-token budget, P's last chunk [200, 260) passes the checkpoint at 256 and leaves
    # 40 tokens of the budget to Q, which arrives while P is still prefilling: P's last chunk
    # shares its batch. Then Z hits P's prefix at 256.
    burst(url, [("P", 0, generate_body(PROMPT_CHUNKED, 4)), ("Q", 0.5, generate_body(toks(116, 300), 4))])
    return burst(url, [("Z", 0, generate_body(PROMPT_CHUNKED[:256] + toks(117, 9), 12))])


PROMPT_LONG = toks(118, 200)


def long_prefill_then_short_hit(url: str) -> list[Answer]:
    # P's one prefill chunk passes the checkpoints at 64, 128 and 192; Z shares its first 150
    # tokens, so its hit stops at the checkpoint at 128.
    burst(url, [("P", 0, generate_body(PROMPT_LONG, 4))])
    return burst(url, [("Z", 0, generate_body(PROMPT_LONG[:150] + toks(119, 7), 12))])


PROMPT_ALIGNED = toks(120, 128)


def whole_prompt_again(url: str) -> list[Answer]:
    # P is 128 tokens, two checkpoints; the same prompt again is a hit on the whole of it.
    burst(url, [("P", 0, generate_body(PROMPT_ALIGNED, 4))])
    return burst(url, [("again", 0, generate_body(PROMPT_ALIGNED, 12))])


# -- a sliding-window model (gemma3: a 64-token window, pages of 64) -----------------------------

WINDOWED = ["--model-arch", "gemma3"]
PROMPT_LONG_W = toks(130, 300)


def hit_on_slid_out_prefix(url: str) -> list[Answer]:
    # A's 300-token prefill slides its windows off pages 0-2 before they are cached: the tree keeps
    # them as tombstones. B's pages then take the window pages A gave back. C shares A's first two
    # pages: a clean engine cuts that hit (the window of page 1 is gone) and recomputes; the faulty
    # one takes it and reads B's window KV there.
    burst(url, [("A", 0, generate_body(PROMPT_LONG_W, 4))])
    burst(url, [("B", 0, generate_body(toks(131, 200), 4))])
    return burst(url, [("C", 0, generate_body(PROMPT_LONG_W[:128] + toks(132, 10), 16))])


PROMPT_P = toks(135, 250)


def saturated_then_partial_page(url: str) -> list[Answer]:
    # Eight 500-token prompts at once need more pages than a 4096-token pool has: admissions wait
    # for pages with other requests in the engine (the pool saturated). Then P is cached (the
    # windows of its pages 2 and 3 held) and V hits P's first three pages with 10 tokens more:
    # 202 tokens, 10 past a page edge. V's partial page gets the lowest free window page, not the
    # one after P's page 2: the faulty write lands there, V's own stays stale.
    burst(url, [(f"F{i}", 0.2 * i, generate_body(toks(140 + i, 500), 4)) for i in range(8)])
    burst(url, [("P", 0, generate_body(PROMPT_P, 4))])
    return burst(url, [("V", 0, generate_body(PROMPT_P[:192] + toks(136, 10), 16))])


# -- a mixture of experts (qwen3-moe) -----------------------------------------------------------

EXPERTS = ["--model-arch", "qwen3-moe"]


# The host-tier faults' setup: a 1,024-token device pool behind a 4,096-token host tier.
HOST_FLAGS = ["--max-total-tokens", "1024", "--host-tier-tokens", "4096"]


def pushed_out(url: str, **tenant: Any) -> None:
    # H caches a 256-token prefix (written through to the host); five 300-token prompts push it
    # out of the device pool. It stays on the host.
    burst(url, [("H", 0, generate_body(PREFIX256 + toks(110, 20), 2, **tenant))])
    burst(url, [(f"F{i}", i, generate_body(toks(111 + i, 300), 4)) for i in range(5)])


def return_beside_a_newcomer(url: str) -> list[Answer]:
    # The prefix comes back right behind a fresh prompt C: both are admitted in one round, and
    # the load-back is given the pages C was just handed. Then a later hit on the loaded prefix.
    pushed_out(url)
    answers = burst(url, [("C", 0, generate_body(toks(120, 100), 16)), ("B", 0.5, generate_body(PREFIX256 + toks(121, 20), 12))])
    return answers + burst(url, [("D", 0, generate_body(PREFIX256 + toks(122, 20), 12))])


def return_while_another_decodes(url: str) -> list[Answer]:
    # The prefix comes back while L decodes (overlap mode: a decode batch in flight as it is
    # admitted): its prefill reads the device pages before the host copy lands.
    pushed_out(url)
    return burst(url, [("L", 0, generate_body(toks(130, 40), 300)), ("B", 100, generate_body(PREFIX256 + toks(131, 20), 12))])


def return_under_another_adapter(url: str) -> list[Answer]:
    # H cached the prefix under lora-a (and the host has it, written through); lora-b and the base
    # model send it. A clean host keys the adapter too: no hit; the faulty one loads lora-a's KV.
    burst(url, [("H", 0, generate_body(PREFIX256 + toks(140, 20), 2, lora_path="lora-a"))])
    return burst(url, [("B", 0, generate_body(PREFIX256 + toks(141, 20), 8, lora_path="lora-b")),
                       ("base", 0, generate_body(PREFIX256 + toks(142, 20), 8))])


# The transfer fault's setup: a prefill/decode pair behind its router.
PAIR = ["--disaggregation-mode", "pair"]


def transfers_at_once(url: str) -> list[Answer]:
    # Three prompts of different first pages at once: their three transfers are in the decode
    # server's receive buffer together (the engine waits for the rest of a burst before it admits).
    return burst(url, [(f"T{i}", 0, generate_body(toks(150 + i, 150), 8)) for i in range(3)])


# fault -> (flags that set up its trigger, trigger, flags of the cure)
CASES: dict[str, tuple[list[str], Callable[[str], list[Answer]], list[str]]] = {
    "page-boundary-prefix": ([], page_boundary_burst, ["--disable-radix-cache"]),
    "overlap-war": (["--max-running-requests", "1"], overlap_burst, ["--disable-overlap-schedule"]),
    "stale-padding": ([], shrinking_decode_burst, ["--disable-cuda-graph"]),
    "chunk-boundary": (["--chunked-prefill-size", "256"], chunked_burst, ["--chunked-prefill-size", "-1"]),
    "abort-reuse": ([], abort_then_reuse, ["--disable-radix-cache"]),
    "evict-in-use": (["--max-total-tokens", "1024"], pool_pressure_burst, ["--max-total-tokens", "65536"]),
    "batch-variant-numerics": ([], many_requests_burst, ["--enable-deterministic-inference"]),
    # It fires under the deterministic mode, which is the point: the mode does not cover decode.
    "deterministic-decode-drift": (["--enable-deterministic-inference"], many_requests_burst,
                                   ["--max-running-requests", "1"]),
    "stale-slot-continuation": ([], finished_then_fresh, ["--disable-radix-cache"]),
    "salt-ignored": ([], tenant_b_after_tenant_a, ["--disable-radix-cache"]),
    "shared-sampler-rng": ([], seeded_burst, ["--max-running-requests", "1"]),
    "bitmask-row-skip": ([], structured_burst, ["--max-running-requests", "1"]),
    "lora-prefix-shared": (LORA_FLAGS, alternating_adapters, ["--disable-radix-cache"]),
    "lossy-hit-reload": ([], hits_in_one_batch, ["--disable-radix-cache"]),
    "ssm-checkpoint-batch": (HYBRID, two_prefills_then_hits, ["--disable-radix-cache"]),
    "stale-state-donated": ([*HYBRID, "--chunked-prefill-size", "100"], chunk_shared_then_hit,
                            ["--chunked-prefill-size", "-1"]),
    "unwritten-state-published": (HYBRID, long_prefill_then_short_hit, ["--disable-radix-cache"]),
    "state-n-minus-1": (HYBRID, whole_prompt_again, ["--disable-radix-cache"]),
    "window-ring-stale": (WINDOWED, hit_on_slid_out_prefix, ["--disable-radix-cache"]),
    "window-modulo-after-saturation": ([*WINDOWED, "--max-total-tokens", "4096"], saturated_then_partial_page,
                                       ["--max-total-tokens", "65536"]),
    "router-tie-numerics": (EXPERTS, many_requests_burst, ["--enable-deterministic-inference"]),
    "host-loadback-stale-pages": (HOST_FLAGS, return_beside_a_newcomer, ["--host-tier-tokens", "0"]),
    "host-key-no-salt": (HOST_FLAGS + LORA_FLAGS, return_under_another_adapter, ["--host-tier-tokens", "0"]),
    "host-loadback-race": (HOST_FLAGS, return_while_another_decodes, ["--disable-overlap-schedule"]),
    # Cured by one server: no transfer at all (the flag a relaunch of the pair as one engine gives).
    "transfer-region-dedupe": (PAIR, transfers_at_once, ["--disaggregation-mode", "null"]),
}

# The model each --model-arch serves, by its fixture (tests/reference/conftest.py).
ARCH_FIXTURES = {"qwen3-next": "hybrid", "gemma3": "windowed", "qwen3-moe": "moe"}


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Callable[[Sequence[str]], TinyModel]:
    """The model a server started with these flags serves: the one its --model-arch names
    (`ARCH_FIXTURES`), the dense one otherwise."""
    return lambda flags: request.getfixturevalue(next((f for a, f in ARCH_FIXTURES.items() if a in flags), "model"))


def test_every_fault_has_a_case() -> None:
    assert set(CASES) == set(FAULTS)


@pytest.mark.parametrize("fault", list(CASES))
def test_fault_fires_under_its_trigger_and_its_cure_removes_it(
    reference_server: Server, served: Callable[[Sequence[str]], TinyModel], fault: str
) -> None:
    setup, trigger, cure = CASES[fault]
    model = served(setup)
    judge = JUDGES.get(fault, wrong_answers)
    faulty = reference_server("--fault", fault, *setup)
    wrong = fires(model, faulty, trigger, judge=judge)
    assert wrong, f"{fault} did not fire under its trigger"
    cured = reference_server("--fault", fault, *setup, *cure)
    assert exact(model, cured, trigger, judge=judge), f"{cure} did not cure {fault}"


@pytest.mark.parametrize("fault", list(CASES))
def test_fault_is_invisible_to_one_request_alone(
    reference_server: Server, served: Callable[[Sequence[str]], TinyModel], fault: str
) -> None:
    setup = CASES[fault][0]
    model = served(setup)
    url = reference_server("--fault", fault, *setup)
    one_slot = "--max-running-requests" in setup  # there, n > 1 is refused
    alone: Sequence[tuple[list[int], int, int]] = [
        (PREFIX64 + toks(70, 300), 24, 1),  # a page-multiple prefix, chunked at 256 where set up
        (PREFIX256 + toks(71, 40), 16, 3),  # n choices fork from one prefill
        (toks(72, 64), 12, 5),  # five choices decode as a batch of five (padded to 8)
    ]
    for prompt, max_new, n in alone:
        flush(url)
        answers = burst(url, [("alone", 0, generate_body(prompt, max_new, n=1 if one_slot else n))])
        assert wrong_answers(model, answers) == {}, (fault, len(prompt), n)


def test_a_seeded_sampled_request_alone_draws_its_own_noise_whatever_its_n(
    reference_server: Server, model: TinyModel
) -> None:
    # The other zoo faults are held alone at temperature 0 above; this one only touches draws.
    url = reference_server("--fault", "shared-sampler-rng")
    for n in (1, 3, 5):
        flush(url)
        answers = burst(url, [("alone", 0, generate_body(toks(73, 50), 12, n=n, temperature=0.9, seed=5))])
        assert len(answers) == n and wrong_answers(model, answers) == {}, n
    assert len({a.ids for a in answers}) > 1  # five choices, five different draws


def test_a_constrained_request_alone_keeps_its_constraint_whatever_its_n(
    reference_server: Server, model: TinyModel
) -> None:
    # The n choices of one request are rows of one request: the fault masks every one of them.
    url = reference_server("--fault", "bitmask-row-skip")
    for n in (1, 3):
        flush(url)
        body = constrained_body("G1", toks(74, 40))
        body["sampling_params"]["n"] = n
        answers = burst(url, [("G1", 0, body)])
        assert len(answers) == n and broken_constraints(model, answers) == {}, n


def test_numeric_drift_moves_logprobs_a_little_and_flips_only_near_ties(
    reference_server: Server, model: TinyModel
) -> None:
    url = reference_server("--fault", "batch-variant-numerics")
    flush(url)
    answers = many_requests_burst(url)
    flips = 0
    for a in answers:
        ref = model.score(a.prompt, a.ids, top_k=2)
        first = next((i for i, t in enumerate(ref.token_ids) if t != a.ids[i]), len(a.ids))
        for i in range(first):  # same tokens: logprobs within the drift's reach
            assert abs(ref.steps[i].logprob - a.logprobs[i]) < 0.03
        if first < len(a.ids):
            flips += 1
            (_, best), (_, second) = ref.steps[first].top
            assert best - second < 0.05, "a drift flip must sit at a near-tie"
    assert flips >= 1


def test_clean_server_is_exact_under_every_trigger(
    reference_server: Server, served: Callable[[Sequence[str]], TinyModel]
) -> None:
    for fault, (setup, trigger, _) in CASES.items():
        assert exact(served(setup), reference_server(*setup), trigger, judge=JUDGES.get(fault, wrong_answers)), fault


def test_the_page_boundary_corruption_hits_the_requests_that_read_a_stale_page(
    reference_server: Server, model: TinyModel
) -> None:
    url = reference_server("--fault", "page-boundary-prefix")
    wrong = fires(model, url, page_boundary_burst)
    assert "blocker" not in wrong and 1 <= len(wrong) <= 2  # the first of A/B/C wrote the page
    flush(url)
    # Once the page is written (a later batch), the same prefix is served correctly from cache.
    post(url, "/generate", generate_body(PREFIX64 + toks(3, 64), 1))
    later = burst(url, [("late", 0, generate_body(PREFIX64 + toks(90, 64), 16))])
    assert later[0].cached_tokens == 64 and wrong_answers(model, later) == {}


def test_a_burst_sent_at_once_reproduces_the_page_fault_in_every_replay(
    reference_server: Server, model: TinyModel
) -> None:
    """Two requests sharing exactly one page, sent a millisecond apart to an idle server: the
    engine takes them in one round (they share an extend batch), and a flush restores the state
    of a fresh engine (the stale page reads zeros again), so every such replay gives the same
    wrong answer. Before, one replay in four split them into two rounds, and every replay after
    the first found the right KV left in the stale page.

    The engine waits 20 ms of quiet for the rest of a burst; on two cores busy with the rest of
    the suite, B has been seen to arrive later than that (one replay in a CI run). The forward
    step counter tells the two cases apart (8 steps for one round of 8 tokens, 16 when B came
    after A), so each is held to its own answer: one round is wrong in B, always the same way;
    a split is exact (A wrote the page before B read it)."""
    url = reference_server("--fault", "page-boundary-prefix")
    pair: Burst = [("A", 0, generate_body(PREFIX64 + toks(70, 1), 8)), ("B", 1, generate_body(PREFIX64 + toks(71, 1), 8))]
    one_round: list[tuple[int, ...]] = []
    for _ in range(12):
        flush(url)
        before = metric(url, "forward_steps_total")
        answers = {a.name: a for a in burst(url, pair)}
        steps = metric(url, "forward_steps_total") - before
        wrong = set(wrong_answers(model, list(answers.values())))
        if steps == 8:
            assert wrong == {"B"}
            one_round.append(answers["B"].ids)
        else:
            assert wrong == set(), f"A and B in two rounds ({steps:g} forward steps) must be exact"
        if len(one_round) == 5:
            break
    assert len(one_round) == 5, "the engine split a burst sent at once in more than 7 of 12 replays"
    assert len(set(one_round)) == 1


def test_an_adapter_changes_the_answer_and_is_exact_alone_under_the_lora_fault(
    reference_server: Server, model: TinyModel
) -> None:
    # lora-prefix-shared needs a page another adapter cached: each adapter alone on a flushed
    # server (n = 1 and n = 3, whose choices share their own prompt pages) is its own forward.
    url = reference_server("--fault", "lora-prefix-shared", *LORA_FLAGS)
    prompt = PREFIX256 + toks(98, 30)
    seen = {}
    for adapter in (None, "lora-a", "lora-b"):
        for n in (1, 3):
            flush(url)
            body = generate_body(prompt, 12, n=n, **({"lora_path": adapter} if adapter else {}))
            answers = burst(url, [("alone", 0, body)])
            assert wrong_answers(model, answers) == {}, (adapter, n)
        seen[adapter] = answers[0].ids
    assert len(set(seen.values())) == 3, "each adapter's greedy answer differs from the others' and the base's"


def test_the_deterministic_mode_removes_batch_numerics_but_not_the_decode_drift_it_leaks(
    reference_server: Server, model: TinyModel
) -> None:
    """The contract fault and its control, on the same burst under --enable-deterministic-inference:
    batch-variant-numerics is gone there (the mode keeps its promise), deterministic-decode-drift
    is not, and only in decode: every first token (prefill) is the exact model's."""
    kept = reference_server("--fault", "batch-variant-numerics", "--enable-deterministic-inference")
    assert exact(model, kept, many_requests_burst)
    leaky = reference_server("--fault", "deterministic-decode-drift", "--enable-deterministic-inference")
    wrong = fires(model, leaky, many_requests_burst)
    assert wrong, "the decode drift did not show under the deterministic mode"
    assert all(step >= 1 for step in wrong.values()), wrong  # token 0 (prefill) bit-exact, as promised


def test_the_state_faults_corrupt_exactly_the_checkpoints_their_cousins_do(
    reference_server: Server, hybrid: TinyModel
) -> None:
    """ssm-checkpoint-batch: the hit on the second request's checkpoint is wrong, the one on the
    first request's is right. unwritten-state-published: a hit stopping at an earlier checkpoint
    of a chunk is wrong, one at its last is right. state-n-minus-1: a hit on the whole prompt is
    wrong, one extending it past its end is right. Each control runs on the faulty server."""
    url = reference_server("--fault", "ssm-checkpoint-batch", *HYBRID)
    wrong = fires(hybrid, url, two_prefills_then_hits)
    assert set(wrong) == {"Z"}, wrong

    url = reference_server("--fault", "unwritten-state-published", *HYBRID)
    assert set(fires(hybrid, url, long_prefill_then_short_hit)) == {"Z"}
    flush(url)
    burst(url, [("P", 0, generate_body(PROMPT_LONG, 4))])
    last = burst(url, [("Z2", 0, generate_body(PROMPT_LONG[:195] + toks(121, 7), 12))])  # stops at 192
    assert last[0].cached_tokens == 192 and wrong_answers(hybrid, last) == {}

    url = reference_server("--fault", "state-n-minus-1", *HYBRID)
    assert set(fires(hybrid, url, whole_prompt_again)) == {"again"}
    flush(url)
    burst(url, [("P", 0, generate_body(PROMPT_ALIGNED, 4))])
    longer = burst(url, [("longer", 0, generate_body(PROMPT_ALIGNED + toks(122, 5), 12))])
    assert longer[0].cached_tokens == 128 and wrong_answers(hybrid, longer) == {}


def test_the_window_faults_corrupt_exactly_where_their_cousins_do(
    reference_server: Server, windowed: TinyModel
) -> None:
    """window-ring-stale: the hit on the slid-out prefix is wrong, one extending A's whole prompt
    (its last windows still held) is right and hits. window-modulo-after-saturation: nothing goes
    wrong until the pool has saturated, and then only a prompt 1..32 tokens past a page edge."""
    url = reference_server("--fault", "window-ring-stale", *WINDOWED)
    wrong = fires(windowed, url, hit_on_slid_out_prefix)
    assert set(wrong) == {"C"}, wrong
    flush(url)
    burst(url, [("A", 0, generate_body(PROMPT_LONG_W, 4))])
    burst(url, [("B", 0, generate_body(toks(131, 200), 4))])
    longer = burst(url, [("D", 0, generate_body(PROMPT_LONG_W + toks(133, 5), 12))])
    assert longer[0].cached_tokens == 256 and wrong_answers(windowed, longer) == {}

    setup = CASES["window-modulo-after-saturation"][0]
    url = reference_server("--fault", "window-modulo-after-saturation", *setup)
    assert set(fires(windowed, url, saturated_then_partial_page)) == {"V"}
    flush(url)  # a flushed pool has not saturated: the same P and V are right
    burst(url, [("P", 0, generate_body(PROMPT_P, 4))])
    assert wrong_answers(windowed, burst(url, [("V", 0, generate_body(PROMPT_P[:192] + toks(136, 10), 16))])) == {}
    flush(url)
    saturated_then_partial_page(url)  # saturated, and 40 tokens past the page edge: right
    late = burst(url, [("V40", 0, generate_body(PROMPT_P[:192] + toks(137, 40), 16))])
    assert late[0].cached_tokens == 192 and wrong_answers(windowed, late) == {}
