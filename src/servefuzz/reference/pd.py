"""The prefill/decode pair: a router in front of one prefill and one decode server.

    $ servefuzz serve-reference --port 0 --disaggregation-mode pair
    servefuzz-reference listening on http://127.0.0.1:40123

`--disaggregation-mode pair` starts, in order, a prefill server (`--disaggregation-mode prefill`)
and a decode server (`--disaggregation-mode decode`, told the prefill server's port), each a
reference engine with the pair's own flags on a port of 127.0.0.1, waits until both answer
/health, and only then listens itself. The three are one process group: whoever stops the
router's group stops all three, and a child that dies takes the router down with it (so a
crash is a crash of the whole pair, restarted together).

A generate call (SGLang's `/generate` or OpenAI's `/v1/completions`) goes to the prefill server
first (its prompt, cache key and adapter, one token), which keeps the prompt's KV; then the
call itself goes to the decode server with the transfer's id (`kv_transfer_params`, vLLM's
field), which pulls that KV from the prefill server (`transfer`) and answers: the router passes
the decode server's answer on, streamed or not. A call the pair cannot split (no token to make,
no list of ids) goes to the decode server alone, which answers it as one server would.

The other endpoints speak for the pair: /flush_cache and /abort_request reach both servers;
/metrics is both servers' series, each with its `role` label ("prefill", "decode"), so a
client reads each one's meters; /coverage sums both engines' maps; /server_info is the decode
server's with the pair's own args, and says which server is where (`disaggregation`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from servefuzz.reference.server_args import ServerArgs

__all__ = ["TRANSFER_BACKEND", "serve_pair"]

# How the KV moves: the decode server pulls it from the prefill server over HTTP on 127.0.0.1.
TRANSFER_BACKEND = "http-pull"
_SESSION = web.AppKey("session", aiohttp.ClientSession)
_PAIR = web.AppKey("pair", dict)
_HEALTH_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """Runs in a child before exec: SIGTERM when the router goes, however it goes."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _start(args: ServerArgs, mode: str, port: int, peer: int = 0) -> subprocess.Popen[bytes]:
    side = dataclasses.replace(args, host="127.0.0.1", port=port, disaggregation_mode=mode, disaggregation_peer_port=peer)
    argv = [sys.executable, "-m", "servefuzz.reference", "--host", "127.0.0.1", "--port", str(port), *side.to_argv()]
    # The same process group as the router (no new session), its output into the router's log.
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)  # noqa: PLW1509, S603


def _wait_healthy(proc: subprocess.Popen[bytes], port: int, name: str) -> None:
    deadline = time.monotonic() + _HEALTH_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the {name} server exited with code {proc.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:  # noqa: S310 - 127.0.0.1
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"the {name} server was not healthy after {_HEALTH_S:.0f} s")


# -- proxying ----------------------------------------------------------------------------------


def _url(request: web.Request, role: str, path: str) -> str:
    return f"http://127.0.0.1:{request.app[_PAIR][role]['port']}{path}"


async def _pass_on(request: web.Request, up: aiohttp.ClientResponse) -> web.StreamResponse:
    """The decode server's answer as the client's: streamed chunk by chunk, or whole."""
    if up.content_type == "text/event-stream":
        resp = web.StreamResponse(status=up.status, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        async for chunk in up.content.iter_any():
            await resp.write(chunk)
        await resp.write_eof()
        return resp
    return web.Response(status=up.status, body=await up.read(), content_type=up.content_type)


def _error(message: str, status: int) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "BadRequestError", "code": status}}, status=status)


async def _split(request: web.Request, prefill_body: dict[str, Any] | None, body: dict[str, Any]) -> web.StreamResponse:
    """Prefill first (when the call can be split), then the call itself on the decode server."""
    session = request.app[_SESSION]
    path = request.path
    if prefill_body is not None:
        async with session.post(_url(request, "prefill", "/generate"), json=prefill_body) as up:
            if up.status != 200:  # a bad request is the prefill server's to refuse first
                return web.Response(status=up.status, body=await up.read(), content_type=up.content_type)
            answer = await up.json()
        tid = ((answer.get("meta_info") or {}).get("kv_transfer_params") or {}).get("transfer_id") \
            if isinstance(answer, dict) else None
        if not isinstance(tid, str):
            return _error("the prefill server answered without a transfer", 502)
        body = {**body, "kv_transfer_params": {"transfer_id": tid}}
    async with session.post(_url(request, "decode", path), json=body) as up:
        return await _pass_on(request, up)


async def _body(request: web.Request) -> dict[str, Any] | web.Response:
    try:
        body = json.loads(await request.read())
    except (ValueError, RecursionError):
        return _error("request body is not valid JSON", 400)
    if not isinstance(body, dict):
        return _error("request body must be a JSON object", 400)
    if "kv_transfer_params" in body:
        return _error("kv_transfer_params is the router's to set", 400)
    return body


def _prefill_of(ids: Any, tokens: Any, extra: dict[str, Any]) -> dict[str, Any] | None:
    """The prefill server's call for a prompt: one token (the decode server makes the answer's),
    greedy, under the same cache key and adapter; None where the call makes no token."""
    if not isinstance(ids, list) or not ids or (isinstance(tokens, int) and tokens < 1):
        return None
    return {"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "kv_transfer_params": {"do_remote_decode": True}, **{k: v for k, v in extra.items() if v is not None}}


async def generate(request: web.Request) -> web.StreamResponse:
    body = await _body(request)
    if isinstance(body, web.Response):
        return body
    sp = body.get("sampling_params")
    sp = sp if isinstance(sp, dict) else {}
    extra = {"extra_key": body.get("extra_key"), "lora_path": body.get("lora_path"), "rid": body.get("rid")}
    return await _split(request, _prefill_of(body.get("input_ids"), sp.get("max_new_tokens", 128), extra), body)


async def completions(request: web.Request) -> web.StreamResponse:
    body = await _body(request)
    if isinstance(body, web.Response):
        return body
    model = body.get("model")
    adapter = model if isinstance(model, str) and model != request.app[_PAIR]["served_model_name"] else None
    extra = {"extra_key": body.get("cache_salt"), "lora_path": adapter}
    return await _split(request, _prefill_of(body.get("prompt"), body.get("max_tokens", 16), extra), body)


async def _both(request: web.Request, path: str) -> list[tuple[int, bytes]]:
    data = await request.read()
    session = request.app[_SESSION]

    async def one(role: str) -> tuple[int, bytes]:
        async with session.request(request.method, _url(request, role, path), data=data,
                                   headers={"Content-Type": request.content_type}) as up:
            return up.status, await up.read()

    return list(await asyncio.gather(one("prefill"), one("decode")))


async def flush_cache(request: web.Request) -> web.Response:
    answers = await _both(request, "/flush_cache")
    bad = next(((status, text) for status, text in answers if status != 200), None)
    if bad is not None:
        return web.Response(status=bad[0], body=bad[1])
    return web.Response(text="Cache flushed.\n")


async def abort_request(request: web.Request) -> web.Response:
    answers = await _both(request, "/abort_request")
    bad = next(((status, text) for status, text in answers if status != 200), None)
    return web.Response(status=bad[0], body=bad[1]) if bad is not None else web.Response(text="")


async def _get(request: web.Request, role: str, path: str) -> tuple[int, bytes, str]:
    async with request.app[_SESSION].get(_url(request, role, path)) as up:
        return up.status, await up.read(), up.content_type


async def forward_decode(request: web.Request) -> web.Response:
    """What the decode server says for the pair: model cards, model info."""
    status, body, kind = await _get(request, "decode", request.path)
    return web.Response(status=status, body=body, content_type=kind)


async def health(request: web.Request) -> web.Response:
    answers = await asyncio.gather(*(_get(request, role, "/health") for role in ("prefill", "decode")))
    bad = next((a for a in answers if a[0] != 200), None)
    return web.Response(text="OK\n") if bad is None else web.Response(status=503, text="a server of the pair is unwell\n")


async def server_info(request: web.Request) -> web.Response:
    status, body, _ = await _get(request, "decode", "/server_info")
    if status != 200:
        return web.Response(status=status, body=body)
    pair = request.app[_PAIR]
    info = {**json.loads(body), **pair["args"].to_json()}
    info["disaggregation"] = {"transfer_backend": TRANSFER_BACKEND,
                              **{role: {"port": pair[role]["port"], "pid": pair[role]["pid"]} for role in ("prefill", "decode")}}
    return web.json_response(info)


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?(\s.*)$")


def _labelled(text: str, role: str) -> list[str]:
    """One server's /metrics samples with its `role` label added.

    >>> _labelled('# TYPE a counter\\na{model_name="m"} 3\\nb 4\\n', "decode")
    ['# TYPE a counter', 'a{role="decode",model_name="m"} 3', 'b{role="decode"} 4']
    """
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if line.startswith("#") or m is None:
            out.append(line)
            continue
        labels = m.group(2)[1:-1] if m.group(2) else ""
        out.append(f'{m.group(1)}{{role="{role}"{"," + labels if labels else ""}}}{m.group(3)}')
    return out


async def metrics(request: web.Request) -> web.Response:
    lines: list[str] = []
    seen: set[str] = set()
    for role in ("prefill", "decode"):
        status, body, _ = await _get(request, role, "/metrics")
        if status != 200:
            return web.Response(status=502, text=f"the {role} server's /metrics answered {status}\n")
        for line in _labelled(body.decode(errors="replace"), role):
            if line.startswith("#"):
                if line in seen:
                    continue  # HELP and TYPE once per name
                seen.add(line)
            lines.append(line)
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8")


async def coverage(request: web.Request) -> web.Response:
    """Both engines' coverage maps, summed (the same code, traced in two processes)."""
    answers = [await _get(request, role, "/coverage") for role in ("prefill", "decode")]
    bad = next((a for a in answers if a[0] != 200), None)
    if bad is not None:
        return web.Response(status=bad[0], body=bad[1], content_type=bad[2])
    maps = [json.loads(body) for _, body, _ in answers]
    points: dict[str, int] = {}
    for m in maps:
        for p, n in m["points"].items():
            points[p] = points.get(p, 0) + n
    return web.json_response({**maps[1], "points": points})


def build_router(args: ServerArgs, prefill: dict[str, Any], decode: dict[str, Any]) -> web.Application:
    app = web.Application(client_max_size=8 * 2**20)
    app[_PAIR] = {"args": args, "prefill": prefill, "decode": decode, "served_model_name": args.served_model_name}

    async def session(app: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)) as s:
            app[_SESSION] = s
            yield

    app.cleanup_ctx.append(session)
    app.add_routes([
        web.post("/generate", generate),
        web.post("/v1/completions", completions),
        web.post("/flush_cache", flush_cache),
        web.get("/flush_cache", flush_cache),
        web.post("/abort_request", abort_request),
        web.get("/server_info", server_info),
        web.get("/get_server_info", server_info),
        web.get("/get_model_info", forward_decode),
        web.get("/v1/models", forward_decode),
        web.get("/health", health),
        web.get("/metrics", metrics),
        web.get("/coverage", coverage),
    ])
    return app


async def _route(args: ServerArgs, sock: socket.socket, children: dict[str, subprocess.Popen[bytes]],
                 ports: dict[str, int]) -> int:
    host, port = sock.getsockname()[:2]
    args = dataclasses.replace(args, port=port)
    sides = {role: {"port": ports[role], "pid": children[role].pid} for role in children}
    runner = web.AppRunner(build_router(args, sides["prefill"], sides["decode"]), handler_cancellation=True,
                           access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    print(f"servefuzz-reference listening on http://{host}:{port} (prefill :{ports['prefill']}, decode :{ports['decode']})",
          flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    code = 0
    try:
        while not stop.is_set():
            dead = next((role for role, p in children.items() if p.poll() is not None), None)
            if dead is not None:
                print(f"servefuzz-reference: the {dead} server exited with code {children[dead].returncode}; "
                      "the pair goes down with it", file=sys.stderr, flush=True)
                code = 1
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
    finally:
        await runner.cleanup()
    return code


def serve_pair(args: ServerArgs) -> int:
    """`--disaggregation-mode pair`: the router, after its prefill and decode servers."""
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, args.port))
    except OSError as e:
        print(f"servefuzz-reference: error: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return 1
    children: dict[str, subprocess.Popen[bytes]] = {}
    ports = {"prefill": _free_port(), "decode": _free_port()}
    try:
        children["prefill"] = _start(args, "prefill", ports["prefill"])
        _wait_healthy(children["prefill"], ports["prefill"], "prefill")
        children["decode"] = _start(args, "decode", ports["decode"], peer=ports["prefill"])
        _wait_healthy(children["decode"], ports["decode"], "decode")
        return asyncio.run(_route(args, sock, children, ports))
    except RuntimeError as e:
        print(f"servefuzz-reference: error: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        for p in children.values():
            if p.poll() is None:
                p.terminate()
        for p in children.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
