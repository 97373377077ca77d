"""Ground truth: an exact float64 forward pass of the served model, teacher-forced.

An engine's answer under load is compared with the same engine's answer alone, and when the two
differ, something has to say which one is wrong. This module says what the model itself
computes: every product, norm and softmax in float64 over the file's own weights, so its error is
some 1e-13 (numpy's pass; transformers' some 1e-5, see `HFTruth`), far below any engine's rounding
(float32 on CPU: ~1e-5; TF32 on a GPU: ~1e-3).

    >>> truth = Truth.load(Path("models/tiny.gguf"))             # doctest: +SKIP
    >>> [p.logprob for p in truth.logprobs(prompt, output, top_k=5)]  # doctest: +SKIP

Two engines compute it (`Truth.load` picks): HF transformers in float64 on the CPU (`HFTruth`)
for any Hugging Face folder servefuzz builds or fetches, whatever its architecture; and, for
servefuzz's own tiny llama, where it is faster, a forward pass written here (`LlamaTruth`) that
reads the two files `servefuzz.models` writes with nothing but numpy and the `gguf` package:

- a GGUF (llama.cpp): architecture `llama`; llama.cpp rotates *adjacent* pairs of each head's
  dimensions (`LLAMA_ROPE_TYPE_NORM`);
- a Hugging Face folder (vLLM): `config.json` and `model.safetensors` (float32, bfloat16 or
  float16); transformers and vLLM rotate the two *halves* of each head (NeoX style).

The same weights therefore mean different models in the two files (convert_hf_to_gguf.py
permutes Q and K to bridge that; `servefuzz.models` writes both unpermuted); each is computed the
way its engine reads it.

LlamaTruth's model: token embedding, then per layer `h += Wo·attn(rope(Wq·n(h)), rope(Wk·n(h)), Wv·n(h))`
and `h += Wdown·(silu(Wgate·n(h)) * Wup·n(h))` with `n` an RMS norm (times its weight), causal
softmax attention scaled by 1/sqrt(head_dim), grouped-query heads allowed; then the final norm and
the output matrix. Log-probabilities are the log-softmax of the logits over the whole vocabulary,
which is what llama-server (`n_probs`) and vLLM (`logprobs`) report.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servefuzz.errors import UsageError, extra_module

__all__ = ["HFTruth", "LlamaTruth", "ModelSpec", "NUMPY_MAX_BYTES", "Position", "Truth", "ROPE_NORM", "ROPE_NEOX"]

ROPE_NORM = "norm"  # pairs (2i, 2i+1): llama.cpp's LLAMA_ROPE_TYPE_NORM (GGUF `llama`)
ROPE_NEOX = "neox"  # pairs (i, i + d/2): transformers' rotate_half, vLLM's is_neox_style


@dataclass(frozen=True)
class ModelSpec:
    """The numbers a forward pass needs, as the file states them."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    rope_theta: float
    rope_dims: int
    rms_eps: float
    rope: str  # ROPE_NORM or ROPE_NEOX


@dataclass(frozen=True)
class Position:
    """The truth at one output position: the given token, its log-probability, the top-k."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token id, logprob), best first

    @property
    def greedy(self) -> int:
        """The token a greedy decoder picks here."""
        return self.top[0][0]

    @property
    def margin(self) -> float:
        """How far the best token is ahead of the second (nats): a flip below it is a near-tie."""
        return self.top[0][1] - self.top[1][1] if len(self.top) > 1 else float("inf")

    def lp(self, token: int) -> float | None:
        return next((lp for t, lp in self.top if t == token), None)


class Truth:
    """The exact truth of a model: its teacher-forced log-probabilities, computed in float64.

    `Truth.load` picks how: servefuzz's own llama forward pass in numpy (`LlamaTruth`) for a GGUF
    (llama.cpp's reading) and for a small llama folder, where it is faster than starting torch;
    HF transformers (`HFTruth`) for every other Hugging Face folder, a fetched real model or
    another architecture. The two agree on the tiny llama (tests/test_truth.py). A subclass gives
    `logits` and `vocab`; everything else is computed from them here."""

    vocab: int
    how = "an exact float64 forward pass of the served model"  # in words: what the truth control says it held runs to

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self._vocab_logprobs: dict[tuple[int, ...], np.ndarray] = {}

    @classmethod
    def load(cls, path: Path | str, engine: str = "auto") -> Truth:
        """A GGUF file (llama.cpp's reading) or a Hugging Face folder (transformers' and vLLM's).
        `engine`: "numpy" (llama only), "transformers" (HF folders), or "auto": numpy for a GGUF
        and for a llama folder whose weights are under `NUMPY_MAX_BYTES`, transformers else."""
        path = Path(path)
        if engine not in ("auto", "numpy", "transformers"):
            raise UsageError(f"truth engine {engine!r}: auto, numpy or transformers")
        if path.is_dir():
            if engine == "transformers" or (engine == "auto" and not _small_llama(path)):
                return HFTruth.load_folder(path)
            return LlamaTruth._load_hf(path)
        if engine == "transformers":
            raise UsageError(f"{path}: transformers computes Hugging Face folders, not a GGUF file")
        if path.suffix == ".gguf" or path.is_file():
            return LlamaTruth._load_gguf(path)
        raise UsageError(f"{path}: neither a GGUF file nor a Hugging Face model folder")

    def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """float64 logits [len(ids), vocab]: row i predicts the token after ids[i]."""
        raise NotImplementedError

    def _check_ids(self, ids: np.ndarray) -> None:
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab):
            raise UsageError(f"token ids must lie in [0, {self.vocab}), got {ids.min()}..{ids.max()}")

    def vocab_logprobs(self, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> np.ndarray:
        """float64 log-probabilities over the vocabulary [len(output_ids), vocab], teacher-forced:
        row j is the distribution the model gives the j-th output token, after the prompt and
        output_ids[:j] (which need not be the model's own greedy choices)."""
        prompt, out = list(prompt_ids), list(output_ids)
        if not prompt:
            raise UsageError("the truth needs at least one prompt token")
        if not out:
            return np.zeros((0, self.vocab))
        key = (len(prompt), *prompt, *out)
        if key not in self._vocab_logprobs:
            z = self.logits(prompt + out[:-1])[len(prompt) - 1:]
            z = z - z.max(axis=-1, keepdims=True)
            self._vocab_logprobs = {key: z - np.log(np.exp(z).sum(axis=-1, keepdims=True))}  # keep the last one
        return self._vocab_logprobs[key]

    def logprobs(self, prompt_ids: Sequence[int], output_ids: Sequence[int], top_k: int = 5) -> list[Position]:
        """Per output position: the given token's log-probability and the top-k, best first."""
        lp = self.vocab_logprobs(prompt_ids, output_ids)
        k = max(1, min(top_k, self.vocab))
        positions = []
        for row, token in zip(lp, output_ids, strict=True):
            best = np.argsort(-row, kind="stable")[:k]
            positions.append(Position(int(token), float(row[token]), tuple((int(t), float(row[t])) for t in best)))
        return positions

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int) -> list[int]:
        """The model's own greedy continuation (ties to the lower id, as argmax does)."""
        out: list[int] = []
        for _ in range(max_tokens):
            out.append(int(np.argmax(self.logits(list(prompt_ids) + out)[-1])))
        return out

    def deviation(self, prompt_ids: Sequence[int], output_ids: Sequence[int],
                  observed_top: Sequence[Sequence[tuple[int, float]]]) -> list[float]:
        """Per position, the largest |observed - true| log-probability over the ids an engine
        listed there (its top-k); the distance of an engine's answer from the truth."""
        lp = self.vocab_logprobs(prompt_ids, list(output_ids)[: len(observed_top)])
        return [max((abs(float(lp_obs) - float(row[t])) for t, lp_obs in top), default=0.0)
                for row, top in zip(lp, observed_top, strict=False)]


# Below this many bytes of weights a llama folder is computed by numpy: servefuzz's tiny models
# (7 MB in float32) take a few milliseconds there, against seconds to start torch.
NUMPY_MAX_BYTES = 64 << 20


def _small_llama(folder: Path) -> bool:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True  # LlamaTruth says what is wrong with it, in one line
    if not isinstance(config, dict) or config.get("model_type") != "llama" or config.get("rope_scaling"):
        return False
    return sum(f.stat().st_size for f in folder.glob("*.safetensors")) < NUMPY_MAX_BYTES


class LlamaTruth(Truth):
    """A llama model held in float64 by numpy, computed by servefuzz's own forward pass."""

    how = "an exact float64 forward pass of the served model"

    def __init__(self, spec: ModelSpec, weights: dict[str, np.ndarray]) -> None:
        super().__init__(spec.vocab)
        self.spec = spec
        self.w = {name: np.asarray(a, dtype=np.float64) for name, a in weights.items()}
        missing = [n for n in _required(spec.layers) if n not in self.w]
        if missing:
            raise UsageError(f"the model lacks tensors {', '.join(missing[:4])}")

    # -- loading --------------------------------------------------------------------------------

    @classmethod
    def _load_gguf(cls, path: Path) -> LlamaTruth:
        gguf = extra_module("gguf", "reading a GGUF")
        try:
            reader = gguf.GGUFReader(str(path))
        except (OSError, ValueError) as e:
            raise UsageError(f"{path}: not a readable GGUF file ({e})") from None
        fields = {name: _field_value(f) for name, f in reader.fields.items()}
        arch = fields.get("general.architecture")
        if arch != "llama":
            raise UsageError(f"{path}: architecture {arch!r}; only 'llama' is computed here")

        def meta(key: str, default: Any = None) -> Any:
            v = fields.get(f"llama.{key}", default)
            if v is None:
                raise UsageError(f"{path}: the GGUF has no llama.{key}")
            return v

        hidden, heads = int(meta("embedding_length")), int(meta("attention.head_count"))
        weights = {t.name: _gguf_tensor(gguf, t) for t in reader.tensors}
        head_dim = int(meta("attention.key_length", hidden // heads))
        vocab = int(weights["token_embd.weight"].shape[0])
        spec = ModelSpec(
            layers=int(meta("block_count")),
            hidden=hidden,
            heads=heads,
            kv_heads=int(meta("attention.head_count_kv", heads)),
            head_dim=head_dim,
            ffn=int(meta("feed_forward_length")),
            vocab=vocab,
            rope_theta=float(meta("rope.freq_base", 10000.0)),
            rope_dims=int(meta("rope.dimension_count", head_dim)),
            rms_eps=float(meta("attention.layer_norm_rms_epsilon")),
            rope=ROPE_NORM,
        )
        if "output.weight" not in weights:  # tied embeddings
            weights["output.weight"] = weights["token_embd.weight"]
        return cls(spec, weights)

    @classmethod
    def _load_hf(cls, folder: Path) -> LlamaTruth:
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UsageError(f"{folder}: no readable config.json ({e})") from None
        if config.get("model_type") != "llama":
            raise UsageError(f"{folder}: model_type {config.get('model_type')!r}; only 'llama' is computed here")
        if config.get("rope_scaling"):
            raise UsageError(f"{folder}: rope_scaling is not supported")
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise UsageError(f"{folder}: no .safetensors file")
        hf: dict[str, np.ndarray] = {}
        for f in files:
            hf.update(_read_safetensors(f))
        hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
        head_dim = int(config.get("head_dim") or hidden // heads)
        weights = {_HF_TO_GGUF(name): a for name, a in hf.items()}
        if "output.weight" not in weights:
            weights["output.weight"] = weights["token_embd.weight"]
        spec = ModelSpec(
            layers=int(config["num_hidden_layers"]),
            hidden=hidden,
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=head_dim,
            ffn=int(config["intermediate_size"]),
            vocab=int(weights["token_embd.weight"].shape[0]),
            rope_theta=float(config.get("rope_theta", 10000.0)),
            rope_dims=head_dim,
            rms_eps=float(config.get("rms_norm_eps", 1e-6)),
            rope=ROPE_NEOX,
        )
        return cls(spec, weights)

    # -- the forward pass -----------------------------------------------------------------------

    def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """float64 logits [len(ids), vocab]: row i predicts the token after ids[i]."""
        s, w = self.spec, self.w
        ids = np.asarray(list(token_ids), dtype=np.int64)
        if ids.size == 0:
            return np.zeros((0, s.vocab))
        self._check_ids(ids)
        n = len(ids)
        h = w["token_embd.weight"][ids]
        cos, sin = _rope_tables(n, s.rope_dims, s.rope_theta)
        causal = np.triu(np.full((n, n), -np.inf), k=1)
        group = s.heads // s.kv_heads
        for i in range(s.layers):
            p = f"blk.{i}."
            x = _rms(h, w[p + "attn_norm.weight"], s.rms_eps)
            q = (x @ w[p + "attn_q.weight"].T).reshape(n, s.heads, s.head_dim)
            k = (x @ w[p + "attn_k.weight"].T).reshape(n, s.kv_heads, s.head_dim)
            v = (x @ w[p + "attn_v.weight"].T).reshape(n, s.kv_heads, s.head_dim)
            q, k = _rope(q, cos, sin, s.rope), _rope(k, cos, sin, s.rope)
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(s.head_dim) + causal
            scores -= scores.max(axis=-1, keepdims=True)
            att = np.exp(scores)
            att /= att.sum(axis=-1, keepdims=True)
            o = np.einsum("hqk,khd->qhd", att, v).reshape(n, s.heads * s.head_dim)
            h = h + o @ w[p + "attn_output.weight"].T
            x = _rms(h, w[p + "ffn_norm.weight"], s.rms_eps)
            gate = x @ w[p + "ffn_gate.weight"].T
            up = x @ w[p + "ffn_up.weight"].T
            h = h + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "ffn_down.weight"].T
        h = _rms(h, w["output_norm.weight"], s.rms_eps)
        return h @ w["output.weight"].T


class HFTruth(Truth):
    """A Hugging Face folder computed by HF transformers on the CPU in float64, eager attention:
    a well-kept library's forward pass instead of one written here per architecture.

    Its weights and matrix products are float64; transformers itself keeps three small steps in
    float32 whatever the model's type (the softmax of eager attention, the RMS norm's variance,
    the rotary angles), so it lands 3.5e-6 nats from the numpy pass on the tiny llama
    (tests/test_truth.py) and 1.2e-5 on SmolLM2's 30 layers (tests/test_realmodel.py), far
    inside `oracles.controls.TRUTH_NEAR` and no more than float32 engines' own noise.
    """

    how = "HF transformers in float64 on the CPU (eager attention) over the served model's weights"

    def __init__(self, model: Any, torch: Any) -> None:
        super().__init__(int(model.get_output_embeddings().weight.shape[0]))
        self.model, self._torch = model, torch

    @classmethod
    def load_folder(cls, folder: Path) -> HFTruth:
        if not (folder / "config.json").is_file():
            raise UsageError(f"{folder}: no config.json, not a Hugging Face model folder")
        torch, transformers = (extra_module(m, "the exact truth of this model") for m in ("torch", "transformers"))
        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        try:
            # Eager experts too: transformers' default grouped matmul refuses float64 ("Expected
            # mat_a to be Float32, BFloat16 or Float16"), so without it every MoE model's truth
            # raised at its first forward pass; a dense model ignores the choice.
            model = transformers.AutoModelForCausalLM.from_pretrained(
                str(folder), dtype=torch.float64, attn_implementation="eager", experts_implementation="eager")
        except (OSError, ValueError, KeyError) as e:
            raise UsageError(f"{folder}: transformers cannot load it ({str(e).splitlines()[0][:200]})") from None
        return cls(model.eval(), torch)

    def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        ids = np.asarray(list(token_ids), dtype=np.int64)
        if ids.size == 0:
            return np.zeros((0, self.vocab))
        self._check_ids(ids)
        torch = self._torch
        with torch.no_grad():
            out = self.model(input_ids=torch.from_numpy(ids)[None, :], use_cache=False).logits[0]
        return np.asarray(out.to(torch.float64).numpy(), dtype=np.float64)


# -- pieces ----------------------------------------------------------------------------------------


def _required(layers: int) -> list[str]:
    per = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
    return ["token_embd.weight", "output_norm.weight", "output.weight"] + [
        f"blk.{i}.{n}.weight" for i in range(layers) for n in per
    ]


def _rms(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _rope_tables(n: int, dims: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of position p times theta^(-2i/dims), [n, dims/2]; both styles share them."""
    inv = theta ** (-np.arange(0, dims, 2, dtype=np.float64) / dims)
    angles = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(angles), np.sin(angles)


def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, style: str) -> np.ndarray:
    """Rotate [n, heads, head_dim]; the first 2*cos.shape[1] dimensions of each head turn."""
    half = cos.shape[1]
    c, s = cos[:, None, :], sin[:, None, :]
    out = x.copy()
    if style == ROPE_NORM:
        a, b = x[..., 0:2 * half:2], x[..., 1:2 * half:2]
        out[..., 0:2 * half:2] = a * c - b * s
        out[..., 1:2 * half:2] = a * s + b * c
    elif style == ROPE_NEOX:
        a, b = x[..., :half], x[..., half:2 * half]
        out[..., :half] = a * c - b * s
        out[..., half:2 * half] = a * s + b * c
    else:
        raise UsageError(f"unknown rope style {style!r}")
    return out


def _field_value(field: Any) -> Any:
    """A GGUF metadata field as a Python scalar or string (arrays are left out: None)."""
    if not field.types or len(field.types) != 1:
        return None
    part = field.parts[field.data[0]]
    if field.types[0].name == "STRING":
        return bytes(part).decode("utf-8", "replace")
    return part.tolist()[0] if hasattr(part, "tolist") else part


def _gguf_tensor(gguf: Any, t: Any) -> np.ndarray:
    """A tensor as float64 in numpy order (ggml's ne reversed: a matrix is [out, in])."""
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    kind = t.tensor_type
    q = gguf.GGMLQuantizationType
    if kind == q.F32:
        a = np.asarray(t.data, dtype=np.float32)
    elif kind == q.F16:
        a = np.asarray(t.data, dtype=np.float16)
    elif kind == q.BF16:
        a = _bf16(np.asarray(t.data).view(np.uint16))
    else:
        a = gguf.quants.dequantize(np.asarray(t.data), kind)
    return a.astype(np.float64).reshape(shape)


def _bf16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


_SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The safetensors format by hand: an 8-byte little-endian header size, a JSON header, data."""
    raw = path.read_bytes()
    try:
        (size,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + size])
    except (struct.error, ValueError) as e:
        raise UsageError(f"{path}: not a safetensors file ({e})") from None
    base, out = 8 + size, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        buf = raw[base + start:base + end]
        if info["dtype"] == "BF16":
            a = _bf16(np.frombuffer(buf, dtype="<u2"))
        elif info["dtype"] in _SAFETENSORS_DTYPES:
            a = np.frombuffer(buf, dtype=np.dtype(_SAFETENSORS_DTYPES[info["dtype"]]).newbyteorder("<"))
        else:
            raise UsageError(f"{path}: tensor {name} has dtype {info['dtype']}, not a float type read here")
        out[name] = a.reshape(info["shape"])
    return out


# Hugging Face tensor names -> llama.cpp's GGUF names, per layer and for the whole model: the one
# table, by which models/llama.py writes its GGUF (and repro_full.py, which embeds these two assignments
# before it) and realmodel converts a GGUF back.
GGUF_LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
GGUF_MODEL_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def _HF_TO_GGUF(name: str) -> str:  # noqa: N802 - a table, read as one
    stem = name.removesuffix(".weight")
    if stem in GGUF_MODEL_NAMES:
        return GGUF_MODEL_NAMES[stem] + ".weight"
    parts = stem.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in GGUF_LAYER_NAMES:
        return f"blk.{parts[2]}.{GGUF_LAYER_NAMES[parts[3]]}.weight"
    return name  # kept under its own name; a model that needs it fails _required's check
