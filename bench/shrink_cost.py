"""Where a shrink's time goes: per pass, the replays spent and accepted, wall and CPU seconds.

    python bench/shrink_cost.py make --faults window-ring-stale,ssm-checkpoint-batch --dir /tmp/sc
    python bench/shrink_cost.py shrink --dir /tmp/sc --out /tmp/sc/after.jsonl
    PYTHONPATH=/path/to/old/src python bench/shrink_cost.py shrink --dir /tmp/sc --out /tmp/sc/before.jsonl
    python bench/shrink_cost.py --table /tmp/sc/before.jsonl /tmp/sc/after.jsonl

`make` writes, for each zoo fault, the finding tests/quality/test_shrink_triage_zoo.py shrinks
(its hand case from tests/zoo_cases.py, run and confirmed on a faulty reference engine by the
test's own `make_finding`), so that two versions of the shrinker are measured on the same
finding. `shrink` shrinks each as the test does (`--launch reference --budget 150
--confirm-runs 5`, fresh-server re-checks on) and appends one JSON line per finding: the
search's replays, rounds and why it stopped; per pass its candidates, acceptances, replays,
wall seconds and the CPU seconds of the whole process tree (this process, its live servers, and
the servers already stopped) spent in it; the whole shrink's wall and CPU (search, final
confirmation and control); the minimal scenario's size; and the load average before and after,
since the box these numbers come from is shared. It only reads `servefuzz.shrinker.PASSES` and
the public API, so an older checkout measures the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
FAULTS = ("window-ring-stale", "stale-state-donated", "host-loadback-stale-pages", "ssm-checkpoint-batch")


def tree_cpu() -> float:
    """CPU seconds of this process, its live descendants and every child already waited for."""
    me = psutil.Process()
    total = sum(resource.getrusage(w).ru_utime + resource.getrusage(w).ru_stime
                for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    for child in me.children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass  # gone between the listing and the read: counted once waited for
    return total


def make(faults: list[str], folder: Path) -> None:
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "quality")]
    from test_shrink_triage_zoo import make_finding  # the test's own finding, made the test's way
    from zoo_cases import CASES

    from servefuzz.workload import PromptBuilder

    for fault in faults:
        flags, scenario = CASES[fault](PromptBuilder(7, range(3, 1024)))
        out = folder / fault
        out.mkdir(parents=True, exist_ok=True)
        print(fault, make_finding(fault, flags, scenario, out), flush=True)


def shrink_one(path: Path, budget: int) -> dict[str, Any]:
    from servefuzz import shrinker
    from servefuzz.api import shrink

    spent: dict[str, list[float]] = {}

    def timed(name: str, fn: Callable[[Any], None]) -> Callable[[Any], None]:
        def run(s: Any) -> None:
            w, c = time.monotonic(), tree_cpu()
            try:
                fn(s)
            finally:
                acc = spent.setdefault(name, [0.0, 0.0])
                acc[0] += time.monotonic() - w
                acc[1] += tree_cpu() - c
        return run

    plain = shrinker.PASSES
    shrinker.PASSES = tuple((name, timed(name, fn)) for name, fn in plain)
    load0 = os.getloadavg()
    w0, c0 = time.monotonic(), tree_cpu()
    try:
        done = shrink(path, launch="reference", budget=budget, confirm_runs=5, restart=True)
    finally:
        shrinker.PASSES = plain
    wall, cpu = time.monotonic() - w0, tree_cpu() - c0
    assert done.search is not None and done.finding is not None, str(done.trail)
    best = done.finding.scenario
    conf = done.finding.confirmation
    return {
        "fault": path.parent.name,
        "finding": str(path),
        "src": shrinker.__file__,
        "budget": budget,
        "replays": done.search.replays,
        "rounds": done.search.rounds,
        "stopped": done.search.stopped_because,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "load": [round(x, 2) for x in (*load0, *os.getloadavg())],
        "passes": [
            {"name": p.name, "calls": p.calls, "accepted": p.accepted, "replays": p.replays,
             "wall_s": round(spent.get(p.name, [0.0, 0.0])[0], 1), "cpu_s": round(spent.get(p.name, [0.0, 0.0])[1], 1)}
            for p in done.search.passes
        ],
        "requests": len(best.requests),
        "prompt_tokens": sum(r.prompt_len for r in best.requests),
        "max_tokens": sum(r.max_tokens for r in best.requests),
        "span_ms": max(r.offset_ms for r in best.requests),
        "minimal": [[r.id, r.offset_ms, r.prompt_len, r.max_tokens] for r in best.requests],
        "confirmed": None if conf is None else f"{conf.reproduced}/{conf.attempts}",
        "verdict": done.finding.verdict.value,
    }


def table(files: list[Path]) -> None:
    print("| file | case | replays | stopped | wall s | CPU s | requests | prompt tok | max_tokens | span ms | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for f in files:
        for line in f.read_text().splitlines():
            r = json.loads(line)
            print(f"| {f.stem} | {r['fault']} | {r['replays']} | {r['stopped']} | {r['wall_s']} | {r['cpu_s']} | "
                  f"{r['requests']} | {r['prompt_tokens']} | {r['max_tokens']} | {r['span_ms']:g} | "
                  f"{r['load'][0]}-{r['load'][3]} |")
    for f in files:
        for line in f.read_text().splitlines():
            r = json.loads(line)
            print(f"\n{f.stem} {r['fault']}: pass calls/accepted/replays/wall s/CPU s")
            for p in r["passes"]:
                print(f"  {p['name']:<18} {p['calls']:>4} {p['accepted']:>3} {p['replays']:>4} {p['wall_s']:>6} {p['cpu_s']:>6}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", nargs="?", choices=["make", "shrink"])
    ap.add_argument("--faults", default=",".join(FAULTS))
    ap.add_argument("--dir", type=Path, default=Path("/tmp/shrink_cost"))
    ap.add_argument("--budget", type=int, default=150)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--table", type=Path, nargs="+")
    args = ap.parse_args()
    if args.table:
        table(args.table)
        return
    faults = [f for f in args.faults.split(",") if f]
    if args.mode == "make":
        make(faults, args.dir)
        return
    for fault in faults:
        found = sorted(p for p in (args.dir / fault).glob("finding_*.json") if "_min" not in p.name)
        row = shrink_one(found[0], args.budget)
        print(json.dumps(row), flush=True)
        if args.out is not None:
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
