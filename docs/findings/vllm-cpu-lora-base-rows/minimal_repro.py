#!/usr/bin/env python3
"""servefuzz finding finding_00000_1318606819.json: suspected-corruption (vllm:isolation:corruption:lora,prefix=page-aligned).
Server, as servefuzz ran it: HF_HUB_OFFLINE=1 VLLM_HOST_IP=127.0.0.1 VLLM_SERVER_DEV_MODE=1 VLLM_NO_USAGE_STATS=1 OMP_NUM_THREADS=1 python3 -m vllm.entrypoints.openai.api_server --host 127.0.0.1 --model ./tiny/hf-float32 --served-model-name tiny --dtype float32 --max-model-len 2048 --enable-prefix-caching --block-size 32 --kv-cache-memory-bytes 268435456 --enforce-eager --enable-prompt-tokens-details --seed 0 --enable-lora --max-lora-rank 8 --max-loras 2 --lora-modules lora-a=./tiny/lora/lora-a lora-b=./tiny/lora/lora-b --port 8000 (./tiny: `python3 repro_full.py --write-model ./tiny`, numpy only)
Run: python3 minimal_repro.py [BASE_URL] [RUNS] (default http://127.0.0.1:60275 10): the 2 requests at their offsets on a flushed cache, RUNS times; at temperature 0, r02_st_sp must answer as alone."""
import json, sys, time, urllib.error, urllib.request
from concurrent.futures import ThreadPoolExecutor
URL = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:60275").rstrip("/")
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
PATH, WATCH = '/v1/completions', ['r02_st_sp']  # WATCH: what answered otherwise under load when servefuzz found it

def post(path, body, answer=True):
    req = urllib.request.Request(URL + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read()) if answer else resp.read()
def get(path):
    return json.loads(urllib.request.urlopen(URL + path, timeout=30).read())
def empty_cache(path):  # a busy server refuses a flush while requests finish: try again
    for _ in range(50):
        try:
            return post(path, {}, answer=False)
        except urllib.error.HTTPError:
            time.sleep(0.1)
    sys.exit(f"{URL}{path} refused the flush 50 times")

def tokens(answer):  # /v1/completions: ids as token_ids, or "token_id:N" with return_tokens_as_token_ids
    return [tuple(c.get("token_ids") or [int(t.split(":", 1)[1]) for t in c["logprobs"]["tokens"]])
            for c in sorted(answer["choices"], key=lambda c: c["index"])]
def flush():  # reset_external empties the offloading connector's CPU tier too
    empty_cache("/reset_prefix_cache?reset_external=true")

def run(ids):  # the requests named in `ids`, each at its offset, on a flushed cache: id -> token ids
    flush()
    out, t0 = {}, time.perf_counter()
    def send(r):
        time.sleep(max(0.0, r["offset_ms"] / 1000 - (time.perf_counter() - t0)))
        out[r["id"]] = tokens(post(PATH, r["body"]))
    with ThreadPoolExecutor(len(REQUESTS)) as pool:  # an error in a request ends the script, never counts
        list(pool.map(send, [r for r in REQUESTS if r["id"] in ids]))
    return out

def main():
    alone = {rid: run({rid})[rid] for rid in WATCH}
    print(f"expected (each alone): {alone}")
    wrong = 0
    for i in range(RUNS):
        got = run({r["id"] for r in REQUESTS})
        bad = {rid: got[rid] for rid in WATCH if got[rid] != alone[rid]}
        wrong += bool(bad)
        print(f"run {i + 1}/{RUNS}: {bad or 'every watched request as alone'}")
    print(f"{wrong}/{RUNS} runs answered otherwise than alone: {'REPRODUCED' if wrong else 'NOT REPRODUCED'}")
    return 0 if wrong else 1

REQUESTS = [json.loads(r) for r in (  # the exact bodies servefuzz sent, offsets in ms: data, not code
    '{"id":"r01_st_sp","offset_ms":0.8,"body":{"model":"lora-b","prompt":[314,630,573,153,462,196,808,495,797,656,693,989,91,879,75,761,574,852,212,898,591,615,533,208,275,903,976,714,561,312,95,790,976,818,517,14,638,636,254,5,416,262,826,840,451,654,350,891,288,746,594,158,993,603,797,276,364,198,640,400,495,450,295,309,166,884,939,836,723,430,439,998,326,599,318,715,7,845,314,86,210,438,971,332,408,760,429,967,506,148,630,318,534,444,648,732,634,674,357,76,516,722,376,337,765,236,400,455,590,310,759,468,38,310,830,566,156,1015,78,259,157,115,298,376,119,119,43,112],"max_tokens":2,"temperature":0.0,"n":1,"logprobs":5,"ignore_eos":true,"return_token_ids":true,"return_tokens_as_token_ids":true}}',
    '{"id":"r02_st_sp","offset_ms":2.3,"body":{"model":"tiny","prompt":[314,630,573,153,462,196,808,495,797,656,693,989,91,879,75,761,574,852,212,898,591,615,533,208,275,903,976,714,561,312,95,790,976,818,517,14,638,636,254,5,416,262,826,840,451,654,350,891,288,746,594,158,993,603,797,276,364,198,640,400,495,450,295,309,166,884,939,836,723,430,439,998,326,599,318,715,7,845,314,86,210,438,971,332,408,760,429,967,506,148,630,318,534,444,648,732,634,674,357,76,516,722,376,337,765,236,400,455,590,310,759,468,38,310,830,566,156,1015,78,259,157,115,298,376,119,119,43,112],"max_tokens":1,"temperature":0.0,"n":1,"logprobs":5,"ignore_eos":true,"return_token_ids":true,"return_tokens_as_token_ids":true}}',
)]
if __name__ == "__main__":
    sys.exit(main())  # exit 0: reproduced (some run answered otherwise); 1: not reproduced
