"""Throughput and start-up of the embedded reference engine, over real HTTP on 127.0.0.1.

    python bench/reference_engine.py [--prompt-len 128] [--max-tokens 128] [--levels 1 8 32 128]

Starts `python -m servefuzz.reference --port 0` (default flags plus any `--flag` after `--`),
times start-up to the "listening" line and to a healthy `/health`, then for each concurrency
level keeps that many `/generate` requests in flight (temperature 0, ignore_eos, non-streaming)
until 2x the level (at least 8) have completed. Prints generated tokens/s per level and its ratio
to concurrency 1, all measured side by side in one run, as a markdown table.

On a machine shared with other work, wall-clock rates move with the load; the table also gives
tokens per CPU-second of the server process (from /proc), which moves much less: it is roughly
the rate of an idle machine, since the server works mostly on one core (the engine thread; the
event loop is idle for non-streaming requests). The load average is printed with the results.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import time
import urllib.request

import aiohttp


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(extra: list[str]) -> tuple[subprocess.Popen[str], str, float, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "servefuzz.reference", "--port", "0", *extra],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    t_listen = time.perf_counter() - t0
    if "listening on " not in line:
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    url = line.split("listening on ", 1)[1]
    with urllib.request.urlopen(url + "/health", timeout=10) as resp:
        assert resp.status == 200
    return proc, url, t_listen, time.perf_counter() - t0


async def level(url: str, concurrency: int, prompt_len: int, max_tokens: int, seed: int) -> tuple[float, int]:
    total = max(2 * concurrency, 8)
    rng = random.Random(seed)
    bodies = [
        {
            "input_ids": [rng.randrange(3, 1024) for _ in range(prompt_len)],
            "sampling_params": {"temperature": 0, "max_new_tokens": max_tokens, "ignore_eos": True},
        }
        for _ in range(total)
    ]
    generated = 0
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as session:

        async def worker() -> None:
            nonlocal generated
            while bodies:
                body = bodies.pop()
                async with session.post(url + "/generate", json=body) as resp:
                    out = await resp.json()
                    assert resp.status == 200, out
                generated += len(out["output_ids"])

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    return generated / elapsed, generated


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32, 128])
    p.add_argument("server_flags", nargs="*", help="after --: extra server flags")
    a = p.parse_args()
    proc, url, t_listen, t_healthy = start_server(a.server_flags)
    try:
        rows = []
        for i, c in enumerate(a.levels):
            cpu = cpu_seconds(proc.pid)
            tps, n = asyncio.run(level(url, c, a.prompt_len, a.max_tokens, seed=i))
            rows.append((c, tps, n, n / (cpu_seconds(proc.pid) - cpu)))
    finally:
        os.killpg(proc.pid, 15)  # our own child's group only
        proc.wait(timeout=10)
    base = rows[0][1]
    print(
        f"server flags: {' '.join(a.server_flags) or '(defaults)'}; prompt {a.prompt_len} tokens, "
        f"{a.max_tokens} generated per request; {os.cpu_count()} CPUs"
    )
    print(f"start-up: {t_listen:.2f} s to the listening line, {t_healthy:.2f} s to a healthy /health")
    print(f"load average after the run (1, 5, 15 min): {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| concurrent requests | generated tokens/s (wall) | ratio to 1 | tokens per server CPU-second | tokens |")
    print("|---:|---:|---:|---:|---:|")
    for c, tps, n, per_cpu in rows:
        print(f"| {c} | {tps:,.0f} | {tps / base:.1f}x | {per_cpu:,.0f} | {n} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
