#!/usr/bin/env python3
"""servefuzz finding finding_00023_724489468.json: corruption (llamacpp:isolation:corruption:lora,prefix=page-aligned).
Server, as servefuzz ran it: llama-server -m ./tiny/tiny.gguf --host 127.0.0.1 -np 8 -c 8192 --cont-batching --cache-prompt --metrics --slots -fa off -ctk f32 -ctv f32 -t 1 -tb 1 --no-webui --cache-ram 0 --lora-scaled ./tiny/lora/lora-a.gguf:0,./tiny/lora/lora-b.gguf:0 --slot-save-path /tmp --port 8080 (./tiny: `python3 repro_full.py --write-model ./tiny`, numpy only)
Run: python3 minimal_repro.py [BASE_URL] [RUNS] (default http://127.0.0.1:41611 10): the 2 requests at their offsets on a flushed cache, RUNS times; at temperature 0, r08_st_sp must answer as alone."""
import json, sys, time, urllib.error, urllib.request
from concurrent.futures import ThreadPoolExecutor
URL = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:41611").rstrip("/")
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
PATH, WATCH = '/completion', ['r08_st_sp']  # WATCH: what answered otherwise under load when servefuzz found it

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

def tokens(answer):  # llama-server's /completion: one object per choice, each with its tokens
    items = answer if isinstance(answer, list) else [answer]
    return [tuple(i["tokens"]) for i in sorted(items, key=lambda i: i.get("index", 0))]
def flush():  # needs --slot-save-path; the slots' cached prompts are erased
    for slot in range(get("/props")["total_slots"]):
        empty_cache(f"/slots/{slot}?action=erase")

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
    '{"id":"r04_p_st_sp","offset_ms":84.6,"body":{"lora":[{"id":1,"scale":1.0}],"prompt":[314,630,573,153,462,196,808,495,797,656,693,989,91,879,75,761,574,852,212,898,591,615,533,208,275,903,976,714,561,312,95,790,976,818,517,14,638,636,254,5,416,262,826,840,451,654,350,891,288,746,594,158,993,603,797,276,364,198,640,400,495,450,295,309,166,884,939,836,723,430,439,998,326,599,318,715,7,845,314,86,210,438,971,332,408,760,429,967,506,148,630,318,534,444,648,732,634,674,357,76,516,722,376,337,765,236,400,455,590,310,759,468,38,310,830,566,156,1015,78,259,157,115,298,376,119,119,43,112],"n_predict":1,"temperature":0.0,"n_probs":5,"n_cmpl":1,"ignore_eos":true,"cache_prompt":true,"return_tokens":true}}',
    '{"id":"r08_st_sp","offset_ms":288.9,"body":{"prompt":[314,630,573,153,462,196,808,495,797,656,693,989,91,879,75,761,574,852,212,898,591,615,533,208,275,903,976,714,561,312,95,790,976,818,517,14,638,636,254,5,416,262,826,840,451,654,350,891,288,746,594,158,993,603,797,276,364,198,640,400,495,450,295,309,166,884,939,836,723,430,439,998,326,599,318,715,7,845,314,86,210,438,971,332,408,760,429,967,506,148,630,318,534,444,648,732,634,674,357,76,516,722,376,337,765,236,400,455,590,310,759,468,38,310,830,566,156,1015,78,259,157,115,298,376,119,119,43,112],"n_predict":5,"temperature":0.0,"n_probs":5,"n_cmpl":1,"ignore_eos":true,"cache_prompt":true,"return_tokens":true}}',
)]
if __name__ == "__main__":
    sys.exit(main())  # exit 0: reproduced (some run answered otherwise); 1: not reproduced
