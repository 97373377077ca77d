#!/usr/bin/env python3
"""vLLM with native KV offloading: `POST /reset_prefix_cache` answers success and leaves the CPU
tier serving the same blocks; with `?reset_external=true` the tier is emptied (vllm#57727).

Server: vLLM with --kv-offloading-size, VLLM_SERVER_DEV_MODE=1 (mounts the reset) and
--enable-prompt-tokens-details (reports cached tokens); servefuzz ran 0.26.0 on an H200 (README).
Run: python3 minimal_repro.py [BASE_URL] [MODEL]   (default http://127.0.0.1:8000 tiny)
A 256-token prompt P twice, then 160 other prompts (more than a 32,768-token device pool, so P
is only in the CPU tier), then the plain reset and P, then the reset with reset_external and P.
Exit 0: P was still served from cache after the plain reset (reproduced); 1: it was not.
"""
import json, sys, urllib.request

URL = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000").rstrip("/")
MODEL = sys.argv[2] if len(sys.argv) > 2 else "tiny"
P = [(37 * i) % 990 + 10 for i in range(256)]

def post(path, body=None):
    req = urllib.request.Request(URL + path, json.dumps(body or {}).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read() or b"{}")

def cached(prompt):
    usage = post("/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 1, "temperature": 0})["usage"]
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0

post("/reset_prefix_cache?reset_external=true")
print(f"P: {cached(P)} cached, again: {cached(P)}")
for i in range(160):
    cached([(i * 257 + j * 11) % 990 + 10 for j in range(256)])
print(f"after 160 other prompts, P: {cached(P)} cached (the CPU tier)")
print(f"plain /reset_prefix_cache: {post('/reset_prefix_cache')}")
left = cached(P)
print(f"then P: {left} cached")
print(f"/reset_prefix_cache?reset_external=true: {post('/reset_prefix_cache?reset_external=true')}")
print(f"then P: {cached(P)} cached")
print("REPRODUCED: the plain reset left the CPU tier serving" if left else "NOT REPRODUCED: the plain reset emptied it")
sys.exit(0 if left else 1)
