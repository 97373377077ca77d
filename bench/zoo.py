"""Detection power on the fault zoo: servefuzz side by side with two anchor batteries.

    python bench/zoo.py                                   # all 7 faults x 5 seeds x 3 arms (hours)
    python bench/zoo.py --faults stale-padding --seeds 2 --cap-s 120 --out /tmp/zoo.jsonl
    python bench/zoo.py --table /tmp/zoo.jsonl            # print the table of a results file
    python bench/zoo.py --arms leave-one-out,leave-one-out+coverage --cap-s 300   # issue 18

For every zoo fault and seed, each arm gets a fresh reference engine with that one fault planted
(plus the settings the fault's trigger needs, `engines.reference.ZOO_SETTINGS`) and runs a campaign until
its first *confirmed* finding of the right class: `numeric-drift` for the benign
batch-variant-numerics and deterministic-decode-drift (in default mode), `isolation-breach` for
salt-ignored (its answers stay exact), `corruption` for every other fault. One fault is planted at
a time, so a finding of the right class is that fault firing. Every arm is judged by the same
oracles and confirmed the same way (`campaign.run_campaign`); only the workload differs:

- **servefuzz**: the default mix of strategies, greybox (corpus, mutation, energy).
- **sglang-determinism**: SGLang's `test_deterministic.py` modes re-expressed as scenarios,
  replayed without feedback: `single` (one prompt, batched 1..16 times), `prefix` (prompts on
  shared prefixes of 1, 511 and 2048 tokens, unique questions, random counts; cache flushed
  before every trial) and `radix_cache` (a prompt uncached, then again and extended once its
  prefix is cached).
- **leave-one-out** (issue 18): the default mix without the strategies written for the planted
  fault (`OWN_STRATEGIES`, from the table in `servefuzz.strategies`), greybox: how long the
  rest of the campaign takes to find a bug no one wrote a strategy for.
  **leave-one-out+coverage**: the same with `CampaignConfig.coverage` (the pairwise generator,
  the cross mutator, new pairs as energy); its rows also give the pairs covered at the end.
  **leave-one-out+coverage+engine**: the same steered by the engine's own code too (issue 57:
  the engine started with `--coverage`, `CampaignConfig.engine_coverage`), the default campaign
  now; the other arms run the engine untraced. **leave-one-out+coverage+engine+ctx**: the same
  with the context bandit on (`CampaignConfig.credit_contexts`, opt-in; every other arm runs it
  off), side by side with the arm before it for the bandit's leave-one-out (issue 57).
  **default**: the default campaign with every strategy in (coverage and engine coverage on).
- **bench-serving**: the load `vllm bench serve` / `sglang.bench_serving` generate, replayed
  without feedback: `random` (lengths uniform in [len * (1 - range_ratio), len], Poisson
  arrivals) and `generated-shared-prefix` (groups of questions behind one system prompt),
  scaled to the reference engine's context.

Per (arm, fault, seed): the requests sent (loaded runs, alone references, probes, confirmation
replays) and the seconds until the first confirmed finding of the right class, or "none" within
`--cap-s` seconds. Results are appended as JSON lines to `--out`, so runs can be split up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servefuzz.api import FuzzOptions
from servefuzz.campaign import CampaignConfig, CampaignResult, run_campaign
from servefuzz.launcher import Launch, ServerProcess, reference_argv
from servefuzz.reference.faults import FAULTS
from servefuzz.runner import RunConfig, Runner
from servefuzz.strategies import (
    DEFAULT_MIX,
    Draft,
    Strategy,
    TargetShape,
    get_strategies,
)
from servefuzz.targets import make_target
from servefuzz.workload import Scenario

__all__ = ["ARMS", "RIGHT_CLASS", "BenchServingLoad", "SGLangDeterminismModes", "main", "run_one"]

# salt-ignored leaves every answer exact (docs/fault-zoo.md): what it breaks is tenant isolation.
# host-key-no-salt breaks either, as the tenant it confuses is a salt (exact answers, a cross-tenant
# hit) or an adapter (KV of another adapter). A finding of any of a fault's classes is the fault.
RIGHT_CLASS: dict[str, tuple[str, ...]] = {
    f: {"batch-variant-numerics": ("numeric-drift",), "deterministic-decode-drift": ("numeric-drift",),
        "router-tie-numerics": ("numeric-drift",), "salt-ignored": ("isolation-breach",),
        "host-key-no-salt": ("corruption", "isolation-breach")}.get(f, ("corruption",))
    for f in FAULTS}


@dataclass(frozen=True)
class SGLangDeterminismModes:
    """SGLang's determinism test modes (single / prefix / radix_cache) as scenarios."""

    name: str = "sglang-determinism"
    max_tokens: int = 32

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        mode = rng.choice(["single", "prefix", "radix_cache"])
        d = Draft(seed, shape)
        if mode == "single":  # one prompt, the same in every trial, batched 1..16 times at once
            prompt = Draft(0, shape).add(0, 128, self.max_tokens).prompt_ids
            for _ in range(rng.randint(1, 16)):
                d.add(0, 0, self.max_tokens, prompt_ids=prompt)
        elif mode == "prefix":  # shared prefixes of 1, 511, 2048 tokens, each with its questions
            for g, plen in enumerate(p for p in (1, 511, 2048) if p < shape.pool_tokens - 128):
                for _ in range(rng.randint(1, 4)):
                    d.add(0, plen + rng.randint(8, 32), self.max_tokens, prefix=f"p{g}", prefix_len=plen)
        else:  # radix_cache: uncached first, then cached hits of the same prompt and extensions
            plen = rng.randint(64, 1024)
            first = d.add(0, plen + 16, self.max_tokens, prefix="p0", prefix_len=plen)
            # the same prompt again, with the prefix as the draft clipped it to the target's
            # context (a 1,024-token slot of llama-server holds less than plen + 16)
            d.add(1500, 0, self.max_tokens, prefix="p0", prefix_len=first.prefix_len, prompt_ids=first.prompt_ids)
            for _ in range(rng.randint(1, 4)):
                d.add(1500, plen + rng.randint(8, 64), self.max_tokens, prefix="p0", prefix_len=plen)
        return d.scenario(self.name, mode=mode)


@dataclass(frozen=True)
class BenchServingLoad:
    """`vllm bench serve` / `sglang.bench_serving` datasets `random` and
    `generated-shared-prefix`, at a Poisson request rate, scaled to a 4k context."""

    name: str = "bench-serving"
    input_len: int = 512
    output_len: int = 64
    range_ratio: float = 0.5
    rate_per_s: float = 16.0
    num_prompts: int = 16

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        d = Draft(seed, shape)
        t = 0.0
        if rng.random() < 0.5:
            dataset = "random"
            for _ in range(self.num_prompts):
                t += rng.expovariate(self.rate_per_s) * 1000.0
                def lo(n: int) -> int:
                    return max(1, int(n * (1 - self.range_ratio)))
                d.add(t, rng.randint(lo(self.input_len), self.input_len), rng.randint(lo(self.output_len), self.output_len))
        else:
            dataset = "generated-shared-prefix"  # groups x prompts, system prompt + question
            groups, per_group, system, question = 2, self.num_prompts // 2, 256, 64
            for _ in range(per_group):
                for g in range(groups):
                    t += rng.expovariate(self.rate_per_s) * 1000.0
                    d.add(t, system + question, self.output_len, prefix=f"sys{g}", prefix_len=system)
        return d.scenario(self.name, dataset=dataset)


# The strategies written for each zoo fault (the table in servefuzz.strategies), left out of
# the leave-one-out arms. tile-boundary is not among them: it aims at tile multiples, which on
# the reference engine's 64-token page are page multiples too (it may well find that fault).
OWN_STRATEGIES: dict[str, tuple[str, ...]] = {
    "page-boundary-prefix": ("page-boundary", "burst-reuse"),
    "overlap-war": ("long-decode",),
    "stale-padding": ("batch-sweep",),
    "chunk-boundary": ("chunk-boundary",),
    "abort-reuse": ("cancel-storm",),
    "evict-in-use": ("eviction",),
    "batch-variant-numerics": ("random",),
    # Drift in shared decode steps: what random's unaimed load makes (in default mode, as here).
    "deterministic-decode-drift": ("random",),
    # No strategy was written for it: any scenario whose requests arrive staggered (one finishes
    # while another runs, a later one misses the cache) triggers it; seeds 0-2 of the default mix
    # found it with burst-reuse and page-boundary scenarios within 30 s (docs/fault-zoo.md).
    "stale-slot-continuation": (),
    "salt-ignored": ("tenant-salt",),
    "shared-sampler-rng": ("seeded-sampling",),
    "bitmask-row-skip": ("structured-burst",),
    # The only strategy that sends requests under adapters: leave-one-out cannot find it.
    "lora-prefix-shared": ("lora-alternation",),
    # No strategy was written for it: any prefix hit prefilled beside other requests triggers it
    # (issue 51's fault whose other victims keep their tokens while their logprobs move).
    "lossy-hit-reload": (),
    # The hybrid model's state-cache faults (qwen3-next): state-restore caches prompts whose
    # lengths sit on the state chunk and hits them by extension, all but the last token and again;
    # prefill-abort sends prompts cut in chunks beside other long ones.
    "ssm-checkpoint-batch": ("state-restore",),
    "stale-state-donated": ("state-restore", "prefill-abort"),
    "unwritten-state-published": ("state-restore",),
    "state-n-minus-1": ("state-restore",),
    # The sliding-window faults (gemma3): window-prefix hits prefixes longer than the window, one
    # of them a window stale; window-edge sends prompt lengths at the window and the page +-1.
    "window-ring-stale": ("window-prefix",),
    "window-modulo-after-saturation": ("window-edge",),
    # The benign routing drift (qwen3-moe): expert-batch grows and shrinks a decode's batch.
    "router-tie-numerics": ("expert-batch",),
    # The host tier's (issue 53): the strategy that pushes a prefix out to the host and returns
    # to it. Left out, eviction's later wave on its holders' prefix is the nearest thing.
    "host-loadback-stale-pages": ("host-tier-return",),
    "host-key-no-salt": ("host-tier-return",),
    "host-loadback-race": ("host-tier-return",),
    # The prefill/decode pair's (issue 56): no strategy was written for it; any burst of different
    # prompts puts two transfers in flight at once.
    "transfer-region-dedupe": (),
}

ARMS: dict[str, tuple[tuple[Strategy, ...], bool]] = {
    "servefuzz": (get_strategies(",".join(DEFAULT_MIX)), True),
    # The same, sending every isolation reference again (RunConfig.reuse_references=False): what
    # reusing the references of requests seen alone before saves, side by side.
    "servefuzz-fresh-refs": (get_strategies(",".join(DEFAULT_MIX)), True),
    "leave-one-out": (get_strategies(",".join(DEFAULT_MIX)), True),
    "leave-one-out+coverage": (get_strategies(",".join(DEFAULT_MIX)), True),
    # The same, steered by the engine's own code too (issue 57: `--coverage` on the engine, its
    # edges in context as `cov:` features): what `servefuzz fuzz` runs by default now.
    "leave-one-out+coverage+engine": (get_strategies(",".join(DEFAULT_MIX)), True),
    # The same with the context bandit (issue 57; opt-in, measured here before it may be a default).
    "leave-one-out+coverage+engine+ctx": (get_strategies(",".join(DEFAULT_MIX)), True),
    # `servefuzz fuzz` as it runs by default, every strategy in: pairwise coverage and the
    # engine's own coverage on (the done-whens' "found by the default campaign").
    "default": (get_strategies(",".join(DEFAULT_MIX)), True),
    "sglang-determinism": ((SGLangDeterminismModes(),), False),
    "bench-serving": ((BenchServingLoad(),), False),
}


def run_one(arm: str, fault: str, seed: int, cap_s: float, workdir: Path) -> dict[str, Any]:
    """One campaign of one arm against one fault; the detection numbers as a JSON-ready row."""
    strategies, greybox = ARMS[arm]
    if arm.startswith("leave-one-out"):
        strategies = tuple(s for s in strategies if s.name not in OWN_STRATEGIES[fault])
    # Engine coverage only in the arms that steer by it: the others run the engine untraced, as
    # every arm did before it existed, so their rows stay comparable with the older results.
    engine = arm.endswith(("+engine", "+engine+ctx")) or arm == "default"
    flags = FuzzOptions(out=workdir, faults=(fault,), engine_coverage=engine).reference_flags()
    # The launch lets the campaign back a suspect the content swap cannot (overlap-war) with the
    # deterministic control, on a fresh server of its own.
    config = CampaignConfig(
        out_dir=workdir / f"{arm}-{fault}-{seed}", seed=seed, time_budget_s=cap_s, stop_at_first=True,
        stop_verdicts=RIGHT_CLASS[fault], greybox=greybox, launch=Launch("reference", tuple(reference_argv(flags))),
        coverage="+coverage" in arm or arm == "default", engine_coverage=engine,
        credit_contexts=arm.endswith("+ctx"),  # spelled out: whatever the campaign's default, only this arm
    )
    with ServerProcess.reference(flags, log_path=workdir / "server.log") as srv:

        async def go() -> CampaignResult:
            run_config = RunConfig(reuse_references=not arm.endswith("fresh-refs"))
            async with Runner(make_target("reference", srv.base_url), run_config) as runner:
                return await run_campaign(runner, strategies, config)

        result = asyncio.run(go())
    firsts = [result.first_confirmed[v] for v in RIGHT_CLASS[fault] if v in result.first_confirmed]
    first = min(firsts, key=lambda f: f[1]) if firsts else None
    other = sorted({f.verdict.value for _, f in result.findings} - set(RIGHT_CLASS[fault]))
    # Which control made the first finding of the right class a corruption (issue 12), in the
    # controls' own words: the backing names and the first backing summary.
    right = [f for _, f in result.findings if f.verdict.value in RIGHT_CLASS[fault]]
    backing = [a for a in right[0].anomalies if a.backed_by] if right else []
    backed_by = sorted({name for a in backing for name in a.backed_by})
    controls = [c.summary for a in backing for c in a.controls if c.backs]
    return {
        "arm": arm, "fault": fault, "seed": seed, "cap_s": cap_s,
        "found": first is not None,
        "requests": None if first is None else first[0],
        "seconds": None if first is None else round(first[1], 1),
        "total_requests": result.requests,
        "other_verdicts": other,
        "backed_by": backed_by,
        "control": controls[0] if controls else None,
        "left_out": list(OWN_STRATEGIES[fault]) if arm.startswith("leave-one-out") else [],
        "pairs": None if result.coverage is None else [result.coverage.covered, result.coverage.total],
    }


def table(rows: Sequence[dict[str, Any]]) -> str:
    """Markdown: per fault, each arm's median requests and seconds to detection, and hit rate."""
    arms = [a for a in ARMS if any(r["arm"] == a for r in rows)]
    head = "| fault | " + " | ".join(f"{a}: median requests (s), found" for a in arms) + " |"
    lines = [head, "|---|" + "---|" * len(arms)]
    for fault in FAULTS:
        cells = []
        for arm in arms:
            mine = [r for r in rows if r["arm"] == arm and r["fault"] == fault]
            if not mine:
                cells.append("-")
                continue
            hits = [r for r in mine if r["found"]]
            if hits:
                req = statistics.median(int(r["requests"]) for r in hits)
                sec = statistics.median(float(r["seconds"]) for r in hits)
                cells.append(f"{req:,.0f} ({sec:.0f} s), {len(hits)}/{len(mine)}")
            else:
                cap = max(float(r["cap_s"]) for r in mine)
                cells.append(f"not detected in {cap:.0f} s, 0/{len(mine)}")
        lines.append(f"| {fault} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--faults", default=",".join(FAULTS), help="comma-separated zoo faults (default: all)")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated arms (default: {', '.join(ARMS)})")
    p.add_argument("--seeds", type=int, default=5, help="seeds per fault and arm (default 5)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--cap-s", type=float, default=300.0, help="seconds per campaign before 'not detected' (default 300)")
    p.add_argument("--out", type=Path, default=Path("zoo-results.jsonl"), help="JSON lines, appended")
    p.add_argument("--table", type=Path, metavar="RESULTS", help="only print the table of a results file")
    p.add_argument("--keep", type=Path, metavar="DIR",
                   help="keep each campaign's directory (findings, progress) under DIR instead of a temporary one")
    args = p.parse_args(argv)
    if args.table:
        rows = [json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]
        print(table(rows))
        return 0
    faults = [f for f in args.faults.split(",") if f]
    unknown = [f for f in faults if f not in FAULTS] + [a for a in args.arms.split(",") if a not in ARMS]
    if unknown:
        print(f"zoo.py: unknown fault or arm: {', '.join(unknown)}", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="servefuzz-zoo-") as scratch:
        tmp = args.keep or Path(scratch)
        for fault in faults:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for arm in args.arms.split(","):
                    row = run_one(arm, fault, seed, args.cap_s, tmp)
                    rows.append(row)
                    with open(args.out, "a", encoding="utf-8") as f:
                        f.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
