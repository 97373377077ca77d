"""A campaign directory in a few numbers: what docs/engines.md quotes for the SmolLM2 campaigns
(bench/results/smollm2-campaigns-*.json), without its histories.

    python bench/campaign_summary.py DIR [DIR ...] > summary.json

Per campaign: the target (engine, version, model form, the launch's argv less paths), the
iterations and requests, how each request ended (status counts over every history), the
findings by verdict and oracle, the scenarios `pace.fit` cut and by how much, the largest paced
request timeout a run was given, the pace measured at the end, the benign shifts the campaign
learnt (L-inf, nats, by bucket), and the exercise evidence's lines.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from servefuzz.history import read_history_jsonl
from servefuzz.pace import PaceMeter
from servefuzz.store import read_noise


def summary(out: Path) -> dict[str, Any]:
    config = json.loads((out / "config.json").read_text())
    progress = json.loads((out / "progress.json").read_text())
    target = config["target"]
    histories = read_history_jsonl(out / "histories.jsonl")
    statuses: Counter[str] = Counter()
    meter = PaceMeter()
    timeouts = []
    for h in histories:
        statuses.update(r.status.value for r in h.records)
        if h.label == "load":
            meter.observe(h.records)
        else:
            for r in h.records:
                meter.observe([r])
        if "request_timeout_s" in h.meta:
            timeouts.append(float(h.meta["request_timeout_s"]))  # type: ignore[arg-type]
    scenarios = [json.loads(line)["scenario"] for line in (out / "scenarios.jsonl").read_text().splitlines()]
    fitted = [s["meta"]["fitted"] for s in scenarios if "fitted" in s["meta"]]
    findings = []
    for f in sorted((out / "findings").glob("finding_*.json")):
        d = json.loads(f.read_text())
        findings.append({"verdict": d.get("verdict"), "signature": d.get("signature"),
                         "confirmation": (d.get("confirmation") or {}).get("rate")})
    pace = meter.pace
    server = json.loads((out / "server.json").read_text()) if (out / "server.json").exists() else {}
    argv = " ".join(Path(a).name if "/" in a else a for a in server.get("argv", [])[1:])
    return {
        "engine": target.get("engine"), "version": target.get("version"),
        "model": {k: (target.get("model") or {}).get(k) for k in ("name", "form", "file", "dtype")},
        "architecture": (target.get("architecture") or {}).get("arch"),  # a --model-arch build's
        "launch_flags": argv,
        "iterations": progress.get("next_iteration"), "requests": progress.get("requests"),
        "elapsed_s": progress.get("elapsed_s"), "restarts": progress.get("restarts"),
        "statuses": dict(statuses),
        "findings": findings, "seen": progress.get("seen", {}),
        "scenarios": len(scenarios),
        "requests_per_scenario": sorted(len(s["requests"]) for s in scenarios),
        "fitted": {"scenarios": len(fitted), "dropped_requests": sum(f["dropped"] for f in fitted),
                   "largest_bound_before_s": max((f["from_s"] for f in fitted), default=None)},
        "largest_paced_timeout_s": max(timeouts, default=None),
        "pace_at_end": None if pace is None else {"prefill_ms": round(pace.prefill_s * 1000, 2),
                                                  "decode_ms": round(pace.decode_s * 1000, 2),
                                                  "slowdown": round(pace.slowdown, 2)},
        "noise": {"samples": (noise := read_noise(out)).samples,
                  "linf_max_by_bucket": {b: h.max for b, h in noise.hists.get("linf", {}).items()}},
        "exercise": (progress.get("exercise") or {}).get("lines") if isinstance(progress.get("exercise"), dict) else None,
    }


if __name__ == "__main__":
    print(json.dumps([summary(Path(d)) for d in sys.argv[1:]], indent=1))
