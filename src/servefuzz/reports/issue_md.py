"""issue.md: a bug report ready to file, in the shape of the seed report (SGLang #22819).

A title that names what went wrong and how the requests were sent (how many, how far apart:
"concurrent" is never claimed from the trace alone), expected and actual in plain words,
the server command, the repro, the request trace table, the diverged outputs, servefuzz's own
evidence folded away, the triage matrix, the known-issue matches and the environment. Everything taken from the
finding is escaped by `servefuzz.sanitize`: table cells and prose through `markdown`, code
spans through `markdown_code`, outputs and commands inside a `fence` longer than any backtick
run they hold, and no control character anywhere, so a finding cannot inject markup into the
issue nor escape sequences into the terminal that shows it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from servefuzz._version import __version__
from servefuzz.anomaly import Variant
from servefuzz.finding import Bisect, Finding
from servefuzz.known_issues import Match, trigger_features
from servefuzz.reports.facts import (
    deciding_divergence,
    diverged_variants,
    repro_command,
    server_command,
    server_death,
    trace_rows,
    triage_rows,
)
from servefuzz.sanitize import fence, visible
from servefuzz.sanitize import markdown as md
from servefuzz.sanitize import markdown_code as code
from servefuzz.terms import BURST_GAP_MS

__all__ = ["issue_markdown"]


def issue_markdown(finding: Finding, matches: Sequence[Match]) -> str:
    """The issue text for `finding`, with the known issues it `matches` (best first)."""
    parts = [
        f"# [Bug] {md(_title(finding))}",
        "## Describe the bug",
        _description(finding),
        "## Reproduction",
        "Step 1 — start the server:",
        fence(server_command(finding.target, multiline=True), "bash"),
        (
            "Step 2 — replay the finding with the attached standalone script `repro.py` "
            "(standard library only, the finding baked in):"
        ),
        fence(repro_command(finding), "bash"),
        f"## Detail of {md(finding.filename)}",
        _trace(finding),
        _outputs(finding),
        _evidence(finding),
    ]
    if finding.triage is not None:
        parts += ["## Triage matrix", _triage(finding)]
    if finding.bisect is not None:
        parts += ["## Versions (bisect)", _bisect(finding.bisect)]
    parts += ["## Known issues this may be", _matches(matches), "## Environment", _environment(finding)]
    return visible("\n\n".join(parts) + "\n")


def _title(finding: Finding) -> str:
    ids = finding.expected_diverging
    t = finding.target
    engine = f"{t.engine} {t.version}" if t.version else t.engine
    sent = _arrival(finding)
    if finding.verdict.is_failure:
        return f"{engine}: {finding.verdict.value} ({sent}): {finding.headline.summary}"
    if finding.verdict.value == "isolation-breach":
        salt = finding.headline.evidence.get("salt")
        return (f"{engine}: a request under cache_salt {salt!r} is served a prefix cached under another salt ({sent})"
                if salt else f"{engine}: isolation-breach ({sent}): {finding.headline.summary}")
    if not finding.verdict.is_divergence:
        return f"{engine}: {finding.verdict.value} ({sent}): {finding.headline.summary}"
    specs = finding.scenario.by_id()
    page = t.page_size
    first = specs.get(ids[0]) if ids else None
    where = f", prefix_len={first.prefix_len}{f', page size {page}' if page else ''}" if first else ""
    who = ", ".join(ids[:3]) or "a request"
    return f"{engine}: {who} {_sampling(finding)} answers otherwise than alone ({sent}{where})"


def _arrival(finding: Finding) -> str:
    """How the requests were sent, from the trace: how many, and over how long."""
    offsets = sorted(r.offset_ms for r in finding.scenario.requests)
    if len(offsets) <= 1:
        return "a single request"
    spread = offsets[-1] - offsets[0]
    if spread <= BURST_GAP_MS:  # at most one burst gap from first to last
        return f"{len(offsets)} requests at once"
    return f"{len(offsets)} requests over {spread:.0f} ms"


def _sampling(finding: Finding) -> str:
    """How the diverging requests chose their tokens: greedily, or as seeded draws."""
    specs = finding.scenario.by_id()
    drawn = [specs[i] for i in finding.expected_diverging if i in specs and specs[i].seeded]
    if not drawn:
        return "at temperature 0"
    temps = sorted({f"{s.temperature:g}" for s in drawn})
    return f"with a fixed seed at temperature {', '.join(temps)}"


def _description(finding: Finding) -> str:
    t = finding.target
    expected, actual = _expected_actual(finding)
    lines = [
        f"On {md(t.engine)}{f' {md(t.version)}' if t.version else ''}, servefuzz sent {md(_arrival(finding))} "
        "at fixed offsets (the trace below) and replayed them, each run on a flushed cache.",
        "",
        f"**Expected:** {expected}",
        "",
        f"**Actual:** {actual}",
        "",
    ]
    if finding.confirmation is not None:
        lines.append(f"- Reproduction rate: {finding.confirmation.interval} of replays ({finding.confirmation.decision})")
    if finding.triage is not None:
        cures = finding.triage.cures
        lines.append(
            "- Cured by: " + (", ".join(code(" ".join(c.flags) or c.name) for c in cures) if cures else "nothing tried")
        )
        if finding.triage.implicated:
            lines.append(f"- Implicated component: {md(', '.join(finding.triage.implicated))}")
    return "\n".join(lines)


def _expected_actual(finding: Finding) -> tuple[str, str]:
    """What the user of the engine could expect, and what it did, in plain words (markdown)."""
    head = finding.headline
    ids = finding.expected_diverging
    rate = f" ({finding.confirmation.rate} replays)" if finding.confirmation is not None else ""
    if finding.verdict.is_failure:
        return "every request is answered (or refused with a 4xx).", md(head.summary) + rate
    e = head.evidence
    hits = e.get("hits")
    if finding.verdict.value == "isolation-breach" and isinstance(hits, list) and hits and isinstance(hits[0], dict):
        hit = hits[0]
        expected = (f"{md(head.request_id)}, sent under cache_salt {code(str(e.get('salt')))}, reports at most "
                    f"{md(str(e.get('allowed')))} cached prompt tokens: requests under other salts must not share "
                    "its prefix cache.")
        actual = (f"it reported {md(str(hit.get('cached_tokens')))} cached tokens: the prefix that "
                  f"{md(str(hit.get('source')))} had put in the cache under cache_salt "
                  f"{code(str(hit.get('source_salt')))}{rate}.")
        return expected, actual
    if finding.verdict.is_divergence and ids:
        who = md(", ".join(ids))
        d = deciding_divergence(finding)
        at = f" from {md(d.unit)} {d.position} on" if d is not None else ""
        return (f"{who} gives the output it gives when sent alone to the idle server ({_sampling(finding)}, "
                "the output is fixed: the same prompt and settings alone give it every time).",
                f"sent with the others, {who} answered otherwise{at}{rate}; the outputs are below.")
    return "the requests behave as each does alone.", md(head.summary) + rate


def _evidence(finding: Finding) -> str:
    """servefuzz's own reasoning (verdict, the margin against the measured noise, trigger
    features), folded away: a maintainer needs the expected and actual first."""
    d = deciding_divergence(finding)
    lines = [f"- Verdict: {md(finding.verdict.value)} — {md(d.reason if d is not None else finding.why)}", "",
             "Trigger features:", ""]
    lines += [f"- {md(reason)} ({code(feature)})" for feature, reason in trigger_features(finding).items()]
    return "<details><summary>servefuzz's evidence</summary>\n\n" + "\n".join(lines) + "\n\n</details>"


def _trace(finding: Finding) -> str:
    rows = ["| request | offset_ms | prompt_len | prefix_len | max_tokens | n | diverged | notes |",
            "|---|---:|---:|---:|---:|---:|:---:|---|"]
    for r in trace_rows(finding):
        rows.append(
            f"| {md(r.id)} | {r.offset_ms:g} | {r.prompt_len} | {r.prefix_len} | {r.max_tokens} | {r.n} | "
            f"{'✓' if r.diverged else ''} | {md(r.notes)} |"
        )
    return "### Request trace\n\n" + "\n".join(rows)


def _outputs(finding: Finding) -> str:
    variants = diverged_variants(finding)
    if not variants:
        out = f"### What went wrong\n\n{md(finding.headline.summary)}"
        death = server_death(finding)
        if death is not None:
            out += f"\n\nThe server exited with status {death[0]}; the end of its log:\n\n" + fence(death[1], "text")
        return out
    parts = ["### Diverged outputs"]
    for rid, vs in variants.items():
        parts += [f"**{md(rid)}**", fence(_variant_lines(vs), "text")]
    d = deciding_divergence(finding)
    if d is not None:
        parts.append(f"Divergence starts at {md(d.unit)} {d.position} of {md(d.request_id)}.")
    return "\n\n".join(parts)


def _variant_lines(variants: Sequence[Variant]) -> str:
    total = {c: sum(v.count for v in variants if v.choice == c) for c in {v.choice for v in variants}}
    lines = []
    for i, v in enumerate(variants, 1):
        who = f"choice {v.choice} " if len(total) > 1 else ""
        lines.append(f"{who}variant {i}: {v.preview()}  ({v.count}/{total[v.choice]})")
    return "\n".join(lines)


def _triage(finding: Finding) -> str:
    rows = ["| variant | flags / env | component | reproduced | outcome |", "|---|---|---|---:|---|"]
    rows += [
        f"| {md(r.name)} | {md(r.change)} | {md(r.component)} | {r.rate} | {md(r.outcome)} |" for r in triage_rows(finding)
    ]
    return "\n".join(rows)


def _bisect(record: Bisect) -> str:
    """The bisection: its conclusion, the last good and first bad version, every version tried."""
    ends = [f"- {word}: " + (f"{md(s.version)} ({s.interval})" if (s := record.step(v)) else "none")
            for word, v in (("Last good", record.last_good), ("First bad", record.first_bad))]
    rows = ["| version | outcome | reproduced | server reported |", "|---|---|---:|---|"]
    rows += [f"| {md(s.version)} | {md(s.outcome)}{' (' + md(s.error) + ')' if s.error else ''} | {s.rate} | "
             f"{md(s.reported or '-')} |" for s in record.steps]
    return "\n".join([f"`servefuzz bisect --launch {md(record.preset)} --versions {md(record.versions)}`: "
                      f"{md(record.conclusion)}.", "", *ends, "", *rows])


def _matches(matches: Sequence[Match]) -> str:
    if not matches:
        return "No issue of servefuzz's known-issue catalogue matches."
    out = []
    for m in matches:
        i = m.issue
        out.append(f"- [{md(i.id)}]({i.link}) — {md(i.title)} ({md(i.status)}); score {m.score}")
        out += [f"  - {md(r)}" for r in m.reasons]
        out += [f"  - against: {md(r)}" for r in m.against]
        if i.caveats:
            out.append(f"  - note: {md(i.caveats)}")
    return "\n".join(out)


def _environment(finding: Finding) -> str:
    t = finding.target
    lines = [
        f"- engine: {md(t.engine)}" + (f" {md(t.version)}" if t.version else ""),
        f"- page size: {t.page_size if t.page_size else 'unknown'}",
        f"- servefuzz: {__version__}; finding {md(finding.filename)}, signature {code(finding.signature)}",
    ]
    if t.faults:
        lines.append(f"- planted faults (reference engine): {md(', '.join(t.faults))}")
    args = json.dumps({"server_args": dict(t.server_args), "env": dict(t.env)}, indent=2, sort_keys=True, default=str)
    return "\n".join(lines) + "\n\n<details><summary>Server args</summary>\n\n" + fence(args, "json") + "\n\n</details>"
