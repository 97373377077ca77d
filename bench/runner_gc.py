"""A full garbage collection before every run, against none, side by side: the client's CPU.

    python bench/runner_gc.py [--rounds 40] [--ballast 200000]

Until 2026-12-01 `Runner.run` called `gc.collect()` before each run (then held the collector off
during it, which it still does). A full collection walks every object the process holds, so its
cost grows with the heap: a campaign's histories and corpus, or a pytest worker's modules and
fixtures when shrink and triage run in-process. This script starts one reference engine, and in
one client process sends the same one-request runs (`run_alone`, as the campaign's controls,
shrink and triage do) in alternating rounds with and without that collection, holding
`--ballast` small live objects to stand in for such a heap. It prints the client's CPU per run
(`time.process_time`, so the server's share is left out) for each, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time

from servefuzz.launcher import ServerProcess
from servefuzz.runner import Runner
from servefuzz.targets import make_target
from servefuzz.workload import RequestSpec


async def _rounds(url: str, rounds: int) -> dict[str, list[float]]:
    spec = RequestSpec("r01", 0.0, tuple(range(10, 42)), 8)
    cpu: dict[str, list[float]] = {"full collection first": [], "none (now)": []}
    plain_run = Runner.run

    async def collecting_run(self: Runner, *args: object, **kwargs: object) -> object:
        gc.collect()  # what the runner did before each run
        return await plain_run(self, *args, **kwargs)  # type: ignore[arg-type]

    async with Runner(make_target("reference", url)) as runner:
        await runner.run_alone(spec, run=0)  # warm: the session, the server's first step
        for i in range(rounds):
            for mode in (cpu if i % 2 == 0 else reversed(cpu)):  # interleaved, each first in turn
                Runner.run = collecting_run if mode.startswith("full") else plain_run  # type: ignore[method-assign]
                start = time.process_time()
                await runner.run_alone(spec, run=i)
                cpu[mode].append((time.process_time() - start) * 1000.0)
        Runner.run = plain_run  # type: ignore[method-assign]
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--ballast", type=int, default=200_000, help="small live objects the client holds")
    args = ap.parse_args()
    ballast = [[i] for i in range(args.ballast)]  # lists stay tracked (all-int dicts and tuples do not)
    with ServerProcess.reference([]) as server:
        cpu = asyncio.run(_rounds(server.base_url, args.rounds))
    print(f"client heap: {len(gc.get_objects()):,} objects the collector tracks ({len(ballast):,} of them ballast)")
    print(f"{'before each run':<24} {'client CPU per run (median ms)':>32}")
    medians = {mode: statistics.median(ms) for mode, ms in cpu.items()}
    for mode, ms in medians.items():
        print(f"{mode:<24} {ms:>32.2f}")
    full, none = medians["full collection first"], medians["none (now)"]
    print(f"ratio (full / none): {full / none:.1f}x over {args.rounds} runs each")


if __name__ == "__main__":
    main()
