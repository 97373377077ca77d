"""Reports of a finding: a standalone `repro_full.py`, a ready-to-file `issue.md`, a `report.html`,
and where the finding has one, `minimal_repro.py` (some fifty lines a maintainer reads).

    >>> paths = write_report(load_finding("findings/finding_00006_1907863917.json"), "report/")  # doctest: +SKIP
    >>> paths.repro.name, paths.issue.name, paths.html.name                                     # doctest: +SKIP
    ('repro_full.py', 'issue.md', 'report.html')

`servefuzz report FINDING [--out DIR]` calls `write_report`. The timeline of report.html draws send *and*
end times when a run of the finding's scenario is in the campaign's `histories.jsonl` (found
beside the `findings/` folder, or given with `--histories`); otherwise send times only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servefuzz import durable
from servefuzz.errors import UsageError
from servefuzz.finding import Finding
from servefuzz.history import RunHistory, read_history_jsonl
from servefuzz.known_issues import match
from servefuzz.reports.html import report_html
from servefuzz.reports.issue_md import WriteUp, issue_markdown
from servefuzz.reports.minimal import minimal_repro
from servefuzz.reports.repro import repro_script

__all__ = ["ReportPaths", "write_report", "histories_for"]


@dataclass(frozen=True)
class ReportPaths:
    """Where `write_report` put its files: the three every finding gets, and `minimal_repro.py`
    where the finding has a minimal form (`reports.minimal`; else None, and `no_minimal` says why)."""

    repro: Path
    issue: Path
    html: Path
    minimal: Path | None = None
    no_minimal: str | None = None


def write_report(finding: Finding, out_dir: Path | str, histories: Sequence[RunHistory] = (),
                 writeup: WriteUp | None = None) -> ReportPaths:
    """Write repro_full.py, issue.md and report.html for `finding` into `out_dir` (created if needed).

    Known-issue matches are computed here, with the finding's own triage when it has one.
    """
    out = Path(out_dir)
    matches = match(finding)
    minimal, no_minimal = minimal_repro(finding)
    paths = ReportPaths(out / "repro_full.py", out / "issue.md", out / "report.html",
                        out / "minimal_repro.py" if minimal is not None else None, no_minimal)
    texts = {
        paths.repro: repro_script(finding),
        paths.issue: issue_markdown(finding, matches, writeup),
        paths.html: report_html(finding, matches, histories),
    }
    if paths.minimal is not None and minimal is not None:
        texts[paths.minimal] = minimal
    try:
        out.mkdir(parents=True, exist_ok=True)
        for path, text in texts.items():
            path.write_text(text, encoding="utf-8")
        for script in (paths.repro, paths.minimal):
            if script is not None:
                os.chmod(script, 0o755)
    except OSError as e:
        if durable.is_disk_full(e):
            raise durable.disk_full(out) from None
        raise UsageError(f"{out}: cannot write the report there: {e.strerror or e}") from None
    return paths


def histories_for(finding_path: Path, given: Path | None = None) -> list[RunHistory]:
    """Histories to draw the timeline from: the file given, else the campaign's beside
    `findings/`; none when there is no such file."""
    path = given or finding_path.resolve().parent.parent / "histories.jsonl"
    if given is None and not path.is_file():
        return []
    try:
        return read_history_jsonl(path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such histories file") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{path}: not a readable histories file ({type(e).__name__}: {e})") from None
