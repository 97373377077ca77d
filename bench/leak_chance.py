"""How long a run of tokens two unrelated requests share by chance: the measure behind the leak
oracle's LEAK_MIN_TOKENS (docs/verdicts.md, *Leaks*).

For every scenario of a stored campaign (`scenarios.jsonl`, `histories.jsonl`), each distinct
output of each request is matched against every other request's prompt followed by each of its
distinct outputs (requests with the same prompt skipped); runs of the request's own prompt and
one token repeated do not count, as in `controls.leak_forensics`. Prints how many outputs have a
longest match of each length. On a clean campaign every match is chance.

    nice -n 19 python bench/leak_chance.py /root/sf-runs/clean20k
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

LENGTHS = (1, 2, 3, 4, 5, 6, 8)


def longest_chance_matches(campaign: Path) -> tuple[int, int, collections.Counter[int]]:
    """(outputs, tokens, longest match length -> outputs) over a stored campaign."""
    prompts: dict[int, dict[str, tuple[int, ...]]] = {}
    for line in (campaign / "scenarios.jsonl").open():
        o = json.loads(line)
        prompts[o["iteration"]] = {r["id"]: tuple(r["prompt_ids"]) for r in o["scenario"]["requests"]}
    outs: dict[int, dict[str, set[tuple[int, ...]]]] = collections.defaultdict(lambda: collections.defaultdict(set))
    iteration = None
    for line in (campaign / "histories.jsonl").open():
        o = json.loads(line)
        if o["kind"] == "run":
            iteration = o["meta"].get("iteration")
            continue
        if o.get("status") == "ok" and iteration is not None:
            outs[iteration][o["request_id"]].update(tuple(c["token_ids"]) for c in o["choices"] if c["token_ids"])
    hist: collections.Counter[int] = collections.Counter()
    n_outputs = n_tokens = 0
    for iteration, by_request in outs.items():
        ps = prompts.get(iteration, {})
        for rid, mine in by_request.items():
            own = ps.get(rid, ())
            sources = [(*ps.get(other, ()), *t) for other, ts in by_request.items()
                       if other != rid and ps.get(other) != own for t in ts]
            sources += [p for other, p in ps.items() if other != rid and other not in by_request and p != own]
            grams = {k: {s[i:i + k] for s in sources for i in range(len(s) - k + 1)} for k in LENGTHS}
            own_grams = {k: {own[i:i + k] for i in range(len(own) - k + 1)} for k in LENGTHS}
            for t in mine:
                n_outputs += 1
                n_tokens += len(t)
                best = 0
                for k in LENGTHS:
                    if any((g := t[i:i + k]) in grams[k] and (k == 1 or (g not in own_grams[k] and len(set(g)) > 1))
                           for i in range(len(t) - k + 1)):
                        best = k
                hist[best] += 1
    return n_outputs, n_tokens, hist


def main() -> None:
    for arg in sys.argv[1:]:
        n, tokens, hist = longest_chance_matches(Path(arg))
        print(f"{arg}: {n} outputs, {tokens} tokens; outputs by longest chance match: "
              + ", ".join(f"{k}: {hist[k]}" for k in sorted(hist)))


if __name__ == "__main__":
    main()
