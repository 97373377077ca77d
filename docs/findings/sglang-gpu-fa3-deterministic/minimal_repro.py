#!/usr/bin/env python3
"""servefuzz finding finding_00007_830225997.json: contract-violation (sglang:isolation:contract-violation:prefix=shared,stream).
Server, as servefuzz ran it: python3 -m sglang.launch_server --model-path SMOLLM2_HF --mem-fraction-static 0.8 --page-size 1 --max-total-tokens 262144 --chunked-prefill-size 8192 --attention-backend fa3 --kv-cache-dtype auto --tp-size 1 --enable-deterministic-inference --port 30000
Run: python3 minimal_repro.py [BASE_URL] [RUNS] (default http://127.0.0.1:47519 10): the 2 requests at their offsets on a flushed cache, RUNS times; at temperature 0, r07 must answer as alone. r01, r07: streamed by servefuzz, whole here."""
import json, sys, time, urllib.error, urllib.request
from concurrent.futures import ThreadPoolExecutor
URL = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:47519").rstrip("/")
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
PATH, WATCH = '/generate', ['r07']  # WATCH: what answered otherwise under load when servefuzz found it

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

def tokens(answer):  # SGLang's /generate: one item per choice, or the one item
    items = answer if isinstance(answer, list) else [answer]
    return [tuple(i.get("output_ids") or [t[1] for t in i["meta_info"]["output_token_logprobs"]]) for i in items]
def flush():
    empty_cache("/flush_cache")

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
    '{"id":"r01","offset_ms":0.0,"body":{"extra_key":"tenant-a-a382326f","input_ids":[486,657,116,93,231,173,745,623,937,692,881,602,695,433,225,1005,167,935,176,128,639,877,234,395,210,660,227,669,180,81,629,1001,550,76,190,451,735,502,100,153,10,536,353,330,562,305,377,864,211,203,594,628,529,575,273,270,166,989,284,225,853,514,643,143,183,583,317,112,756,183,288,813,695,590,590,825,593,154,300,232,694,716,913,1011,664,156,280,401,419,334,392,310,1013,956,4,485,978,974,539,889,718,475,705,421,164,209,736,321,400,579,458,895,598,149,598,117,694,669,598,20,830,147,518,405,703,806,930,681,608,229,39,795,376,531,511,123,781,819,590,842,336,861,966,763,587,752,316,398,904,810,208,357,770,655,235,771,949,155,767,589,394,714,45,509,853,722,422,469,996,690,106,213,442,90,306,918,719,745,583,179,475,419,65,228,710,977,450,783,851,834,152,578,952,422,724,915,927,88,742,199,906,880,843,1015,84,980,675,663,165,849,162,160,513,469,705,961,977,387,629,736,864,166,767,681,741,251,500,657,264,630,214,853,526,308,251,780,368,190,467,928,889,581,65,970,306,778,752,472,739,841,32,336,824,779,14,554,695,509,942,377,205,749,185,487,446],"sampling_params":{"temperature":0.0,"max_new_tokens":4,"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1}}',
    '{"id":"r07","offset_ms":150.7,"body":{"extra_key":"tenant-a-a382326f","input_ids":[486,657,116,93,231,173,745,623,937,692,881,602,695,433,225,1005,167,935,176,128,639,877,234,395,210,660,227,669,180,81,629,1001,550,76,190,451,735,502,100,153,10,536,353,330,562,305,377,864,211,203,594,628,529,575,273,270,166,989,284,225,853,514,643,143,183,583,317,112,756,183,288,813,695,590,590,825,593,154,300,232,694,716,913,1011,664,156,280,401,419,334,392,310,1013,956,4,485,978,974,539,889,718,475,705,421,164,209,736,321,400,579,458,895,598,149,598,117,694,669,598,20,830,147,518,405,703,806,930,681,608,229,39,795,376,531,511,123,781,819,590,842,336,861,966,763,587,752,316,398,904,810,208,357,770,655,235,771,949,155,767,589,394,714,45,509,853,722,422,469,996,690,106,213,442,90,306,918,719,745,583,179,475,419,65,228,710,977,450,783,851,834,152,578,952,422,724,915,927,88,742,199,906,880,843,1015,84,980,675,663,165,849,162,160,513,469,705,961,977,387,629,736,864,166,767,681,741,251,500,657,264,630,214,853,526,308,251,780,368,190,467,928,889,581,65,970,306,778,752,472,739,841,32,336,824,779,14,554,296,636,184,721,266,446,887,561,77],"sampling_params":{"temperature":0.0,"max_new_tokens":4,"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1}}',
)]
if __name__ == "__main__":
    sys.exit(main())  # exit 0: reproduced (some run answered otherwise); 1: not reproduced
