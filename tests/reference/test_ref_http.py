"""The reference server over real HTTP on 127.0.0.1: both dialects' shapes, cache reporting,
flush, abort, metrics, server info, and bad input (400s, and the server keeps serving)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refclient import burst, flush, generate_body, get, metric, post, wrong_answers

from servefuzz.reference.model import EOS_ID, TinyModel, detokenize
from servefuzz.reference.server_args import ServerArgs, parse_args

PROMPT = [int(t) for t in np.random.default_rng(9).integers(3, 1024, 130)]


@pytest.fixture(scope="module")
def url(reference_server: Callable[..., str]) -> str:
    return reference_server()


def test_generate_answers_in_sglang_shape_with_exact_tokens(url: str, model: TinyModel) -> None:
    status, out = post(url, "/generate", generate_body(PROMPT, 8, top_k=3))
    assert status == 200
    meta = out["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 8}
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (130, 8)
    ref = model.generate(PROMPT, 8, top_k=3)
    assert out["output_ids"] == list(ref.token_ids)
    assert out["text"] == detokenize(ref.token_ids)
    assert meta["output_token_logprobs"] == [[s.logprob, s.token_id, None] for s in ref.steps]
    assert meta["output_top_logprobs"] == [[[lp, t, None] for t, lp in s.top] for s in ref.steps]
    _, with_text = post(url, "/generate", generate_body(PROMPT, 2, top_k=1, return_text_in_logprobs=True))
    assert with_text["meta_info"]["output_token_logprobs"][0][2] == detokenize(ref.token_ids[:1])


def test_n_choices_come_back_as_a_list_and_agree_at_temperature_zero(url: str, model: TinyModel) -> None:
    status, out = post(url, "/generate", generate_body(PROMPT[:77], 6, n=3))
    assert status == 200 and [c["index"] for c in out] == [0, 1, 2]
    ref = list(model.generate(PROMPT[:77], 6).token_ids)
    assert all(c["output_ids"] == ref for c in out)
    assert len({c["meta_info"]["id"] for c in out}) == 3


def test_eos_ends_a_request_unless_ignored(url: str) -> None:
    body = generate_body([223, 16, 51], 8)  # seed-0 greedy emits EOS third
    body["sampling_params"]["ignore_eos"] = False
    _, out = post(url, "/generate", body)
    assert out["output_ids"] == [191, 758, EOS_ID]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": EOS_ID}


def sse(url: str, path: str, body: dict[str, Any]) -> list[Any]:
    async def go() -> list[Any]:
        async with aiohttp.ClientSession() as s, s.post(url + path, json=body) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
            events = []
            async for line in resp.content:
                if line.startswith(b"data: "):
                    data = line[6:].strip()
                    events.append(data.decode() if data == b"[DONE]" else json.loads(data))
            return events

    return asyncio.run(go())


def test_sglang_stream_is_cumulative_and_ends_with_done(url: str, model: TinyModel) -> None:
    events = sse(url, "/generate", {**generate_body(PROMPT, 5), "stream": True})
    assert events[-1] == "[DONE]" and len(events) == 6
    ref = list(model.generate(PROMPT, 5).token_ids)
    assert [e["output_ids"] for e in events[:-1]] == [ref[: i + 1] for i in range(5)]
    assert [e["meta_info"]["finish_reason"] for e in events[:-1]][-2:] == [None, {"type": "length", "length": 5}]


def test_openai_completions_match_the_sglang_answer(url: str, model: TinyModel) -> None:
    body = {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "logprobs": 2, "return_token_ids": True}
    status, out = post(url, "/v1/completions", body)
    assert status == 200 and out["object"] == "text_completion"
    (choice,) = out["choices"]
    ref = model.generate(PROMPT, 6, top_k=2)
    assert choice["token_ids"] == list(ref.token_ids) and choice["finish_reason"] == "length"
    assert choice["logprobs"]["token_logprobs"] == [s.logprob for s in ref.steps]
    assert choice["logprobs"]["top_logprobs"][0] == {detokenize([t]): lp for t, lp in ref.steps[0].top}
    assert out["usage"]["prompt_tokens"] == 130 and out["usage"]["completion_tokens"] == 6
    assert "cached_tokens" in out["usage"]["prompt_tokens_details"]
    chunks = sse(url, "/v1/completions", {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert chunks[-1] == "[DONE]" and chunks[-2]["usage"]["completion_tokens"] == 6
    assert "".join(c["choices"][0]["text"] for c in chunks[:-2]) == choice["text"]
    assert [t for c in chunks[:-2] for t in c["choices"][0]["token_ids"]] == list(ref.token_ids)
    status, models = get(url, "/v1/models")
    assert status == 200 and json.loads(models)["data"][0]["id"] == "servefuzz-reference"
    status, err = post(url, "/v1/completions", {**body, "model": "gpt-9"})
    assert status == 404 and "does not exist" in err["error"]["message"]


def test_a_repeat_is_served_from_cache_and_metrics_count_it(url: str) -> None:
    flush(url)
    hits, queries = metric(url, "cache_hit_tokens_total"), metric(url, "cache_query_tokens_total")
    _, first = post(url, "/generate", generate_body(PROMPT, 2))
    _, again = post(url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "temperature": 0})
    assert first["meta_info"]["cached_tokens"] == 0
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 128  # two 64-token pages
    assert metric(url, "cache_hit_tokens_total") - hits == 128
    assert metric(url, "cache_query_tokens_total") - queries == 260
    assert metric(url, "token_usage") > 0
    flush(url)
    _, cold = post(url, "/generate", generate_body(PROMPT, 2))
    assert cold["meta_info"]["cached_tokens"] == 0


def cached(url: str, salt: str | None, dialect: str) -> int:
    """cached_tokens of PROMPT sent with `salt` (SGLang's extra_key, or vLLM's cache_salt)."""
    if dialect == "sglang":
        _, a = post(url, "/generate", generate_body(PROMPT, 2, **({"extra_key": salt} if salt else {})))
        return int(a["meta_info"]["cached_tokens"])
    body = {"prompt": PROMPT, "max_tokens": 2, "temperature": 0, **({"cache_salt": salt} if salt else {})}
    _, b = post(url, "/v1/completions", body)
    return int(b["usage"]["prompt_tokens_details"]["cached_tokens"])


@pytest.mark.parametrize("dialect", ["sglang", "openai"])
def test_a_salt_keys_the_cache_per_tenant(url: str, model: TinyModel, dialect: str) -> None:
    # The paired assertion: the same salt reuses the tenant's pages (so the cache is on and the
    # negative half means something), another salt and no salt reuse none of them.
    flush(url)
    assert cached(url, "tenant-a", dialect) == 0
    assert cached(url, "tenant-a", dialect) == 128
    assert cached(url, "tenant-b", dialect) == 0
    assert cached(url, None, dialect) == 0
    assert cached(url, None, dialect) == 128  # unsalted requests share among themselves, as ever
    assert cached(url, "tenant-b", dialect) == 128
    # Salted answers are the same exact answers: a salt changes what is shared, never a token.
    answers = burst(url, [(s, 0, generate_body(PROMPT, 6, extra_key=s)) for s in ("tenant-a", "tenant-c")])
    assert wrong_answers(model, answers) == {}
    status, err = post(url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "cache_salt": ""})
    assert status == 400 and "cache_salt" in err["error"]["message"]


def test_server_info_resolves_every_flag_under_its_own_name(reference_server: Callable[..., str]) -> None:
    flags = [
        "--page-size",
        "16",
        "--max-total-tokens",
        "8192",
        "--chunked-prefill-size",
        "-1",
        "--disable-cuda-graph",
        "--fault",
        "abort-reuse",
        "--fault",
        "stale-padding",
    ]
    url = reference_server(*flags)
    _, text = get(url, "/server_info")
    info = json.loads(text)
    assert json.loads(get(url, "/get_server_info")[1]) == info
    assert (info["page_size"], info["max_total_tokens"], info["chunked_prefill_size"]) == (16, 8192, -1)
    assert info["faults"] == ["abort-reuse", "stale-padding"] and info["disable_cuda_graph"] is True
    assert (info["vocab_size"], info["eos_token_id"], info["context_length"]) == (1024, EOS_ID, 4096)
    # Relaunching from what the server reports gives the same engine (the triage relies on it).
    fields = {k: info[k] for k in ServerArgs().to_json()}
    fields["faults"] = tuple(fields["faults"])
    relaunch = ServerArgs(**fields)
    assert parse_args(relaunch.to_argv()) == relaunch and relaunch.port == int(url.rsplit(":", 1)[1])


def stream_until_first_token(url: str, body: dict[str, Any], then: Callable[[], Any]) -> Any:
    """Open a streaming request, wait for its first chunk, run `then()`, then hang up."""

    async def go() -> Any:
        async with aiohttp.ClientSession() as s:
            resp = await s.post(url + "/generate", json={**body, "stream": True})
            await resp.content.readline()
            result = await asyncio.get_running_loop().run_in_executor(None, then)
            resp.close()
            return result

    return asyncio.run(go())


def wait_idle(url: str) -> None:
    deadline = time.monotonic() + 20
    while metric(url, "num_running_reqs") or metric(url, "num_queue_reqs"):
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_flush_is_refused_while_a_request_runs(url: str) -> None:
    status = stream_until_first_token(url, generate_body(PROMPT, 3000 - 130), lambda: post(url, "/flush_cache", b"")[0])
    assert status == 400
    wait_idle(url)
    assert post(url, "/flush_cache", b"")[0] == 200


def test_a_client_hanging_up_aborts_its_request_and_frees_its_memory(url: str) -> None:
    flush(url)
    aborted = metric(url, "num_aborted_requests_total")
    running = stream_until_first_token(url, generate_body(PROMPT, 3000), lambda: metric(url, "num_running_reqs"))
    assert running == 1
    wait_idle(url)
    assert metric(url, "num_aborted_requests_total") == aborted + 1
    flush(url)
    assert metric(url, "token_usage") == 0.0  # every page came back


def test_abort_request_ends_a_running_request(url: str) -> None:
    body = {**generate_body(PROMPT, 3000), "rid": "to-abort"}

    async def go() -> dict[str, Any]:
        async with aiohttp.ClientSession() as s:
            task = asyncio.create_task(s.post(url + "/generate", json=body))
            while not metric(url, "num_running_reqs"):
                await asyncio.sleep(0.01)
            async with s.post(url + "/abort_request", json={"rid": "to-abort"}) as r:
                assert r.status == 200
            resp = await task
            return await resp.json()

    out = asyncio.run(go())
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert 0 < len(out["output_ids"]) < 3000


def test_metrics_are_prometheus_text_with_sglang_names(url: str) -> None:
    status, text = get(url, "/metrics")
    assert status == 200
    for name in (
        "cache_hit_tokens_total",
        "cache_query_tokens_total",
        "evicted_tokens_total",
        "num_running_reqs",
        "num_queue_reqs",
        "num_retracted_requests_total",
        "generation_tokens_total",
        "cache_hit_rate",
    ):
        assert f"# TYPE sglang:{name} " in text
        assert metric(url, name) >= 0


def test_a_prompt_past_the_step_budget_counts_its_cuts_and_a_shorter_one_none(url: str) -> None:
    # The default budget is 2,048 tokens: 2,100 uncached tokens take two chunks (one cut), 100 take
    # one. Counted by the engine, so a batch that cuts a prompt no longer than the budget counts too.
    flush(url)
    before = metric(url, "chunked_prefill_cuts_total")
    assert post(url, "/generate", generate_body([7 + i % 900 for i in range(2100)], 1))[0] == 200
    assert metric(url, "chunked_prefill_cuts_total") - before == 1
    assert post(url, "/generate", generate_body([9 + i % 900 for i in range(100)], 1))[0] == 200
    assert metric(url, "chunked_prefill_cuts_total") - before == 1


@pytest.mark.parametrize(
    "path, body, message",
    [
        ("/generate", b"{not json", "not valid JSON"),
        ("/generate", b"[1, 2]", "must be a JSON object"),
        ("/generate", {"input_ids": [5], "colour": 1}, "unknown field 'colour'"),
        ("/generate", {"input_ids": [5], "sampling_params": {"max_new_token": 1}}, "unknown field 'max_new_token'"),
        ("/generate", {"text": "hello"}, "no tokenizer"),
        ("/generate", {"input_ids": [5, 1024]}, "outside the vocabulary"),
        ("/generate", {"input_ids": [5, -1]}, "outside the vocabulary"),
        ("/generate", {"input_ids": [5] * 4000, "sampling_params": {"max_new_tokens": 200}}, "context length"),
        ("/generate", {"input_ids": [5], "sampling_params": {"n": 0}}, "n must be in"),
        ("/generate", {"input_ids": [[5], [6]]}, "batched"),
        ("/generate", {"input_ids": [5], "sampling_params": {"max_new_tokens": "8"}}, "must be an integer"),
        ("/generate", {"input_ids": []}, "at least one token"),
        ("/v1/completions", {"prompt": "hello"}, "list of token ids"),
        ("/v1/completions", {"prompt": [5], "n": -2}, "n must be in"),
        ("/v1/completions", {"prompt": [5], "logprobs": 50}, "logprobs must be"),
        ("/abort_request", {}, "rid"),
    ],
)
def test_bad_input_gets_a_clear_400(url: str, path: str, body: Any, message: str) -> None:
    status, out = post(url, path, body)
    assert status == 400 and message in out["error"]["message"], out


_ODD_VALUES = [None, True, -1, 0, 1.5, 10**30, "x", [], {}, [[1]]]
_VALID = {
    "/generate": {
        "input_ids": [5, 6, 7],
        "sampling_params": {
            "temperature": 0.5,
            "max_new_tokens": 2,
            "n": 2,
            "ignore_eos": True,
            "top_p": 1,
            "top_k": -1,
            "sampling_seed": 3,
        },
        "return_logprob": True,
        "top_logprobs_num": 2,
        "logprob_start_len": -1,
        "return_text_in_logprobs": False,
        "stream": False,
        "rid": "sweep",
    },
    "/v1/completions": {
        "model": "servefuzz-reference",
        "prompt": [5, 6, 7],
        "max_tokens": 2,
        "temperature": 0.5,
        "top_p": 1,
        "n": 2,
        "logprobs": 2,
        "stream": False,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "seed": 3,
        "return_token_ids": True,
        "user": "u",
        "echo": False,
    },
}


def _swept(path: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    base = _VALID[path]
    for key in base:
        for odd in _ODD_VALUES:
            out.append((path, {**base, key: odd}))
    for key in base.get("sampling_params", {}):
        for odd in _ODD_VALUES:
            out.append((path, {**base, "sampling_params": {**base["sampling_params"], key: odd}}))
    return out


def test_every_field_with_every_odd_value_gets_200_or_a_clear_4xx(url: str) -> None:
    cases = _swept("/generate") + _swept("/v1/completions")
    assert len(cases) == 10 * (8 + 7 + 14)  # every field of both dialects
    statuses = set()
    for path, body in cases:
        status, out = post(url, path, body)
        statuses.add(status)
        assert status in (200, 400, 404), (path, body, status, out)
        if status != 200:
            assert out["error"]["message"], (path, body)
    assert statuses == {200, 400, 404}
    assert get(url, "/health") == (200, "OK\n")


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 5000) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)
_small = st.integers(-3, 6) | _json
_sampling = st.fixed_dictionaries(
    {},
    optional={
        "temperature": st.floats(-1, 2) | _json,
        "max_new_tokens": _small,
        "n": _small,
        "ignore_eos": _json,
        "top_p": _json,
        "sampling_seed": _json,
        "bogus": _json,
    },
)
_generate = st.fixed_dictionaries(
    {},
    optional={
        "input_ids": st.lists(st.integers(-2, 1030), max_size=12) | _json,
        "sampling_params": _sampling | _json,
        "return_logprob": _json,
        "top_logprobs_num": _small,
        "stream": st.just(False) | _json,
        "rid": _json,
        "logprob_start_len": _json,
    },
)
_completions = st.fixed_dictionaries(
    {},
    optional={
        "prompt": st.lists(st.integers(-2, 1030), max_size=12) | _json,
        "max_tokens": _small,
        "n": _small,
        "logprobs": _small,
        "temperature": _json,
        "stream": st.just(False) | _json,
        "model": _json,
        "stream_options": _json,
        "echo": _json,
    },
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.one_of(
        st.tuples(st.just("/generate"), _generate | _json | st.binary(max_size=30)),
        st.tuples(st.just("/v1/completions"), _completions | _json | st.binary(max_size=30)),
    )
)
def test_fuzzed_bodies_get_200_or_a_4xx_never_a_crash(url: str, case: tuple[str, Any]) -> None:
    path, body = case
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    except (ValueError, TypeError):
        return
    status, out = post(url, path, data)
    assert status in (200, 400, 404), (status, out)
    if status != 200:
        assert isinstance(out["error"]["message"], str) and out["error"]["message"]


def test_the_server_still_serves_after_the_fuzzing(url: str, model: TinyModel) -> None:
    assert get(url, "/health") == (200, "OK\n")
    answers = burst(url, [("after", 0, generate_body(PROMPT, 4))])
    assert wrong_answers(model, answers) == {}


def test_an_unknown_adapter_is_refused_in_one_line_and_the_adapters_are_listed(reference_server: Callable[..., str]) -> None:
    url = reference_server("--lora", "lora-a=1")
    status, body = post(url, "/generate", {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2}, "lora_path": "nope"})
    assert status == 400 and "no such LoRA adapter" in json.dumps(body) and "nope" not in json.dumps(body)
    status, _ = post(url, "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 2, "model": "nope"})
    assert status == 404
    models = json.loads(get(url, "/v1/models")[1])["data"]
    assert [(m["id"], m.get("parent")) for m in models] == [("servefuzz-reference", None), ("lora-a", "servefuzz-reference")]
    assert json.loads(get(url, "/server_info")[1])["lora"] == ["lora-a=1"]
    status, body = post(url, "/generate", {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2}, "lora_path": "lora-a"})
    assert status == 200 and len(body["output_ids"]) == 2
