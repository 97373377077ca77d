#!/usr/bin/env python3
"""Judge issue 15's device runs against the exact float64 truth (servefuzz.truth), here on a CPU.

gpu_settle.py judges a loaded run against the same request run alone on the same server; that
fails when the alone run is itself wrong. This reads its raw runs (raw.jsonl or raw.jsonl.xz:
every request's tokens and top-k per position) and asks, for every run of the victim, how far the
engine's log-probabilities lie from the model's own at every position (teacher-forced on the
engine's tokens). GPU noise (TF32) keeps a correct run within some 0.002 nats; FAR (0.05) is the
line drawn.

    PYTHONPATH=src python3 scripts/gpu_truth_table.py RAW --gguf tiny.gguf --finding finding.json [--victim r08]

Prints one markdown row per (row, candidate): alone runs far / alone runs, loaded runs far /
loaded runs, the largest deviation of a correct run and the smallest of a wrong one.
"""

from __future__ import annotations

import argparse
import json
import lzma
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gpu_settle import finding_requests, resize_prompt  # noqa: E402

from servefuzz.truth import Truth  # noqa: E402

FAR = 0.05


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw")
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--finding", required=True)
    ap.add_argument("--victim", default="r08")
    args = ap.parse_args()
    truth = Truth.load(args.gguf)
    reqs = finding_requests(json.loads(Path(args.finding).read_text()))
    opener = lzma.open if args.raw.endswith(".xz") else open
    table: dict[tuple[str, str], dict] = defaultdict(lambda: {"solo": [0, 0], "load": [0, 0], "ok_max": 0.0, "far_min": None})
    prompts: dict[int | None, list[int]] = {}
    with opener(args.raw, "rt") as f:
        for line in f:
            item = json.loads(line)
            rec = item["results"].get(args.victim)
            if not rec or not rec.get("top") or rec.get("error"):
                continue
            parts = item["row"].split("/")
            row, cand = parts[1] if len(parts) > 1 else parts[0], "/".join(parts[2:]) or "-"
            m = re.search(r"prompt (\d+)", row)
            length = item.get("prompt_len") or (int(m.group(1)) if m else None)
            if length not in prompts:
                base = next(r for r in reqs if r["id"] == args.victim)
                prompts[length] = base["prompt"] if length in (None, len(base["prompt"])) else next(
                    r for r in resize_prompt(reqs, args.victim, length) if r["id"] == args.victim)["prompt"]
            dev = max(truth.deviation(prompts[length], rec["tokens"], rec["top"]))
            t = table[(row, cand)]
            kind = "solo" if item["kind"] in ("solo", "recipe") else "load"
            t[kind][1] += 1
            if dev > FAR:
                t[kind][0] += 1
                t["far_min"] = dev if t["far_min"] is None else min(t["far_min"], dev)
            else:
                t["ok_max"] = max(t["ok_max"], dev)
    print("| row | candidate | alone runs far from the truth | loaded runs far from the truth | "
          "largest deviation of a correct run | smallest of a wrong one |")
    print("|---|---|---|---|---|---|")
    for (row, cand), t in table.items():
        far_min = "-" if t["far_min"] is None else f"{t['far_min']:.3f}"
        print(f"| {row} | {cand} | {t['solo'][0]}/{t['solo'][1]} | {t['load'][0]}/{t['load'][1]} | {t['ok_max']:.4f} | {far_min} |")


if __name__ == "__main__":
    main()
