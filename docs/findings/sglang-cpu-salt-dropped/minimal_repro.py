#!/usr/bin/env python3
"""SGLang: a request under one cache salt (`extra_key`) is served the prefix another salt cached.

Server: any SGLang with the radix cache on (servefuzz ran 0.5.10.post1 and 0.5.23 on the CPU, README).
Run: python3 minimal_repro.py [BASE_URL]   (default http://127.0.0.1:30000)
On a flushed cache, one 316-token prompt P three times, one token out each: under salt A, then
under salt B, then under A again (the control: the cache works). Requests under different salts
must not share the prefix cache, so B must report 0 cached tokens. Exit 0: B was served A's
prefix (reproduced); 1: it was not. Standard library only.
"""
import json, sys, time, urllib.error, urllib.request

URL = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:30000").rstrip("/")
P = [(7 * i) % 1900 + 50 for i in range(316)]

def post(path, body):
    req = urllib.request.Request(URL + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return resp.read()

def cached(salt):
    body = {"input_ids": P, "extra_key": salt, "sampling_params": {"temperature": 0, "max_new_tokens": 1}}
    return json.loads(post("/generate", body))["meta_info"]["cached_tokens"]

for _ in range(50):  # the scheduler flushes only when idle: try again
    try:
        post("/flush_cache", {})
        break
    except urllib.error.HTTPError:
        time.sleep(0.1)
a, b, again = cached("tenant-a"), cached("tenant-b"), cached("tenant-a")
print(f"cached prompt tokens: salt A {a}, then salt B {b}, then salt A again {again} (of {len(P)})")
print("REPRODUCED: salt B was served salt A's prefix" if b > 0 else "NOT REPRODUCED: salt B got no hit")
sys.exit(0 if b > 0 else 1)
