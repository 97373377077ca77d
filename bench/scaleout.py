"""Scenarios per minute with one and with two Ray workers, side by side in one run (issue 16).

    python bench/scaleout.py --time 90                 # the reference engine, clean, seed 0
    python bench/scaleout.py --time 90 --launch "llama-server -m M -ngl 99 --port {port}" --gpus-per-worker 1

Three campaigns through the real CLI, one after another with the same seed and budget: the local
path (`servefuzz fuzz`, no Ray), `--ray local --workers 1` and `--ray local --workers 2`. Each
is read back from its `--json` summary: scenarios and requests over the campaign's own elapsed
time (the loop, not Ray's or the servers' start). Printed: each arm's rates, two workers
against one (the scale-out), and one Ray worker against the local path (what the driver and the
actor hop cost a worker). A clean engine (`--fault none`, `--keep-going`) so that no finding
stops an arm early. On a 2-core machine each worker's engine shares the cores with the other's:
the ratio says what the driver allows there, not what a fleet gives.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["ARMS", "main", "run_arm"]

ARMS: dict[str, tuple[str, ...]] = {
    "local": (),
    "ray-1": ("--ray", "local", "--workers", "1"),
    "ray-2": ("--ray", "local", "--workers", "2"),
}


def run_arm(name: str, out: Path, time_s: float, seed: int, target: list[str]) -> dict[str, Any]:
    """One campaign of arm `name`; its summary with the rates added."""
    argv = [sys.executable, "-m", "servefuzz", "fuzz", *target, "--keep-going", "--json", "--time", str(time_s),
            "--seed", str(seed), "--out", str(out / name), *ARMS[name]]
    # A local Ray cluster writes an auth token under ~/.ray unless told not to; it binds 127.0.0.1.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    p = subprocess.run(argv, capture_output=True, text=True, timeout=time_s + 600, env=env, check=False)
    if p.returncode not in (0, 1):
        raise SystemExit(f"{name}: servefuzz exited {p.returncode}: {p.stderr.strip()[-500:]}")
    summary: dict[str, Any] = json.loads(p.stdout)
    minutes = max(float(summary["elapsed_s"]), 1e-9) / 60
    return {"arm": name, "scenarios": summary["iterations"], "requests": summary["requests"],
            "elapsed_s": summary["elapsed_s"], "scenarios_per_min": summary["iterations"] / minutes,
            "requests_per_min": summary["requests"] / minutes, "findings": len(summary.get("findings", []))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time", type=float, default=90.0, help="each arm's campaign budget in seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--launch", help="a preset or a command with {port} (default: the clean reference engine)")
    ap.add_argument("--gpus-per-worker", type=int, default=0)
    ap.add_argument("--out", type=Path, help="where the campaigns go (default: a temporary folder)")
    args = ap.parse_args(argv)
    target = ["--fault", "none"] if args.launch is None else ["--launch", args.launch]
    out = args.out or Path(tempfile.mkdtemp(prefix="servefuzz-scaleout-"))
    rows = []
    for name in ARMS:
        extra = ["--gpus-per-worker", str(args.gpus_per_worker)] if args.gpus_per_worker and name != "local" else []
        rows.append(run_arm(name, out, args.time, args.seed, target + extra))
        r = rows[-1]
        print(f"{r['arm']:6} {r['scenarios']:5} scenarios {r['requests']:6} requests in {r['elapsed_s']:7.1f} s: "
              f"{r['scenarios_per_min']:6.1f} scenarios/min {r['requests_per_min']:7.1f} requests/min"
              f"{'  (' + str(r['findings']) + ' findings)' if r['findings'] else ''}", flush=True)
    by = {r["arm"]: r for r in rows}
    print(f"two workers / one: {by['ray-2']['scenarios_per_min'] / by['ray-1']['scenarios_per_min']:.2f}x scenarios, "
          f"{by['ray-2']['requests_per_min'] / by['ray-1']['requests_per_min']:.2f}x requests")
    print(f"one Ray worker / local: {by['ray-1']['scenarios_per_min'] / by['local']['scenarios_per_min']:.2f}x scenarios, "
          f"{by['ray-1']['requests_per_min'] / by['local']['requests_per_min']:.2f}x requests")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
