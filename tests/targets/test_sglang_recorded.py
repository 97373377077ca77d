"""The SGLang adapter against SGLang's own answers, served byte for byte over real HTTP.

SGLang does not run on these machines, so `data/sglang/` holds what it answers: recorded where
SGLang's docs printed a real answer, otherwise transcribed from the code that builds it (that
folder's README.md says which, with sources). A small aiohttp app serves those exact bytes on
127.0.0.1 and the adapter is driven through the `Runner`, as a campaign drives it. The first
part of the URL picks how the served SGLang behaves:

| prefix          | how the served SGLang behaves                                              |
|-----------------|----------------------------------------------------------------------------|
| `plain`         | defaults: cumulative streams, a list for n = 2, recorded `/server_info`, `/metrics` |
| `incremental`   | streams as with `--incremental-streaming-output`                           |
| `legacy`        | streams as with the older `--stream-output` (only the ids are cut)         |
| `docs`          | `/generate` answers what SGLang's docs recorded                            |
| `toolong`       | the prompt is too long: 400 with an error, or a stream the scheduler aborts |
| `busy`, `stuck` | `/flush_cache` refuses twice, then flushes; refuses always                 |
| `old`           | no `/server_info` and no `/metrics` (404): an older build, metrics off     |
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp import web

from servefuzz.errors import TargetError
from servefuzz.history import ChoiceRecord, RequestRecord, Status
from servefuzz.runner import RunConfig, Runner
from servefuzz.targets import make_target
from servefuzz.targets.detect import decide_server_info
from servefuzz.workload import RequestSpec, Scenario

DATA = Path(__file__).parent / "data" / "sglang"
PROMPT = (785, 6722, 3283, 315, 9625, 374)
TOP_K = 3  # the recorded answers carry three alternatives per position

# (prefix, stream, n) -> (fixture, HTTP status)
GENERATE = {
    ("plain", False, 1): ("generate.json", 200),
    ("plain", False, 2): ("generate_n2.json", 200),
    ("plain", True, 1): ("generate_stream.txt", 200),
    ("plain", True, 2): ("generate_stream_n2.txt", 200),
    ("incremental", True, 1): ("generate_stream_incremental.txt", 200),
    ("legacy", True, 1): ("generate_stream_legacy.txt", 200),
    ("docs", False, 1): ("generate_docs_example.json", 200),
    ("toolong", False, 1): ("generate_error.json", 400),
    ("toolong", True, 1): ("generate_stream_abort.txt", 200),
}
BUSY_FLUSHES = 2  # `busy` refuses this many flushes before one succeeds

# What generate.json says, written out so that a parsing slip cannot agree with itself.
# SGLang's logprobs are float32 values printed as float64.
A_IDS = (12095, 13, 576, 6722)
A_LOGPROBS = (-0.012299999594688416, -0.35190001130104065, -0.9301999807357788, -0.2451000064611435)
A_TOPS = (
    ((12095, -0.012299999594688416), (279, -4.882299900054932), (264, -6.139800071716309)),
    ((13, -0.35190001130104065), (11, -1.3518999814987183), (624, -4.039400100708008)),
    ((576, -0.9301999807357788), (1084, -1.0551999807357788), (715, -2.5552000999450684)),
    ((6722, -0.2451000064611435), (3283, -2.1201000213623047), (1879, -3.9951000213623047)),
)
CHOICE_A = ChoiceRecord(0, A_IDS, A_LOGPROBS, A_TOPS, " Paris. The capital", "length")
# generate_n2.json's second choice: the same two tokens, then it stops on the EOS token.
CHOICE_B = ChoiceRecord(
    1,
    (12095, 13, 151645),
    A_LOGPROBS[:2] + (-0.8815000057220459,),
    A_TOPS[:2] + (((151645, -0.8815000057220459), (576, -0.9301999807357788), (715, -2.5552000999450684)),),
    " Paris.",
    "stop",
)

_SEEN = web.AppKey("seen", list)
_T = TypeVar("_T")


def _app() -> web.Application:
    """The served SGLang; every request it gets is noted in `app[_SEEN]` as (method, path, body)."""
    app = web.Application()
    seen: list[tuple[str, str, Any]] = []
    app[_SEEN] = seen
    flushes = {"busy": 0}

    def note(request: web.Request, body: Any = None) -> str:
        seen.append((request.method, request.path, body))
        return request.match_info["prefix"]

    async def generate(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prefix = note(request, body)
        name, status = GENERATE[(prefix, body["stream"], body["sampling_params"]["n"])]
        raw = (DATA / name).read_bytes()
        if not body["stream"]:
            return web.Response(body=raw, status=status, content_type="application/json")
        resp = web.StreamResponse(status=status, headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in raw.split(b"\n\n")[:-1]:  # one body chunk per event, as SGLang yields them
            await resp.write(event + b"\n\n")
        await resp.write_eof()
        return resp

    async def server_info(request: web.Request) -> web.Response:
        if note(request) == "old":
            return web.json_response({"detail": "Not Found"}, status=404)  # FastAPI's 404
        return web.Response(body=(DATA / "server_info.json").read_bytes(), content_type="application/json")

    async def get_server_info(request: web.Request) -> web.Response:
        note(request)
        raw = (DATA / "get_server_info.json").read_bytes()
        return web.Response(body=raw, content_type="application/json")

    async def flush_cache(request: web.Request) -> web.Response:
        prefix = note(request)
        refuse = prefix == "stuck" or (prefix == "busy" and flushes["busy"] < BUSY_FLUSHES)
        flushes["busy"] += prefix == "busy"
        # SGLang sends the same text whether it flushed or not; only the status differs.
        return web.Response(body=(DATA / "flush_cache_busy.txt").read_bytes(), status=400 if refuse else 200)

    async def metrics(request: web.Request) -> web.Response:
        if note(request) == "old":  # no --enable-metrics: the route does not exist
            return web.json_response({"detail": "Not Found"}, status=404)
        text = (DATA / "metrics.txt").read_bytes()
        return web.Response(body=text, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    app.add_routes(
        [
            web.post("/{prefix}/generate", generate),
            web.get("/{prefix}/server_info", server_info),
            web.get("/{prefix}/get_server_info", get_server_info),
            web.post("/{prefix}/flush_cache", flush_cache),
            web.get("/{prefix}/metrics", metrics),
        ]
    )
    return app


@contextlib.asynccontextmanager
async def _serving() -> AsyncIterator[tuple[str, list[tuple[str, str, Any]]]]:
    app = _app()
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", app[_SEEN]
    finally:
        await runner.cleanup()


def _drive(
    prefix: str, call: Callable[[Runner], Awaitable[_T]], **opts: Any
) -> tuple[_T, list[tuple[str, str, Any]]]:
    """Run `call` with a Runner on the `prefix` flavour; return its result and what the server saw."""

    async def main() -> tuple[_T, list[tuple[str, str, Any]]]:
        async with _serving() as (url, seen):
            target = make_target("sglang", f"{url}/{prefix}", flush_interval_s=0.01, **opts)
            async with Runner(target, RunConfig(top_k=TOP_K)) as r:
                return await call(r), seen

    return asyncio.run(main())


def _one(prefix: str, spec: RequestSpec) -> tuple[RequestRecord, list[tuple[str, str, Any]]]:
    history, seen = _drive(prefix, lambda r: r.run(Scenario(seed=0, requests=(spec,)), run=0))
    return history.records[0], seen


def _spec(*, n: int = 1, stream: bool = False, max_tokens: int = 4) -> RequestSpec:
    return RequestSpec("r01", 0.0, PROMPT, max_tokens=max_tokens, n=n, stream=stream, ignore_eos=n == 1)


def test_plain_answer_gives_exact_tokens_logprobs_top_k_and_cache_counts() -> None:
    rec, seen = _one("plain", _spec())
    assert rec.status is Status.OK, rec.error
    assert rec.choices == (CHOICE_A,)
    assert rec.cached_tokens == 5 and rec.prompt_tokens == 6
    assert rec.first_token_ms is None  # nothing arrives before the whole answer
    # and the request was SGLang's native one: exact ids, greedy, output logprobs only
    (body,) = [b for m, p, b in seen if p.endswith("/generate")]
    assert body == {
        "input_ids": list(PROMPT),
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 4, "ignore_eos": True, "n": 1},
        "return_logprob": True,
        "top_logprobs_num": TOP_K,
        "logprob_start_len": -1,
        "stream": False,
    }


def test_n2_list_gives_both_choices_with_their_finish_reasons() -> None:
    rec, _ = _one("plain", _spec(n=2))
    assert rec.status is Status.OK, rec.error
    assert rec.choices == (CHOICE_A, CHOICE_B)
    assert rec.cached_tokens == 5 and rec.prompt_tokens == 6


@pytest.mark.parametrize("prefix", ["plain", "incremental", "legacy"])
def test_every_stream_mode_gives_the_non_streamed_answer(prefix: str) -> None:
    rec, _ = _one(prefix, _spec(stream=True))
    assert rec.status is Status.OK, rec.error
    assert rec.choices == (CHOICE_A,)  # ids, logprobs, top-k, text and finish reason alike
    assert rec.cached_tokens == 5 and rec.prompt_tokens == 6
    sent, first, end = rec.sent_ms, rec.first_token_ms, rec.end_ms
    assert sent is not None and first is not None and end is not None and sent <= first <= end


def test_n2_stream_sorts_interleaved_chunks_by_index() -> None:
    rec, _ = _one("plain", _spec(n=2, stream=True))
    assert rec.status is Status.OK, rec.error
    assert rec.choices == (CHOICE_A, CHOICE_B)


def test_the_answer_recorded_in_sglangs_docs_is_read_without_logprobs() -> None:
    rec, _ = _one("docs", _spec(max_tokens=128))
    assert rec.status is Status.OK, rec.error
    (c,) = rec.choices
    assert len(c.token_ids) == 128 and c.token_ids[:3] == (220, 8907, 811) and c.token_ids[-1] == 941
    assert c.logprobs == () and c.top_logprobs == ()
    assert c.text.startswith("  Berne\n\nTo determine") and c.finish_reason == "length"
    assert rec.cached_tokens == 0 and rec.prompt_tokens == 7


def test_too_long_prompt_is_an_http_error_whether_streamed_or_not() -> None:
    plain, _ = _one("toolong", _spec())
    assert plain.status is Status.HTTP_ERROR and plain.http_status == 400
    assert "longer than the model's context length" in (plain.error or "")
    # streamed, SGLang answers 200 and reports the abort in the only chunk's finish_reason
    streamed, _ = _one("toolong", _spec(stream=True))
    assert streamed.status is Status.HTTP_ERROR and streamed.http_status == 400
    assert "aborted: The input (20481 tokens)" in (streamed.error or "")


def test_recorded_server_info_gives_page_pool_and_version() -> None:
    info, seen = _drive("plain", lambda r: r.server_info())
    assert (info.page_size, info.max_total_tokens, info.version) == (1, 20480, "0.0.0.dev1+g753da2753")
    assert info.vocab_size is None and info.eos_token_id is None  # SGLang does not say
    args = info.server_args
    assert args["disable_radix_cache"] is False and args["chunked_prefill_size"] == 8192
    assert "internal_states" not in args
    assert [p for _, p, _ in seen] == ["/plain/server_info"] * 2  # Runner's own, then ours
    assert decide_server_info(json.loads((DATA / "server_info.json").read_text())) == "sglang"


def test_older_server_falls_back_to_get_server_info_and_reads_the_pool_size() -> None:
    info, seen = _drive("old", lambda r: r.server_info())
    assert [p for _, p, _ in seen][:2] == ["/old/server_info", "/old/get_server_info"]
    # the `max_total_tokens` arg is null there; the pool size comes from the scheduler's facts
    assert (info.page_size, info.max_total_tokens, info.version) == (16, 413184, "0.4.6.post5")
    assert decide_server_info(json.loads((DATA / "get_server_info.json").read_text())) == "sglang"


def test_flush_is_retried_while_sglang_is_busy() -> None:
    flushed, seen = _drive("busy", lambda r: r.flush())
    assert flushed is True
    assert [p for _, p, _ in seen].count("/busy/flush_cache") == BUSY_FLUSHES + 1


def test_flush_that_stays_refused_fails_with_sglangs_words() -> None:
    with pytest.raises(TargetError, match=r"still refused after 3 tries \(HTTP 400: Cache flushed\. Please"):
        _drive("stuck", lambda r: r.flush(), flush_attempts=3)


def test_recorded_metrics_parse_and_missing_metrics_are_empty() -> None:
    m, _ = _drive("plain", lambda r: r.metrics())
    assert m["sglang:cache_hit_rate"] == 0.007507552643049313
    assert m["sglang:num_running_reqs"] == 162.0 and m["sglang:num_queue_reqs"] == 2826.0
    assert m["sglang:prompt_tokens_total"] == 8128902.0 and m["sglang:generation_tokens_total"] == 7557572.0
    assert m["sglang:time_to_first_token_seconds_count"] == 11008.0
    assert m["sglang:func_latency_seconds_count"] == 14007.0  # labelled by `name`, not the model
    none, _ = _drive("old", lambda r: r.metrics())
    assert none == {}
