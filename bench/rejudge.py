"""Re-judge stored findings under the verdict ladder of docs/verdicts.md, from what they stored.

    python bench/rejudge.py docs/gpu/findings/*/*.json --campaign-shift 0.0143
    python bench/rejudge.py CAMPAIGN_DIR/findings/*.json      # noise.json of the campaign is read

A finding stores, for each divergence, the margin at the first differing token, its position
and the threshold it was held against, and, for its confirmation, the variants with the runs
that produced them. That is enough to say what the ladder makes of it without the server:

- the threshold becomes the larger of the stored one and the campaign's at that position: from
  the campaign's `noise.json` when the finding sits in a campaign directory that has one, else
  2 x `--campaign-shift` (the largest benign shift the campaign measured, when it was measured
  by other means; 0 leaves the stored threshold alone);
- a confident flip is `suspected-corruption` unless the finding's evidence names a control
  that backed it (`backed_by`), which stored findings from before the ladder never do;
- recurrences count only replays that showed the first execution's deviant variant: the
  confirmation's variants name their runs, and runs below the first execution's loaded count
  are the first execution's.

- a flip the ladder calls numeric drift, on a server whose mode promises batch- and
  cache-invariant answers (`TargetInfo.promise`: the server args, the variables, or the launch
  profile the file recorded), is a `contract-violation` (`anomaly.held_to`, docs/verdicts.md,
  *Contract violations*); the "stored verdict" column is the file's own word, as written.

What it cannot do without the server is the vote: a finding stores one alone run per request,
and when that run is the odd one out the table says so (the confirmation would measure three
fresh ones).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from servefuzz.anomaly import Divergence, Oracle, Promise, Verdict, deciding
from servefuzz.finding import Finding, load_finding
from servefuzz.oracles.noise import CAMPAIGN_K, NOISE_FILE, CampaignNoise
from servefuzz.store import read_noise

__all__ = ["main", "rejudge", "row"]


def _campaign(path: Path, shift: float) -> tuple[CampaignNoise | None, float]:
    campaign_dir = path.parent.parent
    if (campaign_dir / NOISE_FILE).exists():
        return read_noise(campaign_dir), 0.0
    return None, CAMPAIGN_K * shift


def rejudge(d: Divergence, noise: CampaignNoise | None, flat: float, backed: bool,
            promise: Promise | None = None) -> tuple[Verdict, float]:
    """The divergence's verdict under the ladder, and the threshold it was held against; a
    numeric drift under `promise` (the server's mode's) is a contract violation."""
    wide = noise.threshold(d.position, False) if noise is not None else flat
    threshold = max(d.threshold or 0.0, wide)
    numbers = d.verdict.unbacked if d.verdict is Verdict.CONTRACT_VIOLATION else d.verdict  # what the margin said
    if numbers in (Verdict.UNCLASSIFIED, Verdict.NUMERIC_DRIFT) or d.margin is None:
        verdict = numbers  # a threshold that only grows never makes drift worse
    elif d.margin <= threshold and not d.margin_is_bound:
        verdict = Verdict.NUMERIC_DRIFT
    else:
        verdict = Verdict.CORRUPTION if backed else Verdict.SUSPECTED_CORRUPTION
    if verdict is Verdict.NUMERIC_DRIFT and promise is not None:
        return Verdict.CONTRACT_VIOLATION, threshold
    return verdict, threshold


def _recurrences(f: Finding, rid: str) -> str:
    """'k/n': replays that showed the first execution's deviant variant (what its isolation
    anomaly saw under load, against the alone run); replays are numbered after the first
    execution's loaded runs."""
    c = f.confirmation
    iso = next((a for a in f.anomalies if a.request_id == rid and a.oracle is Oracle.ISOLATION), None)
    if c is None or iso is None or rid not in c.variants:
        return "-"
    first_runs = int(iso.evidence.get("loaded_runs", 2))
    deviant = {v.token_ids for v in iso.variants if v.label != "alone"}
    runs = {r for v in c.variants[rid] if v.token_ids in deviant for r in v.runs if r >= first_runs}
    return f"{len(runs)}/{c.attempts}"


def _odd_alone(f: Finding, rid: str) -> bool:
    """The stored alone run disagrees with every loaded run (and they all agree)."""
    c = f.confirmation
    if c is None or rid not in c.variants:
        return False
    loaded = [v for v in c.variants[rid] if v.label != "alone"]
    return len(loaded) == 1 and any(v.label == "alone" and v.token_ids != loaded[0].token_ids for v in c.variants[rid])


def _stored_verdict(path: Path) -> Verdict:
    """The verdict the file itself says (written by the servefuzz that made it): loading a
    finding holds it to today's rules, so the file's word is read apart."""
    return Verdict(json.loads(path.read_text(encoding="utf-8"))["verdict"])


def row(path: Path, shift: float) -> str:
    f = load_finding(path)
    stored = _stored_verdict(path)
    noise, flat = _campaign(path, shift)
    d = deciding(x for a in f.anomalies for x in a.divergences)
    promise = f.target.promise
    if d is None:
        return f"| {path.name} | {stored.value} | — | {f.verdict.value} | — | — | not a divergence |"
    head = next(a for a in f.anomalies if d in a.divergences)
    backed = bool(head.backed_by)
    new, threshold = rejudge(d, noise, flat, backed, promise)
    margin = "?" if d.margin is None else f"{'>=' if d.margin_is_bound else ''}{d.margin:.4f}"
    rate = f.confirmation.rate if f.confirmation else "-"
    notes = []
    if new is Verdict.SUSPECTED_CORRUPTION:
        notes.append("no control ran: suspected until the content swap backs it")
    if new is Verdict.CONTRACT_VIOLATION and promise is not None:
        notes.append(f"a near-tie flip on a server under {promise.mode}, whose promise it breaks")
    if _odd_alone(f, d.request_id):
        notes.append("the one stored alone run is the odd one: fresh references must vote")
    within = d.margin is not None and d.margin <= (d.threshold or 0.0) and not d.margin_is_bound
    return (f"| {path.name} | {stored.value} (margin {margin} at token {d.position} {'<=' if within else '>'} "
            f"{d.threshold or 0:.4f})"
            + f" | {threshold:.4f} | **{new.value}** | {rate} | {_recurrences(f, d.request_id)} | "
            + ("; ".join(notes) or "—") + " |")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("findings", nargs="+", type=Path)
    p.add_argument("--campaign-shift", type=float, default=0.0,
                   help="the campaign's largest benign shift, where it has no noise.json")
    args = p.parse_args(argv)
    print("| finding | stored verdict | threshold now | re-judged | stored rate | recurrences of the deviant "
          "variant | note |")
    print("|---|---|---|---|---|---|---|")
    for path in args.findings:
        print(row(path, args.campaign_shift))
    return 0


if __name__ == "__main__":
    sys.exit(main())
