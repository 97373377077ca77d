"""How often a campaign's scenarios use each capability of the target, with and without the
strategy that owns it (issue 41): no engine, the scenarios generated from the schedule alone.

    python bench/surface_counts.py --scenarios 200 --out bench/results/surface-counts.json

The target is the reference engine as `servefuzz fuzz` sees it with two LoRA adapters served
(every capability offered: salts, seeds, choices, adapters). A campaign with coverage on (the
default) is imitated without a server: the first round runs every offered strategy once and the
`pairwise` generator, then each turn mutates an earlier scenario (the campaign's mutate share,
`cross` included) or generates from a strategy drawn uniformly; the coverage the pairwise
generator aims with grows by the requests' own fields (`covering.covered_by`: no server
dimensions). The corpus keeps every scenario here (a campaign keeps those with new features),
and no strategy earns energy: the counts are of what the generators and mutators can send, not
of a campaign's exact mix. Arms: the default mix, and the mix without each capability's own
strategy (the leave-one-out of bench/realbugs.py and bench/zoo.py).

Per arm and capability: the share of scenarios with at least one request using it, and of
requests. Runs on the code on the path, so the same command on two trees compares them.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from servefuzz.corpus import MUTATE_SHARE
from servefuzz.coverage import Coverage, FeatureSpace, points
from servefuzz.covering import PairwiseCover
from servefuzz.mutators import CROSS, mutate
from servefuzz.strategies import DEFAULT_MIX, Strategy, TargetShape, get_strategies, offered
from servefuzz.workload import RequestSpec, Scenario

__all__ = ["CAPABILITIES", "REFERENCE", "counts", "main"]

# The reference engine's defaults, as `campaign.shape_of` reads them, with --lora lora-a=1 lora-b=2.
REFERENCE = TargetShape(page_size=64, chunked_prefill_size=2048, max_total_tokens=131072, context_length=4096,
                        salts=True, seeded_sampling=True, choices=True, adapters=("lora-a", "lora-b"))

# Each capability: what a request using it looks like, and the strategy written to send it.
CAPABILITIES: dict[str, tuple[Callable[[RequestSpec], bool], str]] = {
    "salt": (lambda r: r.cache_salt is not None, "tenant-salt"),
    "adapter": (lambda r: r.adapter is not None, "lora-alternation"),
    "seed": (lambda r: r.seeded, "seeded-sampling"),
    "choices": (lambda r: r.choices is not None, "structured-burst"),
    "n>1": (lambda r: r.n > 1, "n-mix"),
}


def scenarios(strategies: Sequence[Strategy], shape: TargetShape, count: int, seed: int) -> list[Scenario]:
    """`count` scenarios as a coverage campaign's schedule would choose them (see the docstring)."""
    mix = {s.name: s for s in offered(strategies, shape)}
    names = [*mix, PairwiseCover.name]
    cov = Coverage.empty(FeatureSpace.for_shape(shape))
    out: list[Scenario] = []
    for i in range(count):
        rng = random.Random(seed * 1_000_003 + i)
        if i >= len(names) and rng.random() < MUTATE_SHARE:
            sc = mutate(rng.choice(out), rng, shape, seed=i, extra=(CROSS,))
        else:
            name = names[i] if i < len(names) else rng.choice(names)
            gen = PairwiseCover(coverage=cov) if name == PairwiseCover.name else mix[name]
            sc = gen.generate(rng, shape, seed=i)
        cov = cov.observe(points(sc, shape).values())
        out.append(sc)
    return out


def counts(scs: Sequence[Scenario]) -> dict[str, dict[str, float]]:
    reqs = [r for s in scs for r in s.requests]
    return {
        cap: {"scenarios": round(sum(any(uses(r) for r in s.requests) for s in scs) / len(scs), 3),
              "requests": round(sum(uses(r) for r in reqs) / len(reqs), 3)}
        for cap, (uses, _) in CAPABILITIES.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--label", default="", help="a name for the code measured (e.g. a commit)")
    p.add_argument("--out", type=Path, help="JSON file to write")
    args = p.parse_args(argv)
    everything = get_strategies(",".join(DEFAULT_MIX))
    rows: list[dict[str, Any]] = []
    arms = {"default mix": everything, **{
        f"without {own}": tuple(s for s in everything if s.name != own) for _, own in CAPABILITIES.values()}}
    for arm, strategies in arms.items():
        got = counts(scenarios(strategies, REFERENCE, args.scenarios, args.seed))
        rows.append({"code": args.label, "arm": arm, "scenarios": args.scenarios, "seed": args.seed, "share": got})
        print(f"{args.label:>8} {arm:<28} " + "  ".join(
            f"{cap} {v['scenarios']:.0%}/{v['requests']:.0%}" for cap, v in got.items()), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
