"""The shell command a report prints to start a server like the one a finding was made on.

One builder per launch preset (`EngineSpec.cpu_preset` / `gpu_preset`), each from that preset's
own argv builder in `engines`, so that a report prints the command servefuzz ran; for a server
servefuzz did not start, the engine's plain command with the flags its typed table lets through.
Everything comes from the finding file, so from the server or whoever wrote the file: flags only
through `engine_flags`, environment names only when they are variable names, every word
shell-quoted, and what does not type-check is left out and named (its key, never its value).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from servefuzz.engine_flags import Flag, Kind, check_flags, env_name, fault_name, flag_words
from servefuzz.engines import (
    PROFILES,
    Profile,
    adapter_flags,
    draft_flags,
    llama_server_preset_argv,
    sglang_argv,
    sglang_env,
    sglang_gpu_argv,
    vllm_argv,
    vllm_env,
    vllm_gpu_argv,
    with_flags,
    without_flags,
)
from servefuzz.engines.llamacpp import FLAGS as LLAMACPP_FLAGS
from servefuzz.engines.reference import FLAGS as REFERENCE_FLAGS
from servefuzz.engines.registry import spec_of
from servefuzz.engines.sglang import FLAGS as SGLANG_FLAGS
from servefuzz.engines.vllm import FLAGS as VLLM_FLAGS
from servefuzz.errors import UsageError
from servefuzz.finding import TargetInfo
from servefuzz.sanitize import one_line

__all__ = ["server_command"]

# What a server command is built of: (argv, environment, what was left out); a string is the
# whole answer (a comment: no command servefuzz can write).
_Built = tuple[list[str], dict[str, str], list[str]] | str


def server_command(target: TargetInfo, *, multiline: bool = False) -> str:
    """A shell command that starts a server like the one the finding was made on; `multiline`
    puts each flag on a line of its own, as the seed report does.

    The server args and environment come from the finding, so from the server or whoever wrote
    the file: flags only through each engine's typed table (`engine_flags`), environment names
    only when they are variable names, every word shell-quoted. What does not type-check is left
    out and named in a comment line (its key, never its value), so the block is safe to paste.
    The command is the one of the preset that starts the engine on the finding's device
    (`EngineSpec.preset`).
    """
    spec = spec_of(target.engine)
    port = str(spec.default_port)
    env = {k: str(v) for k, v in sorted(target.env.items()) if env_name(k)}
    refused = [] if len(env) == len(target.env) else ["environment entries whose names are not variable names"]
    built = _COMMANDS.get(spec.preset(target.device), _other_command)(target, env, port)
    if isinstance(built, str):
        return built
    argv, env, more = built
    refused += more
    argv += ["--port", port]
    words = [*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *(shlex.quote(a) for a in argv)]
    if not multiline:
        command = " ".join(words)
    else:
        # A quoted value starts with a quote, so only real flags start a line.
        command = "".join((" \\\n    " if w.startswith("--") and i else " " if i else "") + w for i, w in enumerate(words))
    if refused:
        command += "\n# left out, not valid launch settings: " + ", ".join(refused)
    return command


def _reference_command(target: TargetInfo, env: dict[str, str], port: str) -> _Built:
    flags, bad = flag_words(REFERENCE_FLAGS, target.server_args)
    faults = [f for f in target.faults if _is_fault(f)]
    argv = ["servefuzz", "serve-reference", *flags, *(w for f in faults for w in ("--fault", f))]
    return argv, env, [*bad, *(["faults not spelled like fault names"] if len(faults) < len(target.faults) else [])]


def _gpu_command(preset_name: str, preset: Sequence[str], target: TargetInfo, env: dict[str, str]) -> _Built:
    # Made by `--launch vllm-gpu` / `sglang-gpu`: the GPU preset's command with the profile's
    # flags and variables from servefuzz's table. The bundle's path was the GPU machine's
    # own: an engine installed with pip needs none (MODEL_DIR as above).
    profile = PROFILES[preset_name].get(target.profile or "")
    flags = with_flags(preset[1:], profile.flags) if profile is not None else list(preset[1:])
    argv = ["python3", *without_flags(flags, {"--port"})]
    if profile is not None:
        env = {**env, **dict(profile.env)}
    return argv, env, []


def _vllm_gpu_command(target: TargetInfo, env: dict[str, str], port: str) -> _Built:
    dtype = str(target.server_args.get("dtype") or "bfloat16")
    preset = vllm_gpu_argv("python3", Path("MODEL_DIR"), dtype if dtype != "auto" else "bfloat16",
                           block_size=target.page_size or 16)
    env = {"VLLM_SERVER_DEV_MODE": "1", **{k: v for k, v in env.items() if k != "VLLM_SERVER_DEV_MODE"}}
    return _gpu_command("vllm-gpu", preset, target, env)


def _sglang_gpu_command(target: TargetInfo, env: dict[str, str], port: str) -> _Built:
    preset = sglang_gpu_argv("python3", Path("MODEL_DIR"), page_size=target.page_size or 1)
    return _gpu_command("sglang-gpu", preset, target, env)


def _sglang_cpu_command(target: TargetInfo, env: dict[str, str], port: str) -> _Built:
    args = target.server_args
    if "sgl_kernel" not in target.standins:
        flags, bad = flag_words(SGLANG_FLAGS, args)
        return ["python3", "-m", "sglang.launch_server", "--model-path", _path(args.get("model_path"), "MODEL"), *flags], env, list(bad)
    # Made by `--launch sglang-cpu`: the preset's command and environment (the CPU engine,
    # the stand-in kernel package on PYTHONPATH, Triton's interpreter where the version needs
    # it) with the profile's flags from servefuzz's table; MODEL_DIR is `servefuzz model
    # build DIR`'s DIR/hf-float32, STANDINS_DIR servefuzz's src/servefuzz/standins.
    page = target.page_size if target.page_size else 1
    preset = sglang_argv(Path("MODEL_DIR"), "", dtype=str(args.get("dtype") or "float32"), page_size=page)
    profile = PROFILES["sglang-cpu"].get(target.profile or "")
    flags = with_flags(preset[1:], _profile_flags("sglang-cpu", profile)) if profile is not None else preset[1:]
    argv = ["python3", *without_flags(flags, {"--port"})]
    cpu = sglang_env(target.version)
    cpu = {k: v for k, v in cpu.items() if k in ("SGLANG_USE_CPU_ENGINE", "TRITON_INTERPRET")}
    return argv, {**cpu, "PYTHONPATH": "STANDINS_DIR", **{k: v for k, v in env.items() if k != "PYTHONPATH"}}, []


def _vllm_cpu_command(target: TargetInfo, env: dict[str, str], port: str) -> _Built:
    args = target.server_args
    if (profile := PROFILES["vllm-cpu"].get(target.profile or "")) is not None:
        # Made by `--launch vllm-cpu --profile NAME`: the preset's command and environment with
        # the profile's flags from servefuzz's table. The server reports its served name, not
        # the folder: MODEL_DIR is `servefuzz model build DIR`'s DIR/hf-<dtype>.
        page = target.page_size if target.page_size else 32
        preset = vllm_argv(Path("MODEL_DIR"), str(args.get("dtype") or "float32"), block_size=page)
        argv = ["python3", *without_flags(with_flags(preset[1:], _profile_flags("vllm-cpu", profile)), {"--port"})]
        return argv, {**vllm_env(), **env}, []
    # The dev mode mounts /reset_prefix_cache, which servefuzz and repro.py flush with.
    env = {"VLLM_SERVER_DEV_MODE": "1", **{k: v for k, v in env.items() if k != "VLLM_SERVER_DEV_MODE"}}
    flags, bad = flag_words(VLLM_FLAGS, args)
    return ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", _path(args.get("model"), "MODEL"), *flags], env, list(bad)


def _llama_server_command(target: TargetInfo, env: dict[str, str], port: str) -> _Built:
    args = target.server_args
    checked = check_flags(LLAMACPP_FLAGS, args)
    values = {flag.key: value for flag, value in checked.values}
    model = _path(args.get("model_path"), "MODEL.gguf")
    profile = PROFILES["llama-server"].get(target.profile or "")
    if profile is not None:
        # Made by `--launch llama-server --profile NAME`: that exact command line, which the
        # server's own answers cannot tell (its numerics flags, the RAM cache). The profile's
        # flags come from servefuzz's own table, looked up by the recorded name.
        slots = values.get("total_slots")
        preset = llama_server_preset_argv(Path(model), slots=slots if isinstance(slots, int) else 8)
        # The slot erase needs a save path; this machine's temporary folder is no one else's.
        flags = with_flags(preset[1:], [*_profile_flags("llama-server", profile), "--slot-save-path", "/tmp"])
        argv = ["llama-server", *without_flags(flags, {"--port"})]
    else:
        argv = ["llama-server", "-m", model, "--host", "127.0.0.1"]
        if "total_slots" in values:
            argv += ["-np", str(values["total_slots"])]
            if "slot_n_ctx" in values:
                argv += ["-c", str(values["total_slots"] * values["slot_n_ctx"])]
    return argv, env, [key for key, _ in checked.refused]


def _other_command(target: TargetInfo, env: dict[str, str], port: str) -> _Built:
    served = target.server_args.get("model")
    return f"# start the OpenAI-compatible server{f' serving {one_line(served)}' if served else ''} on port {port}"


# The command of each launch preset (`EngineSpec.cpu_preset` / `gpu_preset`); an engine with none: a comment.
_COMMANDS: Mapping[str, Callable[[TargetInfo, dict[str, str], str], _Built]] = {
    "reference": _reference_command,
    "vllm-cpu": _vllm_cpu_command,
    "vllm-gpu": _vllm_gpu_command,
    "sglang-cpu": _sglang_cpu_command,
    "sglang-gpu": _sglang_gpu_command,
    "llama-server": _llama_server_command,
}


def _path(value: Any, placeholder: str) -> str:
    try:
        return str(Flag("model", "-m", Kind.PATH).check(value) or placeholder)
    except ValueError:
        return placeholder


def _is_fault(name: str) -> bool:
    try:
        fault_name(name)
    except UsageError:
        return False
    return True


def _profile_flags(preset: str, profile: Profile) -> tuple[str, ...]:
    """A profile's flags as its launch has them; a LoRA profile's adapters as LORA_DIR/NAME
    (LORA_DIR: `servefuzz model build DIR`'s DIR/lora) and a draft profile's draft model as
    DRAFT_DIR/tiny-draft.gguf (DRAFT_DIR: its DIR/draft), since their real paths are the cache's."""
    return (profile.flags + (adapter_flags(preset, Path("LORA_DIR")) if profile.adapters else ())
            + (draft_flags(Path("DRAFT_DIR")) if profile.draft else ()))
