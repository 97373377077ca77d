"""The engines: one spec each (`spec_of`, one module per engine in this package), where
`scripts/setup_engines.sh` put the real engines, and how to launch them.

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

import dataclasses
import functools
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from servefuzz.engine_flags import flag_pairs, with_flags, without_flags  # the one argv rule, re-exported
from servefuzz.engines import llamacpp
from servefuzz.engines.registry import SPECS, spec_of
from servefuzz.engines.spec import EngineSpec, Versions
from servefuzz.errors import UsageError

if TYPE_CHECKING:
    from servefuzz.models import AdapterPaths

__all__ = [
    "EngineSpec",
    "SPECS",
    "spec_of",
    "LLAMA_CPP_COMMIT",
    "PROFILES",
    "SETUP_SCRIPT",
    "VLLM_START_TIMEOUT_S",
    "VLLM_VERSION",
    "SGLANG_START_TIMEOUT_S",
    "SGLANG_VERSIONS",
    "SGLANG_INTERPRETED",
    "PRESET_VERSIONS",
    "engine_dir",
    "installed",
    "version_of",
    "sglang_argv",
    "sglang_env",
    "sglang_installed",
    "sglang_python",
    "standin_path",
    "cache_dir",
    "Profile",
    "default_draft",
    "default_models",
    "draft_flags",
    "adapters_for",
    "draft_for",
    "flag_pairs",
    "profile",
    "with_flags",
    "without_flags",
    "GPU_START_TIMEOUT_S",
    "GPU_VERSIONS",
    "gpu_env",
    "gpu_installed",
    "gpu_python",
    "sglang_gpu_argv",
    "vllm_gpu_argv",
    "gguf_model",
    "hf_model_dir",
    "fit_to_build",
    "llama_server_argv",
    "llama_server_preset_argv",
    "llama_server_binary",
    "llama_server_built",
    "model_dtype",
    "vllm_argv",
    "vllm_env",
    "vllm_installed",
    "vllm_python",
]

# The versions each preset takes, from the engines' specs (`EngineSpec.cpu_versions`,
# `.gpu_versions`): one table, one rule (`version_of`), one place each is installed
# (`engine_dir`). The presets alone mean each one's default, what the setup script installs.
PRESET_VERSIONS: Mapping[str, Versions] = {
    preset: versions
    for spec in SPECS.values()
    for preset, versions in ((spec.cpu_preset, spec.cpu_versions), (spec.gpu_preset, spec.gpu_versions))
    if preset and versions is not None
}
VLLM_VERSION = PRESET_VERSIONS["vllm-cpu"].default
LLAMA_CPP_COMMIT = PRESET_VERSIONS["llama-server"].default
# vLLM imports torch and transformers in three processes before /health answers: 20-50 s on an
# idle 2-core machine, more when other work shares the cores.
VLLM_START_TIMEOUT_S = 300.0
# SGLang on CPU: the newest on PyPI first (what `--launch sglang-cpu` runs), then the version
# of the seed report (sgl-project/sglang#22819), as `--launch sglang-cpu@0.5.10.post1`.
SGLANG_VERSIONS = PRESET_VERSIONS["sglang-cpu"].known
# Its four processes import torch, transformers and SGLang's model zoo before /health answers:
# 48-79 s measured here under load (../shared/notes/sglang-cpu.md).
SGLANG_START_TIMEOUT_S = 300.0
SETUP_SCRIPT = "scripts/setup_engines.sh"


def cache_dir() -> Path:
    """`$SERVEFUZZ_CACHE`, else `~/.cache/servefuzz`: where the setup script installs."""
    return Path(os.environ.get("SERVEFUZZ_CACHE") or Path.home() / ".cache" / "servefuzz")


def version_of(preset: str, asked: str | None) -> str:
    """The version `PRESET[@VERSION]` means: the preset's default when none is asked; UsageError
    (one line naming the versions it takes) for one servefuzz does not know, or for a preset that
    takes none.

    >>> version_of("sglang-cpu", None), version_of("llama-server", "b11434")
    ('0.5.23', 'b11434')
    """
    versions = PRESET_VERSIONS.get(preset)
    if versions is None:
        if asked:
            raise UsageError(f"--launch {preset} takes no @VERSION: servefuzz installs one version of it")
        return ""
    chosen = versions.chosen(asked)
    if chosen is None:
        raise UsageError(f"{preset}@{asked}: not a version servefuzz knows (it knows {versions.summary()})")
    return chosen


def engine_dir(preset: str, version: str) -> Path:
    """Where `preset` at `version` is installed: `cache_dir()/<cache>-<version>` (the setup
    script's folders, `servefuzz engines install`'s too), finished once its `.complete` is there."""
    return cache_dir() / f"{PRESET_VERSIONS[preset].cache}-{version}"


def installed(preset: str, version: str) -> bool:
    """Whether `preset` at `version` was installed to the end (its marker file is there)."""
    return (engine_dir(preset, version) / ".complete").is_file()


def vllm_python(version: str = VLLM_VERSION) -> Path:
    """The interpreter of vLLM's own venv (its `vllm` console script does not work)."""
    return engine_dir("vllm-cpu", version) / "venv" / "bin" / "python"


def llama_server_binary(version: str = LLAMA_CPP_COMMIT) -> Path:
    return engine_dir("llama-server", version) / "llama-server"


def vllm_installed(version: str = VLLM_VERSION) -> bool:
    """Whether the setup script finished installing vLLM (its marker file is there)."""
    return installed("vllm-cpu", version)


def llama_server_built(version: str = LLAMA_CPP_COMMIT) -> bool:
    return installed("llama-server", version)


def sglang_python(version: str) -> Path:
    return engine_dir("sglang-cpu", version) / "venv" / "bin" / "python"


def sglang_installed(version: str) -> bool:
    return installed("sglang-cpu", version)


def standin_path() -> Path:
    """The folder holding servefuzz's stand-in `sgl_kernel` package (and its check): put on the
    PYTHONPATH of SGLang's processes only, never of servefuzz's own."""
    return Path(__file__).resolve().parent.parent / "standins"


def sglang_argv(
    model_dir: Path,
    version: str,
    *,
    dtype: str = "float32",
    page_size: int = 1,
    max_total_tokens: int = 8192,
    seed: int = 0,
    extra: Sequence[str] = (),
) -> list[str]:
    """SGLang's server on 127.0.0.1:{port}, on the CPU, serving `model_dir`.

    Its generic torch paths (`torch_native` attention, `pytorch` sampling): the scheduler, radix
    cache, paged KV pool, chunked prefill and overlap scheduler are SGLang's own. `--dtype` is
    always given: SGLang's `auto` casts a float32 model to float16, so `auto` (a model that
    declares no type, `model_dtype`) is served as float32. `--max-total-tokens` sizes the KV pool
    exactly; `--skip-server-warmup` saves a minute and leaves the cache empty.
    """
    return [
        str(sglang_python(version)), "-m", "sglang.launch_server",
        "--model-path", str(model_dir),
        "--host", "127.0.0.1", "--port", "{port}",
        "--device", "cpu",
        "--attention-backend", "torch_native", "--sampling-backend", "pytorch",
        "--grammar-backend", "none",
        "--disable-cuda-graph", "--skip-server-warmup",
        "--dtype", "float32" if dtype == "auto" else dtype,
        "--max-total-tokens", str(max_total_tokens),
        "--mem-fraction-static", "0.1",
        "--page-size", str(page_size),
        "--random-seed", str(seed),
        # Its scheduler otherwise polls its sockets without pause: one core at 80% while idle,
        # taken from the requests of everything else on a 2-core machine. Idle, it now blocks
        # on the sockets (1 s at most, woken by the first message): nothing changes once work comes.
        "--sleep-on-idle",
        *extra,
    ]


# SGLang versions whose own Triton kernels run on the CPU only under Triton's interpreter, and
# those kernels: 0.5.10.post1's paged allocator is Triton alone (page sizes above 1 died at
# start: "0 active drivers"); interpreted, it is SGLang's code run element by element, checked
# against SGLang's torch version of it (standins/check_standins.py). At page size 1 no Triton
# kernel runs, so the variable changes nothing there.
SGLANG_INTERPRETED: dict[str, tuple[str, ...]] = {"0.5.10.post1": ("alloc_extend_kernel", "alloc_decode_kernel")}


def sglang_env(version: str | None = None, threads: int = 1) -> dict[str, str]:
    """Environment SGLang `version` needs here: its CPU engine, servefuzz's stand-in kernel
    package first on the path of every process it spawns, and Triton's interpreter where the
    version's kernels need it (`SGLANG_INTERPRETED`)."""
    path = os.environ.get("PYTHONPATH", "")
    return {
        "SGLANG_USE_CPU_ENGINE": "1",
        "PYTHONPATH": str(standin_path()) + (os.pathsep + path if path else ""),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": str(threads),
        **({"TRITON_INTERPRET": "1"} if version in SGLANG_INTERPRETED else {}),
    }


def vllm_argv(
    model_dir: Path,
    dtype: str = "float32",
    *,
    block_size: int = 32,
    kv_cache_bytes: int = 256 << 20,
    max_model_len: int = 2048,
    seed: int = 0,
    extra: Sequence[str] = (),
    version: str = VLLM_VERSION,
) -> list[str]:
    """vLLM's OpenAI server (`vllm-cpu` `version`) on 127.0.0.1:{port}, serving `model_dir` as
    model `tiny`.

    On CPU the block size must be a multiple of 32. `--kv-cache-memory-bytes` sizes the pool
    exactly (vLLM would otherwise take a share of RAM); `--enforce-eager` skips compilation,
    which costs minutes here and changes nothing servefuzz looks at.
    """
    return [
        str(vllm_python(version)), "-m", "vllm.entrypoints.openai.api_server",
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
    version: str = LLAMA_CPP_COMMIT,
) -> list[str]:
    """llama.cpp's server (`version`: a release tag or the setup script's commit) on
    127.0.0.1:{port} with `slots` parallel sequences sharing `ctx`.

    `-fa off -ctk f32 -ctv f32` make it as reproducible as llama.cpp gets on CPU (flash attention
    turns itself on and moves logprobs between batch sizes); `--metrics` and `--slots` mount the
    endpoints the adapter reads. One thread: the machines have two cores.
    """
    return [
        str(llama_server_binary(version)),
        "-m", str(gguf),
        "--host", "127.0.0.1", "--port", "{port}",
        "-np", str(slots), "-c", str(ctx),
        "--cont-batching", "--cache-prompt", "--metrics", "--slots",
        "-fa", "off", "-ctk", "f32", "-ctv", "f32",
        "-t", str(threads), "-tb", str(threads),
        "--no-webui",
        *extra,
    ]


def fit_to_build(preset: str | None, version: str | None, argv: Sequence[str]) -> list[str]:
    """`argv`, the preset's whole command line (profile flags included), as the build it starts
    spells it: an older llama.cpp tree of the ladder lacks flags that only ask for what it does
    anyway and spells `--lora-scaled` its own way (`llamacpp.fit_to`, read from the build's own
    `--help`); every other preset and version as it is."""
    if preset != "llama-server":
        return list(argv)
    version = version_of(preset, version or None)
    if version is None or llamacpp.vendored_by(version) is None or not llama_server_built(version):
        return list(argv)
    return llamacpp.fit_to(argv, _help_of(str(llama_server_binary(version))))


@functools.cache
def _help_of(binary: str) -> str:
    """What `binary --help` prints (empty when it cannot run: the launch then says why)."""
    try:
        done = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout + done.stderr


def llama_server_preset_argv(gguf: Path, slots: int = 8, version: str = LLAMA_CPP_COMMIT) -> list[str]:
    """The `--launch llama-server` preset: `llama_server_argv` plus what servefuzz needs of it.

    `--slot-save-path` mounts the slot erase that flushes (erasing writes nothing there);
    `--cache-ram 0` keeps no copy of an erased prompt to restore.
    """
    return llama_server_argv(gguf, slots=slots, version=version,
                             extra=["--slot-save-path", tempfile.gettempdir(), "--cache-ram", "0"])


# -- the GPU engines (the lent H200) -----------------------------------------------------------
#
# No registry there: `scripts/gpu_bundle.sh vllm@0.26.0` (or `sglang@0.5.17`) packs the engine's
# wheels, pinned by sha256 and trimmed to sm_90, and `scripts/gpu_run.sh` unpacks them into
# `cache_dir()/PRESET-VERSION/site`, recording there the interpreter whose torch they were
# built against (the image's: Python 3.12, torch 2.11.0+cu130). Each is the newest release that
# pins that torch (../shared/notes/gpu-engines.md).
GPU_VERSIONS: Mapping[str, tuple[str, ...]] = {
    spec.gpu_preset: spec.gpu_versions.known for spec in SPECS.values() if spec.gpu_versions is not None
}
# Loading, then CUDA-graph capture: 80-134 s measured on the H200 for the tiny model.
GPU_START_TIMEOUT_S = 420.0


def _gpu_dir(preset: str, version: str) -> Path:
    return engine_dir(preset, version)


def gpu_installed(preset: str, version: str) -> bool:
    """Whether `scripts/gpu_run.sh` unpacked this engine here (its marker file is there)."""
    return installed(preset, version)


def gpu_python(preset: str, version: str) -> str:
    """The interpreter the bundle was unpacked for (written by gpu_run.sh beside `site/`)."""
    return (_gpu_dir(preset, version) / "python").read_text(encoding="utf-8").strip()


def gpu_env(preset: str, version: str) -> dict[str, str]:
    """Environment of a GPU engine's processes: its bundle first on their path (never on
    servefuzz's own), no hub; vLLM's sampler without FlashInfer (not in the bundle), its
    internal sockets on 127.0.0.1 and `/reset_prefix_cache` mounted."""
    path = os.environ.get("PYTHONPATH", "")
    env = {
        "PYTHONPATH": str(_gpu_dir(preset, version) / "site") + (os.pathsep + path if path else ""),
        "HF_HUB_OFFLINE": "1",
    }
    if preset == "vllm-gpu":
        env |= {"VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_HOST_IP": "127.0.0.1", "VLLM_SERVER_DEV_MODE": "1",
                "VLLM_NO_USAGE_STATS": "1"}
    return env


def vllm_gpu_argv(
    python: str,
    model_dir: Path,
    dtype: str = "bfloat16",
    *,
    block_size: int = 16,
    max_model_len: int = 2048,
    seed: int = 0,
) -> list[str]:
    """vLLM's OpenAI server on a GPU with its defaults as users serve: CUDA graphs and
    torch.compile, chunked prefill, prefix caching, block size 16, bfloat16. The KV pool is sized
    exactly (`--kv-cache-memory-bytes`, 1 GiB: half a million tokens of the tiny model): sized
    from `--gpu-memory-utilization` instead, a server profiling its memory while another starts
    beside it (a control's, a second campaign's) counts the other's and fails ("Available KV
    cache memory: -0.56 GiB", measured on the H200)."""
    return [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--host", "127.0.0.1", "--port", "{port}",
        "--model", str(model_dir), "--served-model-name", "tiny",
        "--dtype", dtype,
        "--max-model-len", str(max_model_len),
        "--enable-prefix-caching",
        "--block-size", str(block_size),
        "--gpu-memory-utilization", "0.15",
        "--kv-cache-memory-bytes", str(1 << 30),
        "--enable-prompt-tokens-details",
        "--seed", str(seed),
    ]


def sglang_gpu_argv(
    python: str,
    model_dir: Path,
    *,
    page_size: int = 1,
    seed: int = 0,
) -> list[str]:
    """SGLang's server on a GPU: radix cache, overlap scheduler, CUDA graphs and chunked prefill
    at its defaults, page size 1 (its default), Triton attention (the bundle leaves FA3 out) and
    torch sampling. Always bfloat16: at float32 sgl-kernel's CUDA rmsnorm fails the first
    forward ("failed to dispatch data type Float", measured).

    The KV pool is capped at 256Ki tokens (512 MiB of the tiny model in bfloat16). SGLang sizes it
    as the memory free after loading less `(1 - mem_fraction_static)` of what was free before
    (its `kv_cache_configurator`): at 0.2, a second server loading in between leaves that
    negative and the scheduler raises (read in 0.5.17's code; what was seen on the H200: of two
    SGLang servers started side by side, one died before `/health`, "Received sigquit from a
    child process"). At 0.8 the slack is a fifth of the GPU, and the cap, not the fraction,
    decides the pool."""
    return [
        python, "-m", "sglang.launch_server",
        "--model-path", str(model_dir),
        "--host", "127.0.0.1", "--port", "{port}",
        "--attention-backend", "triton", "--sampling-backend", "pytorch",
        "--dtype", "bfloat16",
        "--mem-fraction-static", "0.8", "--max-total-tokens", str(1 << 18),
        "--page-size", str(page_size),
        "--random-seed", str(seed),
    ]


# -- feature profiles of the presets ---------------------------------------------------------


@dataclass(frozen=True)
class Profile:
    """A named feature setting of a launch preset: the flags that turn the feature on (each
    replacing the preset's own value of that flag, or added), what it exercises, what it needs
    beyond the preset, the component a cure by turning it off implicates, the profile's own
    switches that triage flips one at a time (`rows`: flag words and the component each names),
    and the strategies aimed at the feature, which a campaign's first round runs first (`aims`).

    A finding records only the profile's name; replay and triage look the flags up here, so a
    finding file never puts a flag on a command line.
    """

    preset: str
    name: str
    flags: tuple[str, ...]
    exercises: str
    component: str
    needs: str = ""
    rows: tuple[tuple[str, str], ...] = ()
    aims: tuple[str, ...] = ()
    # The profile serves servefuzz's tiny LoRA adapters: `profile` adds the flags that load
    # them (`adapter_flags`), built into the cache on first use, since their paths are the cache's.
    adapters: bool = False
    # The profile serves servefuzz's tiny draft model: `profile` adds the flag that loads it
    # (`-md`, the draft `draft_for` finds for the launch's model; the default models' is built
    # into the cache on first use), for the same reason.
    draft: bool = False
    # Environment of the server's processes the profile sets (NAME, VALUE): a mode an engine
    # turns on by variable only (vLLM's batch invariance). Triage's drop-the-profile row only
    # undoes flags, so a profile of variables alone gets no such row.
    env: tuple[tuple[str, str], ...] = ()

    def undo(self, default_argv: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """What takes a launch of this profile back to the preset's `default_argv`: the preset's
        own values of the flags the profile replaced (to add), and the flags it added (to drop).

        >>> p = profile("llama-server", "context-shift")
        >>> p.undo(["srv", "-c", "8192", "--cache-ram", "0"])
        (('-c', '8192'), ('--context-shift',))
        """
        before = dict(flag_pairs(default_argv))
        add: list[str] = []
        drop: list[str] = []
        for flag, _ in flag_pairs(self.flags):
            if flag not in before:
                drop.append(flag)
                continue
            value = before[flag]
            add += [flag] if value is None else [flag, value]
        return tuple(add), tuple(drop)


# Bytes of KV one token of the tiny model takes (2 layers x 4 heads x 64 dims x K and V x float32):
# the preemption profile sizes its pool in tokens through it.
_TINY_KV_BYTES_PER_TOKEN = 2 * 4 * 64 * 2 * 4

_PROFILE_ROWS: tuple[Profile, ...] = (
    Profile("llama-server", "default", (), "the preset as it is: 8 slots, prompt cache in the slots only",
            "none"),
    # The RAM prompt cache (--cache-ram, 8192 MiB by default at the pinned commit) and idle-slot
    # caching (--cache-idle-slots, on by default there, and needing the RAM cache): the preset
    # turns the RAM cache off so that an erased slot has nothing to restore; this puts both back
    # at llama.cpp's defaults, said out loud. The llama.cpp #27148 class lives here.
    Profile("llama-server", "prompt-cache", ("--cache-ram", "8192", "--cache-idle-slots"),
            "the RAM prompt cache and idle-slot caching at llama.cpp's defaults (llama.cpp #27148)",
            "RAM prompt cache (--cache-ram, idle slots)",
            rows=(("--cache-ram 0", "RAM prompt cache"), ("--no-cache-idle-slots", "idle-slot caching")),
            # requests that finish while others run, then newcomers: what a cached slot is handed to
            aims=("long-decode", "burst-reuse")),
    Profile("llama-server", "cache-reuse", ("--cache-reuse", "64"),
            "reusing cached chunks of at least 64 tokens by shifting KV (--cache-reuse)",
            "KV shifting reuse (--cache-reuse)", rows=(("--cache-reuse 0", "KV shifting reuse"),),
            aims=("burst-reuse", "page-boundary")),  # shared prefixes reused at unaligned lengths
    Profile("llama-server", "kv-unified", ("--kv-unified",),
            "one KV buffer shared by all slots instead of one per slot (--kv-unified)",
            "unified KV buffer (--kv-unified)", aims=("eviction", "batch-sweep")),
    # 8 slots share -c, so 2048 leaves each 256 tokens: long prompts and generations shift.
    Profile("llama-server", "context-shift", ("-c", "2048", "--context-shift"),
            "context shift: a slot that fills its 256 tokens drops its oldest half and goes on",
            "context shift", rows=(("--no-context-shift", "context shift"),), aims=("long-decode",)),
    Profile("llama-server", "spec-ngram", ("--spec-type", "ngram-simple"),
            "n-gram speculative decoding (drafts from the request's own tokens, no draft model)",
            "speculative decoding (n-gram)", rows=(("--spec-type none", "speculative decoding"),),
            aims=("batch-sweep", "n-mix")),  # drafts accepted and rejected across batch sizes
    # A draft model (models.build_draft: the tiny GGUF's weights with seeded noise) proposes up to
    # 4 tokens a step for every slot, batched in its own context beside the target's; the
    # target verifies them in one batch and keeps its KV up to the first rejected token.
    # `--spec-type draft-simple` is needed at this commit: `-md` alone loads the draft but leaves
    # the speculative types at `none`. `--spec-type none` keeps the draft loaded and drafts nothing.
    Profile("llama-server", "spec-draft", ("--spec-type", "draft-simple", "--spec-draft-n-max", "4"),
            "draft-model speculative decoding: a tiny noisy copy of the model drafts up to 4 tokens a step",
            "speculative decoding (draft model)", rows=(("--spec-type none", "speculative decoding"),),
            # drafts kept and thrown away as the batch shrinks, across n > 1, beside newcomers
            aims=("batch-sweep", "n-mix", "long-decode"), draft=True),
    Profile("vllm-cpu", "default", (), "the preset as it is: a 256 MiB KV pool, prefix caching", "none"),
    # A pool of 24 blocks of 32 (768 tokens, just over one 512-token sequence) with up to 32
    # sequences: a few concurrent requests fill it, and the scheduler preempts and recomputes.
    Profile("vllm-cpu", "preemption",
            ("--kv-cache-memory-bytes", str(768 * _TINY_KV_BYTES_PER_TOKEN), "--max-model-len", "512",
             "--max-num-seqs", "32"),
            "preemption and recompute: a 768-token KV pool (tiny model) shared by up to 32 sequences",
            "KV pool size (preemption)", aims=("eviction", "cancel-storm")),
    Profile("vllm-cpu", "spec-ngram",
            ("--speculative-config",
             '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":2,"prompt_lookup_max":4}'),
            "n-gram speculative decoding (prompt lookup, 3 tokens drafted per step)",
            "speculative decoding (n-gram)", aims=("batch-sweep", "n-mix")),
    # A step's token budget of 80 (2.5 blocks of 32): every prompt over 80 tokens is prefilled in
    # chunks, and the chunk ends fall alternately on and between block boundaries, next to the
    # decodes that share the step. At the preset's default budget only a burst of long prompts
    # chunks at all. vLLM wants the budget >= max-num-seqs, hence 32 sequences.
    Profile("vllm-cpu", "chunked-prefill", ("--max-num-batched-tokens", "80", "--max-num-seqs", "32"),
            "chunked prefill: an 80-token step budget, so prompts are prefilled 80 tokens a step",
            "chunked prefill (step token budget)", aims=("chunk-boundary", "page-boundary")),
    Profile("sglang-cpu", "default", (),
            "the preset as it is: page size 1, radix cache, overlap scheduler, an 8192-token KV pool", "none"),
    # The seed report's block size (sgl-project/sglang#22819): the radix cache then matches
    # prefixes in whole pages of 64, and prompts end on, before and after page boundaries.
    Profile("sglang-cpu", "page-64", ("--page-size", "64"),
            "a paged KV pool of 64-token pages (the seed report's block size): prefixes reused page by page",
            "paged KV (page size)", rows=(("--page-size 16", "paged KV (page size)"),),
            aims=("page-boundary", "burst-reuse", "tile-boundary")),
    # Prefill in 64-token chunks: every prompt over 64 tokens spans steps, next to decodes.
    Profile("sglang-cpu", "chunked", ("--chunked-prefill-size", "64"),
            "chunked prefill: prompts prefilled 64 tokens a step",
            "chunked prefill", aims=("chunk-boundary", "page-boundary")),
    # 1024 tokens of KV for up to 32 requests: a few long ones fill it, and the scheduler
    # retracts running requests and evicts the radix tree (retraction under memory pressure).
    Profile("sglang-cpu", "tiny-pool", ("--max-total-tokens", "1024", "--max-running-requests", "32"),
            "retraction and eviction: a 1024-token KV pool shared by up to 32 requests",
            "KV pool size (retraction, eviction)", aims=("eviction", "cancel-storm")),
    Profile("sglang-cpu", "no-overlap", ("--disable-overlap-schedule",),
            "the scheduler without its overlap of CPU scheduling and the forward pass",
            "overlap scheduler", aims=("batch-sweep", "burst-reuse")),
    # On the H200 (scripts/gpu_run.sh): bfloat16 with every GPU default on is what users serve;
    # float32 and eager mode take one mechanism out at a time.
    Profile("vllm-gpu", "default", (),
            "vLLM's GPU defaults: bfloat16, CUDA graphs, chunked prefill, prefix caching, block size 16", "none"),
    Profile("vllm-gpu", "float32", ("--dtype", "float32"),
            "float32 weights and KV: batch numerics a thousand times finer than bfloat16's",
            "bfloat16 numerics", aims=("batch-sweep", "burst-reuse")),
    Profile("vllm-gpu", "eager", ("--enforce-eager",),
            "no CUDA graphs and no torch.compile: every step launched eagerly",
            "CUDA graphs / torch.compile", aims=("batch-sweep",)),
    # The deterministic control as a whole campaign: with batch-invariant kernels (compute
    # capability 9.0 and up) a request's tokens no longer depend on its batch, so the bf16
    # divergences of `default` that were batch numerics must be gone here; what is left is not.
    Profile("vllm-gpu", "batch-invariant", (),
            "batch-invariant kernels (VLLM_BATCH_INVARIANT=1): outputs independent of the batch",
            "batch numerics (batch-invariant mode)", aims=("batch-sweep", "burst-reuse"),
            env=(("VLLM_BATCH_INVARIANT", "1"),)),
    # Batch invariance without CUDA graphs: on the H200 `batch-invariant` left decode tokens
    # differing alone vs loaded (docs/gpu/vllm.md); this takes the graphs' padded decode
    # batches out of that mode.
    Profile("vllm-gpu", "batch-invariant-eager", ("--enforce-eager",),
            "batch-invariant kernels with every step launched eagerly (no CUDA graphs, no torch.compile)",
            "CUDA graphs under batch invariance", aims=("batch-sweep", "burst-reuse"),
            env=(("VLLM_BATCH_INVARIANT", "1"),)),
    # ... and with Triton attention instead of FlashAttention 3: vllm#47069 / #51902 place the
    # batch dependence that survives batch invariance on Hopper in FA3's kernel choice (a decode
    # row takes another specialization once a prefill joins its batch) and report Triton
    # attention stable; eager, since graphs changed nothing there.
    Profile("vllm-gpu", "batch-invariant-triton", ("--attention-backend", "TRITON_ATTN", "--enforce-eager"),
            "batch-invariant kernels with Triton attention instead of FlashAttention 3, eager",
            "FlashAttention 3 under batch invariance", aims=("batch-sweep", "burst-reuse"),
            env=(("VLLM_BATCH_INVARIANT", "1"),)),
    Profile("sglang-gpu", "default", (),
            "SGLang's GPU defaults: bfloat16, page size 1, radix cache, overlap scheduler, CUDA graphs", "none"),
    Profile("sglang-gpu", "page-64", ("--page-size", "64"),
            "a paged KV pool of 64-token pages (the seed report's block size): prefixes reused page by page",
            "paged KV (page size)", rows=(("--page-size 16", "paged KV (page size)"),),
            aims=("page-boundary", "burst-reuse", "tile-boundary")),
    Profile("sglang-gpu", "no-overlap", ("--disable-overlap-schedule",),
            "the scheduler without its overlap of CPU scheduling and the forward pass",
            "overlap scheduler", aims=("batch-sweep", "burst-reuse")),
    # SGLang's deterministic control as a whole campaign (batch-invariant kernels; Triton
    # attention is one of the backends it takes).
    Profile("sglang-gpu", "deterministic", ("--enable-deterministic-inference",),
            "deterministic inference (batch-invariant kernels): outputs independent of the batch",
            "batch numerics (deterministic inference)", aims=("batch-sweep", "burst-reuse")),
    # servefuzz's two tiny adapters (models.ADAPTERS), loaded at start; requests alternate
    # between them and the base model (vLLM #38606, SGLang #27097 class).
    Profile("llama-server", "lora", (),
            "two LoRA adapters (rank 8, q and v), at scale 0 unless a request names one (lora: [{id, scale}])",
            "LoRA adapters (--lora-scaled)", aims=("lora-alternation",), adapters=True),
    Profile("vllm-cpu", "lora", (),
            "two LoRA adapters (rank 8, q and v) served as models lora-a and lora-b (punica on CPU)",
            "LoRA adapters (--enable-lora)", aims=("lora-alternation",), adapters=True),
)

# By preset, then by name: the one table `--profile` reads.
PROFILES: Mapping[str, Mapping[str, Profile]] = {
    preset: {p.name: p for p in _PROFILE_ROWS if p.preset == preset}
    for preset in dict.fromkeys(p.preset for p in _PROFILE_ROWS)
}


def profile(preset: str, name: str, *, model: Path | None = None) -> Profile:
    """The profile `name` of `preset`; UsageError (one line) for a name that is not there.

    `model`: the `--model` the preset serves, for a profile whose flags name files that must
    match it (the adapters: `adapters_for`; the draft model: `draft_for`); None for the default
    models."""
    named = PROFILES.get(preset)
    if named is None:
        raise UsageError(f"--profile needs --launch with a preset that has profiles ({', '.join(PROFILES)})")
    if name not in named:
        raise UsageError(f"--profile {name[:64]!r} is not a profile of {preset} (its profiles: {', '.join(named)})")
    chosen = named[name]
    if chosen.adapters:
        return dataclasses.replace(chosen, flags=chosen.flags + adapter_flags(preset, adapters_for(preset, model)))
    if chosen.draft:
        return dataclasses.replace(chosen, flags=chosen.flags + draft_flags(draft_for(model).parent))
    return chosen


def adapter_flags(preset: str, root: Path | None = None) -> tuple[str, ...]:
    """The flags that load servefuzz's tiny adapters into `preset`: those under `root` (a
    `servefuzz model build` DIR/lora; nothing is built, as a report shows them), else the
    default models' (`default_adapters`, built on first use).

    vLLM: `--enable-lora` with the rank and count they need, each adapter a model of its own
    (`--lora-modules NAME=PATH`, one flag holding both: vLLM keeps only the last flag given).
    llama-server: `--lora-scaled FILE:0,...` loads each at scale 0, so a request that names no
    adapter runs the base model (`--lora` loads at scale 1 and `--lora-init-without-apply` does
    not change what the server's slots apply at this commit, docs/engines.md); the adapter's
    name is its file's stem, as `/lora-adapters` lists the path.
    """
    from servefuzz.models import ADAPTERS, adapter_paths

    paths = default_adapters() if root is None else adapter_paths(root)
    if preset == "vllm-cpu":
        return ("--enable-lora", "--max-lora-rank", "8", "--max-loras", str(len(ADAPTERS)),
                "--lora-modules", *(f"{name}={path}" for name, path in zip(ADAPTERS, paths.hf, strict=True)))
    return ("--lora-scaled", ",".join(f"{path}:0" for path in paths.gguf))


def adapters_for(preset: str, model: Path | None) -> Path | None:
    """The adapters' folder for the model `--model` names (None: the default models', which
    `adapter_flags` builds on first use): the DIR/lora that `servefuzz model build` wrote beside
    DIR's model. UsageError (one line) when there are none: an adapter must fit its model's
    shapes, and one made for another model stops the server's start, or loads and means nothing."""
    from servefuzz.models import adapter_paths

    if model is None:
        return None
    served = gguf_model(model) if preset == "llama-server" else hf_model_dir(model)
    if served.parent == _cached(_DEFAULT_MODELS):
        return None  # the cache's models predate the adapters, which are built beside them
    root = served.parent / "lora"
    paths = adapter_paths(root)
    if not all(p.exists() for p in (paths.gguf if preset == "llama-server" else paths.hf)):
        raise UsageError(f"--model {model}: no adapters beside it ({root}); the lora profile needs the ones "
                         "`servefuzz model build` writes with it")
    return root


def draft_for(model: Path | None) -> Path:
    """The draft model for the GGUF `--model` names (None: the default models, `default_draft`):
    the one `servefuzz model build` wrote beside it (DIR/draft/tiny-draft.gguf next to
    DIR/tiny.gguf). UsageError (one line) when there is none: a draft must share the model's
    vocabulary, and llama-server given one that does not starts anyway and drafts nothing
    ("the target and draft vocabs are not compatible", `/slots` speculative false)."""
    from servefuzz.models import draft_path

    if model is None:
        return default_draft()
    gguf = gguf_model(model)
    if gguf.parent == _cached(_DEFAULT_MODELS):
        return default_draft()  # the cache's models predate the draft, which is built beside them
    beside = draft_path(gguf.parent / "draft")
    if not beside.is_file():
        raise UsageError(f"--model {model}: no draft model beside it ({beside}); the spec-draft profile needs the "
                         "one `servefuzz model build` writes with it")
    return beside


def draft_flags(root: Path) -> tuple[str, ...]:
    """The flag that loads servefuzz's tiny draft model under `root` (a `servefuzz model build`
    DIR/draft) into llama-server: `-md FILE`. Nothing is built here."""
    from servefuzz.models import draft_path

    return ("-md", str(draft_path(root)))


# -- models for the presets ------------------------------------------------------------------


_DEFAULT_MODELS = "tiny-seed0"  # the cache's folder of the default models (`default_models`)


def _cached(name: str) -> Path:
    """`cache_dir()/models/NAME`, where `_built_once` builds NAME (nothing is built here)."""
    return cache_dir() / "models" / name


def _built_once(name: str, build: Callable[[Path], object]) -> Path:
    """`cache_dir()/models/NAME`, built by `build(folder)` on first use: built aside and renamed,
    so a half-built folder is never used; the `.complete` mark says it was finished."""
    root = _cached(name)
    if not (root / ".complete").is_file():
        root.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root.parent))
        build(staging)
        (staging / ".complete").touch()
        if not (root / ".complete").is_file():  # a half-built folder of a process that died
            shutil.rmtree(root, ignore_errors=True)
        try:
            staging.rename(root)
        except OSError:
            # Another process (a parallel test worker, a second campaign) built it first: the
            # builds are the same bits (seed 0), so keep theirs.
            shutil.rmtree(staging, ignore_errors=True)
            if not (root / ".complete").is_file():
                raise
    return root


def default_models() -> Path:
    """The tiny float32 models (seed 0) in the cache, built on first use: what a preset serves
    when the user names no `--model`."""
    from servefuzz.models import build_models  # needs the `models` extra; only when used

    return _built_once(_DEFAULT_MODELS, lambda folder: build_models(folder, dtype="float32", seed=0))


def default_adapters() -> AdapterPaths:
    """servefuzz's tiny LoRA adapters for the default models (seed 0) in the cache, built on first
    use beside them (the models' own folder predates adapters and stays as it is)."""
    from servefuzz.models import adapter_paths, build_adapters  # needs the `models` extra; only when used

    return adapter_paths(_built_once("tiny-seed0-lora", lambda folder: build_adapters(folder, seed=0)))


def default_draft() -> Path:
    """servefuzz's tiny draft model for the default GGUF (seed 0) in the cache, built on first use
    beside it (`tiny-seed0-draft/`; the models' own folder predates the draft and stays as it is)."""
    from servefuzz.models import build_draft, draft_path  # needs the `models` extra; only when used

    return draft_path(_built_once("tiny-seed0-draft", lambda folder: build_draft(folder, seed=0)))


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
