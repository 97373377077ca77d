"""Tiny random-weight models that real engines can serve, built here from a seed.

No model hub is needed: `build_models` writes a Hugging Face folder for vLLM and SGLang (llama
architecture, safetensors weights, a byte-level BPE tokenizer trained here on generated text) and
a GGUF file for llama.cpp (the same architecture with a SentencePiece-style vocabulary). Both are
deterministic functions of the seed, so a finding recorded against them replays anywhere.

    >>> paths = build_models(Path("models"), dtype="float32", seed=0)  # doctest: +SKIP
    >>> paths.hf_dir.name, paths.gguf.name, paths.hf_vocab_size  # doctest: +SKIP
    ('hf-float32', 'tiny.gguf', 2048)

Architectures are an axis of their own (`ARCHITECTURES`, `build_arch`): one module each
(`llama`, `qwen3_moe`, `deepseek_v3`, `gpt_oss`, `gemma3`, `qwen3_next`, `nemotron_h`), the
sizes they share in `parts`, and the file formats written once, with numpy and the standard
library alone, in `files` (which every repro_full.py embeds with `llama`, so a maintainer rebuilds
the model a finding ran on without servefuzz). `build_arch` writes the Hugging Face folder of
any of them, and a GGUF through llama.cpp's own converter where one is found (`gguf_convert`).

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

Builds are an axis too (`BUILDS`): `numerics`, the draw as it is (the default), `judgeable`
(`models.judgeable`: the draw reshaped so rounding rarely flips a route or a token) and
`speculative` (judgeable, and the next-token-prediction layer of DeepSeek-V3 and Qwen3-Next built
to agree with the main model, `models.speculative`; DeepSeek-V3 `SPECULATIVE_HIDDEN` wide, for
SGLang's MTP kernel).

The tokenizer is trained with the optional `models` extra (`pip install 'servefuzz[models]'`),
imported only when used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from servefuzz.errors import UsageError, extra_module
from servefuzz.models import (
    deepseek_v3,
    gemma3,
    gguf_convert,
    gpt_oss,
    judgeable,
    llama,
    nemotron_h,
    qwen3_moe,
    qwen3_next,
    speculative,
)
from servefuzz.models.files import HF_SPECIALS, hf_tokens, made_up_words, random_weights, write_hf_folder
from servefuzz.models.judgeable import BUILDS, DEFAULT_BUILD
from servefuzz.models.llama import ADAPTERS, TINY, ModelShape

__all__ = [
    "ADAPTERS",
    "ARCHITECTURES",
    "BUILDS",
    "DEFAULT_BUILD",
    "DRAFT_GGUF",
    "DRAFT_NOISE",
    "DTYPES",
    "TINY",
    "AdapterPaths",
    "ArchPaths",
    "ModelPaths",
    "ModelShape",
    "adapter_paths",
    "build_adapters",
    "build_arch",
    "build_draft",
    "build_key",
    "build_models",
    "draft_path",
    "hf_tokenizer_json",
]

DTYPES = ("float32", "bfloat16")
_HF_VOCAB = 2048

# Every architecture `build_arch` writes, by the name `--arch` takes: llama is `build_models`'s
# own; the others are one module each with `config(vocab, ids, dtype)` and `shapes(vocab)` (both
# taking `hidden=` where the module sets a `SPECULATIVE_HIDDEN`), and `NEXT_TOKEN_LAYER` where it
# has an MTP layer.
_ARCH_MODULES: dict[str, ModuleType] = {m.NAME: m for m in (qwen3_moe, deepseek_v3, gpt_oss, gemma3, qwen3_next, nemotron_h)}
ARCHITECTURES = ("llama", *_ARCH_MODULES)


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


@dataclass(frozen=True)
class ArchPaths:
    """Where `build_arch` put a model of another architecture than llama: its Hugging Face folder
    and, where llama.cpp's converter was found and took it, its GGUF (else None and why not)."""

    arch: str
    hf_dir: Path
    dtype: str
    vocab_size: int
    gguf: Path | None = None
    gguf_missing: str = ""


# The draft model `build_draft` writes (llama-server `-md`), and the noise it adds to each of the
# target's weight tensors, as a fraction of that tensor's standard deviation. At 0.06 the draft's
# greedy token is the target's at 78% of positions (float64, teacher-forced, 288 positions; 91%
# at 0.03, 64% at 0.10, 7% at 0.5), and llama-server 0c1e57098 under the spec-draft profile
# (4 tokens drafted a step) accepts 57% of drafted tokens (258 of 453, eight 48-token answers;
# `timings.draft_n_accepted / draft_n`): often, but far from always.
DRAFT_GGUF = "tiny-draft.gguf"
DRAFT_NOISE = 0.06


def _check(dtype: str, seed: int) -> None:
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r} (choose from {', '.join(DTYPES)})")
    if seed < 0:
        raise UsageError(f"seed must be >= 0, got {seed}")


def _mkdir(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {folder}: {e.strerror or e}") from None


def build_models(out_dir: Path, *, dtype: str = "float32", seed: int = 0) -> ModelPaths:
    """Write `out_dir/hf-<dtype>/` and `out_dir/tiny.gguf` (llama); the same seed gives the same bytes."""
    _check(dtype, seed)
    hf_dir = out_dir / f"hf-{dtype}"
    _mkdir(hf_dir)
    text = hf_tokenizer_json(seed)
    llama.write_hf(hf_dir, TINY, seed, dtype, text)
    gguf_path = llama.write_gguf(out_dir / "tiny.gguf", TINY, seed)
    adapters = build_adapters(out_dir / "lora", seed=seed)
    draft = build_draft(out_dir / "draft", seed=seed)
    return ModelPaths(hf_dir, gguf_path, dtype, hf_tokens(text)[0], llama.GGUF_VOCAB, adapters, draft)


def build_arch(out_dir: Path, arch: str, *, dtype: str = "float32", seed: int = 0,
               converter: Path | None = None, build: str = DEFAULT_BUILD) -> ArchPaths:
    """Write a tiny random-weight model of `arch` (one of `ARCHITECTURES`; llama is
    `build_models`'s, GGUF and all) as `out_dir/hf-<dtype>/` and, given llama.cpp's
    `convert_hf_to_gguf.py` as `converter`, `out_dir/<arch>.gguf` where it takes the architecture
    (`gguf_convert.convert`). The tokenizer is llama's Hugging Face one for the same seed (the GGUF carries it as a GPT-2
    BPE vocabulary); the same seed gives the same Hugging Face bytes."""
    if arch == "llama":  # the presets' own, GGUF and all, written by hand
        built = build_models(out_dir, dtype=dtype, seed=seed)
        return ArchPaths(arch, built.hf_dir, dtype, built.hf_vocab_size, built.gguf)
    module = _ARCH_MODULES.get(arch)
    if module is None:
        raise UsageError(f"unknown architecture {arch!r} (choose from {', '.join(ARCHITECTURES)})")
    _check(dtype, seed)
    if build not in BUILDS:
        raise UsageError(f"unknown model build {build!r} (choose from {', '.join(BUILDS)})")
    hf_dir = out_dir / f"hf-{dtype}"
    _mkdir(hf_dir)
    text = hf_tokenizer_json(seed)
    vocab, quiet, ids = hf_tokens(text)
    # The speculative build's own width where an engine's speculative kernel refuses the others'.
    wide = {"hidden": module.SPECULATIVE_HIDDEN} if build == "speculative" and hasattr(module, "SPECULATIVE_HIDDEN") else {}
    shapes = module.shapes(vocab, **wide)
    weights = random_weights(np.random.default_rng([seed, 1]), shapes, vocab=vocab, quiet=quiet,
                             embed_std=getattr(module, "EMBED_STD", 1.0))
    config = module.config(vocab, ids, dtype, **wide)
    if build != DEFAULT_BUILD:  # the same draw, reshaped (its own stream: the draw stays the numerics build's)
        judgeable.shape(weights, np.random.default_rng([seed, 6]), vocab=vocab, quiet=quiet,
                        hidden=int(config["hidden_size"]), experts=_experts(config),
                        groups=int(config.get("n_group") or 1), mamba_heads=int(config.get("mamba_num_heads") or 0),
                        head_gain=getattr(module, "HEAD_GAIN", judgeable.HEAD_GAIN),
                        centred_norm=getattr(module, "centred_norm", None))
    layer = getattr(module, "NEXT_TOKEN_LAYER", None)
    if build == "speculative" and layer is not None:  # where the architecture has one (as released)
        hidden = int(config["hidden_size"])
        speculative.agree(weights, layer, hidden=hidden, switch=judgeable.switch_dim(hidden, _experts(config)))
    write_hf_folder(hf_dir, tokenizer_json=text, config=config, weights=weights, dtype=dtype,
                    context=int(config["max_position_embeddings"]))
    made, why = gguf_convert.convert(hf_dir, out_dir / f"{arch}.gguf", converter)
    return ArchPaths(arch, hf_dir, dtype, vocab, made, why)


def _experts(config: dict[str, Any]) -> int:
    """A config's routed experts (each architecture names the key its own way); 0 for a dense model."""
    return int(config.get("num_experts") or config.get("n_routed_experts") or config.get("num_local_experts") or 0)


def build_key(*args: object) -> str:
    """A short hash of what a build's bytes depend on: the source of this package (every module
    of it: the architectures, the shared parts, the file writers, the GGUF shim), the version of
    the `tokenizers` library that trains the vocabulary, and `args` (the builder's arguments, the
    converter's identity). A cached build named by it (`engine_files.arch_models`) is built anew when
    any of them changes, and is never a stale copy of an older builder's output."""
    from importlib.metadata import PackageNotFoundError, version

    digest = hashlib.sha256()
    # truth.py holds the GGUF tensor-name tables the writers use (defined once, in the lower layer).
    for source in [*sorted(Path(__file__).parent.glob("*.py")), Path(__file__).parent.parent / "truth.py"]:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    try:
        tokenizers = version("tokenizers")
    except PackageNotFoundError:
        tokenizers = "none"
    digest.update(repr((tokenizers, *args)).encode())
    return digest.hexdigest()[:12]


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
    _mkdir(out_dir)
    return llama.write_gguf(draft_path(out_dir), TINY, seed, noise=(np.random.default_rng([seed, 5]), DRAFT_NOISE))


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
    _mkdir(out_dir)
    llama.write_adapters(out_dir, TINY, seed, gguf=False)
    llama.write_adapters(out_dir, TINY, seed, gguf=True)
    return adapter_paths(out_dir)


def adapter_paths(out_dir: Path) -> AdapterPaths:
    """Where `build_adapters` puts each adapter under `out_dir` (nothing is built here)."""
    return AdapterPaths(tuple(out_dir / n for n in ADAPTERS), tuple(out_dir / f"{n}.gguf" for n in ADAPTERS))


# --- the tokenizer (the one part that needs the `tokenizers` package) ----------------------


def _sentences(rng: np.random.Generator, words: Sequence[str], count: int) -> Iterator[str]:
    """Zipf-distributed words in sentences: frequent short merges, a long tail of rare ones."""
    weights = 1.0 / np.arange(1, len(words) + 1)
    weights /= weights.sum()
    for _ in range(count):
        picks = rng.choice(len(words), size=int(rng.integers(4, 16)), p=weights)
        sentence = " ".join(words[i] for i in picks)
        yield sentence[0].upper() + sentence[1:] + (". " if rng.random() < 0.8 else "? ")


def hf_tokenizer_json(seed: int = 0) -> str:
    """The text of the tokenizer.json `build_models` writes for `seed` (trained here, about a
    second). repro_full.py carries it as data: it is the one part of the Hugging Face folder that
    `models.llama`, numpy alone, cannot make."""
    return str(_train_tokenizer(np.random.default_rng([seed, 0])).to_str(pretty=True))


def _train_tokenizer(rng: np.random.Generator) -> Any:
    tk = extra_module("tokenizers", "building models")
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=_HF_VOCAB,
        special_tokens=list(HF_SPECIALS),
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),  # every byte has a token
        show_progress=False,
    )
    words = made_up_words(rng, 3000)
    tokenizer.train_from_iterator(list(_sentences(rng, words, 20000)), trainer)
    return tokenizer
