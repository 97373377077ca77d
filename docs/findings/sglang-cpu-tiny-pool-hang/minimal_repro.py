#!/usr/bin/env python3
"""SGLang 0.5.10.post1: two concurrent n = 2 requests with --max-running-requests 1 wedge the
scheduler for good (a stale `running_batch.batch_is_full` after a prefill-only prefix request).

Server: servefuzz's `sglang-cpu` preset with --max-total-tokens 1024 --max-running-requests 1 (README).
Run: python3 minimal_repro.py [BASE_URL]   (default http://127.0.0.1:30000)
Sends two 261-token prompts sharing 257 tokens, n = 2, 11 tokens out, at once; then, whatever
happened, a lone 1-token request. Each gets 30 s. Exit 0: the lone request got no answer either,
the server is wedged (reproduced); 1: it answered. Standard library only. Use a fresh server:
a wedged one stays wedged.
"""
import json, sys, threading, urllib.request

URL = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:30000").rstrip("/")
PREFIX = [(13 * i) % 1000 + 20 for i in range(257)]

def generate(ids, n, new_tokens, out, key):
    body = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": new_tokens,
                                                  "ignore_eos": True, "n": n}}
    req = urllib.request.Request(URL + "/generate", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            out[key] = f"answered (HTTP {resp.status})"
    except OSError as e:  # a timeout is what a wedged scheduler looks like from here
        out[key] = f"no answer in 30 s ({type(e).__name__})"

out = {}
pair = [threading.Thread(target=generate, args=(PREFIX + tail, 2, 11, out, f"n=2 request {i}"))
        for i, tail in enumerate(([1, 2, 3, 4], [5, 6, 7, 8]))]
for t in pair:
    t.start()
for t in pair:
    t.join()
generate([900, 901], 1, 1, out, "then a lone 1-token request")
for key, said in out.items():
    print(f"{key}: {said}")
wedged = out["then a lone 1-token request"].startswith("no answer")
print("REPRODUCED: the server is wedged" if wedged else "NOT REPRODUCED: the server answers")
sys.exit(0 if wedged else 1)
