"""vLLM 0.26.0: structured output (a choice) under n-gram speculative decoding, three servers side by
side (ngram_gpu, ngram, none), the same requests to each; the status codes and the log lines."""
import json, os, subprocess, sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor

site, model, finding, out = sys.argv[1:5]
reqs = json.load(open(finding))["scenario"]["requests"]
ARMS = {"ngram_gpu": '{"method":"ngram_gpu","num_speculative_tokens":3,"prompt_lookup_min":2,"prompt_lookup_max":4}',
        "ngram": '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":2,"prompt_lookup_max":4}',
        "none": None}
env = {**os.environ, "PYTHONPATH": site, "HF_HUB_OFFLINE": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0",
       "VLLM_HOST_IP": "127.0.0.1", "VLLM_NO_USAGE_STATS": "1"}
procs = {}
for i, (arm, spec) in enumerate(ARMS.items()):
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", "--port", str(8101 + i),
            "--model", model, "--served-model-name", "tiny", "--dtype", "bfloat16", "--max-model-len", "2048",
            "--enable-prefix-caching", "--block-size", "16", "--kv-cache-memory-bytes", str(1 << 30),
            "--gpu-memory-utilization", "0.15", "--seed", "0"] + (["--speculative-config", spec] if spec else [])
    procs[arm] = (8101 + i, subprocess.Popen(argv, env=env, stdout=open(f"{out}/probe-{arm}.log", "w"), stderr=subprocess.STDOUT))
    time.sleep(5)

def up(port):
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200
    except Exception:
        return False

deadline = time.time() + 330
while time.time() < deadline and not all(up(p) or pr.poll() is not None for p, pr in procs.values()):
    time.sleep(3)

def post(port, body):
    r = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r, timeout=120) as resp:
            d = json.load(resp)
            return resp.status, d["choices"][0]["text"]
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")[:200]
    except Exception as e:
        return -1, repr(e)[:200]

result = {}
for arm, (port, pr) in procs.items():
    if not up(port):
        result[arm] = {"up": False, "exit": pr.poll()}
        continue
    rows = {}
    for structured in (True, False):
        bodies = []
        for rep in range(4):
            for q in reqs:
                b = {"model": "tiny", "prompt": q["prompt_ids"], "max_tokens": q["max_tokens"], "temperature": 0}
                if structured:
                    b["structured_outputs"] = {"choice": q["choices"]}
                bodies.append(b)
        with ThreadPoolExecutor(len(bodies)) as ex:  # all at once: a batch, as in the campaign
            got = list(ex.map(lambda b: post(port, b), bodies))
        codes = {}
        for c, _ in got:
            codes[str(c)] = codes.get(str(c), 0) + 1
        rows["choice" if structured else "plain"] = {"codes": codes, "sample": [t for _, t in got[:3]]}
        # and one at a time (no batch): does it need the batch?
        if structured:
            alone = [post(port, b) for b in bodies[:len(reqs)]]
            rows["choice-alone"] = {"codes": {str(c): sum(1 for x, _ in alone if x == c) for c, _ in alone}}
    result[arm] = {"up": True, **rows}
for port, pr in procs.values():
    pr.terminate()
json.dump(result, open(f"{out}/probe.json", "w"), indent=1)
print(json.dumps(result, indent=1))
