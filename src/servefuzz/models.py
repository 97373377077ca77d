"""Tiny random-weight models that real engines can serve, built here from a seed.

No model hub is needed: `build_models` writes a Hugging Face folder for vLLM (llama architecture,
safetensors weights, a byte-level BPE tokenizer trained here on generated text) and a GGUF file
for llama.cpp (the same architecture with a SentencePiece-style vocabulary). Both are
deterministic functions of the seed, so a finding recorded against them replays anywhere.

    >>> paths = build_models(Path("models"), dtype="float32", seed=0)  # doctest: +SKIP
    >>> paths.hf_dir.name, paths.gguf.name, paths.hf_vocab_size  # doctest: +SKIP
    ('hf-float32', 'tiny.gguf', 2048)

Random weights pick arbitrary tokens. Two kinds of token would make the engines' answers hard to
read: special tokens (end of sequence stops a request early) and tokens that are not whole UTF-8
text on their own (llama.cpp then misaligns `completion_probabilities` with the tokens). Their
rows of the output layer are zero, so their logit is 0 while the ordinary tokens' best logit is
several units above it: they never win a greedy step and rarely reach the top-k.

`build_models` also writes two tiny random LoRA adapters (`build_adapters`: rank 8 on the q and v
projections, deterministic from the seed), `lora/lora-a/` and `lora/lora-b/` in PEFT's layout
for vLLM (`--lora-modules lora-a=PATH`) and `lora/lora-a.gguf`, `lora/lora-b.gguf` for
llama-server (`--lora PATH`), so that requests can alternate between adapters and the base model.

It writes a draft model for llama-server's draft-model speculative decoding too (`build_draft`:
`draft/tiny-draft.gguf`, `-md PATH`): the GGUF's own vocabulary and weights with seeded noise, so
that its greedy guesses are the target's often but not always and the verify step both accepts
and rejects drafts.

The weights, tokenizers and GGUF writer come from the optional `models` extra
(`pip install 'servefuzz[models]'`: tokenizers, safetensors, gguf), imported only when used.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from servefuzz.errors import UsageError
from servefuzz.truth import GGUF_LAYER_NAMES, GGUF_MODEL_NAMES

__all__ = [
    "ADAPTERS",
    "DRAFT_GGUF",
    "DRAFT_NOISE",
    "DTYPES",
    "TINY",
    "AdapterPaths",
    "ModelPaths",
    "ModelShape",
    "adapter_paths",
    "build_adapters",
    "build_draft",
    "build_models",
    "draft_path",
    "hf_tokenizer_json",
]

DTYPES = ("float32", "bfloat16")
_HF_SPECIALS = ("<s>", "</s>", "<pad>")  # ids 0, 1, 2: the trainer numbers specials first
_HF_VOCAB = 2048
_GGUF_VOCAB = 1024
# Scale of the ordinary tokens' output rows: the final norm makes the hidden state unit-RMS, so
# logits spread with about this standard deviation, which puts the best of them far above the
# quiet tokens' 0 and keeps greedy choices away from near-ties in float32.
_LOGIT_SCALE = 3.0


@dataclass(frozen=True)
class ModelShape:
    """The architecture both files share (llama: RMSNorm, rotary positions, SwiGLU MLP)."""

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


# The adapters `build_adapters` writes, by the names the engines serve them under.
ADAPTERS = ("lora-a", "lora-b")
_LORA_RANK = 8
_LORA_ALPHA = 16.0  # PEFT scales B @ A by alpha / rank: 2 here
_LORA_TARGETS = ("q_proj", "v_proj")  # PEFT's default for llama


@dataclass(frozen=True)
class AdapterPaths:
    """Where `build_adapters` put each adapter: PEFT folders (vLLM) and GGUF files (llama.cpp),
    in the order of `ADAPTERS`."""

    hf: tuple[Path, ...]
    gguf: tuple[Path, ...]


@dataclass(frozen=True)
class ModelPaths:
    """Where `build_models` put things, and the vocabulary size of each model."""

    hf_dir: Path
    gguf: Path
    dtype: str
    hf_vocab_size: int
    gguf_vocab_size: int
    adapters: AdapterPaths | None = None
    draft: Path | None = None


# The draft model `build_draft` writes (llama-server `-md`), and the noise it adds to each of the
# target's weight tensors, as a fraction of that tensor's standard deviation. At 0.06 the draft's
# greedy token is the target's at 78% of positions (float64, teacher-forced, 288 positions; 91%
# at 0.03, 64% at 0.10, 7% at 0.5), and llama-server 0c1e57098 under the spec-draft profile
# (4 tokens drafted a step) accepts 57% of drafted tokens (258 of 453, eight 48-token answers;
# `timings.draft_n_accepted / draft_n`): often, but far from always.
DRAFT_GGUF = "tiny-draft.gguf"
DRAFT_NOISE = 0.06


def build_models(out_dir: Path, *, dtype: str = "float32", seed: int = 0) -> ModelPaths:
    """Write `out_dir/hf-<dtype>/` and `out_dir/tiny.gguf`; the same seed gives the same bytes."""
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r} (choose from {', '.join(DTYPES)})")
    if seed < 0:
        raise UsageError(f"seed must be >= 0, got {seed}")
    hf_dir = out_dir / f"hf-{dtype}"
    try:
        hf_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {hf_dir}: {e.strerror or e}") from None
    hf_vocab = _write_hf(hf_dir, TINY, dtype=dtype, seed=seed)
    gguf_path = out_dir / "tiny.gguf"
    gguf_vocab = _write_gguf(gguf_path, TINY, seed=seed)
    adapters = build_adapters(out_dir / "lora", seed=seed)
    draft = build_draft(out_dir / "draft", seed=seed)
    return ModelPaths(hf_dir, gguf_path, dtype, hf_vocab, gguf_vocab, adapters, draft)


def build_draft(out_dir: Path, *, seed: int = 0) -> Path:
    """Write `out_dir/tiny-draft.gguf` (`draft_path`): a draft model for the GGUF `build_models`
    writes with the same seed, for llama-server's `-md`.

    It is that GGUF with the same vocabulary, token types and specials (llama.cpp refuses a draft
    whose vocabulary differs from the target's) and the same weights plus seeded Gaussian noise,
    `DRAFT_NOISE` times each tensor's own spread (the norms stay ones, the quiet tokens' output
    rows stay zero, so a draft never proposes a token the target cannot pick). The noise comes
    from its own random stream, so the target's bytes are what they were; the same seed gives
    the same bytes. A draft that always agreed with the target would never exercise the
    rejection path, one that never agreed would never extend a slot's KV by accepted tokens.
    """
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {out_dir}: {e.strerror or e}") from None
    path = draft_path(out_dir)
    _write_gguf(path, TINY, seed=seed, noise=(np.random.default_rng([seed, 5]), DRAFT_NOISE))
    return path


def draft_path(out_dir: Path) -> Path:
    """Where `build_draft` puts the draft model under `out_dir` (nothing is built here)."""
    return out_dir / DRAFT_GGUF


def build_adapters(out_dir: Path, *, seed: int = 0) -> AdapterPaths:
    """Write each of `ADAPTERS` for the `TINY` shape: `out_dir/NAME/` (adapter_config.json and
    adapter_model.safetensors, PEFT's layout) and `out_dir/NAME.gguf` (llama.cpp's LoRA GGUF).

    The two formats hold the same matrices. The base models differ between the engines (their own
    weights and vocabularies), so an adapter means something different on each; what matters is
    that on each engine every adapter answers other than the base model (tested). The deltas
    B @ A * alpha / rank have about the base projections' spread, as strong as a trained
    adapter's can be, so that a request's adapter decides its greedy answer.
    """
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {out_dir}: {e.strerror or e}") from None
    paths = adapter_paths(out_dir)
    for index, (folder, gguf_path) in enumerate(zip(paths.hf, paths.gguf, strict=True)):
        pairs = _lora_pairs(np.random.default_rng([seed, 3 + index]), TINY)
        folder.mkdir(exist_ok=True)
        _write_json(folder / "adapter_config.json", {
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": None,
            "r": _LORA_RANK,
            "lora_alpha": _LORA_ALPHA,
            "lora_dropout": 0.0,
            "bias": "none",
            "target_modules": list(_LORA_TARGETS),
            "fan_in_fan_out": False,
            "use_rslora": False,
            "use_dora": False,
        })
        tensors = {f"base_model.model.{module}.lora_{ab}.weight": m
                   for module, (a, b) in pairs.items() for ab, m in (("A", a), ("B", b))}
        _save_safetensors(folder / "adapter_model.safetensors", tensors, "float32")
        _write_lora_gguf(gguf_path, pairs)
    return paths


def adapter_paths(out_dir: Path) -> AdapterPaths:
    """Where `build_adapters` puts each adapter under `out_dir` (nothing is built here)."""
    return AdapterPaths(tuple(out_dir / n for n in ADAPTERS), tuple(out_dir / f"{n}.gguf" for n in ADAPTERS))


def _lora_pairs(rng: np.random.Generator, shape: ModelShape) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Module (HF name, without `.weight`) -> (A [rank, in], B [out, rank]), PEFT's shapes."""
    h = shape.hidden
    out = {}
    for i in range(shape.layers):
        for target in _LORA_TARGETS:
            a = np.asarray(rng.standard_normal((_LORA_RANK, h)) / np.sqrt(h), dtype=np.float32)
            # Spread of (B @ A) * alpha / rank = sqrt(rank) * 0.18 * (1 / sqrt(h)) * 2 ~ 1 / sqrt(h):
            # the base projections' own (`_weights`).
            b = np.asarray(rng.standard_normal((h, _LORA_RANK)) * 0.18, dtype=np.float32)
            out[f"model.layers.{i}.self_attn.{target}"] = (a, b)
    return out


def _write_lora_gguf(path: Path, pairs: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """llama.cpp's LoRA GGUF, as its convert_lora_to_gguf.py writes one: general.type "adapter",
    adapter.type "lora", adapter.lora.alpha, and per target `blk.N.attn_q.weight.lora_a` (A) and
    `.lora_b` (B). llama.cpp checks A against the base tensor's input size, B against its output
    size, and A's rank against B's (llama-adapter.cpp)."""
    gguf = _extra("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, _LORA_ALPHA)
    for module, (a, b) in pairs.items():
        base = _gguf_name(module + ".weight")
        w.add_tensor(base + ".lora_a", a)
        w.add_tensor(base + ".lora_b", b)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# --- the shared pieces ----------------------------------------------------------------------


def _words(rng: np.random.Generator, count: int) -> list[str]:
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


def _sentences(rng: np.random.Generator, words: Sequence[str], count: int) -> Iterator[str]:
    """Zipf-distributed words in sentences: frequent short merges, a long tail of rare ones."""
    weights = 1.0 / np.arange(1, len(words) + 1)
    weights /= weights.sum()
    for _ in range(count):
        picks = rng.choice(len(words), size=int(rng.integers(4, 16)), p=weights)
        sentence = " ".join(words[i] for i in picks)
        yield sentence[0].upper() + sentence[1:] + (". " if rng.random() < 0.8 else "? ")


def _weights(rng: np.random.Generator, shape: ModelShape, vocab: int, quiet: Sequence[int]) -> dict[str, np.ndarray]:
    """Random llama weights under Hugging Face names, as float32.

    Projections are scaled by 1/sqrt(fan-in) so every layer moves the residual stream by about
    as much as the embedding: attention then matters, and a corrupted KV entry shows in the
    output instead of being drowned by the current token's embedding.
    """

    def proj(out: int, inp: int) -> np.ndarray:
        return np.asarray(rng.standard_normal((out, inp)) / np.sqrt(inp), dtype=np.float32)

    h, f = shape.hidden, shape.ffn
    w: dict[str, np.ndarray] = {"model.embed_tokens.weight": rng.standard_normal((vocab, h)).astype(np.float32)}
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
    head = proj(vocab, h) * _LOGIT_SCALE
    head[list(quiet)] = 0.0
    w["lm_head.weight"] = head
    return w


def _extra(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(
            f"building models needs the Python package {module.split('.')[0]!r}: "
            "pip install 'servefuzz[models]'"
        ) from None


# --- the Hugging Face folder (vLLM) -----------------------------------------------------------


def hf_tokenizer_json(seed: int = 0) -> str:
    """The text of the tokenizer.json `build_models` writes for `seed` (trained here, about a
    second). repro.py carries it as data: it is the one part of the Hugging Face folder that
    `reports/tiny_model.py`, numpy alone, cannot make."""
    return str(_train_tokenizer(np.random.default_rng([seed, 0])).to_str(pretty=True))


def _write_hf(hf_dir: Path, shape: ModelShape, *, dtype: str, seed: int) -> int:
    tokenizer = _extra("tokenizers").Tokenizer.from_str(text := hf_tokenizer_json(seed))
    vocab = int(tokenizer.get_vocab_size())
    (hf_dir / "tokenizer.json").write_text(text, encoding="utf-8")
    specials = dict(zip(("bos_token", "eos_token", "pad_token"), _HF_SPECIALS))
    _write_json(hf_dir / "special_tokens_map.json", specials)
    _write_json(hf_dir / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": shape.context,
        "add_bos_token": False,
        "add_eos_token": False,
        **specials,
    })
    ids = {t: tokenizer.token_to_id(t) for t in _HF_SPECIALS}
    _write_json(hf_dir / "config.json", {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": shape.hidden,
        "intermediate_size": shape.ffn,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": shape.context,
        "rms_norm_eps": shape.rms_eps,
        "rope_theta": shape.rope_theta,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": ids["<s>"],
        "eos_token_id": ids["</s>"],
        "pad_token_id": ids["<pad>"],
        "dtype": dtype,
    })
    # A token that is not whole UTF-8 on its own decodes to U+FFFD; those and the specials stay quiet.
    quiet = sorted(set(ids.values()) | {i for i in range(vocab) if "\ufffd" in tokenizer.decode([i])})
    weights = _weights(np.random.default_rng([seed, 1]), shape, vocab, quiet)
    _save_safetensors(hf_dir / "model.safetensors", weights, dtype)
    return vocab


def _train_tokenizer(rng: np.random.Generator) -> Any:
    tk = _extra("tokenizers")
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=_HF_VOCAB,
        special_tokens=list(_HF_SPECIALS),
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),  # every byte has a token
        show_progress=False,
    )
    words = _words(rng, 3000)
    tokenizer.train_from_iterator(list(_sentences(rng, words, 20000)), trainer)
    return tokenizer


def _save_safetensors(path: Path, weights: dict[str, np.ndarray], dtype: str) -> None:
    """Save with the safetensors package itself; numpy has no bfloat16, so those go as raw bits."""
    st = _extra("safetensors")
    arrays = {name: _to_bf16_bits(a) if dtype == "bfloat16" else a for name, a in weights.items()}
    specs = {  # `arrays` keeps the buffers alive while the serializer reads them
        name: st.TensorSpec(dtype=dtype, shape=a.shape, data_ptr=a.ctypes.data, data_len=a.nbytes) for name, a in arrays.items()
    }
    st.serialize_file(specs, str(path), metadata={"format": "pt"})


def _to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounding to nearest even as torch does."""
    bits = np.ascontiguousarray(a, dtype="<f4").view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype("<u2")


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


# --- the GGUF file (llama.cpp) ----------------------------------------------------------------



def _gguf_name(hf_name: str) -> str:
    stem = hf_name.removesuffix(".weight")
    if stem in GGUF_MODEL_NAMES:
        return GGUF_MODEL_NAMES[stem] + ".weight"
    _, _, layer, rest = stem.split(".", 3)  # model.layers.<i>.<rest>
    return f"blk.{layer}.{GGUF_LAYER_NAMES[rest]}.weight"


def _write_gguf(path: Path, shape: ModelShape, *, seed: int,
                noise: tuple[np.random.Generator, float] | None = None) -> int:
    """A SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then word pieces.

    `noise` (a random stream and a scale): the draft model's weights, each tensor but the norms
    plus that many of its own standard deviations of Gaussian noise (`build_draft`)."""
    gguf = _extra("gguf")
    rng = np.random.default_rng([seed, 2])
    types = gguf.TokenType
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    kinds = [types.UNKNOWN, types.CONTROL, types.CONTROL] + [types.BYTE] * 256
    quiet = list(range(len(tokens)))
    pieces = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581"]  # ▁ is SentencePiece's space
    pieces += ["\u2581" + w for w in _words(rng, _GGUF_VOCAB - len(tokens) - len(pieces))]
    tokens += pieces
    kinds += [types.NORMAL] * len(pieces)
    scores = [0.0] * len(quiet) + [-float(i) for i in range(len(pieces))]  # earlier pieces merge first

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("servefuzz-tiny" if noise is None else "servefuzz-tiny-draft")
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.hidden)
    w.add_block_count(shape.layers)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.heads)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(shape.rms_eps)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(kinds)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)  # prompts are exact token ids; nothing is to be slipped in front
    for name, array in _weights(rng, shape, len(tokens), quiet).items():
        if noise is not None and not name.endswith("norm.weight"):
            source, scale = noise
            moved = array + np.float32(scale * float(array.std())) * source.standard_normal(array.shape, dtype=np.float32)
            if name == "lm_head.weight":
                moved[quiet] = 0.0  # the specials and byte tokens stay unpickable
            array = np.asarray(moved, dtype=np.float32)
        w.add_tensor(_gguf_name(name), array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return len(tokens)


# --- command line -----------------------------------------------------------------------------
