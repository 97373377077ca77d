"""The reference engine's exact attention against the forms it replaced, side by side.

    python bench/attention.py [--prompt-len 1000] [--batch 16] [--width 700] [--reps 9]

`baseline` below is the form the engine used until 2026-12-01: integer scores, then a full
`np.where` mask over every score, then the gap divided by ATTN_SHIFT. `blocks128` is the form of
2026-12-01 to 12-04: q scaled by 1/ATTN_SHIFT before the product (exact: a power of two), the
causal mask on each 128-query block's own square of keys only. The engine's form
(`servefuzz.reference.model`) sizes each block so that its score matrix stays near 2**17
elements (in cache), reads the keys through one contiguous transposed copy, and gathers the
weight table with `take`. All are run on the same inputs, checked bit for bit, and timed
interleaved; the table gives medians and the ratios. BLAS is held to one thread, as the engine
holds it.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads, as the engine does

import argparse
import time
from collections.abc import Callable

import numpy as np

from servefuzz.reference.model import ATTN_SHIFT, ModelConfig, TinyModel, attend, causal_attention

_QUERY_BLOCK = 128


def baseline_attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, valid: np.ndarray, lut: np.ndarray) -> np.ndarray:
    s = np.where(valid, q @ np.swapaxes(k, -1, -2), -(2.0**46))
    top = s.max(axis=-1, keepdims=True)
    np.subtract(top, s, out=s)
    np.multiply(s, 1.0 / ATTN_SHIFT, out=s)
    np.minimum(s, len(lut) - 1, out=s)
    w = lut[s.astype(np.intp)]
    return np.round((w @ v) / w.sum(axis=-1, keepdims=True))


def baseline_causal(q: np.ndarray, keys: np.ndarray, values: np.ndarray, start: int, lut: np.ndarray) -> np.ndarray:
    n = len(q)
    out = np.empty_like(q)
    kt, vt = np.swapaxes(keys, 0, 1)[None], np.swapaxes(values, 0, 1)[None]
    for a in range(0, n, _QUERY_BLOCK):
        b = min(n, a + _QUERY_BLOCK)
        width = start + b
        valid = (np.arange(width)[None, :] <= (start + np.arange(a, b))[:, None])[None, None]
        qt = np.swapaxes(q[a:b], 0, 1)[None]
        out[a:b] = np.swapaxes(baseline_attend(qt, kt[:, :, :width], vt[:, :, :width], valid, lut)[0], 0, 1)
    return out


def blocks128_weighted(s: np.ndarray, v: np.ndarray, lut: np.ndarray) -> np.ndarray:
    top = s.max(axis=-1, keepdims=True)
    np.subtract(top, s, out=s)
    np.minimum(s, len(lut) - 1, out=s)
    w = lut[s.astype(np.intp)]
    return np.round((w @ v) / w.sum(axis=-1, keepdims=True))


def blocks128_causal(q: np.ndarray, keys: np.ndarray, values: np.ndarray, start: int, lut: np.ndarray) -> np.ndarray:
    n = len(q)
    out = np.empty_like(q)
    kt, vt = np.swapaxes(keys, 0, 1)[None], np.swapaxes(values, 0, 1)[None]
    for a in range(0, n, _QUERY_BLOCK):
        b = min(n, a + _QUERY_BLOCK)
        width = start + b
        s = (np.swapaxes(q[a:b], 0, 1)[None] * (1.0 / ATTN_SHIFT)) @ np.swapaxes(kt[:, :, :width], -1, -2)
        future = np.arange(b - a)[None, :] > np.arange(b - a)[:, None]
        np.copyto(s[..., start + a : width], -(2.0**38), where=future)
        out[a:b] = np.swapaxes(blocks128_weighted(s, vt[:, :, :width], lut)[0], 0, 1)
    return out


def median_ms(fns: dict[str, Callable[[], np.ndarray]], reps: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):  # interleaved, so load on a shared machine falls on both alike
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: sorted(ts)[len(ts) // 2] * 1e3 for name, ts in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompt-len", type=int, default=1000)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--width", type=int, default=700)
    p.add_argument("--reps", type=int, default=9)
    a = p.parse_args()
    m = TinyModel(ModelConfig(seed=0))
    lut, c = m.attn_lut, m.config
    rng = np.random.default_rng(0)

    def act(*shape: int) -> np.ndarray:
        return np.clip(np.round(rng.normal(0, 1500, shape)), -4095, 4095)

    q, k, v = act(a.prompt_len, c.n_heads, c.head_dim), act(a.prompt_len, c.n_heads, c.head_dim), act(a.prompt_len, c.n_heads, c.head_dim)
    qd, kd, vd = (
        act(a.batch, c.n_heads, 1, c.head_dim),
        act(a.batch, c.n_heads, a.width, c.head_dim),
        act(a.batch, c.n_heads, a.width, c.head_dim),
    )
    lens = rng.integers(1, a.width + 1, a.batch)
    valid = (np.arange(a.width)[None, :] < lens[:, None])[:, None, None, :]
    start = a.prompt_len // 2  # a chunk after a cached prefix: the second half of the prompt
    cases: dict[str, dict[str, Callable[[], np.ndarray]]] = {
        f"prefill {a.prompt_len} tokens": {
            "baseline": lambda: baseline_causal(q, k, v, 0, lut),
            "blocks128": lambda: blocks128_causal(q, k, v, 0, lut),
            "engine": lambda: causal_attention(q, k, v, 0, lut),
        },
        f"prefill {a.prompt_len - start} tokens after {start} cached": {
            "baseline": lambda: baseline_causal(q[start:], k, v, start, lut),
            "blocks128": lambda: blocks128_causal(q[start:], k, v, start, lut),
            "engine": lambda: causal_attention(q[start:], k, v, start, lut),
        },
        f"decode {a.batch} rows x {a.width} keys": {
            "baseline": lambda: baseline_attend(qd, kd, vd, valid, lut),
            "blocks128": lambda: attend(qd, kd, vd, valid, lut),  # decode has no blocks: the same form
            "engine": lambda: attend(qd, kd, vd, valid, lut),
        },
    }
    print(f"load average {os.getloadavg()[0]:.2f}\n")
    print("| case | baseline ms | blocks128 ms | engine ms | engine vs baseline | engine vs blocks128 | bit-identical |")
    print("|---|---|---|---|---|---|---|")
    for name, fns in cases.items():
        outs = [fn() for fn in fns.values()]
        same = all(np.array_equal(outs[0], o) for o in outs[1:])
        t = median_ms(fns, a.reps)
        print(f"| {name} | {t['baseline']:.1f} | {t['blocks128']:.1f} | {t['engine']:.1f} "
              f"| {t['baseline'] / t['engine']:.2f}x | {t['blocks128'] / t['engine']:.2f}x | {same} |")


if __name__ == "__main__":
    main()
