"""How fast and how punctual servefuzz's runner is, against a server that costs (almost) nothing.

    python bench/driver.py            # about 20 s; prints the tables for docs/benchmarks.md
    python bench/driver.py --quick    # a smaller run, for a smoke check

Two measurements, each side by side in this one run (alternating rounds, so the machine's
load affects both arms alike):

1. Throughput: N requests all due at once, through a 256-connection pool, against a minimal
   aiohttp server (another process) that answers an SGLang-shaped completion instantly.
   servefuzz's `Runner` (adapter, records, timing) vs a bare aiohttp loop doing the same HTTP
   and JSON work. Target: runner >= 0.8x the bare loop.
2. Punctuality: requests at seeded random offsets against the same server holding each answer
   `hold` ms, so that about 256 are in flight at any time; send time minus scheduled time,
   p50/p99/max. The runner's sleep-then-spin vs sleep alone (`spin_ms=0`). Target: p99 < 2 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence

import aiohttp
from aiohttp import web

from servefuzz.launcher import ServerProcess
from servefuzz.runner import RunConfig, Runner
from servefuzz.targets import make_target
from servefuzz.workload import RequestSpec, Scenario

__all__ = ["main"]

POOL = 256
PROMPT = tuple(range(100, 164))  # 64 tokens: a realistic body to serialise


def _answer() -> bytes:
    """A 4-token SGLang answer with top-5 logprobs, built once: the server does no work."""
    triples = [[-0.1 * i, 10 + i, None] for i in range(4)]
    top = [[[-0.1 * i - 0.01 * j, 10 + i + j, None] for j in range(5)] for i in range(4)]
    return json.dumps(
        {
            "text": "abcd",
            "output_ids": [10, 11, 12, 13],
            "meta_info": {
                "prompt_tokens": len(PROMPT),
                "completion_tokens": 4,
                "cached_tokens": 0,
                "finish_reason": {"type": "length", "length": 4},
                "output_token_logprobs": triples,
                "output_top_logprobs": top,
            },
        }
    ).encode()


def serve(port: int, hold_ms: float) -> None:
    body = _answer()

    async def generate(request: web.Request) -> web.Response:
        await request.read()
        if hold_ms:
            await asyncio.sleep(hold_ms / 1000)
        return web.Response(body=body, content_type="application/json")

    async def info(_: web.Request) -> web.Response:
        return web.json_response({"version": "bench", "page_size": 16})

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.add_routes(
        [web.post("/generate", generate), web.get("/server_info", info), web.get("/health", health)]
    )
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, backlog=4096)


def _scenario(n: int, window_ms: float, seed: int) -> Scenario:
    rng = random.Random(seed)
    return Scenario(
        seed=seed,
        requests=tuple(
            RequestSpec(f"r{i:05d}", rng.uniform(0, window_ms), PROMPT, max_tokens=4) for i in range(n)
        ),
    )


async def _runner_rate(url: str, sc: Scenario) -> float:
    async with Runner(make_target("sglang", url), RunConfig(max_connections=POOL)) as r:
        t = time.perf_counter()
        h = await r.run(sc, run=0)
        dt = time.perf_counter() - t
    assert all(rec.ok for rec in h.records), {rec.status for rec in h.records}
    return len(h.records) / dt


async def _bare_rate(url: str, n: int) -> float:
    """The floor: one session, the same pool, the same body, read and decode the answer."""
    target = make_target("sglang", url)
    body = target.body(RequestSpec("x", 0.0, PROMPT, max_tokens=4), top_k=5)  # type: ignore[attr-defined]

    async def one(s: aiohttp.ClientSession) -> None:
        async with s.post(url + "/generate", json=body) as resp:
            json.loads(await resp.read())

    conn = aiohttp.TCPConnector(limit=POOL)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=120)) as s:
        await one(s)  # same as the runner's server_info call: one connection already open
        t = time.perf_counter()
        await asyncio.gather(*(one(s) for _ in range(n)))
        return n / (time.perf_counter() - t)


async def _send_errors(url: str, sc: Scenario, spin_ms: float) -> list[float]:
    async with Runner(make_target("sglang", url), RunConfig(max_connections=4 * POOL, spin_ms=spin_ms)) as r:
        h = await r.run(sc, run=0)
    assert all(rec.ok for rec in h.records), {rec.status for rec in h.records}
    return [rec.send_error_ms for rec in h.records if rec.send_error_ms is not None]


def _pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer requests and rounds")
    p.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    p.add_argument("--hold-ms", type=float, default=0.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.serve, args.hold_ms)
        return 0

    n_rate, rounds = (1000, 2) if args.quick else (4000, 4)
    # 1024 requests over 2 s, each held 500 ms: about 256 in flight throughout.
    n_timed, window_ms, hold_ms = (256, 500.0, 500.0) if args.quick else (1024, 2000.0, 500.0)
    me = [sys.executable, __file__, "--serve", "{port}"]
    with ServerProcess(me) as instant, ServerProcess([*me, "--hold-ms", str(hold_ms)]) as held:
        runner_rates, bare_rates = [], []
        for _ in range(rounds):
            bare_rates.append(asyncio.run(_bare_rate(instant.base_url, n_rate)))
            runner_rates.append(asyncio.run(_runner_rate(instant.base_url, _scenario(n_rate, 0.0, 1))))
        sc = _scenario(n_timed, window_ms, 2)
        spin, sleep_only = [], []
        for _ in range(rounds // 2):
            spin += asyncio.run(_send_errors(held.base_url, sc, spin_ms=1.0))
            sleep_only += asyncio.run(_send_errors(held.base_url, sc, spin_ms=0.0))

    rb, rr = statistics.median(bare_rates), statistics.median(runner_rates)
    print(f"## throughput: {n_rate} requests due at once, pool {POOL}, median of {rounds} rounds")
    print(f"bare aiohttp loop   {rb:8.0f} req/s")
    print(f"servefuzz Runner    {rr:8.0f} req/s")
    print(f"ratio runner/bare   {rr / rb:8.2f}x   (target >= 0.8x)")
    print()
    print(
        f"## send time - scheduled time, {n_timed} requests over {window_ms:.0f} ms, answers held "
        f"{hold_ms:.0f} ms (~{n_timed * hold_ms / window_ms:.0f} in flight), {len(spin)} sends per arm"
    )
    print(f"{'':20s}{'p50 ms':>9s}{'p99 ms':>9s}{'max ms':>9s}")
    for name, xs in (("sleep + 1 ms spin", spin), ("sleep only", sleep_only)):
        print(f"{name:20s}{_pct(xs, 0.5):9.3f}{_pct(xs, 0.99):9.3f}{max(xs):9.3f}")
    print("target: p99 < 2 ms with the spin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
