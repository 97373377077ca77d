"""issue.md: a bug report ready to file, in the shape of the seed report (SGLang #22819).

Description, the server command, the repro, the request trace table, the diverged outputs,
the triage matrix, the known-issue matches and the environment. Everything taken from the
finding is escaped by `servefuzz.sanitize`: table cells and prose through `markdown`, code
spans through `markdown_code`, outputs and commands inside a `fence` longer than any backtick
run they hold, and no control character anywhere, so a finding cannot inject markup into the
issue nor escape sequences into the terminal that shows it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from servefuzz import __version__
from servefuzz.anomaly import Variant
from servefuzz.finding import Finding
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
    ]
    if finding.triage is not None:
        parts += ["## Triage matrix", _triage(finding)]
    parts += ["## Known issues this may be", _matches(matches), "## Environment", _environment(finding)]
    return visible("\n\n".join(parts) + "\n")


def _title(finding: Finding) -> str:
    ids = finding.expected_diverging
    engine = finding.target.engine
    if not finding.verdict.is_divergence:
        return f"{engine}: {finding.verdict.value} under concurrent load ({finding.headline.summary})"
    specs = finding.scenario.by_id()
    page = finding.target.page_size
    first = specs.get(ids[0]) if ids else None
    where = f" (prefix_len={first.prefix_len}{f', page size {page}' if page else ''})" if first else ""
    return f"{engine}: {finding.verdict.value} {_sampling(finding)} under concurrent load: {', '.join(ids[:3])}{where} diverges"


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
    n = len(finding.scenario.requests)
    ids = finding.expected_diverging
    # Liveness findings are about the server, not about outputs that differ between runs.
    what = (f"and the server failed them: {md(finding.headline.summary)}" if finding.verdict.is_failure else
            f"and identical requests ({_sampling(finding)}) gave different outputs between runs. "
            + (f"Diverging: {md(', '.join(ids))}; every other request is stable." if ids
               else md(finding.headline.summary)))
    lines = [
        f"servefuzz found a **{md(finding.verdict.value)}** on {md(t.engine)}"
        f"{f' {md(t.version)}' if t.version else ''}: {n} requests were sent at fixed offsets, " + what,
        "",
    ]
    if finding.confirmation is not None:
        lines.append(f"- Reproduction rate: {finding.confirmation.interval} of replays ({finding.confirmation.decision})")
    d = deciding_divergence(finding)
    lines.append(f"- Verdict: {md(finding.verdict.value)} — {md(d.reason if d is not None else finding.why)}")
    if finding.triage is not None:
        cures = finding.triage.cures
        lines.append(
            "- Cured by: " + (", ".join(code(" ".join(c.flags) or c.name) for c in cures) if cures else "nothing tried")
        )
        if finding.triage.implicated:
            lines.append(f"- Implicated component: {md(', '.join(finding.triage.implicated))}")
    lines += ["", "Trigger features:", ""]
    lines += [f"- {md(reason)} ({code(feature)})" for feature, reason in trigger_features(finding).items()]
    return "\n".join(lines)


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
        parts.append(f"Divergence starts at {md(d.unit)} {d.position} of {md(d.request_id)}: {md(d.reason)}")
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
