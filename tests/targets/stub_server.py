"""A small, real SGLang-dialect server that misbehaves on purpose, for the runner's error paths.

    python tests/targets/stub_server.py --mode http500 --port 8123

Modes (what `/generate` does; `/health` always answers 200):
- `http500`: answers 500 with a short message.
- `garbage`: answers 200 with a body that is not JSON.
- `down`:    `/server_info` and `/generate` both answer 500 (the target is unusable).
- `hang`:    never finishes; a streaming request first gets one chunk with one token. The whole
             server is wedged: it answers no request at all.
- `hang-long`: a request for more than one token hangs as in `hang`; one for a single token is
             answered as in `delta`: some requests hang, the server still answers.
- `delta`:   answers like SGLang with `--incremental-streaming-output`: each stream chunk holds
             only the new token (ids, logprob triples, text); without streaming, one dict per
             choice in a list (as for `n > 1`). Output token i (from 1) of choice c is 10*c + i.
- `crash`:   the process exits (status 3) on the first `/generate`, as a server that crashes
             on a request does; `/flush_cache` answers 200 so that replays get that far.
- `openai`:  `/v1/completions` answering 3 tokens (ids 40, 41, 42; texts "a", "b", "c") in the
             style the request's `model` names: `ids` (a `token_ids` list, text keys),
             `prefixed` (vLLM's `token_id:N` spelling only) or `text` (strings only). Streams
             send one token per chunk, then a usage-only chunk, then `data: [DONE]`.
`GET /stats` says how many `/generate` calls are in flight and how many the client cut.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

from aiohttp import web

MODES = ("http500", "garbage", "down", "hang", "hang-long", "delta", "openai", "crash")


def make_app(mode: str) -> web.Application:
    stats = {"inflight": 0, "cut": 0}

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def server_info(_: web.Request) -> web.Response:
        if mode == "down":
            return web.Response(status=500, text="internal error")
        return web.json_response({"version": "stub", "page_size": 16})

    async def get_stats(_: web.Request) -> web.Response:
        return web.json_response(stats)

    async def generate(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if mode == "crash":
            os._exit(3)
        if mode in ("http500", "down"):
            return web.Response(status=500, text="Internal Server Error: boom")
        if mode == "garbage":
            return web.Response(text='{"text": "unterminated', content_type="application/json")
        if mode == "delta" or (mode == "hang-long" and body["sampling_params"]["max_new_tokens"] == 1):
            return await delta(request, body)
        stats["inflight"] += 1
        try:
            if body.get("stream"):
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                chunk = {
                    "text": "a",
                    "output_ids": [7],
                    "meta_info": {"completion_tokens": 1, "finish_reason": None},
                }
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await asyncio.sleep(3600)
            raise AssertionError("unreachable: the test ends this request")
        except asyncio.CancelledError:
            stats["cut"] += 1  # the client disconnected (handler cancellation is on)
            raise
        finally:
            stats["inflight"] -= 1

    async def delta(request: web.Request, body: dict) -> web.StreamResponse:
        n, steps = body["sampling_params"]["n"], body["sampling_params"]["max_new_tokens"]

        def meta(c: int, first: int, upto: int) -> dict:
            return {
                "prompt_tokens": len(body["input_ids"]),
                "cached_tokens": 2 + c,
                "completion_tokens": upto,
                "finish_reason": {"type": "length", "length": steps} if upto == steps else None,
                "output_token_logprobs": [[-0.5, 10 * c + i, None] for i in range(first, upto + 1)],
                "output_top_logprobs": [
                    [[-0.5, 10 * c + i, None], [-1.5, 99, None]] for i in range(first, upto + 1)
                ],
            }

        if not body.get("stream"):
            return web.json_response(
                [
                    {
                        "index": c,
                        "text": "x" * steps,
                        "output_ids": [10 * c + i for i in range(1, steps + 1)],
                        "meta_info": meta(c, 1, steps),
                    }
                    for c in range(n)
                ]
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(1, steps + 1):
            chunk = {"text": "x", "output_ids": [i], "meta_info": meta(0, i, i)}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        style = body["model"]
        ids, texts = [40, 41, 42], ["a", "b", "c"]

        def name(i: int) -> str:
            return f"token_id:{ids[i]}" if style == "prefixed" else texts[i]

        def choice(idx: range) -> dict:
            c = {
                "index": 0,
                "text": "".join(texts[i] for i in idx),
                "finish_reason": "length" if idx[-1] == 2 else None,
                "logprobs": {
                    "tokens": [name(i) for i in idx],
                    "token_logprobs": [-0.25 for _ in idx],
                    # the chosen token, an alternative with an id (vLLM) and one with text only
                    "top_logprobs": [{name(i): -0.25, "token_id:7": -2.0, "zz": -3.0} for i in idx],
                },
            }
            if style == "ids":
                c["token_ids"] = [ids[i] for i in idx]
            return c

        usage = {
            "prompt_tokens": len(body["prompt"]),
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 16},
        }
        if not body.get("stream"):
            return web.json_response({"choices": [choice(range(3))], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in [{"choices": [choice(range(i, i + 1))], "usage": None} for i in range(3)] + [
            {"choices": [], "usage": usage}
        ]:
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def flush_cache(_: web.Request) -> web.Response:
        return web.Response(text="Cache flushed.")

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "ids", "max_model_len": 2048}]})

    app = web.Application()
    app.add_routes(
        [
            web.post("/v1/completions", completions),
            web.get("/v1/models", models),
            web.get("/health", health),
            web.get("/server_info", server_info),
            web.get("/stats", get_stats),
            web.post("/generate", generate),
        ]
    )
    if mode == "crash":
        app.add_routes([web.post("/flush_cache", flush_cache)])
    return app


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    web.run_app(make_app(args.mode), host="127.0.0.1", port=args.port, handler_cancellation=True, print=None)


if __name__ == "__main__":
    main()
