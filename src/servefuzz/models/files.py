"""The file formats of servefuzz's tiny models, written with numpy and the standard library alone:
GGUF v3 as gguf-py lays it out, safetensors as the safetensors package writes it, the Hugging Face
folder's JSON files, and the random streams every architecture draws from.

Every architecture module writes through these, and every repro_full.py embeds this module's source
verbatim with `models.llama`'s (`reports/repro.py`), so a maintainer rebuilds the exact model a
finding ran on without servefuzz. Nothing here imports servefuzz, and numpy only when a model is
written: repro_full.py's replay runs on the standard library alone.

    >>> spell_bytes("\u0120a\u00c3")
    b' a\\xc3'
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    import numpy as np
except ImportError:  # repro_full.py embeds this module: a replay needs no numpy, only --write-model does
    np = None  # type: ignore[assignment]

__all__ = ["HF_SPECIALS", "spell_bytes"]

HF_SPECIALS = ("<s>", "</s>", "<pad>")  # ids 0, 1, 2: the trainer numbers specials first
# Scale of the ordinary tokens' output rows: the final norm makes the hidden state unit-RMS, so
# logits spread with about this standard deviation, which puts the best of them far above the
# quiet tokens' 0 and keeps greedy choices away from near-ties in float32.
LOGIT_SCALE = 3.0


def need_numpy() -> None:
    if np is None:
        raise RuntimeError("writing the model needs numpy (pip install numpy); the replay itself does not")


# --- the random streams ----------------------------------------------------------------------


def made_up_words(rng: Any, count: int) -> list[str]:
    """A made-up lexicon of pronounceable words, so BPE finds plenty of merges."""
    onsets = ["", "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "st", "tr", "kl"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou"]
    codas = ["", "", "n", "r", "s", "t", "l", "m"]
    words: set[str] = set()
    while len(words) < count:
        syllables = int(rng.integers(1, 4))
        words.add("".join(
            onsets[rng.integers(len(onsets))] + vowels[rng.integers(len(vowels))] + codas[rng.integers(len(codas))]
            for _ in range(syllables)
        ))
    return sorted(words)  # sorted: a set's order depends on string hashing, which is salted


def projection(rng: Any, out: int, inp: int) -> Any:
    """A weight matrix scaled by 1/sqrt(fan-in), so every layer moves the residual stream by about
    as much as the embedding: attention then matters, and a corrupted cache entry shows in the
    output instead of being drowned by the current token's embedding."""
    return np.asarray(rng.standard_normal((out, inp)) / np.sqrt(inp), dtype=np.float32)


def output_head(rng: Any, vocab: int, hidden: int, quiet: Sequence[int]) -> Any:
    """The output layer: quiet tokens' rows zero (their logit 0 never wins a greedy step)."""
    head = projection(rng, vocab, hidden) * LOGIT_SCALE
    head[list(quiet)] = 0.0
    return head


def random_weights(rng: Any, shapes: Mapping[str, tuple[int, ...]], *, vocab: int, quiet: Sequence[int],
                   embed_std: float = 1.0) -> dict[str, Any]:
    """Random float32 weights for every tensor of `shapes` (Hugging Face names, in order), by what
    the name says it is: norms ones, biases zeros, the output layer `output_head`, the embeddings
    N(0, embed_std), a Mamba / gated-delta-net decay (`A_log`, `dt_bias`, `D`) in the range trained
    models keep it, a depthwise convolution over its kernel, every other matrix (2-D, or 3-D
    stacked experts) a `projection` over its fan-in (dimension 1 in both layouts)."""
    w: dict[str, Any] = {}
    for name, shape in shapes.items():
        leaf = name.rsplit(".", 1)[-1]
        if name.endswith("embed_tokens.weight") or name.endswith("embeddings.weight"):
            w[name] = np.asarray(rng.standard_normal(shape) * embed_std, dtype=np.float32)
        elif name.endswith("lm_head.weight") or name.endswith("shared_head.head.weight"):
            w[name] = output_head(rng, vocab, shape[1], quiet)
        elif "norm" in name and leaf == "weight":
            w[name] = np.ones(shape, np.float32)
        elif leaf == "A_log":  # A = -exp(A_log) in [-16, -1]: each head forgets at its own rate
            w[name] = np.log(rng.uniform(1.0, 16.0, shape)).astype(np.float32)
        elif leaf == "dt_bias":  # softplus(dt_bias) = a step in [0.001, 0.1]
            w[name] = np.log(np.expm1(np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), shape)))).astype(np.float32)
        elif leaf == "D":
            w[name] = np.ones(shape, np.float32)
        elif leaf == "sinks":  # attention sinks: a logit per head, about as large as the scores
            w[name] = np.asarray(rng.standard_normal(shape), dtype=np.float32)
        elif leaf.endswith("bias"):
            w[name] = np.zeros(shape, np.float32)
        elif len(shape) == 3 and shape[1] == 1:  # depthwise conv1d [channels, 1, kernel]
            w[name] = np.asarray(rng.standard_normal(shape) / np.sqrt(shape[2]), dtype=np.float32)
        elif len(shape) == 3:  # stacked experts
            w[name] = np.asarray(rng.standard_normal(shape) / np.sqrt(shape[1]), dtype=np.float32)
        else:
            w[name] = projection(rng, shape[0], shape[1])
    return w


# --- GGUF (llama.cpp), version 3, laid out as gguf-py writes it -----------------------------

U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9  # GGUF value types
_ALIGN = 32
# llama.cpp's token types
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6


def _gguf_str(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _gguf_value(vtype: int, value: Any) -> bytes:
    if vtype == STR:
        return _gguf_str(value)
    return struct.pack({U32: "<I", I32: "<i", F32: "<f", BOOL: "?"}[vtype], value)


def gguf_file(path: Path, kv: Sequence[tuple[str, int, Any]], tensors: Sequence[tuple[str, Any]]) -> Path:
    """`kv`: (key, type, value), an array as (key, ARR, (element type, values)); float32 tensors."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, vtype, value in kv:
        out += _gguf_str(key) + struct.pack("<I", vtype)
        if vtype == ARR:
            sub, items = value
            out += struct.pack("<IQ", sub, len(items)) + b"".join(_gguf_value(sub, v) for v in items)
        else:
            out += _gguf_value(vtype, value)
    offset = 0
    for name, array in tensors:
        out += _gguf_str(name) + struct.pack("<I", array.ndim)
        out += b"".join(struct.pack("<Q", d) for d in reversed(array.shape))  # ggml's ne: innermost first
        out += struct.pack("<IQ", 0, offset)  # 0: F32
        offset += -(-array.nbytes // _ALIGN) * _ALIGN
    out += bytes(-len(out) % _ALIGN)
    with open(path, "wb") as fh:
        fh.write(out)
        for _, array in tensors:
            data = np.ascontiguousarray(array, dtype="<f4").tobytes()
            fh.write(data + bytes(-len(data) % _ALIGN))
    return path


# --- safetensors and the Hugging Face folder (vLLM, SGLang, transformers) --------------------


def safetensors_file(path: Path, tensors: Mapping[str, Any], dtype: str) -> Path:
    """As the safetensors package writes one dtype: tensors sorted by name, the JSON header
    compact and padded with spaces to a multiple of 8."""
    names = sorted(tensors)
    blobs = {n: bf16_bits(tensors[n]).tobytes() if dtype == "bfloat16"
             else np.ascontiguousarray(tensors[n], dtype="<f4").tobytes() for n in names}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for n in names:
        header[n] = {"dtype": "BF16" if dtype == "bfloat16" else "F32", "shape": list(tensors[n].shape),
                     "data_offsets": [offset, offset + len(blobs[n])]}
        offset += len(blobs[n])
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        for n in names:
            fh.write(blobs[n])
    return path


def bf16_bits(a: Any) -> Any:
    """float32 -> bfloat16 bit patterns, rounding to nearest even as torch does."""
    bits = np.ascontiguousarray(a, dtype="<f4").view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype("<u2")


def json_file(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
    return path


def _byte_chars() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the character each byte is spelled with -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_BYTE_CHARS = _byte_chars()


def spell_bytes(token: str) -> bytes:
    """The bytes a byte-level BPE token stands for."""
    return bytes(_BYTE_CHARS[c] for c in token)


def hf_tokens(tokenizer_json: str) -> tuple[int, list[int], dict[str, int]]:
    """(vocabulary size, quiet ids, special token -> id) of a trained tokenizer.json. Quiet: the
    specials and every token that is not whole UTF-8 on its own (`tokenizers` decodes it to
    U+FFFD; llama.cpp would misalign its probabilities)."""
    tokenizer = json.loads(tokenizer_json)
    vocab: dict[str, int] = dict(tokenizer["model"]["vocab"])
    specials = {t["content"]: int(t["id"]) for t in tokenizer.get("added_tokens") or ()}
    size = max([*vocab.values(), *specials.values()]) + 1
    quiet = {specials[t] for t in HF_SPECIALS}
    for token, i in vocab.items():
        if token in specials:
            continue
        if "\ufffd" in spell_bytes(token).decode("utf-8", "replace"):
            quiet.add(i)
    return size, sorted(quiet), specials


def write_hf_folder(hf_dir: Path, *, tokenizer_json: str, config: Mapping[str, Any], weights: Mapping[str, Any],
                    dtype: str, context: int) -> list[Path]:
    """A Hugging Face model folder: the tokenizer files, config.json and model.safetensors."""
    hf_dir.mkdir(parents=True, exist_ok=True)
    (hf_dir / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    specials = dict(zip(("bos_token", "eos_token", "pad_token"), HF_SPECIALS, strict=True))
    written = [hf_dir / "tokenizer.json", json_file(hf_dir / "special_tokens_map.json", specials)]
    written.append(json_file(hf_dir / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": context,
        "add_bos_token": False, "add_eos_token": False, **specials,
    }))
    written.append(json_file(hf_dir / "config.json", dict(config)))
    written.append(safetensors_file(hf_dir / "model.safetensors", weights, dtype))
    return written
