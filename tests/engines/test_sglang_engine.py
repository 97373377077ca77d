"""SGLang on the CPU (the newest version set up), serving the tiny float32 model, through the
`sglang` adapter and the runner: SGLang's own scheduler, radix cache and paged KV pool, with
servefuzz's stand-in kernel package (tests/engines/test_sglang_standins.py proves it)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from conftest import SGLANG_PAGE
from engine_client import alone, alone_and_in_a_burst, flag, with_runner

from servefuzz import engines
from servefuzz.errors import TargetError
from servefuzz.history import RequestRecord, Status
from servefuzz.launcher import ServerProcess
from servefuzz.runner import Runner
from servefuzz.workload import RequestSpec

pytestmark = pytest.mark.engine

_R = TypeVar("_R")


def _with_runner(url: str, body: Callable[[Runner], Awaitable[_R]], **target_opts: object) -> _R:
    return with_runner("sglang", url, body, **target_opts)


def _alone(url: str, *specs: RequestSpec) -> list[RequestRecord]:
    return alone("sglang", url, *specs)


def test_server_info_reads_version_page_size_and_pool(sglang_server: ServerProcess) -> None:
    async def body(r: Runner):
        return r.info

    info = _with_runner(sglang_server.base_url, body)
    assert info.engine == "sglang" and info.version == engines.PRESET_VERSIONS["sglang-cpu"].known[0]
    assert info.page_size == flag(sglang_server, "--page-size") == SGLANG_PAGE
    assert info.server_args["device"] == "cpu" and info.server_args["dtype"] == "float32"
    assert info.max_total_tokens is None or info.max_total_tokens <= flag(sglang_server, "--max-total-tokens")


def test_a_shared_prefix_is_reused_in_whole_pages_and_the_flush_empties_it(sglang_server: ServerProcess) -> None:
    prefix = tuple(range(500, 500 + 3 * SGLANG_PAGE + 5))  # three whole pages and five tokens
    first = RequestSpec("first", 0.0, prefix + (7, 8, 9), max_tokens=3, prefix_name="p", prefix_len=len(prefix))
    second = RequestSpec("second", 0.0, prefix + (10, 11), max_tokens=3, prefix_name="p", prefix_len=len(prefix))

    async def body(r: Runner):
        assert await r.flush()
        a = await r.run_alone(first, run=0, flush=False)
        b = await r.run_alone(second, run=0, flush=False)
        flushed = await r.flush()
        c = await r.run_alone(second, run=1, flush=False)
        return a, b, flushed, c

    a, b, flushed, c = _with_runner(sglang_server.base_url, body)
    assert a.status is Status.OK and a.cached_tokens == 0
    # The radix tree matches the prefix page by page: the three whole pages, not the five after.
    assert b.cached_tokens == 3 * SGLANG_PAGE
    assert flushed is True and c.cached_tokens == 0
    assert c.choices[0].token_ids == b.choices[0].token_ids


def test_n_above_one_streams_and_logprobs_come_back_whole(sglang_server: ServerProcess) -> None:
    plain = RequestSpec("n3", 0.0, tuple(range(700, 760)), max_tokens=6, n=3)
    streamed = RequestSpec("s1", 0.0, tuple(range(700, 760)), max_tokens=6, stream=True)
    rec, srec = _alone(sglang_server.base_url, plain, streamed)
    assert rec.status is Status.OK and srec.status is Status.OK, (rec.error, srec.error)
    assert sorted(c.index for c in rec.choices) == [0, 1, 2]
    assert all(len(c.token_ids) == 6 and c.finish_reason == "length" for c in rec.choices)
    assert len({c.token_ids for c in rec.choices}) == 1  # float32, temperature 0: one answer
    (s,) = srec.choices
    assert s.token_ids == rec.choices[0].token_ids  # the stream's pieces add up to the whole answer
    for c in (*rec.choices, s):
        assert len(c.logprobs) == len(c.top_logprobs) == 6
        for lp, tok, top in zip(c.logprobs, c.token_ids, c.top_logprobs):
            # greedy: the chosen token is the best of the top-k, with its own logprob
            assert len(top) == 5 and math.isclose(dict(top)[tok], lp, abs_tol=1e-5)
            assert lp == pytest.approx(max(v for _, v in top), abs=1e-5)


def test_a_prompt_past_the_context_is_an_error_not_an_answer(sglang_server: ServerProcess) -> None:
    # Not an out-of-vocabulary token: one of those kills SGLang's whole server (its embedding
    # indexes past the table: IndexError on CPU, a device assert on CUDA; open upstream,
    # sgl-project/sglang#8383), which would end every test after this one.
    too_long = RequestSpec("long", 0.0, tuple(3 + i % 1000 for i in range(5000)), max_tokens=2)
    (rec,) = _alone(sglang_server.base_url, too_long)
    assert rec.status is Status.HTTP_ERROR and rec.http_status == 400, (rec.status, rec.error)
    assert rec.error
    (ok,) = _alone(sglang_server.base_url, RequestSpec("after", 0.0, (5, 6, 7), max_tokens=2))
    assert ok.status is Status.OK  # and the server goes on serving


def test_float32_gives_the_same_tokens_alone_and_in_a_burst(sglang_server: ServerProcess) -> None:
    """The noise SGLang's CPU float32 path shows between a request alone and in a batch: the
    same tokens, logprobs within 1e-4 (about 1e-6 measured)."""
    # Shared prefixes around the page boundary, where a prefix-reuse bug would show.
    p = SGLANG_PAGE
    shapes = [(0, 40), (p - 1, 60), (p, 60), (p + 1, 70), (2 * p, 90), (4 * p, 100)]
    solo, burst = alone_and_in_a_burst("sglang", sglang_server.base_url, shapes, max_tokens=10)
    worst = 0.0
    for ref in solo:
        got = burst[ref.request_id]
        assert got.choices[0].token_ids == ref.choices[0].token_ids, ref.request_id
        worst = max(worst, *(abs(a - b) for a, b in zip(got.choices[0].logprobs, ref.choices[0].logprobs)))
    assert worst < 1e-4, worst


def test_a_flush_is_refused_while_a_request_runs_and_empties_the_cache_after(sglang_server: ServerProcess) -> None:
    """SGLang flushes only when idle (the adapter retries for that reason): a flush asked while
    a request decodes is refused, and one after it ends leaves nothing for the next request."""
    long = RequestSpec("long", 0.0, tuple(range(900, 940)), max_tokens=200)

    async def body(r: Runner):
        running = asyncio.ensure_future(r.run_alone(long, run=0))
        refused = False
        while not running.done() and not refused:
            # Until the scheduler has the request, a flush succeeds (nothing runs yet): asked
            # again until one is refused, which only a running request makes it do.
            try:
                await r.flush()
            except TargetError as e:  # the adapter's tries (here one) all refused
                refused = "refused" in str(e)
            await asyncio.sleep(0.1)
        rec = await running
        flushed = await r.flush()
        again = await r.run_alone(long, run=1, flush=False)
        return refused, rec, flushed, again

    refused, rec, flushed, again = _with_runner(sglang_server.base_url, body, flush_attempts=1)
    assert refused, "no flush was refused while the request ran"
    assert rec.status is Status.OK and len(rec.choices[0].token_ids) == 200
    assert flushed is True and again.cached_tokens == 0
