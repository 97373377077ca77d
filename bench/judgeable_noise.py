"""The agreeing-token noise of servefuzz's tiny models on one engine in bfloat16: each
architecture's `numerics` build (random weights as drawn, the default) and its `judgeable`
build (opt-in, `models.judgeable`) beside the dense llama, in one run (issue 51).

    python bench/judgeable_noise.py --preset vllm-cpu --out /tmp/judgeable-noise.jsonl
    python bench/judgeable_noise.py --preset sglang-cpu --arch qwen3-moe
    python bench/judgeable_noise.py --table /tmp/judgeable-noise.jsonl

Each model is built in bfloat16 into servefuzz's cache (`engine_files.arch_models`, as `--model-arch`
builds it) and served by a fresh server of the preset, one at a time, which runs the same fixed
workload as a campaign executes a scenario (`trial.execute`): three scenarios (bursts of 4, 8 and
16 requests, 25 ms apart, prompts of 40-200 random tokens, half of them on one of two shared
64-token prefixes, 32 tokens each), each twice under load, then each request alone on a flushed
cache. Every pair a campaign compares (loaded against loaded and against alone:
`oracles.noise.pairs`) adds its agreeing tokens' top-k L-inf shifts (`pair_shifts`) to a
`CampaignNoise`, nothing set aside (no fault is planted: what moves is the engine's numerics on
that model). The p99 is read from its histogram pooled over every position and cache bucket
(`ShiftHistogram.quantile`: a bin's upper edge, at most 12% above the truth).

Per model it prints the p99 and max shift, the samples, the pairs whose tokens differ somewhere
(flips), the longest run of tokens two unrelated answers share by chance (`controls.chance_run`:
what a leak must beat), and the p99 as a multiple of the dense llama's. JSON lines are appended
to `--out`, one per model, so a run cut short keeps what it measured; `--table` prints them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servefuzz import engine_files
from servefuzz.errors import LaunchError, UsageError
from servefuzz.launcher import Launch, ServerProcess
from servefuzz.models import ARCHITECTURES, BUILDS, DEFAULT_BUILD
from servefuzz.oracles.controls import chance_run
from servefuzz.oracles.noise import CampaignNoise, ShiftHistogram, pairs
from servefuzz.runner import RunConfig, Runner
from servefuzz.targets import make_target
from servefuzz.trial import execute
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

__all__ = ["main", "measure", "scenarios"]

BURSTS = (4, 8, 16)
PREFIX_LEN = 64
MAX_TOKENS = 32


def scenarios(seed: int = 51) -> list[Scenario]:
    """The fixed workload: one scenario per burst size (the module docstring)."""
    out = []
    for size in BURSTS:
        builder = PromptBuilder(seed=seed + size, vocab=range(3, 2000))
        specs = []
        for i in range(size):
            shared = i % 2 == 0
            name = f"p{i % 4 // 2}" if shared else None
            length = 40 + (i * 37) % 160 + (PREFIX_LEN if shared else 0)
            prefix = PREFIX_LEN if shared else 0
            specs.append(RequestSpec(f"r{i:02d}", 25.0 * i, builder.prompt(name, prefix, length), MAX_TOKENS,
                                     prefix_name=name, prefix_len=prefix))
        out.append(Scenario(seed=seed + size, requests=tuple(specs)))
    return out


async def measure(engine: str, base_url: str, runs: int = 2) -> dict[str, Any]:
    """The workload against one server: its noise (pooled) and what else the module docstring lists."""
    noise, flips, compared, chance = CampaignNoise.empty(), 0, 0, 0
    async with Runner(make_target(engine, base_url), RunConfig(request_timeout_s=900)) as runner:
        for sc in scenarios():
            done = await execute(runner, sc, runs=runs, with_alone=True)
            if done.lost is not None:
                raise LaunchError(f"the server went away: {done.lost}")
            for p in pairs(done.loaded, done.alone):
                compared += 1
                flips += p.a.choice.token_ids != p.b.choice.token_ids
                noise = noise.with_shifts(p.shifts(), cached=p.cached)
            chance = max(chance, chance_run({s.id: s.prompt_ids for s in sc.requests}, done.alone))
    pooled = ShiftHistogram()
    for h in noise.hists.get("linf", {}).values():
        pooled = pooled.merged(h)
    return {"samples": pooled.count, "p99": pooled.quantile(0.99), "p50": pooled.quantile(0.5), "max": pooled.max,
            "pairs": compared, "flipped_pairs": flips, "chance_run": chance,
            "by_bucket_p99": {k: h.quantile(0.99) for k, h in sorted(noise.hists.get("linf", {}).items())}}


def _serve(preset: str, arch: str, build: str, log_dir: Path, profile: str | None = None) -> dict[str, Any]:
    folder = engine_files.arch_models(arch, "bfloat16", build=build)
    launch = Launch.resolve(preset, model=folder, profile=profile)
    t0 = time.monotonic()
    log = log_dir / f"{arch}-{build}.log"
    with ServerProcess(launch.argv, env=launch.env, log_path=log, start_timeout_s=launch.start_timeout_s) as srv:
        started = time.monotonic() - t0
        row = asyncio.run(measure(launch.engine, srv.base_url))
    return {"start_s": round(started, 1), "wall_s": round(time.monotonic() - t0, 1), **row}


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _table(rows: Sequence[dict[str, Any]]) -> str:
    """One line per served model; each p99 set against the dense llama's on the same preset."""
    dense = {r["preset"]: r["p99"] for r in reversed(rows) if r["arch"] == "llama" and r.get("p99") is not None}
    lines = ["| engine | model | build | samples | p99 | max | flipped pairs | chance run | p99 / dense llama's | load |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['preset']} | {r['arch']} | {r['build']} | did not run: {r['error'][:120]} | | | | | | |")
            continue
        base = dense.get(r["preset"])
        ratio = ("-" if base is None or r["p99"] is None else f"{r['p99'] / base:.2f}" if base
                 else "both 0" if r["p99"] == 0 else "dense is 0")
        lines.append(f"| {r['preset']} | {r['arch']} | {r['build']} | {r['samples']:,} | {r['p99']:.3g} | {r['max']:.3g} | "
                     f"{r['flipped_pairs']}/{r['pairs']} | {r['chance_run']} | {ratio} | {r['load']} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="vllm-cpu", help="a preset that serves Hugging Face folders (default vllm-cpu)")
    p.add_argument("--arch", action="append", choices=[a for a in ARCHITECTURES if a != "llama"],
                   help="an architecture to measure (repeatable; default: qwen3-moe, qwen3-next, gpt-oss, gemma3)")
    p.add_argument("--builds", default=",".join(BUILDS), help=f"comma-separated builds (default {','.join(BUILDS)})")
    p.add_argument("--profile", action="append", default=[], metavar="ARCH=PROFILE",
                   help="serve ARCH under the preset's PROFILE (repeatable; e.g. qwen3-next=hybrid on sglang-gpu, "
                        "whose state pool is otherwise sized from free GPU memory)")
    p.add_argument("--out", type=Path, default=Path("judgeable-noise.jsonl"))
    p.add_argument("--table", type=Path, metavar="FILE", help="print the table of a results file and exit")
    args = p.parse_args(argv)
    if args.table is not None:
        print(_table([json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]))
        return 0
    archs = args.arch or ["qwen3-moe", "qwen3-next", "gpt-oss", "gemma3"]
    builds = [b for b in args.builds.split(",") if b]
    if not set(builds) <= set(BUILDS):
        print(f"unknown build in {args.builds!r} (choose from {', '.join(BUILDS)})", file=sys.stderr)
        return 2
    profiles = dict(item.split("=", 1) for item in args.profile if "=" in item)
    if len(profiles) != len(args.profile):
        print("--profile takes ARCH=PROFILE", file=sys.stderr)
        return 2
    plan = [("llama", "dense")] + [(a, b) for a in archs for b in builds]
    logs = Path(tempfile.mkdtemp(prefix="judgeable-noise-"))
    rows = []
    for arch, build in plan:
        row: dict[str, Any] = {"preset": args.preset, "arch": arch, "build": build, "load": _load(),
                               **({"profile": profiles[arch]} if arch in profiles else {})}
        try:
            row |= _serve(args.preset, arch, DEFAULT_BUILD if build == "dense" else build, logs, profiles.get(arch))
        except (LaunchError, UsageError) as e:  # a model the engine refuses: said, and the run goes on
            row["error"] = str(e).splitlines()[0]
        row["load_after"] = _load()
        rows.append(row)
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    print(_table(rows))
    print(f"server logs: {logs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
