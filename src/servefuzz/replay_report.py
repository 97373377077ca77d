"""The replay verdict: did a finding's divergence come back, and the report that says so.

Given a finding and the R histories of replaying its scenario, `replay_result` names the
diverged requests with their output variants and counts, the stable ones, and whether the
expected divergence reproduced; `render_replay_report` prints it in the shape of the seed
report's replay block. The CLI prints the text and exits 0 when `confirmed`, 1 otherwise.

    >>> from servefuzz.anomaly import Anomaly, Oracle, Verdict
    >>> from servefuzz.finding import Finding, TargetInfo
    >>> from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
    >>> from servefuzz.workload import RequestSpec, Scenario
    >>> sc = Scenario(1, (RequestSpec("r01", 0.0, (3, 4), 2),))
    >>> f = Finding(3, 1, sc, TargetInfo("reference", "http://127.0.0.1:1"),
    ...             (Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r01", "r01 diverged"),))
    >>> runs = [RunHistory(i, "load", (RequestRecord("r01", i, "load", Status.OK, 0.0,
    ...         choices=(ChoiceRecord(0, (5, i)),)),)) for i in range(3)]
    >>> r = replay_result(f, runs)
    >>> r.confirmed, r.reproduced, r.stable
    (True, ('r01',), ())

A replay is CONFIRMED when at least one expected request diverged (these bugs are
timing-sensitive; the count of reproduced expectations is printed beside it), or, for a finding
about a crash, hang, 5xx or malformed answer, when the replay shows that same failure again.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from servefuzz.anomaly import Anomaly, Variant, Verdict
from servefuzz.finding import Finding
from servefuzz.history import RunHistory
from servefuzz.oracles import brief, liveness, replay_consistency

__all__ = ["DivergedRequest", "ReplayResult", "replay_result", "render_replay_report"]

_RULE = "=" * 60


@dataclass(frozen=True)
class DivergedRequest:
    """A request that gave more than one output over the replay's runs."""

    request_id: str
    expected: bool
    variants: tuple[Variant, ...]
    verdict: Verdict
    why: str  # the short clause of its deciding divergence


@dataclass(frozen=True)
class ReplayResult:
    """What one replay of a finding (R runs of its scenario) showed."""

    finding_name: str
    bug: str
    expected: tuple[str, ...]
    expected_failure: Verdict | None  # the finding's own verdict when it is not a divergence
    runs: int
    total: int
    diverged: tuple[DivergedRequest, ...]
    stable: tuple[str, ...]
    undetermined: tuple[str, ...]
    failures: tuple[Anomaly, ...]

    @property
    def reproduced(self) -> tuple[str, ...]:
        return tuple(d.request_id for d in self.diverged if d.expected)

    @property
    def confirmed(self) -> bool:
        if self.expected:
            return bool(self.reproduced)
        return any(a.verdict is self.expected_failure for a in self.failures)


def replay_result(finding: Finding, histories: Sequence[RunHistory]) -> ReplayResult:
    """Judge a replay of `finding` from its R run histories (pure)."""
    outcome = replay_consistency(histories)
    expected = finding.expected_diverging
    diverged = tuple(
        DivergedRequest(
            a.request_id,
            a.request_id in expected,
            a.variants,
            a.verdict,
            brief(min(a.divergences, key=lambda d: (d.verdict.rank, d.position))),
        )
        for a in outcome.anomalies
    )
    # Requests of the scenario that never answered determinately are undetermined too.
    known = {r.id for r in finding.scenario.requests} | set(outcome.undetermined)
    undetermined = tuple(sorted(known - {*outcome.diverged, *outcome.stable}))
    return ReplayResult(
        finding_name=finding.filename,
        bug=f"{finding.verdict.value} ({finding.signature})",
        expected=expected,
        expected_failure=None if finding.verdict.is_divergence else finding.verdict,
        runs=len(histories),
        total=len(finding.scenario.requests),
        diverged=diverged,
        stable=outcome.stable,
        undetermined=undetermined,
        failures=tuple(liveness(histories)),
    )


def render_replay_report(result: ReplayResult) -> str:
    """The replay block of the seed report, line for line in spirit."""
    failure = result.expected_failure.value if result.expected_failure else "no failure"
    expect = f"{list(result.expected)} to diverge" if result.expected else f"{failure} again"
    lines = [
        _RULE,
        f"  Finding  : {result.finding_name}",
        f"  Bug      : {result.bug}",
        f"  Expect   : {expect}",
        f"  Runs     : {result.runs}",
        _RULE,
        "",
        f"  [DIVERGED — {len(result.diverged)}/{result.total} requests non-deterministic]",
    ]
    for d in result.diverged:
        lines += ["", f"    {d.request_id}  {'✓ (expected)' if d.expected else '(unexpected)'}"]
        lines += _variant_lines(d.variants)
        lines.append(f"      verdict: {d.verdict.value} ({d.why})")
    lines += ["", f"  [STABLE — {len(result.stable)} requests consistent across all runs]"]
    lines += _id_block(result.stable)
    if result.undetermined:
        lines += ["", f"  [UNDETERMINED — {len(result.undetermined)} requests without two determinate answers]"]
        lines += _id_block(result.undetermined)
    if result.failures:
        lines += ["", f"  [FAILURES — {len(result.failures)}]"]
        lines += [f"    {a.verdict.value}: {a.summary}" for a in result.failures]
    verdict = "CONFIRMED" if result.confirmed else "NOT REPRODUCED"
    if result.expected:
        tally = f"{len(result.reproduced)}/{len(result.expected)} expected divergences reproduced"
    else:
        tally = f"{failure} {'seen' if result.confirmed else 'not seen'} again"
    lines += ["", f"  RESULT: {verdict}  ({tally})", _RULE]
    return "\n".join(lines) + "\n"


def _variant_lines(variants: Sequence[Variant]) -> list[str]:
    choices = sorted({v.choice for v in variants})
    lines: list[str] = []
    for choice in choices:
        of_choice = [v for v in variants if v.choice == choice]
        total = sum(v.count for v in of_choice)
        prefix = f"choice {choice} " if len(choices) > 1 or choice else ""
        lines += [f"      {prefix}variant {i}: {v.preview()}  ({v.count}/{total})" for i, v in enumerate(of_choice, 1)]
    return lines


def _id_block(ids: Sequence[str]) -> list[str]:
    if not ids:
        return []
    return textwrap.wrap(
        ", ".join(ids), width=76, initial_indent="    ", subsequent_indent="    ", break_on_hyphens=False
    )
