"""servefuzz's tiny llama (RMSNorm, rotary positions, SwiGLU MLP): the model every preset serves
by default, and the one architecture whose GGUF servefuzz writes itself (with a SentencePiece-style
vocabulary of its own) rather than through llama.cpp's converter.

`write_model` writes it in the layout `servefuzz.models.build_models` uses (`DIR/tiny.gguf`,
`DIR/hf-<dtype>/`, `DIR/lora/`); every repro_full.py embeds this module's source verbatim, after
`models.files`'s and `truth`'s tensor-name tables, so it imports nothing but those (whose import
lines the embedding drops), the standard library and numpy. The one thing it cannot make is the Hugging Face tokenizer, which
servefuzz trains with the `tokenizers` package: the caller hands its `tokenizer.json` in (repro_full.py
carries it, compressed, as data), and the weights' quiet rows are read from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

try:
    import numpy as np
except ImportError:  # as in `files`: only writing a model needs numpy
    np = None  # type: ignore[assignment]

from ..truth import GGUF_LAYER_NAMES, GGUF_MODEL_NAMES
from .files import (
    ARR,
    BOOL,
    F32,
    I32,
    STR,
    TOKEN_BYTE,
    TOKEN_CONTROL,
    TOKEN_NORMAL,
    TOKEN_UNKNOWN,
    U32,
    gguf_file,
    hf_tokens,
    json_file,
    made_up_words,
    need_numpy,
    output_head,
    projection,
    safetensors_file,
    write_hf_folder,
)

__all__ = ["TINY", "ModelShape", "write_model"]


class ModelShape(NamedTuple):
    """The architecture both files share. A NamedTuple, not a dataclass: a dataclass looks its
    module up in sys.modules, which a script loaded by path (repro_full.py, embedding this) need not be in."""

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


TINY = ModelShape()
ADAPTERS = ("lora-a", "lora-b")
LORA_RANK = 8
LORA_ALPHA = 16.0  # PEFT scales B @ A by alpha / rank: 2 here
LORA_TARGETS = ("q_proj", "v_proj")  # PEFT's default for llama
GGUF_VOCAB = 1024
GGUF_NAME, DRAFT_NAME = "servefuzz-tiny", "servefuzz-tiny-draft"


def write_model(out_dir: Path, fmt: str, *, seed: int = 0, dtype: str = "float32", adapters: bool = True,
                tokenizer_json: str | None = None) -> list[Path]:
    """Write the model of format `fmt` ("gguf": llama.cpp; "hf": vLLM, SGLang) and, with
    `adapters`, its two LoRA adapters under `out_dir`; the paths written. "hf" needs the
    tokenizer servefuzz trained for `seed` (`tokenizer_json`, the text of its tokenizer.json)."""
    need_numpy()
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if fmt == "gguf":
        written.append(write_gguf(out_dir / "tiny.gguf", TINY, seed))
    elif fmt == "hf":
        if tokenizer_json is None:
            raise ValueError("an hf model needs the tokenizer.json servefuzz trained for it")
        written += write_hf(out_dir / f"hf-{dtype}", TINY, seed, dtype, tokenizer_json)
    else:
        raise ValueError(f"unknown model format {fmt!r} (gguf or hf)")
    if adapters:
        written += write_adapters(out_dir / "lora", TINY, seed, gguf=fmt == "gguf")
    return written


def llama_weights(rng: Any, shape: ModelShape, vocab: int, quiet: Sequence[int]) -> dict[str, Any]:
    """Random llama weights under Hugging Face names, as float32."""
    h, f = shape.hidden, shape.ffn
    w: dict[str, Any] = {"model.embed_tokens.weight": rng.standard_normal((vocab, h)).astype(np.float32)}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            w[p + f"self_attn.{name}.weight"] = projection(rng, h, h)
        w[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "mlp.gate_proj.weight"] = projection(rng, f, h)
        w[p + "mlp.up_proj.weight"] = projection(rng, f, h)
        w[p + "mlp.down_proj.weight"] = projection(rng, h, f)
    w["model.norm.weight"] = np.ones(h, np.float32)
    w["lm_head.weight"] = output_head(rng, vocab, h, quiet)
    return w


def lora_pairs(rng: Any, shape: ModelShape) -> dict[str, tuple[Any, Any]]:
    """Module (HF name, without `.weight`) -> (A [rank, in], B [out, rank]), PEFT's shapes."""
    h = shape.hidden
    out = {}
    for i in range(shape.layers):
        for target in LORA_TARGETS:
            a = np.asarray(rng.standard_normal((LORA_RANK, h)) / np.sqrt(h), dtype=np.float32)
            # Spread of (B @ A) * alpha / rank = sqrt(rank) * 0.18 * (1 / sqrt(h)) * 2 ~ 1 / sqrt(h):
            # the base projections' own.
            b = np.asarray(rng.standard_normal((h, LORA_RANK)) * 0.18, dtype=np.float32)
            out[f"model.layers.{i}.self_attn.{target}"] = (a, b)
    return out


def gguf_name(hf_name: str) -> str:
    stem = hf_name.removesuffix(".weight")
    if stem in GGUF_MODEL_NAMES:
        return GGUF_MODEL_NAMES[stem] + ".weight"
    _, _, layer, rest = stem.split(".", 3)  # model.layers.<i>.<rest>
    return f"blk.{layer}.{GGUF_LAYER_NAMES[rest]}.weight"


def write_gguf(path: Path, shape: ModelShape, seed: int, noise: tuple[Any, float] | None = None) -> Path:
    """A SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then word pieces.

    `noise` (a random stream and a scale): the draft model's weights, each tensor but the norms
    plus that many of its own standard deviations of Gaussian noise (`models.build_draft`)."""
    rng = np.random.default_rng([seed, 2])
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    kinds = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL] + [TOKEN_BYTE] * 256
    quiet = list(range(len(tokens)))
    pieces = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581"]  # ▁ is SentencePiece's space
    pieces += ["\u2581" + w for w in made_up_words(rng, GGUF_VOCAB - len(tokens) - len(pieces))]
    tokens += pieces
    kinds += [TOKEN_NORMAL] * len(pieces)
    scores = [0.0] * len(quiet) + [-float(i) for i in range(len(pieces))]  # earlier pieces merge first
    kv = [
        ("general.architecture", STR, "llama"),
        ("general.name", STR, GGUF_NAME if noise is None else DRAFT_NAME),
        ("llama.context_length", U32, shape.context),
        ("llama.embedding_length", U32, shape.hidden),
        ("llama.block_count", U32, shape.layers),
        ("llama.feed_forward_length", U32, shape.ffn),
        ("llama.attention.head_count", U32, shape.heads),
        ("llama.attention.head_count_kv", U32, shape.heads),
        ("llama.rope.dimension_count", U32, shape.head_dim),
        ("llama.rope.freq_base", F32, shape.rope_theta),
        ("llama.attention.layer_norm_rms_epsilon", F32, shape.rms_eps),
        ("general.file_type", U32, 0),  # all F32
        ("llama.vocab_size", U32, len(tokens)),
        ("tokenizer.ggml.model", STR, "llama"),
        ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
        ("tokenizer.ggml.scores", ARR, (F32, scores)),
        ("tokenizer.ggml.token_type", ARR, (I32, kinds)),
        ("tokenizer.ggml.unknown_token_id", U32, 0),
        ("tokenizer.ggml.bos_token_id", U32, 1),
        ("tokenizer.ggml.eos_token_id", U32, 2),
        ("tokenizer.ggml.add_bos_token", BOOL, False),  # prompts are exact token ids
    ]
    tensors = []
    for name, array in llama_weights(rng, shape, len(tokens), quiet).items():
        if noise is not None and not name.endswith("norm.weight"):
            source, scale = noise
            moved = array + np.float32(scale * float(array.std())) * source.standard_normal(array.shape, dtype=np.float32)
            if name == "lm_head.weight":
                moved[quiet] = 0.0  # the specials and byte tokens stay unpickable
            array = np.asarray(moved, dtype=np.float32)
        tensors.append((gguf_name(name), array))
    return gguf_file(path, kv, tensors)


def llama_config(shape: ModelShape, vocab: int, ids: dict[str, int], dtype: str) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": shape.hidden, "intermediate_size": shape.ffn, "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads, "num_key_value_heads": shape.heads, "head_dim": shape.head_dim,
        "hidden_act": "silu", "max_position_embeddings": shape.context, "rms_norm_eps": shape.rms_eps,
        "rope_theta": shape.rope_theta, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "pad_token_id": ids["<pad>"], "dtype": dtype,
    }


def write_hf(hf_dir: Path, shape: ModelShape, seed: int, dtype: str, tokenizer_json: str) -> list[Path]:
    vocab, quiet, ids = hf_tokens(tokenizer_json)
    weights = llama_weights(np.random.default_rng([seed, 1]), shape, vocab, quiet)
    return write_hf_folder(hf_dir, tokenizer_json=tokenizer_json, config=llama_config(shape, vocab, ids, dtype),
                           weights=weights, dtype=dtype, context=shape.context)


# --- the LoRA adapters ------------------------------------------------------------------------


def write_adapters(out_dir: Path, shape: ModelShape, seed: int, *, gguf: bool) -> list[Path]:
    """Each of ADAPTERS: `NAME.gguf` (llama.cpp's LoRA GGUF, as its convert_lora_to_gguf.py writes
    one: llama.cpp checks A against the base tensor's input size, B against its output size) or
    `NAME/` (PEFT's layout)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for index, name in enumerate(ADAPTERS):
        pairs = lora_pairs(np.random.default_rng([seed, 3 + index]), shape)
        if gguf:
            kv = [("general.architecture", STR, "llama"), ("general.type", STR, "adapter"),
                  ("adapter.type", STR, "lora"), ("adapter.lora.alpha", F32, LORA_ALPHA)]
            tensors = [(gguf_name(m + ".weight") + suffix, t) for m, (a, b) in pairs.items()
                       for suffix, t in ((".lora_a", a), (".lora_b", b))]
            written.append(gguf_file(out_dir / f"{name}.gguf", kv, tensors))
            continue
        folder = out_dir / name
        folder.mkdir(exist_ok=True)
        written.append(json_file(folder / "adapter_config.json", {
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": None, "r": LORA_RANK,
            "lora_alpha": LORA_ALPHA, "lora_dropout": 0.0, "bias": "none", "target_modules": list(LORA_TARGETS),
            "fan_in_fan_out": False, "use_rslora": False, "use_dora": False,
        }))
        tensors_hf = {f"base_model.model.{m}.lora_{ab}.weight": t for m, (a, b) in pairs.items()
                      for ab, t in (("A", a), ("B", b))}
        written.append(safetensors_file(folder / "adapter_model.safetensors", tensors_hf, "float32"))
    return written
