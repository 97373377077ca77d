"""A tiny decoder-only transformer whose every reduction is exact.

BLAS picks kernels by matrix shape and numpy regroups sums by length, so ordinary float maths
changes in the last bits with batch size, padding or chunking. Here every activation and weight
is an *integer-valued* float64 (fixed point), every product and partial sum stays an integer
below 2**53, and so every matmul and sum is exact in any order. Only element-wise steps round
(correctly rounded IEEE ops, then `np.round`), and they see the same inputs whatever the batch.
The result: a token's logits and logprobs are the same bits whether it was computed alone, in a
batch of 100, in one prefill or in eight chunks, from a fresh KV pool or a cached prefix.

    >>> m = TinyModel(ModelConfig(seed=0))
    >>> out = m.generate([5, 17, 99, 4], max_new_tokens=4)
    >>> len(out.token_ids), out.token_ids == m.generate([5, 17, 99, 4], 4).token_ids
    (4, True)

The serving engine (`scheduler.py`) drives the same building blocks (`embed`, `qkv`, `attend`,
`post_attention`, `logits`) against its paged KV pool. `score` here is the plain no-cache
forward of one sequence alone that the tests hold the engine to; `generate` is one sequence
alone with a private contiguous cache.

Fixed-point units: normalised activations have 1.0 == `UNIT` (256); the residual stream uses the
same unit; logits are integers in 1/`LOGIT_UNIT` nats. Attention and the final softmax use
lookup tables of integer weights indexed by integer score differences.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servefuzz.reference import recurrent
from servefuzz.reference.experts import Experts

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "FULL",
    "LAYER_KINDS",
    "LINEAR",
    "SLIDING",
    "LOGIT_UNIT",
    "PAD_ID",
    "UNIT",
    "Generation",
    "ModelConfig",
    "TinyModel",
    "TokenLogprobs",
    "attend",
    "causal_attention",
    "detokenize",
    "lora_deltas",
]

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
FULL, LINEAR, SLIDING = "full_attention", "linear_attention", "sliding_attention"  # `ModelConfig.layer_types`
LAYER_KINDS = (FULL, LINEAR, SLIDING)
UNIT = 256  # 1.0 in activation fixed point
CLIP = 4095  # |normalised activation|, |q|, |k|, |v| bound: keeps every dot product small
RESID_CLIP = 32767  # residual stream bound
LOGIT_UNIT = 1024  # integer logits are in 1/1024 nats
ROPE_ONE = 2**14  # cos/sin tables in this fixed point
ATTN_LUT_ONE = 2**20  # attention weights: exp(-d) * 2**20, integers
LOGIT_LUT_BITS = 40  # softmax over the vocabulary: exp(-d) * 2**40, integers
ATTN_SHIFT = 2**8  # integer score differences are bucketed by 256 before the table
# Causal attention takes as many query rows at a time as keep its score matrix near this many
# elements (1 MiB of float64, within a core's L2 here): each of its half-dozen passes then runs
# in cache, about twice as fast on long prompts as a fixed 128 rows (bench/attention.py).
_SCORES_PER_BLOCK = 2**17
_QUERY_BLOCK = (8, 128)  # fewest and most query rows in one block
_MASKED_BUCKET = -(2.0**38)  # far below any bucketed score (|score| / 256 < 2**21): lands on the zero weight


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and the seed of the random weights. Same config, same model, bit for bit."""

    vocab_size: int = 1024
    d_model: int = 128
    n_heads: int = 8
    n_layers: int = 2
    d_mlp: int = 256
    context_length: int = 4096
    seed: int = 0
    rope_base: float = 10000.0
    # Per-head attention sharpness (scales q and k by its square root). Sharp heads make one
    # token among hundreds able to decide what a step attends to, so that changing any prompt
    # token, or reading one wrong KV page, changes the greedy continuation (tested).
    head_sharpness: tuple[float, ...] = (2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0)
    # What each layer is, in Hugging Face's `layer_types` words (`architectures.py` takes them from
    # `servefuzz.models`): "full_attention" (causal attention over the paged KV),
    # "linear_attention" (a gated delta rule: a recurrent state per request, `recurrent.py`) or
    # "sliding_attention" (attention over the last `window` tokens only, `window.py`).
    # Empty: every layer full attention, the dense llama.
    layer_types: tuple[str, ...] = ()
    window: int = 0
    # A mixture of experts in place of every layer's MLP (`experts.py`) where experts > 0:
    # each token takes `experts_per_token` of them, each of hidden size `d_expert`.
    experts: int = 0
    experts_per_token: int = 0
    d_expert: int = 64

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kind of every layer (`layer_types`, or all full attention)."""
        return self.layer_types or ("full_attention",) * self.n_layers

    @property
    def recurrent_layers(self) -> tuple[int, ...]:
        """The layers that keep a recurrent state instead of KV, in order."""
        return tuple(i for i, k in enumerate(self.kinds) if k == LINEAR)

    def windowed(self, layer: int) -> bool:
        """Whether `layer` is a sliding-window layer."""
        return self.kinds[layer] == SLIDING


@dataclass(frozen=True)
class TokenLogprobs:
    """The chosen token of one step, its logprob and the top-k (token, logprob) pairs."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class Generation:
    """A continuation: token ids and, per token, its logprob and top-k alternatives."""

    token_ids: tuple[int, ...]
    steps: tuple[TokenLogprobs, ...]


def detokenize(token_ids: Sequence[int]) -> str:
    """Text is for humans only; the tool compares ids. Token t reads as ' w<t>'."""
    return "".join(f" w{t}" for t in token_ids)


def _quant(x: np.ndarray, shift: int, bound: int = CLIP) -> np.ndarray:
    # x is an exact integer; scaling by a power of two is exact and round-half-even is exact.
    return np.clip(np.round(x * (2.0**-shift)), -bound, bound)


def _rms_norm(h: np.ndarray) -> np.ndarray:
    # Sum of squares is an exact integer (< 2**37); the one per-row factor is made of correctly
    # rounded IEEE ops, so each row's result depends on that row only.
    ms = np.sum(h * h, axis=-1, keepdims=True)
    inv = UNIT / np.sqrt(ms / h.shape[-1] + 1.0)
    return np.clip(np.round(h * inv), -CLIP, CLIP)


def _attention_lut(head_dim: int) -> np.ndarray:
    # Integer weights exp(-real_score_gap) for each bucket of integer score gaps; the last entry
    # is 0 and is where masked positions point.
    scale = ATTN_SHIFT / (UNIT * UNIT * math.sqrt(head_dim))
    n = math.ceil(math.log(2 * ATTN_LUT_ONE) / scale) + 2
    lut = np.round(ATTN_LUT_ONE * np.exp(-np.arange(n) * scale))
    lut[-1] = 0.0
    return lut


def _logit_lut() -> np.ndarray:
    n = math.ceil(math.log(2.0 ** (LOGIT_LUT_BITS + 1)) * LOGIT_UNIT) + 2
    lut = np.round(2.0**LOGIT_LUT_BITS * np.exp(-np.arange(n) / LOGIT_UNIT))
    lut[-1] = 0.0
    return lut


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, valid: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """Exact softmax attention. q [B,H,Q,D], k and v [B,H,K,D], valid [B,1|H,Q,K] -> [B,H,Q,D].

    Scores are integers; the gap to the row maximum indexes an integer weight table; weighted
    sums of values are exact integers; one division per output element. Padding keys (invalid)
    get weight 0, so padding the batch to its longest sequence cannot change a bit. Every row
    needs at least one valid key.
    """
    s = _bucketed_scores(q, np.swapaxes(k, -1, -2))
    np.copyto(s, _MASKED_BUCKET, where=~valid)
    return _weighted_values(s, v, lut)


def _bucketed_scores(q: np.ndarray, kt: np.ndarray) -> np.ndarray:
    # Scores (q [..., Q, D] against transposed keys kt [..., D, K]) in units of ATTN_SHIFT: q
    # scaled by a power of two first, so every product and partial sum is still exact (below
    # 2**45 in steps of 1/256) and equals the integer score divided by ATTN_SHIFT, one pass
    # over the score matrix cheaper than dividing after.
    return (q * (1.0 / ATTN_SHIFT)) @ kt


def _weighted_values(s: np.ndarray, v: np.ndarray, lut: np.ndarray) -> np.ndarray:
    # In place: gap to the row maximum (exact, >= 0), capped at the table's zero entry; its
    # floor (truncation, since gaps are >= 0) is the bucket of the integer gap // ATTN_SHIFT.
    # `take` rather than `lut[...]`: the same elements, a third of the time on a 1-D table.
    top = s.max(axis=-1, keepdims=True)
    np.subtract(top, s, out=s)
    np.minimum(s, len(lut) - 1, out=s)
    w = lut.take(s.astype(np.intp))
    return np.round((w @ v) / w.sum(axis=-1, keepdims=True))  # the row maximum weighs 2**20


def _top_k(row: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries, largest first, ties in index order: the first k of a
    stable argsort of -row, sorting only the entries at or above the k-th largest value."""
    if k >= len(row):
        return np.argsort(-row, kind="stable")
    kth = np.partition(row, len(row) - k)[len(row) - k]
    candidates = np.flatnonzero(row >= kth)
    return candidates[np.argsort(-row[candidates], kind="stable")][:k]


def causal_attention(
    q: np.ndarray, keys: np.ndarray, values: np.ndarray, start: int, lut: np.ndarray, *,
    window: int = 0, key_start: int = 0,
) -> np.ndarray:
    """Attention of one sequence's new tokens. q [n,H,D] at positions start..start+n-1; keys
    and values [start+n-key_start,H,D] at positions key_start..start+n-1 (cached prefix, then the
    new tokens) -> [n,H,D].

    Queries go through in blocks, each against only the keys it may see: memory stays small
    for long prompts, and since every row is exact, blocking changes no bit. A block sees every
    key before it; only its own square of keys is masked (the causal triangle), so the mask is
    written on that square alone rather than over the whole block. Keys are transposed once
    into one contiguous [H, D, K] array, which BLAS reads faster than a strided view.

    With a `window` (a sliding-window layer: the query at p sees the keys p - window < j <= p),
    a block takes only the keys some row of it may see, from the first one its first row sees,
    and masks on that slice what has slid out for the later rows too. The cached prefix need
    only start there (`key_start`, at most the first query's first visible key). Masked keys
    weigh exactly 0 and a row's maximum is over its visible keys, so the result is bit for bit
    what masking the whole matrix gives.
    """
    n, heads = q.shape[0], q.shape[1]
    out = np.empty_like(q)
    kt = np.ascontiguousarray(np.transpose(keys, (1, 2, 0)))[None]  # [1, H, D, K]
    vt = np.swapaxes(values, 0, 1)[None]
    fewest, most = _QUERY_BLOCK
    a = 0
    while a < n:
        lo = max(key_start, start + a - window + 1) if window else key_start  # the block's first key
        rows = min(most, max(fewest, _SCORES_PER_BLOCK // (heads * (start + a + 1 - lo))))
        b = min(n, a + rows)
        width = start + b
        s = _bucketed_scores(np.swapaxes(q[a:b], 0, 1)[None], kt[..., lo - key_start : width - key_start])
        future = np.arange(b - a)[None, :] > np.arange(b - a)[:, None]
        np.copyto(s[..., start + a - lo : width - lo], _MASKED_BUCKET, where=future)
        if window:
            gone = np.arange(lo, width)[None, :] <= np.arange(start + a - window, start + b - window)[:, None]
            np.copyto(s, _MASKED_BUCKET, where=gone)
        out[a:b] = np.swapaxes(_weighted_values(s, vt[:, :, lo - key_start : width - key_start], lut)[0], 0, 1)
        a = b
    return out


LORA_RANK = 8
LORA_TARGETS = ("wq", "wv")  # the q and v projections, as PEFT's default target_modules


def lora_deltas(config: ModelConfig, seed: int) -> list[dict[str, np.ndarray]]:
    """A random LoRA adapter for `config`: per layer, delta = A @ B (rank `LORA_RANK`) for each
    of `LORA_TARGETS`, drawn from `seed` alone, integer-valued so that the adapted weights stay
    exact. Each delta's spread (~34) is about the base v projection's (32): strong enough that
    an adapter's greedy answers differ from the base model's from the first token or so (tested),
    as a trained adapter's do.
    """
    rng = np.random.default_rng((0x10BA, seed))
    d = config.d_model
    out = []
    for _ in range(config.n_layers):
        out.append({
            name: np.round(rng.normal(0.0, 4.0, (d, LORA_RANK))) @ np.round(rng.normal(0.0, 3.0, (LORA_RANK, d)))
            for name in LORA_TARGETS
        })
    return out


class TinyModel:
    """Seeded random weights, integer-valued; see the module docstring for the fixed point."""

    def __init__(self, config: ModelConfig) -> None:
        c = config
        if c.d_model % c.n_heads or c.head_dim % 2:
            raise ValueError("d_model must split into heads of even size")
        if len(c.head_sharpness) != c.n_heads:
            raise ValueError("head_sharpness needs one value per head")
        if len(c.kinds) != c.n_layers or not set(c.kinds) <= set(LAYER_KINDS):
            raise ValueError(f"layer_types needs one of {LAYER_KINDS} per layer")
        if (SLIDING in c.kinds) != (c.window > 0):
            raise ValueError("a window needs sliding_attention layers, and they need a window")
        self.config = c
        rng = np.random.default_rng(c.seed)

        def ints(shape: tuple[int, ...], std: float) -> np.ndarray:
            return np.round(rng.normal(0.0, std, shape))

        d, f, hd = c.d_model, c.d_mlp, c.head_dim
        self.embedding = np.clip(ints((c.vocab_size, d), UNIT), -RESID_CLIP, RESID_CLIP)

        def sharp() -> np.ndarray:
            return np.concatenate([ints((d, hd), 32.0 * math.sqrt(b)) for b in c.head_sharpness], axis=1)

        self.layers = []
        for _ in range(c.n_layers):
            self.layers.append(
                {
                    "wq": sharp(),
                    "wk": sharp(),
                    "wv": ints((d, d), 32.0),
                    "wo": ints((d, d), 32.0),
                    "w1": ints((d, f), 32.0),
                    "w2": ints((f, d), 32.0),
                }
            )
        self.unembed = ints((d, c.vocab_size), 32.0)
        # Linear-attention layers' gates come from a stream of their own, so that the weights
        # every layer shares are the dense model's, bit for bit, whatever the layer kinds.
        gate_rng = np.random.default_rng((c.seed, 0x6D)) if c.recurrent_layers else None
        for i in c.recurrent_layers:
            assert gate_rng is not None
            self.layers[i].update(recurrent.layer_weights(gate_rng, d, c.n_heads))
        self.gate_tables = recurrent.GateTables(c.n_heads)
        # Experts from a generator of their own: the rest of the model is the dense one's, bit for bit.
        moe = np.random.default_rng((c.seed, 0xE7)) if c.experts else None
        self.experts = [Experts(moe, d, c.d_expert, c.experts, c.experts_per_token) if moe else None
                        for _ in range(c.n_layers)]
        # Pad and BOS must never be generated: a huge negative column bias keeps them out.
        self.logit_bias = np.zeros(c.vocab_size)
        self.logit_bias[[PAD_ID, BOS_ID]] = -64 * LOGIT_UNIT
        pos = np.arange(c.context_length)[:, None]
        inv_freq = c.rope_base ** (-np.arange(0, hd, 2) / hd)
        ang = pos * inv_freq[None, :]
        self.rope_cos = np.round(np.cos(ang) * ROPE_ONE)
        self.rope_sin = np.round(np.sin(ang) * ROPE_ONE)
        self.attn_lut = _attention_lut(hd)
        self.logit_lut = _logit_lut()
        # Power-of-two requantisation after each matmul, chosen so activations keep a useful
        # spread in fixed point (the attention output is amplified to rival the embedding).
        self.shift_qkv = self.shift_1 = self.shift_2 = 9
        self.shift_o = 7
        self.shift_logit = 5

    def with_lora(self, seed: int) -> TinyModel:
        """The same model under the adapter `lora_deltas(config, seed)`: its q and v weights
        merged with the deltas, everything else shared. Merging is exact here (integer weights),
        so it is bit for bit what x @ W + (x @ A) @ B computes."""
        adapted = copy.copy(self)
        adapted.layers = [
            {**w, **{name: w[name] + delta[name] for name in LORA_TARGETS}}
            for w, delta in zip(self.layers, lora_deltas(self.config, seed), strict=True)
        ]
        return adapted

    # -- building blocks (shared by the reference forward and the serving engine) -------------

    def embed(self, token_ids: np.ndarray) -> np.ndarray:
        """[T] ids -> [T, d] residual stream."""
        return self.embedding[token_ids]

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        # x [T, H, D]; rotate halves. Products and sums are exact integers, the power-of-two
        # division is exact: RoPE adds no rounding beyond one exact-input np.round.
        half = x.shape[-1] // 2
        c = self.rope_cos[positions][:, None, :]
        s = self.rope_sin[positions][:, None, :]
        a, b = x[..., :half], x[..., half:]
        out = np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
        return np.clip(np.round(out * (1.0 / ROPE_ONE)), -CLIP, CLIP)

    def qkv(self, layer: int, h: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Residual [T, d] at absolute positions [T] -> q, k, v, each [T, H, D] (RoPE applied)."""
        w = self.layers[layer]
        c = self.config
        x = _rms_norm(h)
        shape = (h.shape[0], c.n_heads, c.head_dim)
        q = _quant(x @ w["wq"], self.shift_qkv).reshape(shape)
        k = _quant(x @ w["wk"], self.shift_qkv).reshape(shape)
        v = _quant(x @ w["wv"], self.shift_qkv).reshape(shape)
        return self._rope(q, positions), self._rope(k, positions), v

    def post_attention(
        self, layer: int, h: np.ndarray, attn: np.ndarray, router_offsets: np.ndarray | None = None
    ) -> np.ndarray:
        """Residual [T, d] and attention output [T, H, D] -> residual after out-proj and MLP (or
        experts; `router_offsets` is the planted router-tie-numerics fault's, see experts.py)."""
        w = self.layers[layer]
        o = _quant(attn.reshape(h.shape[0], -1) @ w["wo"], self.shift_o)
        h = np.clip(h + o, -RESID_CLIP, RESID_CLIP)
        experts = self.experts[layer]
        if experts is not None:
            return np.clip(h + experts(_rms_norm(h), CLIP, router_offsets), -RESID_CLIP, RESID_CLIP)
        u = np.maximum(_quant(_rms_norm(h) @ w["w1"], self.shift_1), 0.0)  # ReLU: exact
        return np.clip(h + _quant(u @ w["w2"], self.shift_2), -RESID_CLIP, RESID_CLIP)

    def attention(self, layer: int, q: np.ndarray, keys: np.ndarray, values: np.ndarray, start: int,
                  key_start: int = 0) -> np.ndarray:
        """`causal_attention` as this layer attends: windowed on a sliding-window layer."""
        window = self.config.window if self.config.windowed(layer) else 0
        return causal_attention(q, keys, values, start, self.attn_lut, window=window, key_start=key_start)

    def linear_mix(self, layer: int, h: np.ndarray, spans: Sequence[tuple[int, int]], states: np.ndarray,
                   snapshot_at: Sequence[Sequence[int]]) -> tuple[np.ndarray, list[list[np.ndarray]]]:
        """The linear-attention layer's mixing of several requests' new tokens (residual rows
        h[a:b] per span): each request's recurrent state states[i] [H, Dv, Dk] is replaced in
        place by its state after its tokens. Returns the outputs [T, H, Dv] (for
        `post_attention`) and, per request, copies of its state after each count of its tokens
        in `snapshot_at[i]` (`recurrent.scan_ragged`)."""
        return recurrent.scan_ragged(self.layers[layer], self.gate_tables, _rms_norm(h), spans, states, snapshot_at)

    def state_shape(self) -> tuple[int, ...]:
        """One request's whole recurrent state: [recurrent layers, H, Dv, Dk] (empty for a dense model)."""
        c = self.config
        return (len(c.recurrent_layers), *recurrent.state_shape(c.d_model, c.n_heads))

    def logits(self, h: np.ndarray) -> np.ndarray:
        """Residual [T, d] -> integer logits [T, V] in 1/LOGIT_UNIT nats."""
        raw = _rms_norm(h) @ self.unembed
        return np.round(raw * (2.0**-self.shift_logit)) + self.logit_bias

    def logprobs(self, logits: np.ndarray, token_ids: Sequence[int], top_k: Sequence[int]) -> list[TokenLogprobs]:
        """Log-softmax of each row of integer logits [B, V]; a row's result depends on it alone.

        exp of each integer gap to the row max comes from an integer table, so the partition
        sums are exact integers (any batching sums them the same), and the one `math.log` per
        row sees the same integer whatever the batch.
        """
        top = logits.max(axis=1, keepdims=True)
        gaps = np.minimum(top - logits, len(self.logit_lut) - 1).astype(np.intp)
        partition = self.logit_lut[gaps].sum(axis=1)
        out = []
        for row, peak, z, tok, k in zip(logits, top[:, 0], partition, token_ids, top_k, strict=True):
            log_z = math.log(float(z)) - LOGIT_LUT_BITS * math.log(2.0)
            best = _top_k(row, k) if k > 0 else ()
            out.append(
                TokenLogprobs(
                    int(tok),
                    float((row[tok] - peak) / LOGIT_UNIT - log_z),
                    tuple((int(t), float((row[t] - peak) / LOGIT_UNIT - log_z)) for t in best),
                )
            )
        return out

    # -- the plain reference: one sequence alone, contiguous private KV --------------------------

    def _extend(self, token_ids: Sequence[int], cache: list[Any], start: int) -> np.ndarray:
        """Run new tokens after the `start` cached ones; add them to `cache` (per layer: its K and
        V so far, or a linear-attention layer's recurrent state); return their residuals."""
        ids = np.asarray(token_ids, dtype=np.intp)
        if ids.ndim != 1 or len(ids) == 0 or start + len(ids) > self.config.context_length:
            raise ValueError("need 1..context_length token ids in all")
        pos = np.arange(start, start + len(ids))
        h = self.embed(ids)
        for layer, kind in enumerate(self.config.kinds):
            if kind == LINEAR:
                if len(cache) <= layer:
                    cache.append(np.zeros(self.state_shape()[1:]))
                state = cache[layer][None].copy()
                o, _ = self.linear_mix(layer, h, [(0, len(ids))], state, [()])
                cache[layer] = state[0]
                h = self.post_attention(layer, h, o)
                continue
            q, k, v = self.qkv(layer, h, pos)
            if len(cache) <= layer:
                cache.append((k[:0], v[:0]))
            keys, values = (np.concatenate([cache[layer][0], k]), np.concatenate([cache[layer][1], v]))
            cache[layer] = (keys, values)
            h = self.post_attention(layer, h, self.attention(layer, q, keys, values, start))
        return h

    def forward(self, token_ids: Sequence[int]) -> np.ndarray:
        """Integer logits [T, V] for every position of one sequence, computed from scratch."""
        return self.logits(self._extend(token_ids, [], 0))

    @staticmethod
    def greedy(logits_row: np.ndarray) -> int:
        """Argmax; the first index wins an exact tie."""
        return int(np.argmax(logits_row))

    def generate(
        self, prompt: Sequence[int], max_new_tokens: int, *, ignore_eos: bool = True, top_k: int = 0
    ) -> Generation:
        """Greedy continuation of one sequence alone (one prefill, then one token per step)."""
        cache: list[Any] = []
        steps: list[TokenLogprobs] = []
        h = self._extend(prompt, cache, 0)
        for _ in range(max_new_tokens):
            row = self.logits(h[-1:])
            tok = self.greedy(row[0])
            steps += self.logprobs(row, [tok], [top_k])
            if (tok == EOS_ID and not ignore_eos) or len(steps) == max_new_tokens:
                break
            h = self._extend([tok], cache, len(prompt) + len(steps) - 1)
        return Generation(tuple(s.token_id for s in steps), tuple(steps))

    def score(self, prompt: Sequence[int], output: Sequence[int], *, top_k: int = 0) -> Generation:
        """What greedy decoding *should* have produced at each step, given `output` so far.

        One forward over prompt + output[:-1]: step i is the argmax after prompt + output[:i].
        If an engine's output is right, `score(p, out).token_ids == tuple(out)`; the first
        index where they differ is where the engine went wrong.
        """
        if not output:
            return Generation((), ())
        seq = list(prompt) + list(output[:-1])
        logits = self.forward(seq)[len(prompt) - 1 :]
        steps = self.logprobs(logits, [self.greedy(row) for row in logits], [top_k] * len(logits))
        return Generation(tuple(s.token_id for s in steps), tuple(steps))

    def exactness_bounds(self) -> dict[str, float]:
        """Worst-case |value| of every reduction the model performs; all must be < 2**53.

        Bounds follow from the clips: any row of inputs is at most CLIP (or RESID_CLIP) in
        absolute value, so |x @ W| <= CLIP * max_j sum_i |W[i, j]|.
        """
        c = self.config

        def mm(bound: float, w: np.ndarray) -> float:
            return bound * float(np.abs(w).sum(axis=0).max())

        out: dict[str, float] = {"rms_sum_of_squares": c.d_model * RESID_CLIP**2}
        for i, w in enumerate(self.layers):
            out[f"layer{i}.qkv"] = max(mm(CLIP, w[n]) for n in ("wq", "wk", "wv", *(("wa", "wb") if "wa" in w else ())))
            out[f"layer{i}.out_proj"] = mm(CLIP, w["wo"])
            experts = self.experts[i]
            if experts is None:
                out[f"layer{i}.mlp_up"] = mm(CLIP, w["w1"])
                out[f"layer{i}.mlp_down"] = mm(CLIP, w["w2"])
            else:
                out |= {f"layer{i}.{k}": v for k, v in experts.bounds(CLIP).items()}
        out["rope"] = 2 * CLIP * ROPE_ONE
        out["attn_scores"] = c.head_dim * CLIP * CLIP
        out["attn_weighted_values"] = c.context_length * ATTN_LUT_ONE * CLIP
        out["attn_weight_sum"] = c.context_length * ATTN_LUT_ONE
        out["logits"] = mm(CLIP, self.unembed)
        out["softmax_partition"] = c.vocab_size * 2.0**LOGIT_LUT_BITS
        if c.recurrent_layers:
            out.update(recurrent.exactness_bounds(c.d_model, c.n_heads))
        return out
