"""The SGLang dialect over real HTTP: the answer shapes the reference engine does not produce
(incremental streaming, one dict per choice), served by the stub server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from servefuzz.history import Status
from servefuzz.launcher import ServerProcess
from servefuzz.runner import Runner
from servefuzz.targets import make_target
from servefuzz.workload import RequestSpec, Scenario


def _one(url: str, spec: RequestSpec):
    async def main():
        async with Runner(make_target("sglang", url)) as r:
            return (await r.run(Scenario(seed=0, requests=(spec,)), run=0)).records[0]

    return asyncio.run(main())


def test_incremental_stream_chunks_are_accumulated(stub_server: Callable[[str], ServerProcess]) -> None:
    srv = stub_server("delta")
    rec = _one(srv.base_url, RequestSpec("s", 0.0, (5, 6, 7), max_tokens=4, stream=True))
    assert rec.status is Status.OK
    (c,) = rec.choices
    assert c.token_ids == (1, 2, 3, 4)
    assert c.logprobs == (-0.5,) * 4
    assert c.top_logprobs == tuple(((i, -0.5), (99, -1.5)) for i in (1, 2, 3, 4))
    assert c.text == "xxxx" and c.finish_reason == "length"
    assert rec.first_token_ms is not None and rec.sent_ms <= rec.first_token_ms <= rec.end_ms
    assert rec.cached_tokens == 2 and rec.prompt_tokens == 3


def test_one_dict_per_choice_becomes_n_choices(stub_server: Callable[[str], ServerProcess]) -> None:
    srv = stub_server("delta")
    rec = _one(srv.base_url, RequestSpec("n", 0.0, (5, 6), max_tokens=3, n=3))
    assert rec.status is Status.OK
    assert [c.token_ids for c in rec.choices] == [(1, 2, 3), (11, 12, 13), (21, 22, 23)]
    assert all(c.finish_reason == "length" for c in rec.choices)
    assert rec.first_token_ms is None  # not streamed: no token arrives before the whole answer
    # each choice reports its own cached count (2 + index); the request keeps the smallest
    assert rec.cached_tokens == 2
