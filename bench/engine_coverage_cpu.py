"""Engine coverage on the real CPU engines (issue 57): what servefuzz's tracer inside vLLM's or
SGLang's processes costs, side by side in one run.

    python bench/engine_coverage_cpu.py --preset vllm-cpu --out /tmp/engcov-cpu.jsonl
    python bench/engine_coverage_cpu.py --preset sglang-cpu --passes 3

Two servers of the preset, one traced (`servers.tracing_env`, the spec's `traced` packages, as a
campaign's `--launch` starts it) and one not, both up at once, serve the same fixed scenario (16
requests on two shared prefixes, a quarter n = 2, sent together) in alternating passes, each on a
flushed cache. Per pass: requests per wall second, and per CPU-second of the server's whole
process group (from /proc: it moves much less with a shared machine's load); the ratio traced /
untraced of the medians. Also what one coverage read costs (the handshake, twice per loaded run)
and how many edges the traced server reached. JSON lines appended to `--out`; summary last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servefuzz.engines.registry import spec_of
from servefuzz.launcher import Launch, ServerProcess
from servefuzz.runner import RunConfig, Runner
from servefuzz.servers import tracing_env
from servefuzz.targets import make_target
from servefuzz.targets.base import HttpTarget
from servefuzz.targets.coverage_files import CoverageFiles
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

__all__ = ["group_cpu_seconds", "main", "scenario"]


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU seconds of every live process in group `pgid` (Linux /proc)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def scenario(requests: int) -> Scenario:
    builder = PromptBuilder(seed=7, vocab=range(3, 2000))
    specs = []
    for i in range(requests):
        name = f"p{i % 2}"
        specs.append(RequestSpec(f"r{i:02d}", 0.0, builder.prompt(name, prefix_len=48, prompt_len=48 + 8 + i % 24),
                                 max_tokens=16, prefix_name=name, prefix_len=48, n=2 if i % 4 == 1 else 1))
    return Scenario(seed=7, requests=tuple(specs))


async def _pass(runner: Runner, sc: Scenario, pgid: int, run: int) -> dict[str, float]:
    await runner.flush()
    cpu0, t0 = group_cpu_seconds(pgid), time.perf_counter()
    h = await runner.run(sc, run=run)
    wall, cpu = time.perf_counter() - t0, group_cpu_seconds(pgid) - cpu0
    assert all(r.ok for r in h.records), [r.status for r in h.records]
    n = len(sc.requests)
    return {"rps": n / wall, "rps_cpu": n / max(cpu, 1e-9), "wall_s": wall, "cpu_s": cpu}


async def measure(engine: str, plain: ServerProcess, traced: ServerProcess, files: CoverageFiles,
                  passes: int, requests: int) -> list[dict[str, Any]]:
    sc = scenario(requests)
    config = RunConfig(request_timeout_s=600)
    rows = []
    target = make_target(engine, traced.base_url)
    assert isinstance(target, HttpTarget)
    target.coverage_source = files
    async with Runner(make_target(engine, plain.base_url), config) as a, Runner(target, config) as b:
        for i in range(passes + 1):  # pass 0 warms both (first-request compilation, allocations)
            for arm, runner, srv in (("plain", a, plain), ("traced", b, traced)):
                row = {"arm": arm, "pass": i, **await _pass(runner, sc, srv.pid or 0, i)}
                if i:
                    rows.append(row)
                print(json.dumps(row), flush=True)
        t0 = time.perf_counter()
        reads = 5
        for _ in range(reads):
            reached = await b.engine_coverage()
        rows.append({"arm": "read", "read_ms": (time.perf_counter() - t0) / reads * 1000, "edges": len(reached)})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="vllm-cpu", help="vllm-cpu or sglang-cpu[@VERSION]")
    p.add_argument("--model", type=Path, help="the model to serve (default: the preset's tiny model)")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--out", type=Path, default=Path("engine-coverage-cpu.jsonl"))
    args = p.parse_args(argv)
    launch = Launch.resolve(args.preset, model=args.model)
    work = Path(tempfile.mkdtemp(prefix="engcov-cpu-"))
    files = CoverageFiles(work / "cov")
    files.reset()
    plain = ServerProcess(launch.argv, env=launch.env, log_path=work / "plain.log", start_timeout_s=launch.start_timeout_s)
    traced = ServerProcess(launch.argv, env=tracing_env(launch.env, files.folder, spec_of(launch.engine).traced),
                           log_path=work / "traced.log", start_timeout_s=launch.start_timeout_s)
    with plain, traced:
        rows = asyncio.run(measure(launch.engine, plain, traced, files, args.passes, args.requests))
    med = {arm: {k: statistics.median(r[k] for r in rows if r["arm"] == arm) for k in ("rps", "rps_cpu")}
           for arm in ("plain", "traced")}
    read = next(r for r in rows if r["arm"] == "read")
    summary = {"preset": args.preset, "passes": args.passes, "requests": args.requests,
               "plain": med["plain"], "traced": med["traced"],
               "ratio_rps": med["traced"]["rps"] / med["plain"]["rps"],
               "ratio_rps_cpu": med["traced"]["rps_cpu"] / med["plain"]["rps_cpu"],
               "read_ms": read["read_ms"], "edges": read["edges"]}
    with open(args.out, "a", encoding="utf-8") as f:
        for row in [*rows, summary]:
            f.write(json.dumps({"preset": args.preset, **row}) + "\n")
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
