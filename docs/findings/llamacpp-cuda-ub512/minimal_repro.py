#!/usr/bin/env python3
"""llama.cpp CUDA: a prompt micro-batch computes wrongly after an in-place cudaGraphExecUpdate drops a cluster shape.

Server, fresh (the model: `python3 repro_full.py build tiny.gguf`, numpy and gguf), built with CUDA:
  llama-server -m tiny.gguf --port 8080 -np 8 -c 8192 --cont-batching --cache-prompt --metrics --slots -fa off -ctk f32 -ctv f32 -t 4 -tb 4 --no-webui -ngl 99 --cache-ram 0 --slot-save-path /tmp
Run: python3 minimal_repro.py [BASE_URL]   (default http://127.0.0.1:8080). README's sequence: VICTIM (569 tokens, 30 out)
alone, then beside DECODER (62 tokens, generating when VICTIM arrives) on free slots, then pinned to slots (0,1),
(1,0), (0,2), (3,4); slots erased before every request. An answer whose log-probabilities move more than 0.05 nats
from VICTIM's first answer is wrong (right ones stay within 0.002). Exit 0: some answer wrong; 1: none.
"""
import json, sys, threading, urllib.request
URL = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080").rstrip("/")
DECODER = [973,56,982,497,1012,61,592,299,200,995,681,530,363,721,73,591,398,911,375,687,987,346,450,347,687,782,595,87,967,813,666,741,492,363,349,993,957,30,389,993,1003,760,162,774,586,587,743,104,405,966,717,192,654,364,699,880,252,357,745,970,778,636]
VICTIM = [991,647,720,554,714,772,553,745,435,262,690,609,235,301,294,702,370,671,709,279,456,864,253,759,665,152,355,652,1020,105,461,243,192,1022,859,589,921,551,72,550,598,353,298,347,429,919,860,180,854,528,86,546,392,495,69,291,882,666,685,643,454,701,549,14,415,470,747,792,520,597,169,309,765,820,744,103,443,565,583,18,994,969,96,928,815,335,226,755,904,455,915,149,218,116,1008,370,132,971,481,181,549,619,98,595,825,490,657,73,281,763,924,507,674,148,105,760,66,430,483,892,205,463,312,836,205,57,924,813,419,50,343,193,251,583,41,596,365,569,74,569,276,840,1015,644,584,468,39,563,172,322,212,302,852,360,176,321,878,938,1019,993,54,735,287,802,462,80,864,500,823,480,121,946,1010,1014,725,3,543,921,764,683,839,321,509,720,445,612,356,399,68,192,90,172,838,30,350,675,344,677,109,90,989,335,995,576,33,969,788,597,101,874,40,562,805,502,276,717,123,529,453,785,65,334,117,11,839,864,46,481,838,945,748,858,572,947,221,370,51,1012,167,424,686,797,261,480,270,778,969,48,29,88,628,606,453,438,981,134,738,151,828,863,988,145,391,529,908,647,256,829,302,586,593,109,333,857,849,685,550,542,408,353,113,382,189,226,736,908,32,899,865,627,857,600,70,827,18,620,347,688,898,259,610,746,723,71,439,713,168,232,896,864,233,734,987,737,998,375,799,962,733,937,87,220,258,386,790,149,740,549,890,990,1018,990,859,399,326,19,882,110,1011,806,904,369,955,837,76,415,7,85,489,570,384,225,398,884,1000,331,375,876,336,832,696,612,757,890,356,641,745,500,12,537,351,840,137,372,360,625,143,752,31,874,519,14,678,811,12,602,736,479,359,755,417,95,971,236,994,823,88,599,968,861,676,672,629,306,562,993,625,109,290,731,968,943,654,306,560,212,15,1001,170,247,739,836,975,885,277,762,763,49,886,524,611,306,118,471,357,111,661,688,915,132,802,54,737,346,955,666,109,570,790,623,716,876,202,677,194,305,988,949,249,867,179,758,414,585,862,274,547,214,642,119,925,843,768,293,836,323,455,75,65,661,692,871,374,918,394,1021,606,762,574,822,717,291,869,497,70,631,323,905,796,103,751,286,320,300,938,524,178,375,111,234,91,777,794,767,98,470,1012,318,312,952,700,796,337,497,1016,50,938,198,643,512,325,152,764,311,852,943,759,398,661,968,141,993,18,555,933,571,145,55,82,619,498,856,884,59,797,419,118,742,524,64,410,486,248,378,175,624,876,816,993]
PATTERNS = [("alone, free slot", None, False), ("with DECODER, free slots", None, True), ("slots 0,1", (0, 1), True),
            ("slots 1,0", (1, 0), True), ("slots 0,2", (0, 2), True), ("slots 3,4", (3, 4), True)]

def complete(prompt, n, slot=None, cache=True, started=None):  # greedy; streamed to tell when it generates
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "n_probs": 10, "ignore_eos": True,
            "cache_prompt": cache, "stream": started is not None, **({"id_slot": slot} if slot is not None else {})}
    req = urllib.request.Request(URL + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        if started is None:
            return [(p["id"], p["top_logprobs"][0]["logprob"]) for p in json.loads(resp.read())["completion_probabilities"]]
        for _ in resp:
            started.set()  # its first token is out: VICTIM's prompt now shares a batch with it
    started.set()

def erase():
    for slot in range(8):
        urllib.request.urlopen(urllib.request.Request(f"{URL}/slots/{slot}?action=erase", b"{}"), timeout=30).read()

def pattern(slots, with_decoder):  # each request alone first, then 4 loaded runs, slots erased before each
    bg, vs = slots or (None, None)
    if with_decoder:
        erase()
        complete(DECODER, 157, bg, cache=False)
    erase()
    answers = [complete(VICTIM, 30, vs, cache=False)]
    for _ in range(4):
        erase()
        started = threading.Event() if with_decoder else None
        decoder = threading.Thread(target=complete, args=(DECODER, 157, bg, True, started)) if with_decoder else None
        if decoder:
            decoder.start()
            started.wait(60)
        answers.append(complete(VICTIM, 30, vs if with_decoder else None))
        if decoder:
            decoder.join(120)
    return answers

first, wrong, total = None, 0, 0
for name, slots, with_decoder in PATTERNS:
    for i, answer in enumerate(pattern(slots, with_decoder)):
        first = first or answer
        moved = max(abs(a[1] - b[1]) if a[0] == b[0] else 99.0 for a, b in zip(answer, first))
        wrong, total = wrong + (moved > 0.05), total + 1
        print(f"{name:26s} {'alone ' if i == 0 else 'loaded'}: first token {answer[0]}, moved {moved:.4f}{'  WRONG' if moved > 0.05 else ''}")
print(f"{wrong} of {total} answers of VICTIM wrong: {'REPRODUCED' if wrong else 'NOT REPRODUCED'}")
sys.exit(0 if wrong else 1)
