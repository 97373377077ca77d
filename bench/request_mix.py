"""What a campaign spent its requests on: the scenarios themselves, and the evidence around them.

    python bench/request_mix.py CAMPAIGN_DIR...     # a campaign's --out folder (or several)

On a GPU an engine's time per request is the budget (issue 29: cost per request), so the share
of requests that are not the scenario's own first run is the price of the evidence. A campaign
folder keeps every first execution in `histories.jsonl`: each record's `label` says what it was
and its `run` which repetition. Everything the campaign sent beyond those records
(`progress.json`'s `requests`) went to confirming candidates: the 5 replays, the controls and
the leak checks. Per campaign, one row:

- scenario: the loaded run 0 of each scenario, what the fuzzer chose to send;
- replay: the further loaded runs (the replay oracle's second opinion);
- alone: the references, each request alone on a flushed cache (the isolation oracle), as sent;
- reused: the references not sent, an earlier identical request's answer (`Runner.reference`;
  each alone run's meta names them), so not among the requests;
- cache probes: warm, primed and cold runs of the cache-state oracle;
- confirmation: the rest, the candidates' confirmations and controls;
- requests per minute of fuzzing (`progress.json`'s `elapsed_s`, server start excluded).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

_PROBES = ("warm", "primed", "cold")


@dataclass(frozen=True)
class Mix:
    campaign: str
    requests: int
    minutes: float
    scenario: int
    replay: int
    alone: int
    probes: int
    reused: int = 0

    @property
    def confirmation(self) -> int:
        return self.requests - self.scenario - self.replay - self.alone - self.probes

    def row(self) -> str:
        def share(n: int) -> str:
            return f"{n:,} ({100 * n / self.requests:.0f}%)" if self.requests else "0"

        rate = self.requests / self.minutes if self.minutes else 0.0
        return (f"| {self.campaign} | {self.requests:,} | {rate:,.0f} | {share(self.scenario)} | {share(self.replay)} | "
                f"{share(self.alone)} | {self.reused:,} | {share(self.probes)} | {share(self.confirmation)} |")


HEAD = ("| campaign | requests | per minute | scenario | replay | alone | reused (not sent) | cache probes | confirmation |\n"
        "|---|---|---|---|---|---|---|---|---|")


def mix_of(folder: Path) -> Mix:
    progress = json.loads((folder / "progress.json").read_text(encoding="utf-8"))
    seen: Counter[str] = Counter()
    with open(folder / "histories.jsonl", encoding="utf-8") as lines:
        for line in lines:
            event = json.loads(line)
            if event.get("kind") == "run" and event.get("label") == "alone":
                seen["reused"] += len(event.get("meta", {}).get("reused", ()))
            if event.get("kind") != "record":
                continue
            label = event.get("label")
            if label == "load":
                seen["scenario" if event.get("run") == 0 else "replay"] += 1
            elif label == "alone":
                seen["alone"] += 1
            elif label in _PROBES:
                seen["probes"] += 1
    return Mix(folder.name, int(progress["requests"]), float(progress["elapsed_s"]) / 60, seen["scenario"],
               seen["replay"], seen["alone"] - seen["reused"], seen["probes"], seen["reused"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("campaigns", nargs="+", type=Path)
    args = parser.parse_args(argv)
    print(HEAD)
    for folder in args.campaigns:
        try:
            print(mix_of(folder).row())
        except (OSError, ValueError, KeyError) as e:
            print(f"request_mix: {folder}: not a campaign folder with histories ({e})", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
