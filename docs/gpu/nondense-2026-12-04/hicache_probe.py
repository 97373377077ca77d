"""SGLang 0.5.17 HiCache: does a prefix evicted to host memory come back? One server of the
`hicache` profile's flags (4,096-token device pool, host pool x2, page 16); 30 distinct 384-token
prompts (11,520 tokens: the device pool overflows, radix pages go to host memory), then the first
10 again, each alone; /metrics before and after each phase."""
import json, os, re, subprocess, sys, time, urllib.request

site, model, out = sys.argv[1:4]
env = {**os.environ, "PYTHONPATH": site, "HF_HUB_OFFLINE": "1"}
argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--host", "127.0.0.1", "--port", "8201",
        "--attention-backend", "triton", "--sampling-backend", "pytorch", "--dtype", "bfloat16",
        "--mem-fraction-static", "0.8", "--max-total-tokens", "4096", "--page-size", "16", "--random-seed", "0",
        "--enable-metrics", "--enable-hierarchical-cache", "--hicache-ratio", "2"]
proc = subprocess.Popen(argv, env=env, stdout=open(f"{out}/hicache-probe-server.log", "w"), stderr=subprocess.STDOUT)

def get(path):
    return urllib.request.urlopen(f"http://127.0.0.1:8201{path}", timeout=5).read().decode()

t0 = time.time()
while time.time() - t0 < 240:
    try:
        get("/health"); break
    except Exception:
        if proc.poll() is not None:
            break
        time.sleep(2)

def metrics():
    m = {}
    for line in get("/metrics").splitlines():
        if line.startswith("sglang:") and re.search(r"load_back_tokens_total|evicted_tokens_total|cached_tokens_total|hicache_host_used", line):
            k, v = line.rsplit(" ", 1)
            k = re.sub(r'(model_name|engine_type|tp_rank|pp_rank|moe_ep_rank|dp_rank|pid)="[^"]*",?', "", k)
            m[k] = float(v)
    return m

def gen(ids):
    body = json.dumps({"model": "tiny", "prompt": ids, "max_tokens": 4, "temperature": 0}).encode()
    r = urllib.request.Request("http://127.0.0.1:8201/v1/completions", body, {"Content-Type": "application/json"})
    d = json.load(urllib.request.urlopen(r, timeout=60))
    u = d.get("usage") or {}
    return (u.get("prompt_tokens_details") or {}).get("cached_tokens")

res = {"up": proc.poll() is None}
if res["up"]:
    prompts = [[(7 * i + 13 * j) % 1900 + 40 for j in range(384)] for i in range(30)]
    res["before"] = metrics()
    res["first_pass_cached"] = [gen(p) for p in prompts]
    time.sleep(2)
    res["after_fill"] = metrics()
    res["second_pass_cached"] = [gen(p) for p in prompts[:10]]
    time.sleep(2)
    res["after_reuse"] = metrics()
proc.terminate()
json.dump(res, open(f"{out}/hicache-probe.json", "w"), indent=1)
print(json.dumps(res, indent=1))
