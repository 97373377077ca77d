"""The timing side channel of tenant isolation, measured: how much sooner a cross-salt probe got
its first token than its cold twin, in every loaded run of every tenant-salt execution of a
stored campaign (`scenarios.jsonl` with `meta.twins`, `histories.jsonl`), beside the
execution's own TTFT jitter (`oracles.tenancy.timing_noise`) and what the oracle said
(`tenant_isolation(...).status`). On a clean engine every advantage is noise and ordering: the
numbers behind `oracles.tenancy.TTFT_FLOOR_MS` (docs/verdicts.md, *Tenant isolation*).

    nice -n 19 python bench/tenant_timing.py /tmp/sf-clean-salt /tmp/sf-fault-salt
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

from servefuzz.history import RunHistory, read_history_jsonl
from servefuzz.oracles.tenancy import tenant_isolation, timing_noise
from servefuzz.workload import Scenario


def measure(campaign: Path) -> tuple[list[float], list[float], collections.Counter[str]]:
    """(advantages in ms, per-execution jitters in ms, oracle statuses) over a stored campaign."""
    scenarios = {}
    for line in (campaign / "scenarios.jsonl").open():
        o = json.loads(line)
        scenarios[o["iteration"]] = Scenario.from_json(o["scenario"])
    runs: dict[int, list[RunHistory]] = collections.defaultdict(list)
    for h in read_history_jsonl(campaign / "histories.jsonl"):
        it = h.meta.get("iteration")
        if h.label == "load" and isinstance(it, int):
            runs[it].append(h)
    advantages: list[float] = []
    jitters: list[float] = []
    statuses: collections.Counter[str] = collections.Counter()
    for it, sc in scenarios.items():
        twins = sc.meta.get("twins") or {}
        loaded = runs.get(it, [])[:2]  # the first execution's loaded runs (replays follow)
        if not twins or not loaded:
            continue
        statuses[tenant_isolation(sc, loaded).status.split(":")[0]] += 1
        noise = timing_noise(loaded, skip=set(twins))
        if noise is not None:
            jitters.append(noise)
        for probe, twin in twins.items():
            for h in loaded:
                recs = {r.request_id: r for r in h.records}
                p, t = recs.get(probe), recs.get(twin)
                if p and t and p.first_token_ms is not None and t.first_token_ms is not None \
                        and p.sent_ms is not None and t.sent_ms is not None:
                    advantages.append((t.first_token_ms - t.sent_ms) - (p.first_token_ms - p.sent_ms))
    return advantages, jitters, statuses


def main(argv: list[str]) -> int:
    for path in argv:
        adv, jit, statuses = measure(Path(path))
        adv.sort()
        jit.sort()

        def q(xs: list[float], f: float) -> float:
            return xs[min(len(xs) - 1, int(f * len(xs)))] if xs else float("nan")

        print(f"{path}: {len(adv)} probe/twin pairs; advantage ms min {q(adv, 0):.1f} p50 {q(adv, .5):.1f} "
              f"p90 {q(adv, .9):.1f} max {q(adv, 1):.1f}; jitter ms p50 {q(jit, .5):.1f} max {q(jit, 1):.1f}; "
              f"oracle: {dict(statuses)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
