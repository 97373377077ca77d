#!/usr/bin/env python3
"""llama.cpp CUDA: a wrong answer from an in-place-updated CUDA graph (llama-server, several slots).

Self-contained: Python 3.10+, numpy and gguf (`pip install numpy gguf`), and a llama-server built
with CUDA. Nothing is downloaded.

    python3 repro.py build tiny.gguf                       # the 7 MB float32 test model (seed 0)
    python3 repro.py run --server ./llama-server --model tiny.gguf [--env GGML_CUDA_DISABLE_GRAPHS=1]

`build` writes a 2-layer llama (hidden 256, 4 heads, vocabulary 1024, float32, random weights)
that is byte-identical to the one the runs in README.md used (sha256 dd17ae0d...).

`run` starts llama-server with the flags of the finding (8 slots, no flash attention, f32 KV
cache), then sends one fixed sequence of requests: a 569-token prompt (VICTIM, 30 tokens out)
alone, then together with a 62-token prompt (DECODER) that is already generating when VICTIM
arrives, first on free slots, then pinned to slots (0,1), (1,0), (0,2) and (3,4) with `id_slot`.
Before every request the slots are erased, and each pattern starts with every request run alone
(`cache_prompt: false`), as the measurements did. Every answer of VICTIM is checked against an
exact float64 forward pass of the same GGUF, teacher-forced on the answer's own tokens: a correct
answer lies within ~0.002 nats of it at every position (TF32 rounding), a wrong one 0.17-0.75.
Exit status 1 when an answer was wrong.

On an H200 (llama.cpp 0c1e570, CUDA 13.0, driver 580.159.04) this sequence, sent by the driver
that produced README.md's tables (scripts/gpu_settle.py, stage `history`), gave 8 wrong answers
of 30 on each of 4 fresh servers, always in the (1,0) and (0,2) patterns, the same wrong tokens
every time; with GGML_CUDA_DISABLE_GRAPHS=1, none (0 of 56, on a longer sequence). This script
re-implements that sequence; it was run against a CPU build only (0 of 30 wrong, as expected
without CUDA graphs), not yet on a GPU.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

# The two prompts of the finding (token ids of the test model's vocabulary).
DECODER = [
    973, 56, 982, 497, 1012, 61, 592, 299, 200, 995, 681, 530, 363, 721, 73, 591, 398, 911, 375,
    687, 987, 346, 450, 347, 687, 782, 595, 87, 967, 813, 666, 741, 492, 363, 349, 993, 957, 30,
    389, 993, 1003, 760, 162, 774, 586, 587, 743, 104, 405, 966, 717, 192, 654, 364, 699, 880, 252,
    357, 745, 970, 778, 636
]
VICTIM = [
    991, 647, 720, 554, 714, 772, 553, 745, 435, 262, 690, 609, 235, 301, 294, 702, 370, 671, 709,
    279, 456, 864, 253, 759, 665, 152, 355, 652, 1020, 105, 461, 243, 192, 1022, 859, 589, 921, 551,
    72, 550, 598, 353, 298, 347, 429, 919, 860, 180, 854, 528, 86, 546, 392, 495, 69, 291, 882, 666,
    685, 643, 454, 701, 549, 14, 415, 470, 747, 792, 520, 597, 169, 309, 765, 820, 744, 103, 443,
    565, 583, 18, 994, 969, 96, 928, 815, 335, 226, 755, 904, 455, 915, 149, 218, 116, 1008, 370,
    132, 971, 481, 181, 549, 619, 98, 595, 825, 490, 657, 73, 281, 763, 924, 507, 674, 148, 105,
    760, 66, 430, 483, 892, 205, 463, 312, 836, 205, 57, 924, 813, 419, 50, 343, 193, 251, 583, 41,
    596, 365, 569, 74, 569, 276, 840, 1015, 644, 584, 468, 39, 563, 172, 322, 212, 302, 852, 360,
    176, 321, 878, 938, 1019, 993, 54, 735, 287, 802, 462, 80, 864, 500, 823, 480, 121, 946, 1010,
    1014, 725, 3, 543, 921, 764, 683, 839, 321, 509, 720, 445, 612, 356, 399, 68, 192, 90, 172, 838,
    30, 350, 675, 344, 677, 109, 90, 989, 335, 995, 576, 33, 969, 788, 597, 101, 874, 40, 562, 805,
    502, 276, 717, 123, 529, 453, 785, 65, 334, 117, 11, 839, 864, 46, 481, 838, 945, 748, 858, 572,
    947, 221, 370, 51, 1012, 167, 424, 686, 797, 261, 480, 270, 778, 969, 48, 29, 88, 628, 606, 453,
    438, 981, 134, 738, 151, 828, 863, 988, 145, 391, 529, 908, 647, 256, 829, 302, 586, 593, 109,
    333, 857, 849, 685, 550, 542, 408, 353, 113, 382, 189, 226, 736, 908, 32, 899, 865, 627, 857,
    600, 70, 827, 18, 620, 347, 688, 898, 259, 610, 746, 723, 71, 439, 713, 168, 232, 896, 864, 233,
    734, 987, 737, 998, 375, 799, 962, 733, 937, 87, 220, 258, 386, 790, 149, 740, 549, 890, 990,
    1018, 990, 859, 399, 326, 19, 882, 110, 1011, 806, 904, 369, 955, 837, 76, 415, 7, 85, 489, 570,
    384, 225, 398, 884, 1000, 331, 375, 876, 336, 832, 696, 612, 757, 890, 356, 641, 745, 500, 12,
    537, 351, 840, 137, 372, 360, 625, 143, 752, 31, 874, 519, 14, 678, 811, 12, 602, 736, 479, 359,
    755, 417, 95, 971, 236, 994, 823, 88, 599, 968, 861, 676, 672, 629, 306, 562, 993, 625, 109,
    290, 731, 968, 943, 654, 306, 560, 212, 15, 1001, 170, 247, 739, 836, 975, 885, 277, 762, 763,
    49, 886, 524, 611, 306, 118, 471, 357, 111, 661, 688, 915, 132, 802, 54, 737, 346, 955, 666,
    109, 570, 790, 623, 716, 876, 202, 677, 194, 305, 988, 949, 249, 867, 179, 758, 414, 585, 862,
    274, 547, 214, 642, 119, 925, 843, 768, 293, 836, 323, 455, 75, 65, 661, 692, 871, 374, 918,
    394, 1021, 606, 762, 574, 822, 717, 291, 869, 497, 70, 631, 323, 905, 796, 103, 751, 286, 320,
    300, 938, 524, 178, 375, 111, 234, 91, 777, 794, 767, 98, 470, 1012, 318, 312, 952, 700, 796,
    337, 497, 1016, 50, 938, 198, 643, 512, 325, 152, 764, 311, 852, 943, 759, 398, 661, 968, 141,
    993, 18, 555, 933, 571, 145, 55, 82, 619, 498, 856, 884, 59, 797, 419, 118, 742, 524, 64, 410,
    486, 248, 378, 175, 624, 876, 816, 993
]


# --- the model ----------------------------------------------------------------------------------
# servefuzz.models (seed 0), reduced to the GGUF: a SentencePiece-style vocabulary of 1024 and
# random float32 weights; the byte and control tokens' output rows are zero so they never win.

LAYERS, HIDDEN, HEADS, FFN, CONTEXT, THETA, EPS, VOCAB, LOGIT_SCALE = 2, 256, 4, 512, 2048, 10000.0, 1e-5, 1024, 3.0


def words(rng: np.random.Generator, count: int) -> list[str]:
    onsets = ["", "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "st", "tr", "kl"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou"]
    codas = ["", "", "n", "r", "s", "t", "l", "m"]
    out: set[str] = set()
    while len(out) < count:
        syllables = int(rng.integers(1, 4))
        out.add("".join(onsets[rng.integers(len(onsets))] + vowels[rng.integers(len(vowels))]
                        + codas[rng.integers(len(codas))] for _ in range(syllables)))
    return sorted(out)


def build(path: Path, seed: int = 0) -> None:
    import gguf

    rng = np.random.default_rng([seed, 2])
    types = gguf.TokenType
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    kinds = [types.UNKNOWN, types.CONTROL, types.CONTROL] + [types.BYTE] * 256
    quiet = list(range(len(tokens)))
    pieces = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581"]
    pieces += ["\u2581" + w for w in words(rng, VOCAB - len(tokens) - len(pieces))]
    tokens += pieces
    kinds += [types.NORMAL] * len(pieces)
    scores = [0.0] * len(quiet) + [-float(i) for i in range(len(pieces))]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("servefuzz-tiny")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_rope_freq_base(THETA)
    w.add_layer_norm_rms_eps(EPS)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(kinds)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)

    def proj(out: int, inp: int) -> np.ndarray:
        return np.asarray(rng.standard_normal((out, inp)) / np.sqrt(inp), dtype=np.float32)

    tensors = {"token_embd.weight": rng.standard_normal((len(tokens), HIDDEN)).astype(np.float32)}
    for i in range(LAYERS):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = np.ones(HIDDEN, np.float32)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensors[p + name + ".weight"] = proj(HIDDEN, HIDDEN)
        tensors[p + "ffn_norm.weight"] = np.ones(HIDDEN, np.float32)
        tensors[p + "ffn_gate.weight"] = proj(FFN, HIDDEN)
        tensors[p + "ffn_up.weight"] = proj(FFN, HIDDEN)
        tensors[p + "ffn_down.weight"] = proj(HIDDEN, FFN)
    tensors["output_norm.weight"] = np.ones(HIDDEN, np.float32)
    head = proj(len(tokens), HIDDEN) * LOGIT_SCALE
    head[quiet] = 0.0
    tensors["output.weight"] = head
    for name, array in tensors.items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# --- the truth: the same model in float64 ----------------------------------------------------------
# llama.cpp's llama graph: RMS norm, RoPE over adjacent pairs (LLAMA_ROPE_TYPE_NORM), causal
# softmax attention scaled by 1/sqrt(head_dim), SwiGLU; log-softmax over the whole vocabulary,
# which is what llama-server's n_probs reports.


def load_weights(path: Path) -> dict[str, np.ndarray]:
    import gguf

    reader = gguf.GGUFReader(str(path))
    return {t.name: np.asarray(t.data, dtype=np.float64).reshape(tuple(int(d) for d in reversed(t.shape.tolist())))
            for t in reader.tensors}


def logprobs(w: dict[str, np.ndarray], prompt: list[int], output: list[int]) -> np.ndarray:
    """[len(output), vocab]: row j is the distribution of output[j] after prompt + output[:j]."""
    ids = np.asarray(prompt + output[:-1])
    n, hd = len(ids), HIDDEN // HEADS
    eps = float(np.float32(EPS))

    def rms(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g

    ang = np.arange(n)[:, None] * THETA ** (-np.arange(0, hd, 2) / hd)[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(x: np.ndarray) -> np.ndarray:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
        return out

    mask = np.triu(np.full((n, n), -np.inf), k=1)
    h = w["token_embd.weight"][ids]
    for i in range(LAYERS):
        p = f"blk.{i}."
        x = rms(h, w[p + "attn_norm.weight"])
        q = rope((x @ w[p + "attn_q.weight"].T).reshape(n, HEADS, hd))
        k = rope((x @ w[p + "attn_k.weight"].T).reshape(n, HEADS, hd))
        v = (x @ w[p + "attn_v.weight"].T).reshape(n, HEADS, hd)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        h = h + np.einsum("hqk,khd->qhd", a, v).reshape(n, HIDDEN) @ w[p + "attn_output.weight"].T
        x = rms(h, w[p + "ffn_norm.weight"])
        g = x @ w[p + "ffn_gate.weight"].T
        h = h + (g / (1 + np.exp(-g)) * (x @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
    z = rms(h, w["output_norm.weight"]) @ w["output.weight"].T
    z = z[len(prompt) - 1:]
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def deviation(w: dict[str, np.ndarray], prompt: list[int], answer: dict) -> float:
    """The largest |engine - truth| log-probability over every position and every listed token."""
    lp = logprobs(w, prompt, answer["tokens"])
    return max(abs(lpo - lp[j, t]) for j, top in enumerate(answer["top"]) for t, lpo in top)


# --- llama-server -----------------------------------------------------------------------------------

FLAGS = ["-np", "8", "-c", "8192", "--cont-batching", "--cache-prompt", "--metrics", "--slots", "-fa", "off",
         "-ctk", "f32", "-ctv", "f32", "-t", "4", "-tb", "4", "--no-webui", "-ngl", "99", "--cache-ram", "0"]


def post(port: int, path: str, body: dict, timeout: float = 120.0) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{path}: HTTP {resp.status} {data[:200]!r}")
        return data
    finally:
        conn.close()


def complete(port: int, prompt: list[int], n: int, *, cache_prompt: bool, slot: int | None = None,
             first_token: threading.Event | None = None) -> dict:
    """POST /completion, greedy, top-10 log-probabilities; streamed when first_token is to be set."""
    body = {"prompt": prompt, "n_predict": n, "temperature": 0.0, "n_probs": 10, "ignore_eos": True,
            "cache_prompt": cache_prompt, "return_tokens": True, "stream": first_token is not None}
    if slot is not None:
        body["id_slot"] = slot
    out: dict = {"tokens": [], "top": []}

    def take(chunk: dict) -> None:
        for p in chunk.get("completion_probabilities") or []:
            out["tokens"].append(p["id"])
            out["top"].append([(t["id"], t["logprob"]) for t in p["top_logprobs"]])
        if "id_slot" in chunk and chunk.get("stop"):
            out["slot"] = chunk["id_slot"]

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", "/completion", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if first_token is None:
            take(json.loads(resp.read()))
        else:
            for line in resp:
                if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                    take(json.loads(line[5:]))
                    if out["tokens"]:
                        first_token.set()
    finally:
        conn.close()
        if first_token is not None:
            first_token.set()
    return out


def erase(port: int) -> None:
    for slot in range(8):
        post(port, f"/slots/{slot}?action=erase", {})


def pattern(port: int, slots: tuple[int, int] | None, with_decoder: bool) -> list[tuple[str, dict]]:
    """One pattern as the measurements ran it: every request alone first (slots erased before
    each), then 4 loaded runs (slots erased before each). Returns VICTIM's answers."""
    bg_slot, v_slot = slots if slots else (None, None)
    answers = []
    erase(port)
    if with_decoder:
        erase(port)
        complete(port, DECODER, 157, cache_prompt=False, slot=bg_slot)
    erase(port)
    answers.append(("alone", complete(port, VICTIM, 30, cache_prompt=False, slot=v_slot)))
    for _ in range(4):
        erase(port)
        if not with_decoder:
            answers.append(("loaded", complete(port, VICTIM, 30, cache_prompt=True)))
            continue
        started = threading.Event()
        bg = threading.Thread(target=complete, args=(port, DECODER, 157),
                              kwargs={"cache_prompt": True, "slot": bg_slot, "first_token": started})
        bg.start()
        started.wait(60)  # DECODER is generating: VICTIM's prompt now shares a batch with it
        answers.append(("loaded", complete(port, VICTIM, 30, cache_prompt=True, slot=v_slot)))
        bg.join(120)
    return answers


def run(args: argparse.Namespace) -> int:
    weights = load_weights(args.model)
    env = {**os.environ, **dict(kv.split("=", 1) for kv in args.env)}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    slot_dir = tempfile.mkdtemp(prefix="repro-slots-")
    argv = [args.server, "-m", str(args.model), "--host", "127.0.0.1", "--port", str(port), *FLAGS,
            "--slot-save-path", slot_dir, *args.flag]
    print("$", " ".join(f"{k}={v}" for k, v in dict(kv.split("=", 1) for kv in args.env).items()), " ".join(argv))
    log = open(args.log, "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    wrong = total = 0
    try:
        for _ in range(600):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        truth0 = logprobs(weights, VICTIM, [0])[0]
        best = np.argsort(-truth0)[:2]
        print(f"truth (float64), VICTIM's first token: {best[0]} {truth0[best[0]]:.4f}, {best[1]} {truth0[best[1]]:.4f}")
        for name, slots, with_decoder in (("VICTIM alone, free slot", None, False),
                                          ("DECODER + VICTIM, free slots", None, True),
                                          ("DECODER + VICTIM, slots 0,1", (0, 1), True),
                                          ("DECODER + VICTIM, slots 1,0", (1, 0), True),
                                          ("DECODER + VICTIM, slots 0,2", (0, 2), True),
                                          ("DECODER + VICTIM, slots 3,4", (3, 4), True)):
            for kind, answer in pattern(port, slots, with_decoder):
                dev = deviation(weights, VICTIM, answer)
                bad = dev > 0.05
                wrong += bad
                total += 1
                first = answer["top"][0][:2]
                print(f"{name:30s} {kind:6s}: first token {first[0][0]} {first[0][1]:.4f}, {first[1][0]} {first[1][1]:.4f};"
                      f" largest deviation from the truth {dev:.4f}{'  WRONG' if bad else ''}", flush=True)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        log.close()
    print(f"{wrong} of {total} answers of VICTIM were wrong")
    return 1 if wrong else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write the test model")
    b.add_argument("path", type=Path)
    r = sub.add_parser("run", help="serve it and send the sequence")
    r.add_argument("--server", required=True, help="llama-server built with -DGGML_CUDA=ON")
    r.add_argument("--model", type=Path, required=True)
    r.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server, e.g. GGML_CUDA_DISABLE_GRAPHS=1")
    r.add_argument("--flag", action="append", default=[], help="one more server argument (repeatable)")
    r.add_argument("--log", default="llama-server.log")
    args = ap.parse_args()
    if args.cmd == "build":
        build(args.path)
        print(f"wrote {args.path}")
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
