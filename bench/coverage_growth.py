"""Pairwise feature coverage over a campaign's time (issue 18): after 1, 5 and 10 minutes.

    python bench/coverage_growth.py --time 600 --out /tmp/cov-on               # default mix + coverage
    python bench/coverage_growth.py --time 600 --out /tmp/cov-off --no-coverage  # the default mix alone
    python bench/coverage_growth.py --logs /tmp/cov-off --html /tmp/cov-off.html  # any campaign directory

A run starts a clean reference engine (default flags: the space has 722 pairs there, 507 before
the salt, sampler and constraint dimensions of issue 41), runs the default mix for `--time`
seconds, with `CampaignConfig.coverage` on unless `--no-coverage`, then prints the coverage at
each mark. The numbers are computed from the campaign's own logs
(`scenarios.jsonl`, the first loaded run of each iteration in `histories.jsonl`), by the same
`coverage.points` the campaign uses, so a campaign that did not track coverage is measured the
same way as one that did, and a finished directory can be measured again. Time is the wall
clock from the first run's start (one session: a resumed campaign's pause counts too).
`--html` draws the coverage at the last mark (`reports/coverage_page.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from servefuzz.campaign import CampaignConfig, CampaignResult, run_campaign, shape_of
from servefuzz.coverage import Coverage, FeatureSpace, points
from servefuzz.history import RunHistory, read_history_jsonl
from servefuzz.launcher import ServerProcess
from servefuzz.reports.coverage_page import write_coverage_page
from servefuzz.runner import Runner
from servefuzz.server_facts import TargetInfo
from servefuzz.strategies import get_strategies
from servefuzz.targets import make_target
from servefuzz.workload import Scenario

__all__ = ["MARKS_S", "coverage_over_time", "main"]

MARKS_S = (60.0, 300.0, 600.0)


def coverage_over_time(campaign: Path, marks: Sequence[float] = MARKS_S) -> list[tuple[float, Coverage]]:
    """The campaign's coverage at each mark (seconds from its first run), from its logs."""
    config = json.loads((campaign / "config.json").read_text(encoding="utf-8"))
    shape = shape_of(TargetInfo.from_json(config["target"]))
    scenarios: dict[int, Scenario] = {}
    for line in (campaign / "scenarios.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            scenarios[int(d["iteration"])] = Scenario.from_json(d["scenario"])  # a rerun's last line counts
    first: dict[int, RunHistory] = {}
    for h in read_history_jsonl(campaign / "histories.jsonl"):
        it = h.meta.get("iteration")
        if h.label == "load" and isinstance(it, int) and it not in first:
            first[it] = h
    start = min((_t(h) for h in first.values()), default=0.0)
    timeline = sorted((_t(first[it]) - start, it) for it in first if it in scenarios)
    cov = Coverage.empty(FeatureSpace.for_shape(shape))
    out, i = [], 0
    for mark in marks:
        while i < len(timeline) and timeline[i][0] <= mark:
            it = timeline[i][1]
            cov = cov.observe(points(scenarios[it], shape, [first[it]]).values())
            i += 1
        out.append((mark, cov))
    return out


def _t(h: RunHistory) -> float:
    return datetime.fromisoformat(str(h.meta["started_at"])).timestamp()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--time", type=float, default=600.0, help="campaign seconds (default 600)")
    p.add_argument("--out", type=Path, help="campaign directory to create")
    p.add_argument("--no-coverage", action="store_true", help="the default mix alone (no generator, no cross)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--logs", type=Path, metavar="CAMPAIGN", help="only measure an existing campaign directory")
    p.add_argument("--html", type=Path, metavar="PAGE", help="write the coverage page of the last mark here")
    args = p.parse_args(argv)
    campaign = args.logs
    if campaign is None:
        if args.out is None:
            p.error("--out (or --logs) is needed")
        config = CampaignConfig(args.out, seed=args.seed, time_budget_s=args.time, coverage=not args.no_coverage)
        with ServerProcess.reference([], log_path=args.out.parent / f"{args.out.name}-server.log") as srv:

            async def go() -> CampaignResult:
                async with Runner(make_target("reference", srv.base_url)) as runner:
                    return await run_campaign(runner, get_strategies("mix"), config)

            result = asyncio.run(go())
        print(f"{result.iterations} scenarios, {result.requests} requests in {result.elapsed_s:.0f} s")
        campaign = args.out
    marks = coverage_over_time(campaign, [m for m in MARKS_S if m <= max(args.time, MARKS_S[0])])
    for mark, cov in marks:
        print(f"after {mark / 60:g} min: {cov.summary()} ({cov.requests} scenario requests)")
    if args.html is not None:
        print(write_coverage_page(marks[-1][1], args.html, title=campaign.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
