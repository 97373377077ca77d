"""Replay the seed report's finding (sgl-project/sglang#22819, finding_03330) against SGLang here.

    python bench/seed_trace.py --launch sglang-cpu@0.5.10.post1 --runs 10
    python bench/seed_trace.py --launch sglang-cpu --page-size 1 --runs 10

The report's trace, as its table gives it: eleven requests in two bursts, every one with
max_tokens 32 and n 4, r02's family on a 64-token shared prefix (one KV block there). The
report ran Qwen2.5-0.5B on a GPU with --enable-deterministic-inference; here it is servefuzz's
tiny float32 llama on the CPU (the prompts are random tokens of its vocabulary, bit-exact
across runs), the 2048-token prompts cut to 2000 so that prompt and answer fit its 2048-token
context (SGLang refuses a prompt and max_tokens that reach the context, and 2015 tokens came back
with 31 of 32: measured), and no deterministic mode (SGLang refuses it on the CPU). The page size is the
report's block size, 64, unless `--page-size` says otherwise (0.5.10.post1's paged allocator
runs under Triton's interpreter there: engines.sglang.INTERPRETED). Replays go through
`servefuzz.api.replay`: each run on a flushed cache, judged by the one reproduction rule, r02
expected to diverge. Prints the replay report.
"""

from __future__ import annotations

import argparse
import sys

from servefuzz import api
from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.finding import Finding
from servefuzz.models import TINY
from servefuzz.replay_report import render_replay_report
from servefuzz.server_facts import TargetInfo
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

# (request, offset ms, prompt_len, prefix_len) from the report's "Request trace" table.
TRACE = (
    ("r01", 0, 128, 0), ("r02", 45, 256, 64), ("r03", 109, 64, 0),
    ("r04_s_b_s_s_s", 385, 2048, 0), ("r02_b_s_b_s_s_s", 385, 1024, 64), ("r03_s_s_s_s", 486, 256, 0),
    ("r01_b_s_s_s_s", 518, 512, 0), ("r03_b_s_s_s_s", 526, 256, 0), ("r04_s_s_s_s", 537, 2048, 0),
    ("r04_b_s_s_s_s", 542, 2048, 0), ("r02_b_s_s_s_s", 547, 1024, 64),
)  # fmt: skip
MAX_TOKENS, N = 32, 4


def seed_finding(seed: int = 22819, page_size: int = 64) -> Finding:
    builder = PromptBuilder(seed=seed, vocab=range(3, 2000))  # inside the tiny vocabulary
    specs = tuple(
        RequestSpec(rid, float(at), builder.prompt("p" if pl else None, prefix_len=pl,
                                                   prompt_len=min(n, TINY.context - MAX_TOKENS - 16)),
                    max_tokens=MAX_TOKENS, n=N, prefix_name="p" if pl else None, prefix_len=pl)
        for rid, at, n, pl in TRACE
    )
    target = TargetInfo("sglang", "http://127.0.0.1:0", "0.5.10.post1", {"page_size": page_size})
    anomaly = Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r02", "r02 diverged in the seed report (10/10 runs)")
    return Finding(3330, seed, Scenario(seed, specs), target, (anomaly,))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launch", required=True, help="sglang-cpu, sglang-cpu@0.5.10.post1, ...")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--page-size", type=int, default=64, help="the KV page size to launch with (default: the report's 64)")
    args = ap.parse_args()
    result = api.replay(seed_finding(page_size=args.page_size), launch=args.launch, runs=args.runs)
    print(render_replay_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
