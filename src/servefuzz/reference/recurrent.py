"""The gated delta rule of the hybrid model's linear-attention layers, in exact fixed point.

Qwen3-Next's linear-attention layers (a gated delta net) keep, per request and per head, a
matrix state S [value_dim, key_dim] instead of per-token KV. Each token t writes its value under
its key with the delta rule and decays what was there:

    S_t = a_t * S_{t-1} + b_t * (v_t - S_{t-1} k_t) k_t^T        o_t = S_t q_t

with q and k normalised to a fixed length, a_t in (0, 1] (the gate's decay, per head) and b_t in
[0, 1] (the write strength). Here every quantity is an integer-valued float64, as in `model.py`:
the gates come from integer tables indexed by integer projections, a and b are integers over a
power of two, and each step rounds its element-wise products once. Every product and partial sum
stays an exact integer below 2**53, so a request's state after token t is the same bits whether
the tokens came in one prefill, in chunks, one decode step at a time, or beside other requests:
the scan is sequential per request and reads nothing but that request's own rows.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> w = {n: np.round(rng.normal(0, 32, (32, 32))) for n in ("wq", "wk", "wv")}
    >>> w.update(layer_weights(rng, d_model=32, heads=2))
    >>> tables = GateTables(heads=2)
    >>> x = np.round(rng.normal(0, 256, (7, 32)))
    >>> zero = np.zeros(state_shape(32, 2))
    >>> whole, end, _ = scan(w, tables, x, zero)
    >>> first, mid, _ = scan(w, tables, x[:3], zero)
    >>> rest, end2, _ = scan(w, tables, x[3:], mid)
    >>> bool((np.concatenate([first, rest]) == whole).all() and (end == end2).all())
    True
    >>> _, _, snaps = scan(w, tables, x, zero, snapshot_at=[3])
    >>> bool((snaps[0] == mid).all())
    True

The short causal convolution of the real layer and its output gate are left out: what the
engine must get right is the state a prefix leaves behind, and the matrix state is that.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "BETA_ONE",
    "DECAY_ONE",
    "KEY_NORM",
    "STATE_CLIP",
    "GateTables",
    "layer_weights",
    "scan",
    "scan_ragged",
    "state_shape",
    "step",
]

CLIP = 4095  # as model.CLIP: the bound of q, k, v and of the layer's output
KEY_NORM = 64  # |q| and |k| after normalisation: S k / KEY_NORM**2 reads back the value written under k
DECAY_ONE = 64  # a = decay / DECAY_ONE
BETA_ONE = 16  # b = beta / BETA_ONE
STATE_CLIP = 2**24  # |S|: keeps S k (key_dim * 2**24 * 64) and a * S far below 2**53
_GATE_RANGE = 32  # gate projections are clipped to [-32, 32] and index the tables there
_GATE_SHIFT = 9  # x @ w_gate >> 9, as the model's q/k/v requantisation
# The per-head decay rate: head h forgets at rate RATES[h % 8] times the gate's sigmoid. The slow
# heads remember a hundred tokens and more (a wrong state shows for long); the fast ones follow
# the last few tokens.
_RATES = (1 / 256, 1 / 96, 1 / 48, 1 / 24, 1 / 12, 1 / 6, 1 / 3, 1.0)


def state_shape(d_model: int, heads: int) -> tuple[int, int, int]:
    """One layer's state of one request: [heads, value_dim, key_dim] (the head dims are d_model / heads)."""
    hd = d_model // heads
    return heads, hd, hd


def layer_weights(rng: np.random.Generator, d_model: int, heads: int) -> dict[str, np.ndarray]:
    """The gate projections of one linear-attention layer (its q, k, v and output projections are
    the layer's ordinary ones): `wa` (decay) and `wb` (write strength), one column per head."""
    return {"wa": np.round(rng.normal(0.0, 32.0, (d_model, heads))),
            "wb": np.round(rng.normal(0.0, 32.0, (d_model, heads)))}


class GateTables:
    """Integer decay and write-strength tables, indexed by (head, clipped gate projection + range)."""

    def __init__(self, heads: int) -> None:
        z = np.arange(-_GATE_RANGE, _GATE_RANGE + 1) / 8.0
        sig = 1.0 / (1.0 + np.exp(-z))
        rates = np.array([_RATES[h % len(_RATES)] for h in range(heads)])[:, None]
        self.decay = np.round(DECAY_ONE * np.exp(-rates * sig[None, :]))  # [H, 65], in 1..64
        self.beta = np.round(BETA_ONE * sig)  # [65], in 0..16

    def gates(self, x: np.ndarray, w: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Normalised rows x [T, d] -> integer decay [T, H] and beta [T, H]. Each row's gates
        depend on that row alone (an exact matmul, a power-of-two shift, a table)."""
        za = _gate_index(x @ w["wa"])
        zb = _gate_index(x @ w["wb"])
        heads = np.arange(za.shape[1])[None, :]
        return self.decay[heads, za], self.beta[zb]


def _gate_index(z: np.ndarray) -> np.ndarray:
    return (np.clip(np.round(z * (2.0**-_GATE_SHIFT)), -_GATE_RANGE, _GATE_RANGE) + _GATE_RANGE).astype(np.intp)


def normalise(x: np.ndarray) -> np.ndarray:
    """Rows [..., D] scaled to length KEY_NORM, rounded: one correctly rounded per-row factor,
    as model._rms_norm, so a row's result depends on that row alone."""
    ss = np.sum(x * x, axis=-1, keepdims=True)
    return np.round(x * (KEY_NORM / np.sqrt(ss + 1.0)))


def step(state: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, decay: np.ndarray,
         beta: np.ndarray) -> np.ndarray:
    """One token of B requests at once, in place: state [B, H, Dv, Dk]; q, k normalised and v,
    each [B, H, D]; decay, beta [B, H]. Returns the output o [B, H, Dv].

    Rows never mix: each request's new state and output are what that request alone gets."""
    inv = 1.0 / (KEY_NORM * KEY_NORM)
    pred = np.round(np.matmul(state, k[..., None])[..., 0] * inv)  # what S holds under k
    delta = v - pred
    np.maximum(delta, -2 * CLIP, out=delta)
    np.minimum(delta, 2 * CLIP, out=delta)
    # a / DECAY_ONE and b / BETA_ONE have a few fraction bits and the products fit 53 bits:
    # each product below is exact, each np.round the step's one rounding of it.
    state *= (decay * (1.0 / DECAY_ONE))[..., None, None]
    np.round(state, out=state)
    state += np.round((delta * (beta * (1.0 / BETA_ONE))[..., None])[..., :, None] * k[..., None, :])
    np.maximum(state, -STATE_CLIP, out=state)
    np.minimum(state, STATE_CLIP, out=state)
    o = np.round(np.matmul(state, q[..., None])[..., 0] * inv)
    np.maximum(o, -CLIP, out=o)
    return np.minimum(o, CLIP, out=o)


def scan(w: dict[str, np.ndarray], tables: GateTables, x: np.ndarray, state: np.ndarray,
         snapshot_at: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """One request's tokens through one layer: normalised rows x [T, d] after the state `state`
    [H, Dv, Dk] (not changed) -> outputs [T, H, Dv], the state after the last token, and a copy
    of the state after each count of tokens in `snapshot_at` (counts 1..T, in order)."""
    states = state[None].copy()
    out, snaps = scan_ragged(w, tables, x, [(0, len(x))], states, [snapshot_at])
    return out, states[0], snaps[0]


def scan_ragged(w: dict[str, np.ndarray], tables: GateTables, x: np.ndarray, spans: Sequence[tuple[int, int]],
                states: np.ndarray, snapshot_at: Sequence[Sequence[int]]) -> tuple[np.ndarray, list[list[np.ndarray]]]:
    """Several requests' new tokens through one layer at once, as an extend batch runs them:
    request i's normalised rows are x[a_i:b_i] (`spans`), its state before them states[i]
    [H, Dv, Dk], replaced in place by its state after them. Returns the outputs [N, H, Dv] and,
    per request, a copy of its state after each count of its tokens in `snapshot_at[i]`.

    The requests step in lockstep, token t of each at once, each row alone (`step`): a request's
    outputs and states are what it gets alone."""
    q, k, v, decay, beta = project(w, tables, x, states.shape[1])
    lens = np.array([b - a for a, b in spans], dtype=np.intp)
    order = np.argsort(-lens, kind="stable")  # the longest first: the requests still running are a prefix
    s = states[order]
    starts = np.array([spans[i][0] for i in order], dtype=np.intp)
    running = np.searchsorted(-lens[order], -np.arange(int(lens.max(initial=0))), side="left")
    keep = [set(snapshot_at[i]) for i in order]
    snaps: list[list[np.ndarray]] = [[] for _ in spans]
    out = np.empty(v.shape)
    for t, n in enumerate(running):
        rows = starts[:n] + t
        out[rows] = step(s[:n], q[rows], k[rows], v[rows], decay[rows], beta[rows])
        for j in range(n):
            if t + 1 in keep[j]:
                snaps[order[j]].append(s[j].copy())
    states[order] = s
    return out, snaps


def project(w: dict[str, np.ndarray], tables: GateTables, x: np.ndarray,
            heads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Normalised rows x [T, d] -> q, k (normalised), v [T, H, D] and the gates [T, H]: every row
    alone, so projecting a batch's rows together is what each row gets alone."""
    t, d = x.shape
    shape = (t, heads, d // heads)
    q = normalise(_quant(x @ w["wq"]).reshape(shape))
    k = normalise(_quant(x @ w["wk"]).reshape(shape))
    v = _quant(x @ w["wv"]).reshape(shape)
    decay, beta = tables.gates(x, w)
    return q, k, v, decay, beta


def _quant(x: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x * (2.0**-9)), -CLIP, CLIP)


def exactness_bounds(d_model: int, heads: int) -> dict[str, float]:
    """Worst-case |value| of the scan's reductions and products (all must be < 2**53)."""
    hd = d_model // heads
    return {
        "state_read": hd * STATE_CLIP * KEY_NORM,  # S k and S q
        "state_decay": STATE_CLIP * DECAY_ONE,
        "state_write": 2 * CLIP * KEY_NORM * BETA_ONE,
        "gate_proj": 4095.0 * d_model * 32.0 * 8,  # generous: |x| <= CLIP, |w| a few hundred
        "key_norm_sum": hd * CLIP * CLIP,
        "decay_table_max": math.ldexp(1, 6),
    }
