#!/usr/bin/env python3
"""vLLM CPU: one seeded request whose prompt is prefilled in two chunks kills the engine
(`RuntimeError: CPU Generator does not use offset` in GPUModelRunner._bookkeeping_sync).

Server (any model; servefuzz's tiny one here), chunked prefill at 80 tokens a step:
  vllm serve MODEL --served-model-name tiny --max-num-batched-tokens 80 --max-num-seqs 32 ...
Run: python3 minimal_repro.py [BASE_URL]   (default http://127.0.0.1:8000)
Sends a seeded 80-token prompt (one chunk: the control), then the same with 81 tokens (two
chunks), then a greedy request to see whether the server still answers. Exit 0: the 81-token
request took the server down (reproduced); 1: it did not. Standard library only.
"""
import json, sys, urllib.error, urllib.request

URL = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000").rstrip("/")

def complete(first, n_prompt, **sampling):  # prompts start on different tokens: no prefix cache hit
    body = {"model": "tiny", "prompt": list(range(first, first + n_prompt)), "max_tokens": 8, **sampling}
    req = urllib.request.Request(URL + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return f"HTTP {resp.status}, {json.loads(resp.read())['usage']['completion_tokens']} tokens"
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}: {e.read()[:200]!r}"
    except OSError as e:
        return f"no answer: {e}"

control = complete(100, 80, seed=1, temperature=0.7)
print(f"seeded, 80-token prompt (one chunk):   {control}")
crash = complete(300, 81, seed=1, temperature=0.7)
print(f"seeded, 81-token prompt (two chunks):  {crash}")
after = complete(500, 16, temperature=0)
print(f"then a greedy 16-token request:        {after}")
down = not crash.startswith("HTTP 200") and not after.startswith("HTTP 200")
print("REPRODUCED: the server is down" if down else "NOT REPRODUCED: the server still answers")
sys.exit(0 if down else 1)
