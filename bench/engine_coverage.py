"""Engine coverage (issue 57): what the tracer costs the reference engine, and what steering by it
buys a campaign, side by side on the same seeds in one run.

    python bench/engine_coverage.py                          # 2 seeds, 90 s per campaign arm
    python bench/engine_coverage.py --seeds 3 --budget-s 300 --out /tmp/engcov.jsonl
    python bench/engine_coverage.py --skip cost --seeds 3 --budget-s 300 --side-by-side   # both arms at once
    python bench/engine_coverage.py --skip cost --seeds 3 --budget-requests 1500          # per request
    python bench/engine_coverage.py --skip cost --seeds 3 --budget-s 300 --side-by-side --arms off,off,fast
    python bench/engine_coverage.py --skip cost --seeds 3 --budget-s 300 --side-by-side --arms off,off,rare+ctx,breadth

(a) **Cost**: two reference engines, one with `--coverage` and one without, serve the same
    fixed workload per seed (prompts on shared prefixes, some n = 2 and seeded, `--concurrency`
    requests in flight), the two arms alternating; requests per second of wall clock, and per
    CPU-second of the server process (from /proc; it moves much less with a shared machine's
    load), and their ratios traced / untraced.
(b) **Gain**: the default mix's campaign (greybox, pairwise coverage on, as `servefuzz fuzz`
    runs it) for `--budget-s` seconds against a fresh `--coverage` engine, with engine-coverage
    feedback (`CampaignConfig.engine_coverage`) and without: the engine measures its coverage in
    both arms, only the feedback differs. Counted at the end from the engine's own `/coverage`:
    the context points (edge x context) reached, the distinct edges among them, and the
    campaign's requests; ratio feedback / no feedback per seed. `--arms` picks the arms: `off`
    (no feedback), `rare` (the default schedule), `fast` (AFL's path-frequency schedule),
    `breadth` (energy by the step contexts an entry reached), the last three optionally `+ctx`
    (the strategy schedule's context bandit) or `+ctxt` (it weighs the mutation turns too), each
    optionally `@share` of mutation turns;
    `off,off` runs a replica of the control beside it, whose ratio is the noise of one run
    against another.

Results are appended as JSON lines to `--out`; the summary with the ratios is printed last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp

from servefuzz.campaign import CampaignConfig, run_campaign
from servefuzz.corpus import POWER_SCHEDULES
from servefuzz.launcher import ServerProcess
from servefuzz.reference.tracer import CONTEXT_BITS
from servefuzz.runner import Runner
from servefuzz.strategies import DEFAULT_MIX, get_strategies
from servefuzz.targets import make_target

__all__ = ["campaign_arm", "main", "throughput_arm"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def points(url: str) -> dict[int, int]:
    with urllib.request.urlopen(url + "/coverage", timeout=30) as resp:
        return {int(p): int(n) for p, n in json.loads(resp.read())["points"].items()}


def workload(seed: int, requests: int) -> list[dict[str, Any]]:
    """/generate bodies: prompts on four shared prefixes, a quarter n = 2, a quarter sampled."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(3, 1024) for _ in range(rng.choice((64, 100, 128)))] for _ in range(4)]
    out = []
    for i in range(requests):
        prompt = rng.choice(prefixes) + [rng.randrange(3, 1024) for _ in range(rng.randint(8, 96))]
        sp: dict[str, Any] = {"max_new_tokens": rng.randint(8, 32), "ignore_eos": True, "temperature": 0,
                              "n": 2 if i % 4 == 1 else 1}
        if i % 4 == 2:
            sp.update(temperature=0.8, sampling_seed=rng.randrange(1 << 30))
        out.append({"input_ids": prompt, "sampling_params": sp})
    return out


async def _drive(url: str, bodies: Sequence[dict[str, Any]], concurrency: int) -> None:
    todo = list(bodies)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:

        async def worker() -> None:
            while todo:
                body = todo.pop(0)
                async with session.post(url + "/generate", json=body) as resp:
                    assert resp.status == 200, await resp.text()
                    await resp.read()

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def throughput_arm(srv: ServerProcess, seed: int, requests: int, concurrency: int) -> dict[str, float]:
    """One pass of the seed's workload: requests per wall second and per server CPU-second."""
    pid = srv.pid
    assert pid is not None
    bodies = workload(seed, requests)
    with urllib.request.urlopen(urllib.request.Request(srv.base_url + "/flush_cache", method="POST")):
        pass
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    asyncio.run(_drive(srv.base_url, bodies, concurrency))
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    return {"rps": requests / wall, "rps_cpu": requests / max(cpu, 1e-9)}


# The campaign arms `--arms` may name: engine-coverage feedback off (the control) or on under a
# power schedule (`corpus.POWER_SCHEDULES`), the feedback ones optionally with the context bandit
# (`+ctx`: `CampaignConfig.credit_contexts`; `+ctxt`: it weighs the mutation turns too,
# `share_by_contexts`), each optionally with its share of mutation turns (`fast@0.8`,
# `rare+ctx@0.3`); the same name twice (`off,off`) runs a replica, whose spread is the noise floor.
ARMS = ("off", *POWER_SCHEDULES)
BANDITS = {"+ctx": {"credit_contexts": True}, "+ctxt": {"credit_contexts": True, "share_by_contexts": True}}


def arm_config(arm: str) -> dict[str, Any]:
    """`CampaignConfig` fields of an arm: `off`, `rare`, `fast`, `breadth`, the last three optionally
    `+ctx` or `+ctxt`, any of them `@share`.

    >>> arm_config("breadth+ctx@0.3")
    {'engine_coverage': True, 'power': 'breadth', 'credit_contexts': True, 'mutate_share': 0.3}
    >>> arm_config("rare")
    {'engine_coverage': True, 'power': 'rare', 'credit_contexts': False}
    """
    name, _, share = arm.partition("@")
    name, plus, bandit = name.partition("+")
    if name not in ARMS or (plus and (name == "off" or plus + bandit not in BANDITS)):
        raise SystemExit(f"unknown arm {arm!r}: one of {', '.join(ARMS)} (all but off optionally "
                         f"{' or '.join(BANDITS)}), optionally @SHARE")
    out: dict[str, Any] = {"engine_coverage": name != "off"}
    if name != "off":
        out["power"] = name
    # Spelled out either way, so that `rare` names the schedule alone whatever the campaign's default.
    out.update(BANDITS.get(plus + bandit, {"credit_contexts": False}))
    if share:
        out["mutate_share"] = float(share)
    return out


def campaign_arm(seed: int, budget_s: float | None, arm: str, workdir: Path,
                 budget_requests: int | None = None, tag: str = "") -> dict[str, Any]:
    """The default mix's campaign against a fresh `--coverage` engine; what it reached there, and
    where its scenarios came from (mutated corpus entries or fresh strategy scenarios)."""
    strategies = get_strategies(",".join(DEFAULT_MIX))
    name = f"{seed}-{arm}{tag}"
    with ServerProcess.reference(["--coverage"], log_path=workdir / f"server-{name}.log") as srv:
        out = workdir / f"campaign-{name}"
        config = CampaignConfig(out_dir=out, seed=seed, time_budget_s=budget_s,
                                request_budget=budget_requests, coverage=True, **arm_config(arm))

        async def go() -> int:
            async with Runner(make_target("reference", srv.base_url)) as runner:
                return (await run_campaign(runner, strategies, config)).requests

        sent = asyncio.run(go())
        reached = points(srv.base_url)
    origins = [json.loads(line)["origin"] for line in (out / "scenarios.jsonl").read_text().splitlines() if line]
    return {"seed": seed, "arm": arm + tag, "feedback": arm != "off", "budget_s": budget_s,
            "budget_requests": budget_requests, "requests": sent,
            "points": len(reached), "edges": len({p >> CONTEXT_BITS for p in reached}),
            "contexts": len({p & ((1 << CONTEXT_BITS) - 1) for p in reached}),
            "scenarios": len(origins), "mutated": sum(o.startswith("mutate:") for o in origins),
            # Where the fresh turns went (the context bandit's effect), and its scores at the end.
            "fresh": dict(Counter(o for o in origins if not o.startswith("mutate:")).most_common()),
            **{k: v for k, v in json.loads((out / "progress.json").read_text()).get("schedule", {}).items()
               if k in ("scores", "mutating")},
            "corpus": len(list((out / "corpus").glob("entry_*.json")))}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--budget-s", type=float, default=90.0, help="seconds per campaign arm (default 90)")
    p.add_argument("--budget-requests", type=int,
                   help="requests per campaign arm instead of seconds: the search's reach per request, which a "
                        "shared machine's load moves far less than its reach per second")
    p.add_argument("--side-by-side", action="store_true",
                   help="run a seed's two campaign arms at once, each on its own engine and process, so that the "
                        "machine's load falls on both alike (each then has about half the cores)")
    p.add_argument("--arms", default="rare,off",
                   help="campaign arms, comma-separated (default rare,off: the default schedule against no "
                        "feedback): off, rare, fast, breadth, all but off optionally +ctx or +ctxt (the context bandit), each "
                        "optionally @MUTATE_SHARE; a name twice runs a replica")
    p.add_argument("--requests", type=int, default=64, help="requests per throughput pass (default 64)")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--skip", choices=("cost", "gain"), help="leave one half out")
    p.add_argument("--out", type=Path, default=Path("engine-coverage.jsonl"), help="JSON lines, appended")
    p.add_argument("--keep", type=Path, help="keep the campaigns' folders (corpus, scenarios) here, not in a "
                                             "temporary folder")
    args = p.parse_args(argv)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    rows: list[dict[str, Any]] = []

    def keep(row: dict[str, Any]) -> None:
        rows.append(row)
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    if args.skip != "cost":
        with ServerProcess.reference([]) as plain, ServerProcess.reference(["--coverage"]) as traced:
            throughput_arm(plain, 99, args.concurrency, args.concurrency)  # warm both up alike
            throughput_arm(traced, 99, args.concurrency, args.concurrency)
            for seed in seeds:
                # Alternating, so the machine's load moves both arms alike.
                for name, srv in (("untraced", plain), ("traced", traced)):
                    keep({"part": "cost", "seed": seed, "arm": name,
                          **throughput_arm(srv, seed, args.requests, args.concurrency)})
    if args.skip != "gain":
        budget_s = None if args.budget_requests else args.budget_s
        with tempfile.TemporaryDirectory(prefix="servefuzz-engcov-") as scratch:
            tmp = str(args.keep or scratch)
            Path(tmp).mkdir(parents=True, exist_ok=True)
            names = args.arms.split(",")
            for arm in names:
                arm_config(arm)  # a bad name fails before any campaign runs
            tags = [f"#{names[:i].count(a) + 1}" if names.count(a) > 1 else "" for i, a in enumerate(names)]
            for seed in seeds:
                arms = [(seed, budget_s, arm, Path(tmp), args.budget_requests, tag) for arm, tag in zip(names, tags, strict=True)]
                if args.side_by_side:
                    with ProcessPoolExecutor(max_workers=len(arms)) as pool:
                        done = list(pool.map(campaign_arm, *zip(*arms, strict=True)))
                else:
                    done = [campaign_arm(*arm) for arm in arms]
                for row in done:
                    keep({"part": "gain", **row})
    print(summary(rows))
    return 0


def summary(rows: Sequence[dict[str, Any]]) -> str:
    lines = []
    cost = [r for r in rows if r["part"] == "cost"]
    if cost:
        for key, what in (("rps", "requests/s (wall)"), ("rps_cpu", "requests per server CPU-second")):
            ratios = []
            for seed in sorted({r["seed"] for r in cost}):
                arm = {r["arm"]: r[key] for r in cost if r["seed"] == seed}
                ratios.append(arm["traced"] / arm["untraced"])
                lines.append(f"cost seed {seed}: {what} untraced {arm['untraced']:.2f}, traced {arm['traced']:.2f}, "
                             f"ratio {ratios[-1]:.2f}")
            lines.append(f"cost: traced / untraced {what}: mean ratio {statistics.mean(ratios):.2f}")
    gain = [r for r in rows if r["part"] == "gain"]
    if gain:
        # Every arm against the first control (`off`, or `off#1`), seed by seed; rows of an older
        # run carry `feedback` alone (the default schedule on, or off).
        arm_of = {id(r): r.get("arm", "rare" if r["feedback"] else "off") for r in gain}
        names = list(dict.fromkeys(arm_of[id(r)] for r in gain))
        control = next((a for a in names if a.split("#")[0] == "off"), None)
        ratios: dict[str, list[float]] = {a: [] for a in names if a != control}
        for seed in sorted({r["seed"] for r in gain}):
            by = {arm_of[id(r)]: r for r in gain if r["seed"] == seed}
            base = by.get(control) if control else None
            for arm in names:
                r = by.get(arm)
                if r is None:
                    continue
                ratio = ""
                if base is not None and arm != control:
                    ratios[arm].append(r["points"] / base["points"])
                    ratio = f", ratio to {control} {ratios[arm][-1]:.3f}"
                mixed = f", {r['mutated']}/{r['scenarios']} scenarios mutated" if "scenarios" in r else ""
                lines.append(f"gain seed {seed} {arm}: context points {r['points']} ({r['contexts']} contexts, "
                             f"{r['edges']} edges, {r['requests']} requests{mixed}){ratio}")
        for arm, rs in ratios.items():
            if rs:
                lines.append(f"gain: {arm} / {control} context points: mean ratio {statistics.mean(rs):.3f} "
                             f"(min {min(rs):.3f}, max {max(rs):.3f})")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
