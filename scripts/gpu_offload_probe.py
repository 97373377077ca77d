#!/usr/bin/env python3
"""Does vLLM's KV offloading serve one tenant's prompt from another tenant's CPU-tier blocks?

    gpu_offload_probe.py BASE_URL [MODEL]

The probe of docs/findings/vllm-gpu-kv-offloading-tenant-leak, with salts that were never sent
before, so that no same-tenant source can explain a hit: a 256-token prompt P under salt A, then
enough other prompts to push P out of the device pool (into the CPU tier), then P under fresh
salts and under none (each must report 0 cached tokens), then the flush with and without
`reset_external=true`. Needs a server started with `--enable-prompt-tokens-details` and
`VLLM_SERVER_DEV_MODE=1`. Standard library only; prints one line per step and a JSON summary.
"""

from __future__ import annotations

import json
import random
import sys
import urllib.request

PROMPT_TOKENS = 256
FILLERS = 160  # x 256 tokens: more than a 32,768-token device pool


def post(base: str, path: str, body: dict | None = None) -> dict:
    data = json.dumps(body or {}).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read() or b"{}")


def cached(base: str, model: str, prompt: list[int], salt: str | None) -> int:
    body: dict = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0}
    if salt is not None:
        body["cache_salt"] = salt
    usage = post(base, "/v1/completions", body).get("usage") or {}
    return int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    base, model = argv[0].rstrip("/"), (argv[1] if len(argv) == 2 else "tiny")
    rng = random.Random(20261204)
    p = [rng.randrange(10, 1000) for _ in range(PROMPT_TOKENS)]
    salt_a = f"probe-a-{rng.getrandbits(32):08x}"
    fresh = [f"probe-x{i}-{rng.getrandbits(32):08x}" for i in range(3)]
    steps: list[tuple[str, int, str]] = []

    def step(name: str, got: int, expect: str) -> None:
        steps.append((name, got, expect))
        print(f"{name}: {got} cached (expected {expect})", flush=True)

    post(base, "/reset_prefix_cache?reset_external=true")
    step("1 P, salt A, first", cached(base, model, p, salt_a), "0")
    step("2 P, salt A, again (device pool)", cached(base, model, p, salt_a), f"about {PROMPT_TOKENS}")
    for _ in range(FILLERS):
        cached(base, model, [rng.randrange(10, 1000) for _ in range(PROMPT_TOKENS)], None)
    step("3 after the fillers, P, salt A (CPU tier)", cached(base, model, p, salt_a), f"about {PROMPT_TOKENS}")
    for i, salt in enumerate(fresh):
        step(f"4.{i} P, salt never sent before", cached(base, model, p, salt), "0: else another tenant's blocks")
    step("5 P, no salt (never sent unsalted)", cached(base, model, p, None), "0: else another tenant's blocks")
    plain = post(base, "/reset_prefix_cache")
    step(f"6 plain /reset_prefix_cache {plain}, then P, salt A", cached(base, model, p, salt_a), "whatever the CPU tier kept")
    full = post(base, "/reset_prefix_cache?reset_external=true")
    step(f"7 /reset_prefix_cache?reset_external=true {full}, then P, salt A", cached(base, model, p, salt_a), "0")
    leak = any(got > 0 for name, got, _ in steps if name.startswith(("4.", "5 ")))
    print(json.dumps({"cross_tenant_hit": leak, "flush_with_external_empties": steps[-1][1] == 0,
                      "plain_flush_left": steps[-2][1], "steps": steps}))
    return 1 if leak else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
