"""llama-server on a real byte-level BPE model (SmolLM2-135M-Instruct): a character of several
UTF-8 bytes written as several tokens is read back whole, never a `malformed` answer.

The server keeps such partial-character tokens out of `completion_probabilities` (and out of a
stream): the Chinese prompt makes the model write them, the English one does not (the control).
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from engine_client import with_runner

from servefuzz.anomaly import Verdict
from servefuzz.history import RequestRecord, Status
from servefuzz.launcher import ServerProcess
from servefuzz.oracles.judge import judge
from servefuzz.runner import Runner
from servefuzz.trial import execute
from servefuzz.workload import RequestSpec, Scenario

pytestmark = pytest.mark.engine

CHINESE = "<|im_start|>user\n请用中文介绍一下北京。<|im_end|>\n<|im_start|>assistant\n"
ENGLISH = "<|im_start|>user\nWrite three sentences about the sea.<|im_end|>\n<|im_start|>assistant\n"
MAX_TOKENS = 32


async def _post(url: str, path: str, body: dict[str, object]) -> object:
    async with aiohttp.ClientSession() as s, s.post(url + path, json=body) as resp:
        assert resp.status == 200
        return json.loads(await resp.read())


def _ids(url: str, text: str) -> tuple[int, ...]:
    data = asyncio.run(_post(url, "/tokenize", {"content": text, "parse_special": True}))
    assert isinstance(data, dict)
    return tuple(int(t) for t in data["tokens"])


def _raw_counts(url: str, prompt: tuple[int, ...]) -> tuple[int, int]:
    """(tokens, probability entries) of the server's own answer, read without servefuzz."""
    data = asyncio.run(_post(url, "/completion", {"prompt": list(prompt), "n_predict": MAX_TOKENS, "temperature": 0,
                                                  "n_probs": 5, "return_tokens": True, "cache_prompt": False}))
    assert isinstance(data, dict)
    return len(data["tokens"]), len(data["completion_probabilities"])


def _alone(url: str, *specs: RequestSpec) -> list[RequestRecord]:
    async def body(r: Runner) -> list[RequestRecord]:
        return [await r.run_alone(s, run=0) for s in specs]

    return with_runner("llamacpp", url, body)


def test_partial_characters_come_back_whole_and_without_invented_logprobs(real_llama_server: ServerProcess) -> None:
    url = real_llama_server.base_url
    chinese, english = _ids(url, CHINESE), _ids(url, ENGLISH)
    # What the server does: fewer probability entries than tokens for Chinese, as many for English.
    tokens, entries = _raw_counts(url, chinese)
    assert tokens == MAX_TOKENS and entries < tokens
    assert _raw_counts(url, english) == (MAX_TOKENS, MAX_TOKENS)
    zh, en, zh_stream = _alone(
        url,
        RequestSpec("zh", 0.0, chinese, max_tokens=MAX_TOKENS),
        RequestSpec("en", 0.0, english, max_tokens=MAX_TOKENS),
        RequestSpec("zh-stream", 0.0, chinese, max_tokens=MAX_TOKENS, stream=True),
    )
    assert zh.status is Status.OK and en.status is Status.OK, (zh.error, en.error)
    c = zh.choices[0]
    assert len(c.token_ids) == len(c.logprobs) == len(c.top_logprobs) == MAX_TOKENS
    missing = [i for i, lp in enumerate(c.logprobs) if lp is None]
    # The positions without probabilities are exactly the withheld ones, and have no top-k either.
    assert len(missing) == tokens - entries
    assert all(c.top_logprobs[i] == () for i in missing)
    # Every placed entry sits on its own token: greedy, so that token is the top-1 there.
    assert all(c.top_logprobs[i][0][0] == t for i, t in enumerate(c.token_ids) if i not in missing)
    assert all(lp is not None for lp in en.choices[0].logprobs)  # the control: nothing withheld
    # The stream skipped those tokens; they are recovered, the same ids as the whole answer's.
    assert zh_stream.status is Status.OK, zh_stream.error
    assert zh_stream.choices[0].token_ids == c.token_ids
    assert [lp is None for lp in zh_stream.choices[0].logprobs] == [lp is None for lp in c.logprobs]


def test_a_campaign_run_on_chinese_text_finds_nothing(real_llama_server: ServerProcess) -> None:
    """Alone and loaded, streamed and not: partial characters are no finding."""
    url = real_llama_server.base_url
    chinese, english = _ids(url, CHINESE), _ids(url, ENGLISH)
    specs = tuple(
        RequestSpec(f"r{i}", float(i), prompt, max_tokens=MAX_TOKENS, stream=i % 2 == 1)
        for i, prompt in enumerate((chinese, chinese, english, chinese))
    )
    scenario = Scenario(seed=1, requests=specs)

    async def body(r: Runner):
        done = await execute(r, scenario, runs=1, with_alone=True)
        return done, judge(done.loaded, done.alone, scenario=scenario)

    done, judgement = with_runner("llamacpp", url, body)
    assert all(rec.status is Status.OK for run in done.loaded for rec in run.records)
    assert all(rec.status is Status.OK for recs in done.alone.values() for rec in recs)
    assert not {a.verdict for a in judgement.anomalies} & {Verdict.MALFORMED, Verdict.CORRUPTION}
