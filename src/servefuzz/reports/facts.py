"""What every report says about a finding, computed once: the server command, the request
trace, the diverged outputs, the deciding divergence and the request timeline.

issue.md and report.html render these facts; neither computes anything of its own.

    >>> from servefuzz.server_facts import TargetInfo
    >>> print(server_command(TargetInfo("reference", "http://127.0.0.1:1", faults=("stale-padding",),
    ...                                 server_args={"page_size": 64, "disable_cuda_graph": False})))
    servefuzz serve-reference --page-size 64 --fault stale-padding --port 30000
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servefuzz.anomaly import Divergence, Variant, deciding
from servefuzz.engines.registry import SPECS, spec_of
from servefuzz.finding import Finding
from servefuzz.history import RunHistory
from servefuzz.reports.commands import server_command

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

def repro_command(finding: Finding, runs: int = 10) -> str:
    port = spec_of(finding.target.engine).default_port
    return f"python3 repro_full.py --base-url http://127.0.0.1:{port} --runs {runs}"


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


