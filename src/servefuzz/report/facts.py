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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servefuzz.anomaly import Divergence, Variant
from servefuzz.finding import Finding, TargetInfo
from servefuzz.history import RunHistory

__all__ = [
    "DEFAULT_PORTS",
    "TraceRow",
    "Bar",
    "server_command",
    "repro_command",
    "trace_rows",
    "TriageRow",
    "triage_rows",
    "diverged_variants",
    "deciding_divergence",
    "server_death",
    "timeline",
]

# Where each engine listens by default: the repro command line points there.
DEFAULT_PORTS = {"sglang": 30000, "reference": 30000, "vllm": 8000, "openai": 8000, "llamacpp": 8080}

# server arg -> launch flag, for the args that decide whether these bugs show (the ones the
# seeds' bisection varies). Other args are in the report's environment section.
_SGLANG_FLAGS = (
    ("context_length", "--context-length"),
    ("mem_fraction_static", "--mem-fraction-static"),
    ("page_size", "--page-size"),
    ("max_total_tokens", "--max-total-tokens"),
    ("chunked_prefill_size", "--chunked-prefill-size"),
    ("max_running_requests", "--max-running-requests"),
    ("attention_backend", "--attention-backend"),
    ("kv_cache_dtype", "--kv-cache-dtype"),
    ("tp_size", "--tp-size"),
    ("disable_radix_cache", "--disable-radix-cache"),
    ("disable_overlap_schedule", "--disable-overlap-schedule"),
    ("disable_cuda_graph", "--disable-cuda-graph"),
    ("enable_deterministic_inference", "--enable-deterministic-inference"),
)
_REFERENCE_FLAGS = (
    ("page_size", "--page-size"),
    ("max_total_tokens", "--max-total-tokens"),
    ("chunked_prefill_size", "--chunked-prefill-size"),
    ("max_running_requests", "--max-running-requests"),
    ("context_length", "--context-length"),
    ("model_seed", "--model-seed"),
    ("disable_radix_cache", "--disable-radix-cache"),
    ("disable_overlap_schedule", "--disable-overlap-schedule"),
    ("disable_cuda_graph", "--disable-cuda-graph"),
    ("enable_deterministic_inference", "--enable-deterministic-inference"),
)
_VLLM_FLAGS = (
    ("max_model_len", "--max-model-len"),
    ("block_size", "--block-size"),
    ("enable_prefix_caching", "--enable-prefix-caching"),
    ("gpu_memory_utilization", "--gpu-memory-utilization"),
    ("cache_dtype", "--kv-cache-dtype"),
)


def server_command(target: TargetInfo, *, multiline: bool = False) -> str:
    """A shell command that starts a server like the one the finding was made on; `multiline`
    puts each flag on a line of its own, as the seed report does."""
    args = target.server_args
    port = str(DEFAULT_PORTS.get(target.engine, 8000))
    env = [f"{k}={shlex.quote(str(v))}" for k, v in sorted(target.env.items())]
    if target.engine == "reference":
        argv = ["servefuzz", "serve-reference", *_flags(args, _REFERENCE_FLAGS)]
        argv += [w for fault in target.faults for w in ("--fault", fault)]
    elif target.engine == "sglang":
        model = str(args.get("model_path") or "MODEL")
        argv = ["python3", "-m", "sglang.launch_server", "--model-path", model, *_flags(args, _SGLANG_FLAGS)]
    elif target.engine == "vllm":
        # The dev mode mounts /reset_prefix_cache, which servefuzz and repro.py flush with.
        env = ["VLLM_SERVER_DEV_MODE=1", *(e for e in env if not e.startswith("VLLM_SERVER_DEV_MODE="))]
        model = str(args.get("model") or "MODEL")
        argv = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", model, *_flags(args, _VLLM_FLAGS)]
    elif target.engine == "llamacpp":
        slots = args.get("total_slots")
        ctx = args.get("slot_n_ctx")
        argv = ["llama-server", "-m", str(args.get("model_path") or "MODEL.gguf"), "--host", "127.0.0.1"]
        if isinstance(slots, int):
            argv += ["-np", str(slots)]
            if isinstance(ctx, int):
                argv += ["-c", str(slots * ctx)]
    else:
        served = args.get("model")
        return f"# start the OpenAI-compatible server{f' serving {served}' if served else ''} on port {port}"
    argv += ["--port", port]
    words = [*env, *(shlex.quote(a) for a in argv)]
    if not multiline:
        return " ".join(words)
    # A quoted value starts with a quote, so only real flags start a line.
    return "".join((" \\\n    " if w.startswith("--") and i else " " if i else "") + w for i, w in enumerate(words))


def _flags(args: Mapping[str, Any], table: Sequence[tuple[str, str]]) -> list[str]:
    out: list[str] = []
    for key, flag in table:
        value = args.get(key)
        if value is True:
            out.append(flag)
        elif value is not None and value is not False:
            out += [flag, str(value)]
    return out


def repro_command(finding: Finding, runs: int = 10) -> str:
    port = DEFAULT_PORTS.get(finding.target.engine, 8000)
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
        outcome = f"error: {o.error}" if o.error else "cured" if cured else "reproduces" if o.reproduced else "-"
        change = " ".join([*o.flags, *(f"{k}={v}" for k, v in o.env.items())]) or "(unchanged)"
        rows.append(TriageRow(o.name, change, o.component, o.rate, outcome, cured, o.reproduced > 0))
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


def deciding_divergence(finding: Finding) -> Divergence | None:
    """The divergence a report shows as the evidence: the most severe, earliest one of a request
    expected to diverge (the one the replay checks), else of any request."""
    divergences = [d for a in finding.anomalies for d in a.divergences]
    expected = [d for d in divergences if d.request_id in finding.expected_diverging]
    return min(expected or divergences, key=lambda d: (d.verdict.rank, d.position), default=None)


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
