"""Re-judge stored campaigns from their histories under today's rules, execution by execution.

    python bench/rejudge_campaign.py CAMPAIGN_DIR...      # a directory, or a tarball of one
    python bench/rejudge_campaign.py bench/data/vllm-bf16/*.tar.xz   # docs/verdicts.md's table

A campaign directory keeps every first execution (`histories.jsonl`: the loaded runs, the alone
references and the cache-state probes of each iteration, `meta.iteration` naming it) and its
scenarios (`scenarios.jsonl`). That is what the campaign judged, so it can be judged again by
the code that judges now, in the campaign's order: each execution with `oracles.judge.judge`
against the campaign's noise model as it stood, which then learns from it (`judge.learn`), as
`campaign.run_campaign` does. Nothing is re-implemented here.

Before: the campaign's own count of findings by signature (`progress.json` "seen": every
finding, duplicates included, keyed by its headline verdict, a suspected corruption keyed as a
corruption). After: the same count over the re-judged executions. What cannot be redone without
the server is what came after a first execution (the confirmation's replays and votes, the
controls): a confident flip re-judged here is `suspected-corruption` until a control backs it.
The rebuilt noise model is checked against the campaign's `noise.json`: the same sample count
says the re-judging saw what the campaign saw.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from servefuzz.finding import Finding
from servefuzz.history import RequestRecord, RunHistory, read_history_jsonl
from servefuzz.oracles.judge import judge, learn
from servefuzz.oracles.noise import NOISE_FILE, CampaignNoise
from servefuzz.server_facts import TargetInfo
from servefuzz.store import read_json, read_noise
from servefuzz.workload import Scenario

__all__ = ["Execution", "Rejudged", "executions", "rejudge", "main"]


@dataclass(frozen=True)
class Execution:
    """One iteration's first execution, as the campaign stored it."""

    iteration: int
    scenario: Scenario
    loaded: tuple[RunHistory, ...]
    alone: dict[str, list[RequestRecord]]
    cache: tuple[RequestRecord, ...]


@dataclass(frozen=True)
class Rejudged:
    """A campaign's findings by headline verdict, as stored (`before`) and re-judged (`after`)."""

    name: str
    executions: int
    before: Counter[str]
    after: Counter[str]
    anomalies: Counter[str]  # every re-judged anomaly by verdict (a finding may hold several)
    samples: int  # the rebuilt noise model's
    stored_samples: int  # noise.json's (0: the campaign kept none)


def executions(out: Path) -> Iterator[Execution]:
    """The campaign's first executions in iteration order (an iteration that ran twice, cut by a
    kill, counts as its last run, as the campaign's resume does)."""
    scenarios: dict[int, Scenario] = {}
    for line in (out / "scenarios.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue  # a torn last line
        scenarios[int(d["iteration"])] = Scenario.from_json(d["scenario"])
    runs: dict[int, list[RunHistory]] = {}
    for h in read_history_jsonl(out / "histories.jsonl"):
        it = int(h.meta.get("iteration", -1))
        if h.label == "load" and any(x.label == "load" and x.run == h.run for x in runs.get(it, ())):
            runs[it] = []  # the iteration ran again after a kill: its last execution counts
        runs.setdefault(it, []).append(h)
    for it in sorted(i for i in runs if i in scenarios):
        alone: dict[str, list[RequestRecord]] = {}
        for r in (r for h in runs[it] if h.label == "alone" for r in h.records):
            alone.setdefault(r.request_id, []).append(r)
        cache = tuple(r for h in runs[it] if h.label == "cache" for r in h.records)
        yield Execution(it, scenarios[it], tuple(h for h in runs[it] if h.label == "load"), alone, cache)


def _verdict_of(signature: str) -> str:
    return signature.split(":")[2]  # engine:oracle:verdict:features (`Finding.signature`)


def rejudge(out: Path, name: str | None = None) -> Rejudged:
    config = read_json(out / "config.json")
    target = TargetInfo.from_json(config["target"]) if "target" in config else TargetInfo("openai", "http://127.0.0.1:1")
    performance = bool(config.get("performance", False))
    noise = CampaignNoise.empty()
    after: Counter[str] = Counter()
    anomalies: Counter[str] = Counter()
    n = 0
    for ex in executions(out):
        n += 1
        verdict = judge(ex.loaded, ex.alone, cache=ex.cache, performance=performance, campaign=noise, scenario=ex.scenario)
        noise = learn(noise, verdict, ex.loaded, ex.alone, ex.cache, ex.scenario)
        anomalies.update(a.verdict.value for a in verdict.anomalies)
        if verdict.anomalies:
            found = Finding(ex.iteration, ex.scenario.seed, ex.scenario, target, verdict.anomalies)
            after[_verdict_of(found.signature)] += 1
    before: Counter[str] = Counter()
    for sig, count in read_json(out / "progress.json").get("seen", {}).items():
        before[_verdict_of(sig)] += int(count)
    stored = read_noise(out).samples if (out / NOISE_FILE).exists() else 0
    return Rejudged(name or out.name, n, before, after, anomalies, noise.samples, stored)


def _opened(path: Path, scratch: Path) -> Path:
    """A campaign directory, or the one directory inside a tarball of one (.tar.xz, .tar.gz)."""
    if path.is_dir():
        return path
    with tarfile.open(path) as tar:
        tar.extractall(scratch, filter="data")
    [inner] = [p for p in scratch.iterdir() if p.is_dir()]
    return inner


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("campaigns", nargs="+", type=Path, help="campaign directories (or a tarball of one each)")
    args = p.parse_args(argv)
    results = []
    for path in args.campaigns:
        with tempfile.TemporaryDirectory() as scratch:
            results.append(rejudge(_opened(path, Path(scratch)), path.name.split(".tar")[0]))
    # Corruption always has its column (a suspected one is keyed as corruption): its 0 is the claim.
    verdicts = sorted({"corruption", *(v for r in results for v in (*r.before, *r.after))})
    print("| campaign | executions | noise samples (rebuilt / stored) | "
          + " | ".join(f"{v} before -> after" for v in verdicts) + " | anomalies re-judged |")
    print("|---|---|---|" + "---|" * len(verdicts) + "---|")
    for r in results:
        cells = " | ".join(f"{r.before[v]} -> {r.after[v]}" for v in verdicts)
        detail = ", ".join(f"{v} {k}" for v, k in sorted(r.anomalies.items())) or "none"
        print(f"| {r.name} | {r.executions} | {r.samples:,} / {r.stored_samples:,} | {cells} | {detail} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
