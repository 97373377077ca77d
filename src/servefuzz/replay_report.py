"""The replay verdict: did a finding's divergence come back, and the report that says so.

Given a finding and the R histories of replaying its scenario, `replay_result` names the
diverged requests with their output variants and counts, the stable ones, and whether the
expected divergence reproduced; `render_replay_report` prints it in the shape of the seed
report's replay block. The CLI prints the text and exits 0 when `confirmed`, 1 otherwise.
The text holds no control character (`sanitize.visible`) but may hold `[`: print it plainly,
never through a markup parser.

    >>> from servefuzz.anomaly import Anomaly, Oracle, Verdict
    >>> from servefuzz.finding import Confirmation, Finding
    >>> from servefuzz.server_facts import TargetInfo
    >>> from servefuzz.oracles.judge import Judgement
    >>> from servefuzz.workload import RequestSpec, Scenario
    >>> sc = Scenario(1, (RequestSpec("r01", 0.0, (3, 4), 2),))
    >>> a = Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r01", "r01 diverged")
    >>> f = Finding(3, 1, sc, TargetInfo("reference", "http://127.0.0.1:1"), (a,))
    >>> r = replay_result(f, Confirmation(3, 3, {}, ("r01",), ()), Judgement((a,), ()))
    >>> r.confirmed, r.reproduced, r.rate
    (True, ('r01',), '3/3')

The rule that decides is not here: `servefuzz.oracles.judge.reproduction` measured the
confirmation (the same rule the campaign confirms with), and this module only renders it. A
replay is CONFIRMED when the finding came back in at least one replay: an expected request
answered other than alone on a flushed cache, or, for a crash, hang, 5xx or malformed answer,
the same failure showed again.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from servefuzz import stats
from servefuzz.anomaly import Anomaly, Promise, Variant, Verdict, deciding, held_to, previews
from servefuzz.finding import Confirmation, Finding
from servefuzz.oracles import brief
from servefuzz.oracles.judge import Judgement
from servefuzz.sanitize import one_line, visible

__all__ = ["DivergedRequest", "ReplayResult", "replay_result", "render_replay_report", "render_confirmation"]

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
    confirmation: Confirmation
    # The finding's whole reason where no diverged request prints its own (a crash, a stall):
    # the fuzz summary's table leaves it out to fit 80 columns, so replay is where it is read.
    reason: str = ""

    @property
    def reproduced(self) -> tuple[str, ...]:
        return tuple(d.request_id for d in self.diverged if d.expected)

    @property
    def rate(self) -> str:
        return self.confirmation.rate

    @property
    def decision(self) -> str:
        """What the replays decide (`stats.decide`: a sequential test, each error at most 1%)."""
        return self.confirmation.decision

    @property
    def confirmed(self) -> bool:
        return self.decision == stats.REPRODUCED


def replay_result(finding: Finding, confirmation: Confirmation, judgement: Judgement,
                  promise: Promise | None = None) -> ReplayResult:
    """The replay of `finding` as a report: `confirmation` and `judgement` of its replays (pure).
    `promise`: that of the mode the replaying server runs in (`TargetInfo.promise`): its near-tie
    flips are contract violations, as the finding's were (`anomaly.held_to`)."""
    expected = finding.expected_diverging if finding.verdict.is_divergence else ()
    worst_of: dict[str, Anomaly] = {}
    for a in held_to(judgement.divergent, promise):
        if a.request_id not in worst_of or a.verdict.rank < worst_of[a.request_id].verdict.rank:
            worst_of[a.request_id] = a
    diverged = tuple(
        DivergedRequest(
            rid,
            rid in expected,
            confirmation.variants.get(rid) or a.variants,
            a.verdict,
            brief(head) if (head := deciding(a.divergences)) else a.summary,
        )
        for rid, a in worst_of.items()
    )
    # Requests that never answered determinately twice are neither diverged nor stable.
    known = {r.id for r in finding.scenario.requests}
    stable = tuple(sorted((set(judgement.stable) & known) - set(worst_of)))
    undetermined = tuple(sorted(known - set(worst_of) - set(stable)))
    return ReplayResult(
        finding_name=finding.filename,
        bug=f"{finding.verdict.value} ({finding.signature})",
        reason="" if finding.verdict.is_divergence else finding.why,
        expected=expected,
        expected_failure=None if finding.verdict.is_divergence else finding.verdict,
        runs=confirmation.attempts,
        total=len(finding.scenario.requests),
        diverged=diverged,
        stable=stable,
        undetermined=undetermined,
        failures=tuple(a for a in judgement.anomalies if not a.verdict.is_divergence),
        confirmation=confirmation,
    )


def render_replay_report(result: ReplayResult) -> str:
    """The replay block of the seed report, line for line in spirit."""
    failure = result.expected_failure.value if result.expected_failure else "no failure"
    expect = f"{list(result.expected)} to diverge" if result.expected else f"{failure} again"
    lines = [
        _RULE,
        f"  Finding  : {result.finding_name}",
        f"  Bug      : {result.bug}",
        *([f"  Reason   : {one_line(result.reason)}"] if result.reason else []),
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
    verdict = {stats.REPRODUCED: "CONFIRMED", stats.NOT_REPRODUCED: "NOT REPRODUCED"}.get(result.decision, "UNDECIDED")
    if result.expected:
        tally = f"{len(result.reproduced)}/{len(result.expected)} expected divergences reproduced"
    else:
        tally = f"{failure} {'seen' if result.confirmation.reproduced else 'not seen'} again"
    lines += ["", f"  RESULT: {verdict}  (in {result.rate} replays; {tally})",
              f"  RATE   : {stats.REPRODUCTION.describe(*_kn(result))} (sequential test, each error <= 1%)", _RULE]
    # Outputs, ids and error messages are the server's (or the finding's) words: shown, never obeyed.
    return visible("\n".join(lines) + "\n")


def _kn(result: ReplayResult) -> tuple[int, int]:
    return result.confirmation.reproduced, result.confirmation.attempts


def _variant_lines(variants: Sequence[Variant]) -> list[str]:
    choices = sorted({v.choice for v in variants})
    lines: list[str] = []
    for choice in choices:
        of_choice = [v for v in variants if v.choice == choice]
        total = sum(v.count for v in of_choice)
        prefix = f"choice {choice} " if len(choices) > 1 or choice else ""
        lines += [f"      {prefix}variant {i}: {shown}  ({v.count}/{total})"
                  for i, (v, shown) in enumerate(zip(of_choice, previews(of_choice), strict=True), 1)]
    return lines


def _id_block(ids: Sequence[str]) -> list[str]:
    if not ids:
        return []
    return textwrap.wrap(
        ", ".join(ids), width=76, initial_indent="    ", subsequent_indent="    ", break_on_hyphens=False
    )


def render_confirmation(c: Confirmation) -> list[str]:
    """The rate and each flagged request's distinct outputs with counts, one line each."""
    lines = [f"reproduced {c.interval}: {c.decision}" + ("  (flaky: it did not come back)" if c.reproduced == 0 else "")]
    for rid, variants in c.variants.items():
        total = sum(v.count for v in variants)
        lines.append(f"  {visible(rid)}: {len(variants)} variant{'s' if len(variants) != 1 else ''}")
        lines += [f"    {visible(shown)}  ({v.count}/{total})" for v, shown in zip(variants, previews(variants), strict=True)]
    return lines
