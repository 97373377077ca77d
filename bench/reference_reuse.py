"""What reusing isolation references saves: one campaign with `Runner.reference` reusing the
answer of a request seen alone before, one sending every reference again, side by side.

    python bench/reference_reuse.py --time 120 --seed 5          # the clean reference engine
    python bench/reference_reuse.py --time 120 --fault overlap-war

Each arm gets a fresh reference engine (the same flags) and a campaign of the default mix for
`--time` seconds that does not stop at a finding, so both spend the same wall time. Per arm:
scenarios run, requests sent, references sent and reused (from `histories.jsonl`, through
request_mix.py's reading), requests per scenario, and what was found. A reference reused is a
request not sent: the same scenarios in fewer requests, or more scenarios in the same time.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from servefuzz.api import FuzzOptions
from servefuzz.campaign import CampaignConfig, CampaignResult, run_campaign
from servefuzz.launcher import ServerProcess
from servefuzz.runner import RunConfig, Runner
from servefuzz.strategies import DEFAULT_MIX, get_strategies
from servefuzz.targets import make_target

sys.path.insert(0, str(Path(__file__).resolve().parent))
from request_mix import mix_of  # noqa: E402 - bench/ is not a package


@dataclass(frozen=True)
class Arm:
    name: str
    scenarios: int
    requests: int
    alone_sent: int
    reused: int
    findings: tuple[str, ...]

    def row(self) -> str:
        per = self.requests / max(self.scenarios, 1)
        return (f"| {self.name} | {self.scenarios} | {self.requests:,} | {per:.1f} | {self.alone_sent:,} | "
                f"{self.reused:,} | {', '.join(self.findings) or 'none'} |")


def run_arm(reuse: bool, fault: str, seed: int, time_s: float, workdir: Path) -> Arm:
    flags = FuzzOptions(out=workdir, faults=(fault,)).reference_flags()
    out = workdir / ("reuse" if reuse else "fresh")
    config = CampaignConfig(out_dir=out, seed=seed, time_budget_s=time_s, stop_at_first=False)
    with ServerProcess.reference(flags, log_path=workdir / f"server-{out.name}.log") as srv:

        async def go() -> CampaignResult:
            async with Runner(make_target("reference", srv.base_url), RunConfig(reuse_references=reuse)) as runner:
                return await run_campaign(runner, get_strategies(",".join(DEFAULT_MIX)), config)

        result = asyncio.run(go())
    mix = mix_of(out)
    return Arm(out.name, result.iterations, result.requests, mix.alone, mix.reused,
               tuple(sorted({f.verdict.value for _, f in result.findings})))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--time", type=float, default=120.0, help="seconds per arm (default 120)")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--fault", default="none", help="a zoo fault to plant, or none (default)")
    args = p.parse_args(argv)
    print("| arm | scenarios | requests | per scenario | references sent | reused (not sent) | findings |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="servefuzz-reuse-") as tmp:
        for reuse in (True, False):
            print(run_arm(reuse, args.fault, args.seed, args.time, Path(tmp)).row(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
