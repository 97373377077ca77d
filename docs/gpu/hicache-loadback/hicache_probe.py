"""SGLang 0.5.17 HiCache load-back: does a prefix evicted to host memory come back to the GPU?

One server of the `sglang-gpu` preset's `hicache` profile flags (4,096-token device pool, host pool
x2 = 8,208 tokens, page 16). 16 distinct 384-token prompts one at a time (6,144 tokens: more than
the device pool, less than the host pool, so the oldest leave the GPU but stay in host memory),
then the oldest 6 again (evicted from the GPU first, so the most likely to be host-only), each
alone. SGLang's own meters (/metrics) before and after each phase, and its log's
`#cached-token` per request. Usage: hicache_probe.py SITE MODEL_DIR OUT_DIR
(the previous probe, ../nondense-2026-12-04/hicache_probe.py, sent 30 prompts: 11,520 tokens
overflowed the host pool too, and it re-sent the oldest, which had most likely left host memory).
"""
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

site, model, out = sys.argv[1:4]
env = {**os.environ, "PYTHONPATH": site, "HF_HUB_OFFLINE": "1"}
argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--host", "127.0.0.1", "--port", "8201",
        "--attention-backend", "triton", "--sampling-backend", "pytorch", "--dtype", "bfloat16",
        "--mem-fraction-static", "0.8", "--max-total-tokens", "4096", "--page-size", "16", "--random-seed", "0",
        "--enable-metrics", "--enable-hierarchical-cache", "--hicache-ratio", "2"]
log_path = f"{out}/hicache-loadback-server.log"
proc = subprocess.Popen(argv, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)


def get(path):
    return urllib.request.urlopen(f"http://127.0.0.1:8201{path}", timeout=5).read().decode()


t0 = time.time()
while time.time() - t0 < 240:
    try:
        get("/health")
        break
    except Exception:
        if proc.poll() is not None:
            break
        time.sleep(2)


def metrics():
    m = {}
    for line in get("/metrics").splitlines():
        if line.startswith("sglang:") and re.search(
                r"load_back|evicted_tokens_total|cached_tokens_total|hicache|host", line):
            k, v = line.rsplit(" ", 1)
            k = re.sub(r'(model_name|engine_type|tp_rank|pp_rank|moe_ep_rank|dp_rank|pid)="[^"]*",?', "", k)
            m[k] = float(v)
    return m


def gen(ids):
    body = json.dumps({"model": "tiny", "prompt": ids, "max_tokens": 4, "temperature": 0}).encode()
    r = urllib.request.Request("http://127.0.0.1:8201/v1/completions", body, {"Content-Type": "application/json"})
    d = json.load(urllib.request.urlopen(r, timeout=60))
    return d["choices"][0]["text"]


def cached_counts():
    # SGLang's prefill log line: "Prefill batch, #new-seq: 1, #new-token: N, #cached-token: M, ..."
    text = open(log_path, errors="replace").read()
    return [int(n) for n in re.findall(r"#cached-token: (\d+)", text)]


res = {"up": proc.poll() is None}
if res["up"]:
    prompts = [[(7 * i + 13 * j) % 1900 + 40 for j in range(384)] for i in range(16)]
    res["before"] = metrics()
    res["first_pass_text"] = [gen(p) for p in prompts]
    time.sleep(3)
    res["after_fill"] = metrics()
    n = len(cached_counts())
    res["second_pass_text"] = [gen(p) for p in prompts[:6]]
    time.sleep(3)
    res["after_reuse"] = metrics()
    res["second_pass_cached_tokens_from_log"] = cached_counts()[n:]
    res["same_text"] = [a == b for a, b in zip(res["first_pass_text"][:6], res["second_pass_text"])]
proc.terminate()
proc.wait(timeout=30)
json.dump(res, open(f"{out}/hicache-loadback.json", "w"), indent=1)
print(json.dumps(res, indent=1))
