"""The reference engine's HTTP server (aiohttp): SGLang's and OpenAI's dialects on one engine.

    $ servefuzz serve-reference --port 0 --fault stale-padding
    servefuzz-reference listening on http://127.0.0.1:40123

SGLang dialect: `POST /generate` (`input_ids`, `sampling_params`, `return_logprob`,
`top_logprobs_num`, `stream`, `rid`), `POST /flush_cache` (400 while requests are in progress),
`POST /abort_request`, `GET /server_info` (and `/get_server_info`), `/get_model_info`,
`/health`, `/metrics` (Prometheus text, `sglang:` names), `/coverage` (with `--coverage`: the
engine's cumulative edge-in-context map, `tracer`; 404 without). OpenAI dialect: `POST /v1/completions`
with a token-id `prompt`, `logprobs`, `n`, `stream`, and `usage.prompt_tokens_details`;
`GET /v1/models`.

Bad input gets a 400 with one clear message, and the server keeps serving. A client that
disconnects aborts its request. The engine runs on its own thread; each handler awaits an
asyncio queue that the engine feeds with `loop.call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import json
import re
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from servefuzz.reference.architectures import model_facts
from servefuzz.reference.faults import FAULTS
from servefuzz.reference.model import BOS_ID, EOS_ID, PAD_ID, TokenLogprobs, detokenize
from servefuzz.reference.pd import serve_pair
from servefuzz.reference.scheduler import (
    Engine,
    Event,
    FinishEvent,
    FinishReason,
    Request,
    RequestError,
)
from servefuzz.reference.server_args import ArgsError, ServerArgs, parse_args
from servefuzz.reference.tracer import CONTEXT_BITS, EDGE_BITS
from servefuzz.reference.transfer import TRANSFER_ID, Transfer, TransferError

__all__ = ["VERSION", "build_app", "main"]

VERSION = "0.1.0"
_ENGINE = web.AppKey("engine", Engine)
_LIVE_RIDS = web.AppKey("live_rids", set)
_PEER = web.AppKey("peer", aiohttp.ClientSession)


class BadRequest(Exception):
    """Becomes a 400 (or the given status) with a JSON error body."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _error(message: str, status: int = 400) -> web.Response:
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


# -- reading request bodies ------------------------------------------------------------------


async def _json_object(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read())
    except (ValueError, RecursionError) as e:
        raise BadRequest(f"request body is not valid JSON: {str(e).splitlines()[0][:120]}") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def _reject_unknown(d: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(d) - known)
    if unknown:
        raise BadRequest(f"unknown field {unknown[0]!r} in {where}")


def _field(d: dict[str, Any], key: str, default: Any, kinds: type | tuple[type, ...], what: str) -> Any:
    """`d[key]` when it is one of `kinds` (JSON's true and false are never numbers), `default`
    when missing or null; anything else is a 400 that says what it must be."""
    v = d.get(key, default)
    if v is None:
        return default
    if (isinstance(v, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,))) or not isinstance(v, kinds):
        raise BadRequest(f"{key} must be {what}")
    return v


def _int(d: dict[str, Any], key: str, default: int) -> int:
    return int(_field(d, key, default, int, "an integer"))


def _bool(d: dict[str, Any], key: str, default: bool) -> bool:
    return bool(_field(d, key, default, bool, "true or false"))


def _float(d: dict[str, Any], key: str, default: float) -> float:
    return float(_field(d, key, default, (int, float), "a number"))


def _token_ids(v: Any, key: str) -> tuple[int, ...]:
    if not isinstance(v, list):
        raise BadRequest(f"{key} must be a list of token ids (this engine has no tokenizer)")
    if v and all(isinstance(x, list) for x in v):
        raise BadRequest(f"batched {key} are not supported: send one prompt per request")
    if any(isinstance(x, bool) or not isinstance(x, int) for x in v):
        raise BadRequest(f"{key} must hold integers only")
    return tuple(v)


def _salt(d: dict[str, Any], key: str) -> str | None:
    """A tenant's cache salt: absent or null for none, else a non-empty string of at most 1024
    characters (vLLM's `cache_salt` field bounds)."""
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not 1 <= len(v) <= 1024:
        raise BadRequest(f"{key} must be a non-empty string of at most 1024 characters")
    return v


# The one regex shape this engine constrains by: an alternation of choices in its own spelling,
# ' w<t>' per token (what servefuzz's SGLang adapter sends: `targets.sglang.choice_regex`).
_CHOICE_REGEX = re.compile(r"\(((?: w\d{1,6})+(?:\|(?: w\d{1,6})+){0,15})\)")
_CHOICE_WORD = re.compile(r" w(\d+)")


def _choices(d: dict[str, Any], key: str) -> tuple[tuple[int, ...], ...] | None:
    """A `regex` constraint as token-id choices: only `( w5 w7| w9)`, at most 16 choices; any
    other regex is refused (this engine has no tokenizer to run a general one over)."""
    v = d.get(key)
    if v is None:
        return None
    m = _CHOICE_REGEX.fullmatch(v) if isinstance(v, str) else None
    if m is None:
        raise BadRequest(f"{key}: this engine constrains only by an alternation of ' w<id>' choices, "
                         "like '( w5 w7| w9)'")
    return tuple(tuple(int(t) for t in _CHOICE_WORD.findall(alt)) for alt in m.group(1).split("|"))


def _adapter(v: Any) -> str | None:
    """SGLang's `lora_path`: absent or null for the base model, else one adapter's name (a list
    of one, as SGLang's batched form, is taken too). Whether it exists, the engine checks."""
    if isinstance(v, list) and len(v) == 1:
        v = v[0]
    if v is None:
        return None
    if not isinstance(v, str) or not 1 <= len(v) <= 64:
        raise BadRequest("lora_path must be one adapter name")
    return v


def _only_default(d: dict[str, Any], key: str, allowed: object, what: str) -> None:
    if key in d and d[key] is not None and d[key] != allowed:
        raise BadRequest(f"{key}={d[key]!r} is not supported ({what})")


# -- accumulating a request's events ---------------------------------------------------------


@dataclass
class _Choice:
    ids: list[int] = field(default_factory=list)
    steps: list[TokenLogprobs] = field(default_factory=list)
    finish: FinishReason | None = None
    sent: int = 0  # tokens already streamed (OpenAI streams deltas)


class _Tracker:
    """The HTTP side of one request: an asyncio queue fed from the engine thread.

    A streaming request wakes its handler every engine step; a non-streaming one only when a
    choice finishes (its events wait on the engine side), which keeps the event loop quiet.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, n: int, stream: bool) -> None:
        self._loop = loop
        self._stream = stream
        self._queue: asyncio.Queue[list[Event]] = asyncio.Queue()
        self._held: list[Event] = []  # touched by the engine thread only
        self.choices = [_Choice() for _ in range(n)]
        self.started = time.monotonic()

    def sink(self, events: Sequence[Event]) -> None:  # engine thread
        self._held += events
        if not (self._stream or any(isinstance(e, FinishEvent) for e in events)):
            return
        batch, self._held = self._held, []
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, batch)
        except RuntimeError:
            pass  # the loop is closed: the server is shutting down

    @property
    def done(self) -> bool:
        return all(c.finish is not None for c in self.choices)

    async def updates(self) -> AsyncIterator[set[int]]:
        """Yields the indices of the choices each engine step changed, until all finish."""
        while not self.done:
            changed = set()
            for ev in await self._queue.get():
                c = self.choices[ev.index]
                changed.add(ev.index)
                if isinstance(ev, FinishEvent):
                    c.finish = ev.reason
                else:
                    c.ids.append(ev.step.token_id)
                    c.steps.append(ev.step)
            yield changed


async def _run(
    request: web.Request,
    req: Request,
    respond: Callable[[_Tracker], Any],
    stream: Callable[[web.StreamResponse, _Tracker, set[int]], Any] | None,
    stream_tail: Callable[[web.StreamResponse, _Tracker], Any] | None = None,
) -> web.StreamResponse:
    """Submit `req`, then answer once (non-stream) or once per engine step (stream).

    Whatever ends the handler early (client disconnect cancels it) aborts the request.
    """
    engine = request.app[_ENGINE]
    live = request.app[_LIVE_RIDS]
    if engine.error is not None:
        return _error("engine failed; see server log", 500)
    try:
        engine.check(req)
    except RequestError as e:
        return _error(str(e))
    if req.rid in live:
        return _error(f"request id {req.rid!r} is already in progress")
    if req.transfer_in is not None:
        failed = await _pull_transfer(request, req)
        if failed is not None:
            return failed
    tracker = _Tracker(asyncio.get_running_loop(), req.n, stream is not None)
    req.sink = tracker.sink
    live.add(req.rid)
    engine.submit(req)
    try:
        if stream is None:
            async for _ in tracker.updates():
                pass
            if engine.error is not None:
                return _error("engine failed; see server log", 500)
            return web.json_response(respond(tracker))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        async for changed in tracker.updates():
            await stream(resp, tracker, changed)
        if stream_tail is not None:
            await stream_tail(resp, tracker)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
    finally:
        live.discard(req.rid)
        if not tracker.done:
            engine.abort(req.rid)


def _transfer_params(engine: Engine, req: Request, d: dict[str, Any]) -> None:
    """`kv_transfer_params` (vLLM's field): on a prefill server `{"do_remote_decode": true}` keeps
    the prompt's KV for its decode server; on a decode server `{"transfer_id": ID}` starts from
    the KV the prefill server keeps under ID. Elsewhere, and in any other shape, a 400."""
    params, mode = d.get("kv_transfer_params"), engine.args.disaggregation_mode
    if params is None:
        return
    if mode == "prefill" and params == {"do_remote_decode": True}:
        req.transfer_out = uuid.uuid4().hex
    elif mode == "decode" and isinstance(params, dict) and set(params) == {"transfer_id"} \
            and isinstance(params["transfer_id"], str) and TRANSFER_ID.fullmatch(params["transfer_id"]):
        req.transfer_in = params["transfer_id"]
    else:
        raise BadRequest(f"kv_transfer_params: not a {mode} server's ({{\"do_remote_decode\": true}} on a prefill "
                         'server, {"transfer_id": ID} on a decode server)')


async def _pull_transfer(request: web.Request, req: Request) -> web.Response | None:
    """A decode server's request: pull its KV from the prefill server (127.0.0.1, its own
    --disaggregation-peer-port; the request names only the transfer) and stage it for the engine."""
    engine = request.app[_ENGINE]
    assert engine.received is not None and req.transfer_in is not None
    url = f"http://127.0.0.1:{engine.args.disaggregation_peer_port}/kv_transfer/{req.transfer_in}"
    try:
        async with request.app[_PEER].get(url) as resp:
            if resp.status != 200:
                return _error(f"kv transfer {req.transfer_in}: the prefill server answered {resp.status}")
            t = Transfer.decode(await resp.read())
    except (aiohttp.ClientError, TimeoutError) as e:
        return _error(f"kv transfer {req.transfer_in}: the prefill server is unreachable ({type(e).__name__})", 503)
    except TransferError as e:
        return _error(str(e))
    if t.prompt != req.prompt or t.tokens != len(req.prompt) - 1 or t.kv.shape[0] != len(engine.pool.kv) \
            or t.kv.shape[2:] != engine.pool.kv[0].shape[1:]:
        return _error(f"kv transfer {req.transfer_in}: not this prompt's KV on this model")
    engine.received.stage(req.transfer_in, t)
    return None


async def kv_transfer(request: web.Request) -> web.Response:
    """A prefill server hands a finished transfer over, once: its decode server's pull."""
    outbox = request.app[_ENGINE].outbox
    if outbox is None:
        return _error("not a prefill server (--disaggregation-mode prefill)", 404)
    t = outbox.pull(request.match_info["tid"])
    if t is None:
        return _error("no such transfer (pulled already, or never made)", 404)
    return web.Response(body=t.encode(), content_type="application/octet-stream")


async def _sse(resp: web.StreamResponse, obj: Any) -> None:
    await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")


# -- SGLang dialect --------------------------------------------------------------------------

_SGLANG_FIELDS = {
    "input_ids",
    "text",
    "sampling_params",
    "return_logprob",
    "top_logprobs_num",
    "logprob_start_len",
    "return_text_in_logprobs",
    "stream",
    "rid",
    "extra_key",  # SGLang's cache key beside the tokens: what its OpenAI API makes of cache_salt
    "lora_path",  # SGLang's per-request adapter: a --lora NAME (never a path here)
    "kv_transfer_params",  # prefill/decode disaggregation (`_transfer_params`)
}
_SAMPLING_FIELDS = {"temperature", "max_new_tokens", "n", "ignore_eos", "top_p", "top_k", "sampling_seed", "regex"}


def _text(c: _Choice) -> str:
    """A choice's text. The EOS that ended it is left out, as SGLang and vLLM leave it out
    (skip_special_tokens): a constrained answer then reads exactly as its choice."""
    ended = c.finish is not None and c.finish.kind == "stop" and c.ids and c.ids[-1] == EOS_ID
    return detokenize(c.ids[:-1] if ended else c.ids)


def _lp_triple(lp: float, tok: int, text: bool) -> list[Any]:
    return [lp, tok, detokenize([tok]) if text else None]


async def generate(request: web.Request) -> web.StreamResponse:
    try:
        body = await _json_object(request)
        _reject_unknown(body, _SGLANG_FIELDS, "the request")
        if "text" in body:
            raise BadRequest("this engine has no tokenizer: send input_ids")
        if "input_ids" not in body:
            raise BadRequest("input_ids is required")
        prompt = _token_ids(body["input_ids"], "input_ids")
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise BadRequest("sampling_params must be an object")
        _reject_unknown(sp, _SAMPLING_FIELDS, "sampling_params")
        _only_default(sp, "top_p", 1, "only top_p=1")
        _only_default(sp, "top_k", -1, "only top_k=-1")
        _only_default(body, "logprob_start_len", -1, "prompt logprobs are not computed")
        return_logprob = _bool(body, "return_logprob", False)
        top_k = _int(body, "top_logprobs_num", 0) if return_logprob else 0
        as_text = _bool(body, "return_text_in_logprobs", False)
        rid = body.get("rid") or uuid.uuid4().hex
        if not isinstance(rid, str):
            raise BadRequest("rid must be a string")
        req = Request(
            rid=rid,
            prompt=prompt,
            max_new_tokens=_int(sp, "max_new_tokens", 128),
            n=_int(sp, "n", 1),
            temperature=_float(sp, "temperature", 1.0),
            ignore_eos=_bool(sp, "ignore_eos", False),
            top_logprobs_num=top_k,
            seed=_int(sp, "sampling_seed", 0),
            cache_salt=_salt(body, "extra_key"),
            choices=_choices(sp, "regex"),
            adapter=_adapter(body.get("lora_path")),
        )
        _transfer_params(request.app[_ENGINE], req, body)
        stream = _bool(body, "stream", False)
    except BadRequest as e:
        return _error(str(e), e.status)

    def choice_json(t: _Tracker, i: int) -> dict[str, Any]:
        c = t.choices[i]
        meta: dict[str, Any] = {
            "id": rid if req.n == 1 else f"{rid}-{i}",
            "finish_reason": c.finish.to_json() if c.finish else None,
            "prompt_tokens": len(prompt),
            "completion_tokens": len(c.ids),
            "cached_tokens": req.cached_tokens,
            "e2e_latency": time.monotonic() - t.started,
        }
        if req.transfer_out is not None:
            meta["kv_transfer_params"] = {"transfer_id": req.transfer_out}
        if return_logprob:
            meta["output_token_logprobs"] = [_lp_triple(s.logprob, s.token_id, as_text) for s in c.steps]
            if top_k > 0:
                meta["output_top_logprobs"] = [[_lp_triple(lp, tok, as_text) for tok, lp in s.top] for s in c.steps]
        out: dict[str, Any] = {"text": _text(c), "output_ids": list(c.ids), "meta_info": meta}
        if req.n > 1:
            out["index"] = i
        return out

    def respond(t: _Tracker) -> Any:
        outs = [choice_json(t, i) for i in range(req.n)]
        return outs[0] if req.n == 1 else outs

    async def chunk(resp: web.StreamResponse, t: _Tracker, changed: set[int]) -> None:
        for i in sorted(changed):  # SGLang streams cumulative text, ids and meta_info
            await _sse(resp, choice_json(t, i))

    return await _run(request, req, respond, chunk if stream else None)


async def flush_cache(request: web.Request) -> web.Response:
    engine = request.app[_ENGINE]
    if engine.error is not None:
        return web.Response(status=500, text="engine failed\n")
    if await asyncio.wrap_future(engine.flush_cache()):
        return web.Response(text="Cache flushed.\n")
    return web.Response(status=400, text="Cache not flushed: requests are in progress. Retry when idle.\n")


async def abort_request(request: web.Request) -> web.Response:
    try:
        body = await _json_object(request)
        _reject_unknown(body, {"rid", "abort_all"}, "the request")
        if _bool(body, "abort_all", False):
            request.app[_ENGINE].abort_all()
        elif isinstance(body.get("rid"), str):
            request.app[_ENGINE].abort(body["rid"])
        else:
            raise BadRequest("rid (a string) or abort_all=true is required")
    except BadRequest as e:
        return _error(str(e), e.status)
    return web.Response(text="")


def _server_info(engine: Engine) -> dict[str, Any]:
    c = engine.model.config
    return {
        **engine.args.to_json(),
        "vocab_size": c.vocab_size,
        "eos_token_id": EOS_ID,
        "bos_token_id": BOS_ID,
        "pad_token_id": PAD_ID,
        "model_path": engine.args.served_model_name,
        # Real SGLang merges the scheduler's sized pool into /server_info under this name.
        "max_total_num_tokens": engine.pool.num_slots,
        "version": VERSION,
        "engine": "servefuzz-reference",
        "known_faults": sorted(FAULTS),
        # What the model keeps per request beside per-token KV (a recurrent state and the
        # interval it is checkpointed at), in the shape of the fuzzer's `model_facts.ModelFacts`.
        "architecture": model_facts(engine.args.model_arch, state_interval=engine.args.mamba_track_interval),
    }


async def server_info(request: web.Request) -> web.Response:
    return web.json_response(_server_info(request.app[_ENGINE]))


async def model_info(request: web.Request) -> web.Response:
    engine = request.app[_ENGINE]
    return web.json_response({"model_path": engine.args.served_model_name, "is_generation": True})


async def health(request: web.Request) -> web.Response:
    if request.app[_ENGINE].error is not None:
        return web.Response(status=503, text="engine failed\n")
    return web.Response(text="OK\n")


_METRICS = (
    ("cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.", "cache_hit_tokens"),
    ("cache_query_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.", "cache_query_tokens"),
    ("evicted_tokens_total", "counter", "KV tokens evicted from the prefix cache.", "evicted_tokens"),
    ("state_restores_total", "counter", "Recurrent-state checkpoints restored by prefix hits (hybrid models).",
     "state_restores"),
    ("state_evictions_total", "counter", "Recurrent-state checkpoints evicted for want of a state slot.",
     "state_evictions"),
    ("swa_evicted_tokens_total", "counter", "Cached sliding-window KV tokens given back under window-pool pressure.",
     "swa_evicted_tokens"),
    ("num_retracted_requests_total", "counter", "Decode requests retracted for lack of KV memory.", "retracted_reqs"),
    ("num_finished_reqs_total", "counter", "Requests finished (length or stop).", "finished_reqs"),
    ("num_aborted_requests_total", "counter", "Requests aborted.", "aborted_reqs"),
    ("prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", "prompt_tokens"),
    ("generation_tokens_total", "counter", "Generated tokens.", "generation_tokens"),
    ("forward_steps_total", "counter", "Forward batches run.", "forward_steps"),
    ("chunked_prefill_cuts_total", "counter", "Prefill chunks cut at the step budget (continued next batch).", "chunked_cuts"),
    ("num_running_reqs", "gauge", "Requests running (prefill or decode).", "num_running_reqs"),
    ("num_queue_reqs", "gauge", "Requests waiting.", "num_queue_reqs"),
    ("token_usage", "gauge", "Fraction of KV pages in use (cache included).", "token_usage"),
    ("swa_token_usage", "gauge", "Fraction of the sliding-window KV pool's pages in use (windowed models).",
     "swa_token_usage"),
)


async def metrics(request: web.Request) -> web.Response:
    engine = request.app[_ENGINE]
    st = engine.stats
    label = f'{{model_name="{engine.args.served_model_name}"}}'
    lines = []
    for name, kind, help_text, attr in _METRICS:
        lines += [
            f"# HELP sglang:{name} {help_text}",
            f"# TYPE sglang:{name} {kind}",
            f"sglang:{name}{label} {getattr(st, attr)}",
        ]
    rate = st.cache_hit_tokens / st.cache_query_tokens if st.cache_query_tokens else 0.0
    lines += ["# HELP sglang:cache_hit_rate Prefix cache hit rate (tokens).", "# TYPE sglang:cache_hit_rate gauge"]
    lines.append(f"sglang:cache_hit_rate{label} {rate}")
    lines += _host_metrics(engine, engine.args.served_model_name)
    lines += _transfer_metrics(engine, engine.args.served_model_name)
    lines += ["# HELP sglang:num_retracted_requests_by_feature_total Retracted requests with each stateful feature.",
              "# TYPE sglang:num_retracted_requests_by_feature_total counter"]
    lines += [f'sglang:num_retracted_requests_by_feature_total{{model_name="{engine.args.served_model_name}",'
              f'feature="{name}"}} {n}' for name, n in st.retracted_by.items()]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8")


# The host tier's series, under SGLang's names and labels (its metrics_collector.py, 0.5.23): what
# the tier wrote, loaded back and dropped, the hit tokens by the tier they came from (what the
# host gave is loaded back first, so both tiers' sum is `cache_hit_tokens_total`), and its pool.
_HOST_METRICS = (
    ("hicache_backup_tokens_total", "counter", "Tokens backed up from the device pool to the host tier.",
     "backup_tokens", ',pool="kv"'),
    ("load_back_tokens_total", "counter", "Tokens loaded back from the host tier to the device pool.",
     "load_back_tokens", ',pool="kv"'),
    ("hicache_dropped_tokens_total", "counter", "Device tokens evicted with no host copy kept.",
     "dropped_tokens", ',reason="host_pressure",pool="kv"'),
)


def _host_metrics(engine: Engine, model_name: str) -> list[str]:
    host = engine.host
    if host is None:
        return []
    label = f'model_name="{model_name}"'
    lines = []
    for name, kind, help_text, attr, extra in _HOST_METRICS:
        lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} {kind}",
                  f"sglang:{name}{{{label}{extra}}} {getattr(host.stats, attr)}"]
    device = engine.stats.cache_hit_tokens - host.stats.host_hit_tokens
    lines += ["# HELP sglang:cached_tokens_total Number of cached prompt tokens by source (device/host/storage).",
              "# TYPE sglang:cached_tokens_total counter",
              f'sglang:cached_tokens_total{{{label},cache_source="device"}} {device}',
              f'sglang:cached_tokens_total{{{label},cache_source="host"}} {host.stats.host_hit_tokens}']
    ps = engine.pool.page_size
    for name, value in (("hicache_host_used_tokens", host.used_pages * ps), ("hicache_host_total_tokens", host.num_pages * ps)):
        lines += [f"# HELP sglang:{name} The host tier's tokens ({name.rsplit('_', 2)[-2]}).", f"# TYPE sglang:{name} gauge",
                  f"sglang:{name}{{{label}}} {value}"]
    return lines


_TRANSFER_METRICS = (
    ("kv_transfers_total", "KV transfers done (prefill: pulled by the decode server; decode: received).", "transfers"),
    ("kv_transfer_pages_total", "KV pages moved by those transfers.", "pages"),
    ("kv_transfer_bytes_total", "KV bytes moved by those transfers.", "bytes"),
)


def _transfer_metrics(engine: Engine, model_name: str) -> list[str]:
    """A prefill or decode server's transfer counters (its own names: SGLang's differ by backend)."""
    side = engine.outbox or engine.received
    if side is None:
        return []
    lines = []
    for name, help_text, attr in _TRANSFER_METRICS:
        lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} counter",
                  f'sglang:{name}{{model_name="{model_name}"}} {getattr(side.stats, attr)}']
    return lines


async def coverage(request: web.Request) -> web.Response:
    """The cumulative coverage map, `{"points": {"<point>": hits}}` (a point: the edge's
    `EDGE_BITS`-bit hash shifted left by `CONTEXT_BITS`, or'ed with the step context's key,
    `tracer`), and each context key's features (`"contexts": {"<key>": "multi|-;n+seed"}`,
    `tracer.describe`). Cumulative since the start, as /metrics counters are: a client takes deltas."""
    tracer = request.app[_ENGINE].coverage
    if tracer is None:
        return _error("engine coverage is off: start the server with --coverage", 404)
    points, names = tracer.snapshot(), tracer.names()
    return web.json_response({"edge_bits": EDGE_BITS, "context_bits": CONTEXT_BITS,
                              "contexts": {str(k): v for k, v in names.items()},
                              "points": {str(p): n for p, n in points.items()}})


# -- OpenAI dialect --------------------------------------------------------------------------

_OPENAI_FIELDS = {
    "model",
    "prompt",
    "max_tokens",
    "temperature",
    "top_p",
    "n",
    "logprobs",
    "stream",
    "stream_options",
    "ignore_eos",
    "seed",
    "return_token_ids",
    "user",
    "echo",
    "cache_salt",
    "kv_transfer_params",
}


def _openai_logprobs(steps: Sequence[TokenLogprobs], offset: int) -> dict[str, Any]:
    tokens = [detokenize([s.token_id]) for s in steps]
    starts = []
    for t in tokens:
        starts.append(offset)
        offset += len(t)
    return {
        "tokens": tokens,
        "token_logprobs": [s.logprob for s in steps],
        # As vLLM does: the top-k alternatives plus the sampled token itself.
        "top_logprobs": [{detokenize([tok]): lp for tok, lp in (*s.top, (s.token_id, s.logprob))} for s in steps],
        "text_offset": starts,
    }


def _openai_finish(reason: FinishReason | None) -> str | None:
    return None if reason is None else reason.kind


async def completions(request: web.Request) -> web.StreamResponse:
    engine = request.app[_ENGINE]
    name = engine.args.served_model_name
    try:
        body = await _json_object(request)
        _reject_unknown(body, _OPENAI_FIELDS, "the request")
        model = body.get("model", name)
        # As vLLM does, a LoRA adapter is a model of its own: `model` names it.
        if model != name and not (isinstance(model, str) and model in engine.loras):
            raise BadRequest("The model does not exist.", 404)
        if "prompt" not in body:
            raise BadRequest("prompt is required")
        prompt = _token_ids(body["prompt"], "prompt")
        _only_default(body, "top_p", 1, "only top_p=1")
        _only_default(body, "echo", False, "echo is not supported")
        logprobs = body.get("logprobs")
        top_k = 0 if logprobs is None else _int(body, "logprobs", 0)
        if not 0 <= top_k <= 20:
            raise BadRequest("logprobs must be in 0..20")
        opts = body.get("stream_options") or {}
        if not isinstance(opts, dict) or set(opts) - {"include_usage"}:
            raise BadRequest("stream_options may only hold include_usage")
        include_usage = _bool(opts, "include_usage", False)
        with_ids = _bool(body, "return_token_ids", False)
        req = Request(
            rid=f"cmpl-{uuid.uuid4().hex}",
            prompt=prompt,
            max_new_tokens=_int(body, "max_tokens", 16),
            n=_int(body, "n", 1),
            temperature=_float(body, "temperature", 1.0),
            ignore_eos=_bool(body, "ignore_eos", False),
            top_logprobs_num=top_k,
            seed=_int(body, "seed", 0),
            cache_salt=_salt(body, "cache_salt"),
            adapter=None if model == name else str(model),
        )
        _transfer_params(engine, req, body)
        stream = _bool(body, "stream", False)
    except BadRequest as e:
        return _error(str(e), e.status)
    created = int(time.time())

    def usage(t: _Tracker) -> dict[str, Any]:
        done = sum(len(c.ids) for c in t.choices)
        return {
            "prompt_tokens": len(prompt),
            "completion_tokens": done,
            "total_tokens": len(prompt) + done,
            "prompt_tokens_details": {"cached_tokens": req.cached_tokens},
        }

    def choice(t: _Tracker, i: int, start: int) -> dict[str, Any]:
        c = t.choices[i]
        steps = c.steps[start:]
        out: dict[str, Any] = {
            "index": i,
            "text": detokenize(c.ids[start:]),
            "logprobs": None if logprobs is None else _openai_logprobs(steps, len(detokenize(c.ids[:start]))),
            "finish_reason": _openai_finish(c.finish),
        }
        if with_ids:
            out["token_ids"] = c.ids[start:]
        return out

    def envelope(choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": req.rid, "object": "text_completion", "created": created, "model": name, "choices": choices}

    def respond(t: _Tracker) -> dict[str, Any]:
        out = envelope([choice(t, i, 0) for i in range(req.n)])
        out["usage"] = usage(t)
        if req.transfer_out is not None:
            out["kv_transfer_params"] = {"transfer_id": req.transfer_out}
        if with_ids:
            out["prompt_token_ids"] = list(prompt)
        return out

    async def chunk(resp: web.StreamResponse, t: _Tracker, changed: set[int]) -> None:
        for i in sorted(changed):
            c = t.choices[i]
            await _sse(resp, envelope([choice(t, i, c.sent)]))
            c.sent = len(c.ids)

    async def tail(resp: web.StreamResponse, t: _Tracker) -> None:
        if include_usage:
            await _sse(resp, {**envelope([]), "usage": usage(t)})

    return await _run(request, req, respond, chunk if stream else None, tail)


async def models(request: web.Request) -> web.Response:
    engine = request.app[_ENGINE]
    card = {
        "id": engine.args.served_model_name,
        "object": "model",
        "created": 0,
        "owned_by": "servefuzz",
        "max_model_len": engine.args.context_length,
    }
    # As vLLM lists them: each LoRA adapter a model of its own, its base model as `parent`.
    loras = [{**card, "id": name, "parent": card["id"]} for name in engine.loras]
    return web.json_response({"object": "list", "data": [card, *loras]})


# -- wiring ----------------------------------------------------------------------------------


def build_app(engine: Engine) -> web.Application:
    """The aiohttp application around a started engine."""
    app = web.Application(client_max_size=8 * 2**20)
    app[_ENGINE] = engine
    app[_LIVE_RIDS] = set()
    app.add_routes(
        [
            web.post("/generate", generate),
            web.post("/flush_cache", flush_cache),
            web.get("/flush_cache", flush_cache),
            web.post("/abort_request", abort_request),
            web.get("/server_info", server_info),
            web.get("/get_server_info", server_info),
            web.get("/get_model_info", model_info),
            web.get("/health", health),
            web.get("/metrics", metrics),
            web.get("/coverage", coverage),
            web.post("/v1/completions", completions),
            web.get("/v1/models", models),
            web.get("/kv_transfer/{tid}", kv_transfer),
        ]
    )
    if engine.args.disaggregation_mode == "decode":
        async def peer(app: web.Application) -> AsyncIterator[None]:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
                app[_PEER] = session
                yield

        app.cleanup_ctx.append(peer)
    return app


def _serve_temporaries_from_the_heap() -> None:
    """Decode allocates multi-megabyte numpy temporaries every step. glibc gives blocks over
    128 KiB fresh pages from mmap and returns them on free, so each step page-faults its
    temporaries in again (a quarter of decode time, measured). Raising the thresholds (glibc's
    maximum is 32 MiB) keeps freed blocks on the heap for reuse. Other C libraries: no-op."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 32 * 2**20)
    mallopt(m_trim_threshold, 256 * 2**20)


async def _serve(args: ServerArgs, sock: socket.socket) -> None:
    host, port = sock.getsockname()[:2]
    engine = Engine(dataclasses.replace(args, port=port))  # /server_info shows the real port
    engine.start()
    runner = web.AppRunner(build_app(engine), handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    print(f"servefuzz-reference listening on http://{host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        engine.stop()


def main(argv: list[str]) -> int:
    """`servefuzz serve-reference [flags]` and `python -m servefuzz.reference [flags]`."""
    try:
        args = parse_args(argv)
    except ArgsError as e:
        print(f"servefuzz-reference: error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return int(e.code or 0)
    if args.disaggregation_mode == "pair":
        return serve_pair(args)
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, args.port))
    except OSError as e:
        print(
            f"servefuzz-reference: error: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr
        )
        return 1
    _serve_temporaries_from_the_heap()
    asyncio.run(_serve(args, sock))
    return 0
