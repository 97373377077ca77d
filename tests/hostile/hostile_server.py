"""A real, deliberately hostile server on 127.0.0.1: what servefuzz must survive while fuzzing.

It speaks the SGLang dialect (`/generate`, `/server_info`, `/flush_cache`, `/metrics`,
`/health`), and misbehaves in one of MODES. One process serves every mode at once, each under
its own path prefix, so a test picks a mode by its base URL:

    python tests/hostile/hostile_server.py --port 8123            # every mode, by prefix
    servefuzz fuzz --url http://127.0.0.1:8123/markup --engine sglang ...
    python -m tests.hostile.hostile_server --mode markup --port 8123   # (from the repo root)
    servefuzz fuzz --url http://127.0.0.1:8123 --engine sglang ...     # `markup` at the root too

It binds 127.0.0.1 only. `GET /stats` (no prefix, never behind auth) answers what each mode was
asked, per path, and how many requests came without the expected credentials. In tests, the
`hostile_server` fixture (tests/hostile/conftest.py) starts one for the session and gives
`url(mode)`.

Modes (what differs from a well-behaved server; `ok` is the control that misbehaves nowhere):

| mode        | misbehaviour                                                                       |
|-------------|------------------------------------------------------------------------------------|
| ok          | none                                                                               |
| markup      | token text, version and model name full of rich markup, ANSI, OSC 8 links, C1, bidi |
| http500     | /generate answers 500 with a hostile (markup + ANSI) body                          |
| nonutf8     | /generate answers 500 with a body that is not UTF-8                                |
| nonutf8-ok  | 200 answers and /server_info with bytes that are not UTF-8 inside JSON strings     |
| badjson     | /generate answers 200 with a body (or stream chunk) that is not JSON              |
| nan         | /generate answers logprobs of NaN                                                  |
| wrongshape  | /generate answers JSON of the wrong shape (`{"meta_info": 3}`, a list of ints)     |
| truncated   | /generate cuts its answer: a body shorter than its Content-Length, a stream that stops |
| oversized   | /generate answers 12 MiB: one body, or one stream line without a newline           |
| flood       | /generate streams small lines forever (each one valid)                             |
| hang        | every second /generate never answers                                               |
| drip        | /generate sends its headers at once, then its answer one byte a second              |
| hanginfo    | /server_info never answers                                                         |
| deepinfo    | /server_info is JSON nested 100,000 deep                                           |
| bigint      | /server_info holds an integer of 5,000 digits                                      |
| plant       | /server_info plants flags and faults (`"disable_radix_cache": "--host=0.0.0.0"`)   |
| auth        | every path wants `Authorization: Bearer sekrit` (401 with a hostile body otherwise) |
| flushfail   | /flush_cache always answers 503 with a hostile body                                |
| redirect    | /generate answers 302 to another address (credentials must not follow)              |
| canned      | answers what a test set with `POST /canned/_set` (for property tests): /generate's |
|             | status and body (in chunks), whether to cut the connection after it, /server_info  |
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
from collections import Counter
from typing import Any

from aiohttp import web

# Markup that crashed rich or rendered a link, ANSI, OSC, C1 and bidi controls, a lone surrogate.
HOSTILE_TEXT = (
    "[/oops] [link=http://evil.example]click[/link] \x1b[5;31mred\x1b[2J "
    "\x1b]8;;http://evil.example\x07osc8\x1b]8;;\x07 \x1b]0;pwned-title\x07 \x9b2J \u202eevil \ud800"
)
TOKEN = "sekrit"
MODES = (
    "ok", "markup", "http500", "nonutf8", "nonutf8-ok", "badjson", "nan", "wrongshape", "truncated",
    "oversized", "flood", "hang", "drip", "hanginfo", "deepinfo", "bigint", "plant", "auth", "flushfail", "redirect", "canned",
)  # fmt: skip
OVERSIZED_BYTES = 12 << 20
PLANTED: dict[str, Any] = {
    "engine": "servefuzz-reference",
    "model_path": "hostile",
    "disable_radix_cache": "--host=0.0.0.0",
    "context_length": "4096; touch /tmp/servefuzz-pwned",
    "served_model_name": "$(touch /tmp/servefuzz-pwned)",
    "max_running_requests": 8,
    "host": "0.0.0.0",
    "faults": ["--host=0.0.0.0", "overlap-war"],
}


def _dumps(obj: Any) -> bytes:
    # ensure_ascii keeps a lone surrogate writable (as the escape \ud800, which a client decodes).
    return json.dumps(obj, ensure_ascii=True).encode()


def _text(text: str, status: int = 200) -> web.Response:
    # The lone surrogate goes out as the bytes it would be (not UTF-8: hostile on its own).
    return web.Response(status=status, body=text.encode("utf-8", "surrogatepass"), content_type="text/plain")


def answer(body: dict[str, Any], text: str = "tok", logprob: float = -0.5) -> dict[str, Any]:
    """A well-formed SGLang answer to `body`: max_new_tokens tokens, ids 10, 11, ..."""
    steps = int(body.get("sampling_params", {}).get("max_new_tokens", 1))
    ids = [10 + i for i in range(steps)]
    return {
        "text": text,
        "output_ids": ids,
        "meta_info": {
            "prompt_tokens": len(body.get("input_ids", ())),
            "completion_tokens": steps,
            "cached_tokens": 0,
            "finish_reason": {"type": "length", "length": steps},
            "output_token_logprobs": [[logprob, t, None] for t in ids],
            "output_top_logprobs": [[[logprob, t, None], [logprob - 1, t + 1, None]] for t in ids],
        },
    }


def make_app(root_mode: str | None = None) -> web.Application:
    """The server: every mode under `/<mode>/...`, and `root_mode` (if given) at `/...` too."""
    stats: dict[str, Any] = {"paths": Counter(), "unauthorized": Counter()}
    generate_calls: Counter[str] = Counter()
    canned: dict[str, Any] = {"status": 200, "chunks": [b"{}"], "cut": False, "info": None}

    async def stats_handler(_: web.Request) -> web.Response:
        return web.json_response({k: dict(v) for k, v in stats.items()})

    async def dispatch(request: web.Request) -> web.StreamResponse:
        tail = request.match_info["tail"]
        head, _, rest = tail.partition("/")
        if head in MODES:
            mode, path = head, "/" + rest
        elif root_mode is not None:
            mode, path = root_mode, "/" + tail
        else:
            return web.Response(status=404, text="no such mode")
        stats["paths"][f"{mode} {request.method} {path}"] += 1
        if mode == "auth" and request.headers.get("Authorization") != f"Bearer {TOKEN}":
            stats["unauthorized"][f"{request.method} {path}"] += 1
            return _text(f"unauthorized {HOSTILE_TEXT}", 401)
        if path == "/health":
            return web.Response(text="ok")
        if mode == "canned" and path == "/_set":
            d = await request.json()
            canned.update(status=int(d["status"]), cut=bool(d.get("cut")),
                          chunks=[base64.b64decode(c) for c in d["chunks"]],
                          info=None if d.get("info") is None else base64.b64decode(d["info"]))
            return web.Response(text="set")
        if mode == "canned" and path in ("/server_info", "/get_server_info") and canned["info"] is not None:
            return web.Response(body=canned["info"], content_type="application/json")
        if mode == "canned" and path == "/generate":
            return await canned_answer(request)
        if path in ("/server_info", "/get_server_info"):
            return await server_info(mode)
        if path == "/flush_cache":
            if mode == "flushfail":
                return _text(f"busy {HOSTILE_TEXT}", 503)
            return web.Response(text="flushed")
        if path == "/metrics":
            return web.Response(body=b"# TYPE x counter\nsglang:x 1\n" + (b"\xff\xfe\x80 junk\n" if mode != "ok" else b""))
        if path == "/generate" and request.method == "POST":
            generate_calls[mode] += 1
            return await generate(request, mode, generate_calls[mode])
        return _text(f"not found {HOSTILE_TEXT}", 404)

    async def server_info(mode: str) -> web.StreamResponse:
        info: dict[str, Any] = {"model_path": "hostile", "page_size": 16, "version": "hostile-1", "max_total_num_tokens": 4096}
        if mode == "markup":
            info |= {"version": HOSTILE_TEXT, "model_path": HOSTILE_TEXT, "served_model_name": HOSTILE_TEXT}
        elif mode == "nonutf8-ok":
            return web.Response(body=b'{"model_path": "host\xffile", "page_size": 16, "version": "v\x80\xfe"}',
                                content_type="application/json")
        elif mode == "hanginfo":
            await asyncio.sleep(3600)
        elif mode == "deepinfo":
            return web.Response(body=b"[" * 100_000 + b"]" * 100_000, content_type="application/json")
        elif mode == "bigint":
            return web.Response(body=b'{"model_path": "h", "page_size": 1' + b"0" * 5000 + b"}", content_type="application/json")
        elif mode == "plant":
            info |= PLANTED
        return web.Response(body=_dumps(info), content_type="application/json")

    async def generate(request: web.Request, mode: str, call: int) -> web.StreamResponse:
        body = await request.json()
        stream = bool(body.get("stream"))
        if mode == "redirect":
            # Port 9 (discard) on this host: were the client to follow, it would still stay local.
            raise web.HTTPFound(location="http://127.0.0.1:9/steal")
        if mode == "http500":
            return _text(f"Internal Server Error: {HOSTILE_TEXT}", 500)
        if mode == "nonutf8":
            return web.Response(status=500, body=b"\xff\xfe\x80 internal error \x1b[5;31m\xc3(")
        if mode == "hang" and call % 2 == 0:
            await asyncio.sleep(3600)
        if mode == "badjson":
            return await send(request, stream, [b'{"text": "unterminated'])
        if mode == "wrongshape":
            return await send(request, stream, [b'{"meta_info": 3}' if call % 2 else b"[1, 2, 3]"])
        if mode == "oversized":
            return await oversized(request, stream)
        if mode == "truncated":
            return await truncated(request, stream, body)
        if mode == "flood":
            return await flood(request, body)
        if mode == "drip":
            return await drip(request, stream, _dumps(answer(body)))
        text = HOSTILE_TEXT if mode == "markup" else "tok"
        payload = _dumps(answer(body, text=text))
        if mode == "nan":
            payload = payload.replace(b"-0.5", b"NaN")
        if mode == "nonutf8-ok":
            payload = payload.replace(b'"tok"', b'"t\xffo\x80k"')
        return await send(request, stream, [payload])

    async def canned_answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(status=canned["status"], headers={"Content-Type": "application/octet-stream"})
        await resp.prepare(request)
        try:
            for chunk in canned["chunks"]:
                await resp.write(chunk)
            if canned["cut"]:
                assert request.transport is not None
                request.transport.close()
            else:
                await resp.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass
        return resp

    async def send(request: web.Request, stream: bool, payloads: list[bytes]) -> web.StreamResponse:
        if not stream:
            return web.Response(body=payloads[0], content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for p in payloads:
            await resp.write(b"data: " + p + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def oversized(request: web.Request, stream: bool) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream" if stream else "application/json"})
        await resp.prepare(request)
        block = b"a" * (1 << 20)
        try:
            await resp.write(b'data: {"text": "' if stream else b'{"text": "')
            for _ in range(OVERSIZED_BYTES // len(block)):  # one line, no newline anywhere
                await resp.write(block)
            await resp.write(b'"}\n\n' if stream else b'"}')
        except (ConnectionResetError, ConnectionError):
            pass  # the client stopped reading at its cap, as it should
        return resp

    async def truncated(request: web.Request, stream: bool, body: dict[str, Any]) -> web.StreamResponse:
        if not stream:
            resp = web.StreamResponse(headers={"Content-Type": "application/json", "Content-Length": "1000"})
            await resp.prepare(request)
            await resp.write(b'{"text": "cut')
        else:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            one = answer(body)
            one["meta_info"]["finish_reason"] = None
            await resp.write(b"data: " + _dumps(one) + b"\n\n")
        assert request.transport is not None
        request.transport.close()  # the server goes away mid-answer
        return resp

    async def flood(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        one = answer(body)
        one["meta_info"]["finish_reason"] = None
        line = b"data: " + _dumps(one) + b"\n\n"
        try:
            while True:
                await resp.write(line * 64)
        except (ConnectionResetError, ConnectionError):
            return resp

    async def drip(request: web.Request, stream: bool, payload: bytes) -> web.StreamResponse:
        # Every read gets a byte within a second, so only a deadline on the whole request (not
        # one on the gaps between reads) ever ends it: a 1 KB answer takes 17 minutes.
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream" if stream else "application/json"})
        await resp.prepare(request)
        whole = b"data: " + payload + b"\n\ndata: [DONE]\n\n" if stream else payload
        try:
            for i in range(len(whole)):
                await resp.write(whole[i : i + 1])
                await asyncio.sleep(1.0)
            await resp.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass  # the client gave up, as it should
        return resp

    app = web.Application()
    app.add_routes([web.get("/stats", stats_handler), web.route("*", "/{tail:.*}", dispatch)])
    return app


def main() -> None:
    p = argparse.ArgumentParser(description="A hostile SGLang-dialect server for servefuzz's tests (127.0.0.1 only).")
    p.add_argument("--mode", choices=MODES, help="also serve this mode at the root (every mode is under /<mode>/)")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    web.run_app(make_app(args.mode), host="127.0.0.1", port=args.port, handler_cancellation=True, print=None,
                access_log=None)


if __name__ == "__main__":
    main()
