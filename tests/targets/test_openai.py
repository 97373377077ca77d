"""The OpenAI completions dialect over real HTTP: exact ids from whichever spelling the server
uses, top-k alternatives, streaming deltas with a trailing usage chunk."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from servefuzz.history import RequestRecord, Status
from servefuzz.launcher import ServerProcess
from servefuzz.runner import Runner
from servefuzz.targets import make_target
from servefuzz.workload import RequestSpec, Scenario

StubFactory = Callable[[str], ServerProcess]


def _one(url: str, spec: RequestSpec, model: str | None) -> tuple[RequestRecord, Runner]:
    async def main():
        async with Runner(make_target("openai", url, model=model)) as r:
            return (await r.run(Scenario(seed=0, requests=(spec,)), run=0)).records[0], r

    return asyncio.run(main())


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("style", ["ids", "prefixed"])
def test_token_ids_are_exact_in_either_spelling(stub_server: StubFactory, style: str, stream: bool) -> None:
    srv = stub_server("openai")
    rec, _ = _one(srv.base_url, RequestSpec("o", 0.0, (5, 6, 7), max_tokens=3, stream=stream), model=style)
    assert rec.status is Status.OK, rec.error
    (c,) = rec.choices
    assert c.token_ids == (40, 41, 42) and c.text == "abc" and c.finish_reason == "length"
    assert c.logprobs == (-0.25,) * 3
    # the chosen token and the id-spelled alternative; "zz" has no id and is left out
    assert c.top_logprobs == tuple(((t, -0.25), (7, -2.0)) for t in (40, 41, 42))
    assert rec.cached_tokens == 16 and rec.prompt_tokens == 3
    assert (rec.first_token_ms is not None) == stream


def test_text_only_answer_is_malformed_with_a_reason(stub_server: StubFactory) -> None:
    srv = stub_server("openai")
    rec, _ = _one(srv.base_url, RequestSpec("o", 0.0, (5, 6), max_tokens=3), model="text")
    assert rec.status is Status.MALFORMED
    assert "returns token ids" in (rec.error or "")


def test_model_defaults_to_the_first_listed(stub_server: StubFactory) -> None:
    srv = stub_server("openai")
    rec, runner = _one(srv.base_url, RequestSpec("o", 0.0, (5,), max_tokens=3), model=None)
    assert rec.status is Status.OK and rec.choices[0].token_ids == (40, 41, 42)
    assert runner.info is not None and runner.info.server_args == {"model": "ids", "max_model_len": 2048}
    assert runner.info.version is None  # the stub has no /version, which is no failure
