"""Which requests get n-gram drafts accepted by servefuzz's tiny random-weight model (issue 53).

    python bench/spec_acceptance.py

One vLLM CPU server (the `vllm-cpu` preset's `spec-ngram` profile: prompt lookup of the last 2-4
tokens, 3 drafted a step, the cache's tiny model) and, one form at a time, four requests of it
at once (greedy unless said), read by the engine's own meters around them: drafted and accepted
tokens (`vllm:spec_decode_num_{draft,accepted}_tokens_total`) and generated tokens
(`vllm:generation_tokens_total`). vLLM drafts only where the lookup finds a match, so "of
drafted" is the drafter's precision and "of generated" how much of the decode it sped up; an
engine that drafts every step (SGLang's n-gram trie) sees the second, not the first. Then
spec-echo's scenarios (seeds 53, 1, 2) and the random load (seed 53), each run once by
servefuzz's runner. Rows go to stdout as a markdown table.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

METERS = ("vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total",
          "vllm:generation_tokens_total")
VOCAB = range(3, 2048)  # the tiny model's ids, as a campaign's TargetShape has them


def _meters(url: str) -> list[float]:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as page:  # noqa: S310 - 127.0.0.1
        text = page.read().decode()
    return [sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith((m + "{", m + " ")))
            for m in METERS]


def _complete(url: str, prompt: Sequence[int], max_tokens: int, temperature: float) -> None:
    body = {"model": "tiny", "prompt": list(prompt), "max_tokens": max_tokens, "temperature": temperature,
            "ignore_eos": True, **({"seed": 5} if temperature else {})}
    request = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=900) as answer:  # noqa: S310 - 127.0.0.1
        answer.read()


def _row(name: str, url: str, send: Callable[[], None]) -> None:
    before = _meters(url)
    send()
    drafted, accepted, generated = (b - a for a, b in zip(before, _meters(url), strict=True))
    print(f"| {name} | {generated:,.0f} | {drafted:,.0f} | {accepted:,.0f} | {accepted / max(drafted, 1):.0%} "
          f"| {accepted / max(generated, 1):.0%} |", flush=True)


def _four(url: str, prompts: list[list[int]], max_tokens: int, temperature: float = 0.0) -> Callable[[], None]:
    def send() -> None:
        with ThreadPoolExecutor(len(prompts)) as pool:
            list(pool.map(lambda p: _complete(url, p, max_tokens, temperature), prompts))
    return send


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    from servefuzz.launcher import Launch, ServerProcess
    from servefuzz.runner import RunConfig, Runner
    from servefuzz.strategies import RandomLoad, SpecEcho, TargetShape
    from servefuzz.targets import make_target
    from servefuzz.workload import Scenario

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, help="keep the server's log here (default: a temporary folder's, removed)")
    args = parser.parse_args(argv)
    rng = random.Random(53)
    shape = TargetShape(page_size=32, context_length=2048, vocab=VOCAB, speculative=True)

    def ids(n: int) -> list[int]:
        return [rng.choice(VOCAB) for _ in range(n)]

    def scenario(s: Scenario) -> Callable[[], None]:
        async def run() -> None:
            async with Runner(make_target("vllm", url), RunConfig(request_timeout_s=900)) as r:
                await r.run(s, run=0)
        return lambda: asyncio.run(run())

    launch = Launch.resolve("vllm-cpu", profile="spec-ngram")
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(launch.argv, env=launch.env,
                                                             log_path=args.log or Path(tmp) / "server.log",
                                                             start_timeout_s=launch.start_timeout_s) as srv:
        url = srv.base_url
        print("| requests | generated | drafted | accepted | of drafted | of generated |")
        print("|---|---|---|---|---|---|")
        for new in (32, 100, 400, 800):
            _row(f"4 random 32-token prompts, {new} tokens each", url, _four(url, [ids(32) for _ in range(4)], new))
        for motif in (1, 4, 16):
            prompts = [(ids(motif) * (128 // motif)) for _ in range(4)]
            _row(f"4 prompts of a {motif}-token motif x {128 // motif}, 200 tokens", url, _four(url, prompts, 200))
        _row("4 prompts of an 8-token motif x 16, 200 tokens, temperature 0.8", url,
             _four(url, [ids(8) * 16 for _ in range(4)], 200, 0.8))
        for seed in (53, 1, 2):
            s = SpecEcho().generate(random.Random(seed), shape, seed=seed)
            _row(f"spec-echo scenario {seed} ({len(s.requests)} requests)", url, scenario(s))
        s = RandomLoad().generate(random.Random(53), shape, seed=53)
        _row(f"random scenario 53 ({len(s.requests)} requests)", url, scenario(s))
    print(f"\n{time.monotonic() - start:.0f} s, server start included", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
