"""Re-judge stored findings under the leak rule of docs/verdicts.md (*Leaks*), from what they stored.

    python bench/rejudge_leaks.py docs/findings/*/*.json docs/gpu/findings/*/*.json
    python bench/rejudge_leaks.py ../shared/evidence/*-gpu-bf16/*.json --truth MODEL

Every anomaly a leak backed is judged again (`oracles.judge.rejudged_leaks`): with `--truth` (the
model the target served, when servefuzz built it: `servefuzz model build DIR --seed 0` writes the
default one, DIR/hf-float32 for vLLM and SGLang, DIR/tiny.gguf for llama.cpp) the forced check
runs on the exact truth; without it an unchecked leak backs only a flip above the noise. Prints
one row per finding (verdict before -> after, and why) and nothing for files that are not
findings. Writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from servefuzz.errors import FindingError
from servefuzz.finding import load_finding
from servefuzz.oracles.controls import LEAK
from servefuzz.oracles.judge import rejudged_leaks
from servefuzz.truth import Truth

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("findings", nargs="+", type=Path)
    parser.add_argument("--truth", type=Path, help="the model the target served (an HF folder or a GGUF)")
    args = parser.parse_args(argv)
    truth = Truth.load(args.truth) if args.truth is not None else None
    print("| finding | engine | leak-backed anomalies | before | after | forced check |")
    print("|---|---|---|---|---|---|")
    changed = 0
    for path in args.findings:
        try:
            f = load_finding(path)
        except FindingError:
            continue
        leaked = [a for a in f.anomalies if LEAK in a.backed_by]
        again = rejudged_leaks(f, truth)
        checks = {c.own_check.how + (": own" if c.own_check.explains else ": not own")
                  for a in again.anomalies for c in a.controls if c.name == LEAK and c.own_check is not None}
        changed += again.verdict is not f.verdict
        print(f"| {path} | {f.target.engine} {f.target.version or ''} | {len(leaked)} | {f.verdict.value} | "
              f"{again.verdict.value} | {', '.join(sorted(checks)) or '-'} |")
    print(f"\n{changed} verdicts changed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
