"""What every report says about a finding, computed once: the server command, the request
trace, the diverged outputs, the deciding divergence and the request timeline.

issue.md and report.html render these facts; neither computes anything of its own.

    >>> from servefuzz.finding import TargetInfo
    >>> print(server_command(TargetInfo("reference", "http://127.0.0.1:1", faults=("stale-padding",),
    ...                                 server_args={"page_size": 64, "disable_cuda_graph": False})))
    servefuzz serve-reference --page-size 64 --fault stale-padding --port 30000
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servefuzz.anomaly import Divergence, Variant, deciding
from servefuzz.engine_flags import (
    Flag,
    Kind,
    check_flags,
    env_name,
    fault_name,
    flag_words,
)
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
from servefuzz.engines.registry import SPECS, spec_of
from servefuzz.engines.sglang import FLAGS as SGLANG_FLAGS
from servefuzz.engines.vllm import FLAGS as VLLM_FLAGS
from servefuzz.errors import UsageError
from servefuzz.finding import Finding, TargetInfo
from servefuzz.history import RunHistory
from servefuzz.sanitize import one_line

__all__ = [
    "DEFAULT_PORTS",
    "TraceRow",
    "Bar",
    "server_command",
    "repro_command",
    "trace_rows",
    "TriageRow",
    "triage_rows",
    "alone_and_loaded",
    "diverged_variants",
    "deciding_divergence",
    "server_death",
    "timeline",
]

# Where each engine listens by default (`EngineSpec.default_port`): the repro command line points there.
DEFAULT_PORTS = {name: spec.default_port for name, spec in SPECS.items()}

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


def repro_command(finding: Finding, runs: int = 10) -> str:
    port = spec_of(finding.target.engine).default_port
    return f"python3 repro.py --base-url http://127.0.0.1:{port} --runs {runs}"


@dataclass(frozen=True)
class TraceRow:
    """One line of the request trace table, as in the seed report."""

    id: str
    offset_ms: float
    prompt_len: int
    prefix_len: int
    max_tokens: int
    n: int
    diverged: bool
    notes: str  # "stream", "cancelled after 30 ms"


def trace_rows(finding: Finding) -> list[TraceRow]:
    expected = set(finding.expected_diverging)
    rows = []
    for r in finding.scenario.requests:
        notes = [*(["stream"] if r.stream else []), *([f"cancelled after {r.cancel_after_ms:g} ms"] if r.cancelled else [])]
        rows.append(TraceRow(r.id, r.offset_ms, r.prompt_len, r.prefix_len, r.max_tokens, r.n, r.id in expected, ", ".join(notes)))
    return rows


@dataclass(frozen=True)
class TriageRow:
    """One row of the triage matrix as reports show it."""

    name: str
    change: str  # the flags and environment the variant set; "(unchanged)" for the baseline
    component: str
    rate: str
    outcome: str  # "cured", "reproduces", "-" or "error: ..."
    cured: bool
    reproduced: bool


def triage_rows(finding: Finding) -> list[TriageRow]:
    """The baseline, then every variant; empty without a triage."""
    triage = finding.triage
    if triage is None:
        return []
    rows = []
    for o in (triage.baseline, *triage.variants):
        cured = o in triage.cures
        if o.error:
            outcome = f"error: {o.error}"
        elif o is triage.baseline:
            outcome = "reproduces" if o.reproduced else "did not reproduce: nothing can be called cured"
        else:
            decided, p = triage.decision(o)
            outcome = decided + ("" if p is None else f" (p = {p:.2g})")
        change = " ".join([*o.flags, *(f"{k}={v}" for k, v in o.env.items())]) or "(unchanged)"
        rows.append(TriageRow(o.name, change, o.component, str(o.interval), outcome, cured, o.reproduced > 0))
    return rows


def diverged_variants(finding: Finding) -> dict[str, tuple[Variant, ...]]:
    """Output variants of each diverging request: the confirmation's counts (every run), else
    the anomalies' own variants."""
    if finding.confirmation is not None and finding.confirmation.variants:
        return {rid: tuple(vs) for rid, vs in finding.confirmation.variants.items() if rid in finding.expected_diverging}
    out: dict[str, tuple[Variant, ...]] = {}
    for a in finding.anomalies:
        if a.verdict.is_divergence and a.variants and a.request_id not in out:
            out[a.request_id] = a.variants
    return out


def alone_and_loaded(variants: Sequence[Variant]) -> tuple[Variant | None, Variant | None]:
    """The answer a request gave alone (its variant labelled "alone"; None when it was never
    run alone, as when runs of one scenario disagree among themselves) and the most common
    answer it gave otherwise. Confirmation lists variants by count, so the wrong answer often
    comes first.

    >>> load, alone = Variant(0, (1,), "x", 9, (0,), "load"), Variant(0, (2,), "y", 1, (1,), "alone")
    >>> alone_and_loaded((load, alone)) == (alone, load)
    True
    """
    alone = next((v for v in variants if v.label == "alone"), None)
    others = sorted((v for v in variants if v is not alone), key=lambda v: -v.count)
    return alone, (others[0] if others else None)


def deciding_divergence(finding: Finding) -> Divergence | None:
    """The divergence a report shows as the evidence: the most severe, earliest one of a request
    expected to diverge (the one the replay checks), else of any request."""
    divergences = [d for a in finding.anomalies for d in a.divergences]
    expected = [d for d in divergences if d.request_id in finding.expected_diverging]
    return deciding(expected or divergences)


def server_death(finding: Finding) -> tuple[int | None, str] | None:
    """The exit status and log tail of a server that died, when servefuzz launched it and
    recorded them with the crash (None otherwise)."""
    for a in finding.anomalies:
        if a.verdict.value == "crash" and a.evidence.get("log_tail") is not None:
            code = a.evidence.get("exit_code")
            return (code if isinstance(code, int) else None), str(a.evidence["log_tail"])
    return None


@dataclass(frozen=True)
class Bar:
    """One request on the timeline: when it left and, when a run history says, when it ended."""

    id: str
    start_ms: float
    end_ms: float | None
    diverged: bool
    cancelled: bool


def timeline(finding: Finding, histories: Sequence[RunHistory] = ()) -> tuple[list[Bar], str]:
    """The requests of the finding on a time axis, and where the times come from.

    End times come from a loaded run of this very scenario among `histories` (a campaign's
    histories.jsonl holds every run of every iteration: the run whose requests and offsets are
    exactly the scenario's is one of this finding's). Without one, only send times are known.
    """
    expected = set(finding.expected_diverging)
    wanted = {(r.id, round(r.offset_ms, 3)) for r in finding.scenario.requests}
    run = next(
        (h for h in histories if h.label == "load" and {(r.request_id, round(r.scheduled_ms, 3)) for r in h.records} == wanted),
        None,
    )
    records = run.by_id() if run is not None else {}
    bars = []
    for spec in finding.scenario.requests:
        rec = records.get(spec.id)
        start = rec.sent_ms if rec is not None and rec.sent_ms is not None else spec.offset_ms
        bars.append(Bar(spec.id, start, rec.end_ms if rec is not None else None, spec.id in expected, spec.cancelled))
    source = (
        f"send and end times of loaded run {run.run} of this scenario" if run is not None
        else "scheduled send times only: no run of this scenario was found beside the finding"
    )
    return bars, source


def _profile_flags(preset: str, profile: Profile) -> tuple[str, ...]:
    """A profile's flags as its launch has them; a LoRA profile's adapters as LORA_DIR/NAME
    (LORA_DIR: `servefuzz model build DIR`'s DIR/lora) and a draft profile's draft model as
    DRAFT_DIR/tiny-draft.gguf (DRAFT_DIR: its DIR/draft), since their real paths are the cache's."""
    return (profile.flags + (adapter_flags(preset, Path("LORA_DIR")) if profile.adapters else ())
            + (draft_flags(Path("DRAFT_DIR")) if profile.draft else ()))
