"""The tiny random-weight models of servefuzz's findings, written with numpy and the standard
library alone, so that a maintainer can rebuild the exact model a finding ran on without
servefuzz: every generated repro.py embeds this module's source verbatim (`--write-model DIR`).

It writes what `servefuzz.models.build_models` writes for the same seed, in the same layout
(`DIR/tiny.gguf`, `DIR/hf-<dtype>/`, `DIR/lora/`), byte for byte (tests/reports/test_tiny_model.py
holds the two together): the same random streams (numpy's `default_rng([seed, k])`), the same
weights, and the two file formats written by hand with `struct` and `json` (GGUF v3 as gguf-py
lays it out; safetensors as the safetensors package does). The one thing it cannot make is the
Hugging Face tokenizer, which servefuzz trains with the `tokenizers` package: the caller hands
its `tokenizer.json` in (repro.py carries it, compressed, as data), and the weights' quiet rows
are read from it.

    >>> spell_bytes("\u0120a\u00c3")
    b' a\\xc3'

Nothing here imports servefuzz, and numpy only when a model is written: repro.py's replay runs
on the standard library alone.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

try:
    import numpy as np
except ImportError:  # repro.py embeds this module: a replay needs no numpy, only --write-model does
    np = None  # type: ignore[assignment]

__all__ = ["TINY", "TinyShape", "spell_bytes", "write_model"]


class TinyShape(NamedTuple):
    """servefuzz's tiny llama (`servefuzz.models.ModelShape`): RMSNorm, rotary, SwiGLU. A
    NamedTuple, not a dataclass: a dataclass looks its module up in sys.modules, which a script
    loaded by path (repro.py, embedding this) need not be in."""

    layers: int = 2
    hidden: int = 256
    heads: int = 4
    ffn: int = 512
    context: int = 2048
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


TINY = TinyShape()
ADAPTERS = ("lora-a", "lora-b")
LORA_RANK = 8
LORA_ALPHA = 16.0
LORA_TARGETS = ("q_proj", "v_proj")
LOGIT_SCALE = 3.0  # the ordinary tokens' output rows: their best logit far above the quiet ones' 0
GGUF_VOCAB = 1024
HF_SPECIALS = ("<s>", "</s>", "<pad>")
GGUF_LAYER_NAMES = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}
GGUF_MODEL_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def write_model(out_dir: Path, fmt: str, *, seed: int = 0, dtype: str = "float32", adapters: bool = True,
                tokenizer_json: str | None = None) -> list[Path]:
    """Write the model of format `fmt` ("gguf": llama.cpp; "hf": vLLM, SGLang) and, with
    `adapters`, its two LoRA adapters under `out_dir`; the paths written. "hf" needs the
    tokenizer servefuzz trained for `seed` (`tokenizer_json`, the text of its tokenizer.json)."""
    if np is None:
        raise RuntimeError("writing the model needs numpy (pip install numpy); the replay itself does not")
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if fmt == "gguf":
        written.append(_write_gguf(out_dir / "tiny.gguf", TINY, seed))
    elif fmt == "hf":
        if tokenizer_json is None:
            raise ValueError("an hf model needs the tokenizer.json servefuzz trained for it")
        written += _write_hf(out_dir / f"hf-{dtype}", TINY, seed, dtype, tokenizer_json)
    else:
        raise ValueError(f"unknown model format {fmt!r} (gguf or hf)")
    if adapters:
        written += _write_adapters(out_dir / "lora", TINY, seed, gguf=fmt == "gguf")
    return written


# --- the random streams, as servefuzz.models draws them ------------------------------------


def _words(rng: Any, count: int) -> list[str]:
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
    return sorted(words)


def _weights(rng: Any, shape: TinyShape, vocab: int, quiet: Sequence[int]) -> dict[str, Any]:
    def proj(out: int, inp: int) -> Any:
        return np.asarray(rng.standard_normal((out, inp)) / np.sqrt(inp), dtype=np.float32)

    h, f = shape.hidden, shape.ffn
    w: dict[str, Any] = {"model.embed_tokens.weight": rng.standard_normal((vocab, h)).astype(np.float32)}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            w[p + f"self_attn.{name}.weight"] = proj(h, h)
        w[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "mlp.gate_proj.weight"] = proj(f, h)
        w[p + "mlp.up_proj.weight"] = proj(f, h)
        w[p + "mlp.down_proj.weight"] = proj(h, f)
    w["model.norm.weight"] = np.ones(h, np.float32)
    head = proj(vocab, h) * LOGIT_SCALE
    head[list(quiet)] = 0.0
    w["lm_head.weight"] = head
    return w


def _lora_pairs(rng: Any, shape: TinyShape) -> dict[str, tuple[Any, Any]]:
    h = shape.hidden
    out = {}
    for i in range(shape.layers):
        for target in LORA_TARGETS:
            a = np.asarray(rng.standard_normal((LORA_RANK, h)) / np.sqrt(h), dtype=np.float32)
            b = np.asarray(rng.standard_normal((h, LORA_RANK)) * 0.18, dtype=np.float32)
            out[f"model.layers.{i}.self_attn.{target}"] = (a, b)
    return out


def _gguf_name(hf_name: str) -> str:
    stem = hf_name.removesuffix(".weight")
    if stem in GGUF_MODEL_NAMES:
        return GGUF_MODEL_NAMES[stem] + ".weight"
    _, _, layer, rest = stem.split(".", 3)
    return f"blk.{layer}.{GGUF_LAYER_NAMES[rest]}.weight"


# --- GGUF (llama.cpp), version 3, laid out as gguf-py writes it -----------------------------

_U32, _I32, _F32, _BOOL, _STR, _ARR = 4, 5, 6, 7, 8, 9  # GGUF value types
_ALIGN = 32
# llama.cpp's token types
_NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6


def _gguf_str(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _gguf_value(vtype: int, value: Any) -> bytes:
    if vtype == _STR:
        return _gguf_str(value)
    return struct.pack({_U32: "<I", _I32: "<i", _F32: "<f", _BOOL: "?"}[vtype], value)


def _gguf_file(path: Path, kv: Sequence[tuple[str, int, Any]], tensors: Sequence[tuple[str, Any]]) -> Path:
    """`kv`: (key, type, value), an array as (key, _ARR, (element type, values))."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, vtype, value in kv:
        out += _gguf_str(key) + struct.pack("<I", vtype)
        if vtype == _ARR:
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


def _write_gguf(path: Path, shape: TinyShape, seed: int) -> Path:
    """`servefuzz.models._write_gguf`: <unk>, <s>, </s>, the 256 byte tokens, then word pieces."""
    rng = np.random.default_rng([seed, 2])
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    kinds = [_UNKNOWN, _CONTROL, _CONTROL] + [_BYTE] * 256
    quiet = list(range(len(tokens)))
    pieces = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581"]
    pieces += ["\u2581" + w for w in _words(rng, GGUF_VOCAB - len(tokens) - len(pieces))]
    tokens += pieces
    kinds += [_NORMAL] * len(pieces)
    scores = [0.0] * len(quiet) + [-float(i) for i in range(len(pieces))]
    kv = [
        ("general.architecture", _STR, "llama"),
        ("general.name", _STR, "servefuzz-tiny"),
        ("llama.context_length", _U32, shape.context),
        ("llama.embedding_length", _U32, shape.hidden),
        ("llama.block_count", _U32, shape.layers),
        ("llama.feed_forward_length", _U32, shape.ffn),
        ("llama.attention.head_count", _U32, shape.heads),
        ("llama.attention.head_count_kv", _U32, shape.heads),
        ("llama.rope.dimension_count", _U32, shape.head_dim),
        ("llama.rope.freq_base", _F32, shape.rope_theta),
        ("llama.attention.layer_norm_rms_epsilon", _F32, shape.rms_eps),
        ("general.file_type", _U32, 0),  # all F32
        ("llama.vocab_size", _U32, len(tokens)),
        ("tokenizer.ggml.model", _STR, "llama"),
        ("tokenizer.ggml.tokens", _ARR, (_STR, tokens)),
        ("tokenizer.ggml.scores", _ARR, (_F32, scores)),
        ("tokenizer.ggml.token_type", _ARR, (_I32, kinds)),
        ("tokenizer.ggml.unknown_token_id", _U32, 0),
        ("tokenizer.ggml.bos_token_id", _U32, 1),
        ("tokenizer.ggml.eos_token_id", _U32, 2),
        ("tokenizer.ggml.add_bos_token", _BOOL, False),  # prompts are exact token ids
    ]
    weights = _weights(rng, shape, len(tokens), quiet)
    return _gguf_file(path, kv, [(_gguf_name(n), a) for n, a in weights.items()])


# --- safetensors and the Hugging Face folder (vLLM, SGLang) ---------------------------------


def _safetensors(path: Path, tensors: dict[str, Any], dtype: str) -> Path:
    """As the safetensors package writes one dtype: tensors sorted by name, the JSON header
    compact and padded with spaces to a multiple of 8."""
    names = sorted(tensors)
    blobs = {n: _bf16_bits(tensors[n]).tobytes() if dtype == "bfloat16"
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


def _bf16_bits(a: Any) -> Any:
    """float32 -> bfloat16 bit patterns, rounding to nearest even as torch does."""
    bits = np.ascontiguousarray(a, dtype="<f4").view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype("<u2")


def _json(path: Path, obj: Any) -> Path:
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


def _quiet_tokens(tokenizer: dict[str, Any]) -> tuple[int, list[int]]:
    """(vocabulary size, quiet ids): the specials and every token that is not whole UTF-8 on its
    own (`tokenizers` decodes it to U+FFFD, which servefuzz.models reads as quiet)."""
    vocab: dict[str, int] = dict(tokenizer["model"]["vocab"])
    specials = {t["content"]: int(t["id"]) for t in tokenizer.get("added_tokens") or ()}
    size = max([*vocab.values(), *specials.values()]) + 1
    quiet = {specials[t] for t in HF_SPECIALS}
    for token, i in vocab.items():
        if token in specials:
            continue
        if "\ufffd" in spell_bytes(token).decode("utf-8", "replace"):
            quiet.add(i)
    return size, sorted(quiet)


def _write_hf(hf_dir: Path, shape: TinyShape, seed: int, dtype: str, tokenizer_json: str) -> list[Path]:
    hf_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = json.loads(tokenizer_json)
    vocab, quiet = _quiet_tokens(tokenizer)
    ids = {t["content"]: int(t["id"]) for t in tokenizer.get("added_tokens") or ()}
    (hf_dir / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    specials = dict(zip(("bos_token", "eos_token", "pad_token"), HF_SPECIALS, strict=True))
    written = [hf_dir / "tokenizer.json", _json(hf_dir / "special_tokens_map.json", specials)]
    written.append(_json(hf_dir / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": shape.context,
        "add_bos_token": False, "add_eos_token": False, **specials,
    }))
    written.append(_json(hf_dir / "config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": shape.hidden, "intermediate_size": shape.ffn, "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads, "num_key_value_heads": shape.heads, "head_dim": shape.head_dim,
        "hidden_act": "silu", "max_position_embeddings": shape.context, "rms_norm_eps": shape.rms_eps,
        "rope_theta": shape.rope_theta, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "pad_token_id": ids["<pad>"], "dtype": dtype,
    }))
    weights = _weights(np.random.default_rng([seed, 1]), shape, vocab, quiet)
    written.append(_safetensors(hf_dir / "model.safetensors", weights, dtype))
    return written


# --- the LoRA adapters ------------------------------------------------------------------------


def _write_adapters(out_dir: Path, shape: TinyShape, seed: int, *, gguf: bool) -> list[Path]:
    """Each of ADAPTERS: `NAME.gguf` (llama.cpp's LoRA GGUF) or `NAME/` (PEFT's layout)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for index, name in enumerate(ADAPTERS):
        pairs = _lora_pairs(np.random.default_rng([seed, 3 + index]), shape)
        if gguf:
            kv = [("general.architecture", _STR, "llama"), ("general.type", _STR, "adapter"),
                  ("adapter.type", _STR, "lora"), ("adapter.lora.alpha", _F32, LORA_ALPHA)]
            tensors = [(_gguf_name(m + ".weight") + suffix, t) for m, (a, b) in pairs.items()
                       for suffix, t in ((".lora_a", a), (".lora_b", b))]
            written.append(_gguf_file(out_dir / f"{name}.gguf", kv, tensors))
            continue
        folder = out_dir / name
        folder.mkdir(exist_ok=True)
        written.append(_json(folder / "adapter_config.json", {
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": None, "r": LORA_RANK,
            "lora_alpha": LORA_ALPHA, "lora_dropout": 0.0, "bias": "none", "target_modules": list(LORA_TARGETS),
            "fan_in_fan_out": False, "use_rslora": False, "use_dora": False,
        }))
        tensors_hf = {f"base_model.model.{m}.lora_{ab}.weight": t for m, (a, b) in pairs.items()
                      for ab, t in (("A", a), ("B", b))}
        written.append(_safetensors(folder / "adapter_model.safetensors", tensors_hf, "float32"))
    return written
