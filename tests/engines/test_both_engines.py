"""What every real engine must do for servefuzz, asked of each one the same way (vLLM CPU and
llama-server CPU, each serving the tiny float32 model)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from engine_client import alone

from servefuzz.history import Status
from servefuzz.launcher import ServerProcess
from servefuzz.targets import detect_engine
from servefuzz.workload import RequestSpec

pytestmark = pytest.mark.engine

ENGINES = {"vllm": "vllm_server", "llamacpp": "llama_server"}


@pytest.fixture(params=sorted(ENGINES))
def served(request: pytest.FixtureRequest) -> tuple[str, ServerProcess]:
    return request.param, request.getfixturevalue(ENGINES[request.param])


def test_token_id_prompt_gives_exact_ids_with_top_k(served: tuple[str, ServerProcess]) -> None:
    engine, srv = served
    prompt = tuple(range(300, 340))
    plain, streamed = alone(
        engine, srv.base_url,
        RequestSpec("plain", 0.0, prompt, max_tokens=8),
        RequestSpec("streamed", 0.0, prompt, max_tokens=8, stream=True),
    )
    for rec in (plain, streamed):
        assert rec.status is Status.OK, rec.error
        assert rec.prompt_tokens == len(prompt)
        (c,) = rec.choices
        assert len(c.token_ids) == 8 and c.finish_reason == "length"
        for token, logprob, top in zip(c.token_ids, c.logprobs, c.top_logprobs, strict=True):
            assert len(top) == 5
            assert top[0] == (token, logprob)  # greedy: the chosen token heads its top-k
            assert token >= 259  # the tiny model's byte and control tokens never win
    assert plain.choices[0].token_ids == streamed.choices[0].token_ids
    assert streamed.first_token_ms is not None


def test_the_engine_is_detected_when_not_named(served: tuple[str, ServerProcess]) -> None:
    engine, srv = served

    async def detect() -> str:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
            return (await detect_engine(s, srv.base_url)).engine

    assert asyncio.run(detect()) == engine
