#!/usr/bin/env python3
"""vLLM 0.26.0 with native KV offloading (--kv-offloading-size): aborting requests that are still
queued kills EngineCore (`assert len(offload_keys) == len(offload_block_ids)` in _build_store_jobs;
vllm#49118, fixed by PR #49146 in 0.27.0).

Server: vLLM 0.26.0 on a GPU with a KV pool far smaller than the load, e.g. (README):
  vllm serve MODEL --served-model-name tiny --kv-offloading-size 1 --kv-cache-memory-bytes 67108864 ...
Run: python3 minimal_repro.py [BASE_URL] [N]   (default http://127.0.0.1:8000, 64 requests)
Sends N concurrent 1,500-token prompts with a 2 s client timeout, so the ones still queued are
aborted when their connection drops; then one short request. Exit 0: the engine is dead
(reproduced); 1: it answers. Standard library only. NOT RUN by servefuzz in this form (README).
"""
import json, sys, threading, urllib.error, urllib.request

URL = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000").rstrip("/")
N = int(sys.argv[2]) if len(sys.argv) > 2 else 64

def complete(prompt, max_tokens, timeout):
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    req = urllib.request.Request(URL + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return f"HTTP {resp.status}"
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"
    except OSError as e:  # our own timeout: the server aborts the request when we hang up
        return f"dropped ({type(e).__name__})"

said = [None] * N
def one(i):  # distinct prompts: no prefix cache hit keeps a request's blocks
    said[i] = complete([(i * 131 + j) % 1500 + 10 for j in range(1500)], 64, 2)

threads = [threading.Thread(target=one, args=(i,)) for i in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join()
after = complete([1, 2, 3, 4], 4, 60)
print(f"{sum(s.startswith('dropped') for s in said)}/{N} requests dropped by the client; then a short request: {after}")
dead = after != "HTTP 200"
print("REPRODUCED: the engine is dead" if dead else "NOT REPRODUCED: the server answers")
sys.exit(0 if dead else 1)
