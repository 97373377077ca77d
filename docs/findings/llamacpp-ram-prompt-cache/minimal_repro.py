#!/usr/bin/env python3
"""servefuzz finding finding_00022_860011053.json: suspected-corruption (llamacpp:replay:corruption:prefix=none).
Server, as servefuzz ran it: llama-server -m ./tiny/tiny.gguf --host 127.0.0.1 -np 3 -c 8192 --cont-batching --cache-prompt --metrics --slots -fa off -ctk f32 -ctv f32 -t 1 -tb 1 --no-webui --cache-ram 8192 --cache-idle-slots --slot-save-path /tmp --port 8080 (./tiny: `python3 repro_full.py --write-model ./tiny`, numpy only)
Run: python3 minimal_repro.py [BASE_URL] [RUNS] (default http://127.0.0.1:37933 10): the 3 requests at their offsets on a flushed cache, RUNS times; at temperature 0, r13 must answer as alone."""
import json, sys, time, urllib.error, urllib.request
from concurrent.futures import ThreadPoolExecutor
URL = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:37933").rstrip("/")
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
PATH, WATCH = '/completion', ['r13']  # WATCH: what answered otherwise under load when servefuzz found it

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
    '{"id":"r12_l","offset_ms":0.0,"body":{"prompt":[601,597,868,511,617,137,623,637,388,993,221,304,368,157,248,131,506,962,326,325,273,810,923,700,1020,744,576,621,175,525,834,56,672,764,80,369,749,914,840,531,153,592,113,816,84,581,334,320,810,532,989,980,69,386,352,747,843,906,24,892,335,559,374],"n_predict":1,"temperature":0.0,"n_probs":5,"n_cmpl":3,"ignore_eos":false,"cache_prompt":true,"return_tokens":true}}',
    '{"id":"r13","offset_ms":2.0,"body":{"prompt":[149,497,235,602,936,978,165,391,516,53,470,768,6,797,297,594,930,278,247,923,619,286,191,186,345,193,441,691,806,397,124,125,573,522,535,862,637,391,623,756,811,834,93,609,130,171,56,100,719,90,526,914,388,877,525,618,642,308,799,174,746,845,183,68,794,821,663,947,257,264,900,238,222,109,893,17,762,769,919,31,894,10,923,927,366,786,406,570,757,328,166,802,22,670,656,959,447,601,723,1014,686,615,939,783,277,166,388,463,705,647,323,225,200,150,474,548,558,893,768,714,498,546,935,713,440,591,754,955,818,841,34,937,119,103,191,672,840,357,332,893,853,910,737,714,208,240,340,735,164,68,379,610,471,930,406,214,899,953,235,180,984,500,921,189,818,432,1011,250,871,902,738,608,287,1020,736,278,216,172,503,70,237,167,79,880,560,780,377,816,390,371,119,376,874,384,226,97,627,52,944,680,14,36,487,586,572,252,694,92,681,164,51,476,205,77,60,997,57,106,353,300,101,676,645,499,296,463,724,538,585,200,46,715,856,483,15,901,709,363,1016,832,630,855,30,745,872,645,398,430,122,258,210,807,25,178,365,128,767,773,960,920,20,798,581,709,961,631,636,45,718,963,582,167,238,935,128,8,231,523,709,708,129,654,507,499,432,631,327,189,430,850,898,692,365,398,585,587,454,888,663,655,871,906,1021,899,241,527,352,986,917,278,452,541,211,545,36,489,548,32,459,969,935,626,918,242,301,912,854,534,81,642,613,558,462,480,365,600,629,471,877,979,1011,120,392,243,82,427,131,283,1008,400,117,698,718,114,459,491,274,505,363,906,866,1020,412,688,356,391,576,778,26,796,677,862,909,817,419,1014,858,544,326,560,103,501,733,968,201,284,898,557,482,519,381,1002,905,612,79,459,952,765,439,963,666,619,869,406,392,618,107,679,42,920,589,583,280,516,316,145,155,853,742,331,681,757,614,377,622,286,538,602,29,909,999,466,871,522,446,417,491,979,245,787,69,1022,988,215,968,187,28,527,618,612,735,806,555,271,187,779,371,581,213,933,532,170,480,826,252,482,52,1014,478,455,441,141,646,372,305,602,215,99,104,213,107,863,634,236,701,85,811,839,440,888,982,402,473,85,622,6,857,70,618,666,546,43,88,965,944,479,629,93,1009,345,365,634,255,966,456,10,439,412,270,334,25,512,979,404,674,716,827,110,411,440,976,890,518,969,523,216,259,403,68,1017,106,944,24,904,700,295,533,552,73,887,128,957,351,648,247,530,777,525,965,766,283,767,445,877,557,397,1008,803,497,299,616,312,139,975,583,565,760,883,560,718,45,609,258,41,540,695,932,773,805,601,362,782,272,244,1012,4,25,575,711,229,904,782,561,435,52,677,696,359,651,166,835,995,854,943,980,818,870,453,152,877,323,1017,875,313,521,150,475,805,506,866,373,494,565,717,671,334,824,130,49,328,748,101,217,867,88,75,413,566,566,616,157,561,123,781,602,260,540,925,6,988,779,806,337,784,964,465,106,532,689,184,213,874,181,388,874,744,194,341,851,789,854,352,176,607,279,586,692,575,750,422,450,771,318,514,722,277,99,992,789,843,654,571,666,693,967,176,321,342,763,648,231,125,545,885,566,815,977,650,861,946,1008,112,187,691,376,278,4,736,776,84,977,605,131,716,226,721,797,236,555,306,905,637,314,937,432,346,874,491,288,701,751,733,149,178,476,395,907,644,361,635,503,963,361,667,996,334,425,184,20,866,702,582,1014,508,778,728,412,628,832,455,273,102,478,3,92,216,161,415,484,82,97,729,683,956,1002,751,494,705,869,140,832,604,547,188,893,914,798,593,562,1017,836,960,93,451,387,13,518,228,385,108,184,659,685,639,455,913,270,787,139,7,684,1022,409,553,917,941,880,600,795,658,909,279,216,806,665,901],"n_predict":11,"temperature":0.0,"n_probs":5,"n_cmpl":1,"ignore_eos":true,"cache_prompt":true,"return_tokens":true}}',
    '{"id":"c","offset_ms":600.0,"body":{"prompt":[601,597,868,511,617,137,623,637,388,993,221,304,368,157,248,131,506,962,326,325,273,810,923,700,1020,744,576,621,175,525,834,56,672,764,80,369,749,914,840,531,153,592,113,816,84,581,334,320,810,532,989,980,69,386,352,747,843,906,24,892,335,559,374,1016,1006,224,540,624,8,619,41,410,888,739,624,283,820,186,501,523,938,580,44,1012,302,952,573,672,82,665,216,647,721,833,831,730,659,253,765,778,13,851,124,121,690,246,178,131,441,1009,319,408,77,829,993,696,112,708,126,674,540,1018,894,264,974,1014,68,477,988,781,184,47,351,501,418,843,833,727,524,969,1012,945,941,529,1017,61,87,203,1012,540,922,424,230,267,866,698,522,589,692,89,787,615,80,65,656,151,471,10,475,384,485,149,337,988,156,545,367,343,998,733,565,473,137,125,634,94,69],"n_predict":1,"temperature":0.0,"n_probs":5,"n_cmpl":1,"ignore_eos":true,"cache_prompt":true,"return_tokens":true}}',
)]
if __name__ == "__main__":
    sys.exit(main())  # exit 0: reproduced (some run answered otherwise); 1: not reproduced
