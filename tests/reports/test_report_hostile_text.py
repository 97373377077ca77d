"""Server text through every renderer: rich markup (`[/oops]`, `[link=...]`), ANSI, OSC and C1
sequences, bidi overrides and lone surrogates are shown, never obeyed; and the "start the
server" block of the reports runs nothing but the server, whatever the finding holds."""

from __future__ import annotations

import dataclasses
import html
import io
import re
import stat
import subprocess
from pathlib import Path

from report_findings import seed_like
from rich.console import Console

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.campaign import CampaignResult, CampaignState, FindingKept, Stop, StopReason
from servefuzz.known_issues import match
from servefuzz.progress import LiveProgress, print_banner, print_summary
from servefuzz.reports import write_report
from servefuzz.reports.facts import server_command
from servefuzz.reports.html import report_html
from servefuzz.reports.issue_md import issue_markdown
from servefuzz.reports.repro import repro_script
from servefuzz.sanitize import visible
from servefuzz.server_facts import TargetInfo

# What the issue saw: markup that crashed rich or rendered a link, and raw escape sequences.
TERM = (
    "[/oops] [link=http://evil.example]click[/link] \x1b[5;31mred\x1b[2J "
    "\x1b]8;;http://evil.example\x07osc8\x1b]8;;\x07 \x1b]0;pwned-title\x07 \x9b2J \u202eevil \ud800 "
)
# The sequences themselves, which no output may carry (rich styles its own output with others).
RAW = ("\x1b[5;31m", "\x1b[2J", "\x1b]8;;http://evil", "\x1b]0;", "\x9b", "\u202e", "\ud800")


def hostile_finding():  # type: ignore[no-untyped-def]
    base = seed_like(hostile=True, hostile_text=TERM)
    error = Anomaly(
        Oracle.LIVENESS, Verdict.SERVER_ERROR, base.scenario.requests[0].id, f"r01: HTTP 500: {TERM} in 1/1 runs",
        evidence={"errors": [f"HTTP 500: {TERM}"], "log_tail": f"FATAL {TERM}\nsecond line"},
    )
    return dataclasses.replace(base, anomalies=(*base.anomalies, error))


def assert_inert(text: str) -> None:
    for raw in RAW:
        assert raw not in text, (raw, text[:200])
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", text)


def test_issue_md_shows_server_text_as_text() -> None:
    finding = hostile_finding()
    text = issue_markdown(finding, match(finding))
    assert_inert(text)
    assert "\\\\x1b\\[5;31mred" in text or "\\x1b[5;31mred" in text  # visible, escaped or fenced
    assert "\\[/oops\\]" in text  # markdown-escaped in prose


def test_report_html_shows_server_text_as_text() -> None:
    finding = hostile_finding()
    page = report_html(finding, match(finding))
    assert_inert(page)
    assert "href='http://evil" not in page and 'href="http://evil' not in page
    assert "[link=http://evil.example]click[/link]" in html.unescape(page)


def test_repro_py_prints_server_text_made_visible(tmp_path: Path) -> None:
    finding = hostile_finding()
    script = repro_script(finding)
    space: dict[str, object] = {"__name__": "repro"}
    exec(compile(script, "repro_full.py", "exec"), space)  # the generated script, as a module
    # Its own copy of the sanitizer (it may import nothing of servefuzz) is the same set.
    from servefuzz import sanitize

    assert space["INVISIBLE"].pattern == sanitize._INVISIBLE.pattern  # type: ignore[attr-defined]
    outcome = space["Outcome"]
    runs = [
        [outcome(r["id"], "ok", choices={0: ((1, 2), f"{TERM}{i}")}, end=1.0) for r in space["FINDING"]["requests"]]  # type: ignore[index,operator]
        for i in range(2)
    ] + [[outcome(r["id"], "http_error", error=f"HTTP 500: {TERM}", http_status=500, end=2.0)
          for r in space["FINDING"]["requests"]]]  # type: ignore[index,operator]
    text, _ = space["report"](runs, {}, [], 3)  # type: ignore[operator]
    assert_inert(text)
    assert "\\x1b[5;31mred" in text and "[/oops]" in text


def test_the_live_line_and_the_summary_table_show_server_text_as_text() -> None:
    finding = hostile_finding()
    for terminal in (False, True):
        out = io.StringIO()
        console = Console(file=out, force_terminal=terminal, width=160, color_system="standard" if terminal else None)
        state = CampaignState(last=FindingKept(f"finding_{TERM}.json", "new", "corruption", f"summary {TERM}"))
        with LiveProgress(console, f"fuzzing {TERM}") as live:
            live.update(state)
        print_banner(console, f"banner {TERM}")
        result = CampaignResult(
            iterations=3, requests=9, elapsed_s=1.0, findings=((Path(f"findings/{finding.filename}"), finding),),
            stop=Stop(StopReason.TARGET_LOST, f"the target went away: {TERM}"),
        )
        print_summary(console, result)
        text = out.getvalue()
        for raw in RAW:
            assert raw not in text, (terminal, raw)
        assert "[/oops]" in text and "\\x1b[5;31mred" in text
        if not terminal:
            assert "\x1b" not in text


def test_write_report_writes_files_a_terminal_can_show(tmp_path: Path) -> None:
    paths = write_report(hostile_finding(), tmp_path / "report")
    for path in (paths.issue, paths.html):
        assert_inert(path.read_text(encoding="utf-8"))


# --- the "start the server" block ------------------------------------------------------------


def planted(marker: Path) -> TargetInfo:
    """A target as a hostile server (or a hand-edited finding) describes it."""
    return TargetInfo(
        "reference", "http://127.0.0.1:30000",
        server_args={
            "disable_radix_cache": "--host=0.0.0.0",  # not a bool: left out, never passed on
            "page_size": f"16; touch {marker}",
            "served_model_name": f"$(touch {marker})",
            "max_running_requests": 8,
        },
        env={f"X=1;touch {marker};Y": "1", "GOOD": f"a'b $(touch {marker}) `touch {marker}`"},
        faults=("overlap-war", f"x; touch {marker}"),
    )


def run_block(block: str, tmp_path: Path) -> list[str]:
    """Paste `block` into bash with a `servefuzz` on PATH that records its argv; return it."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "servefuzz"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > "$ARGV_OUT"\necho "GOOD=$GOOD" >> "$ARGV_OUT"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    argv_out = tmp_path / "argv.txt"
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "ARGV_OUT": str(argv_out), "HOME": str(tmp_path)}
    subprocess.run(["bash", "-c", block], cwd=tmp_path, env=env, timeout=30, check=False, capture_output=True)
    return argv_out.read_text().splitlines() if argv_out.exists() else []


def test_the_start_the_server_block_runs_only_the_server(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    target = planted(marker)
    finding = dataclasses.replace(seed_like(), target=target)
    issue = issue_markdown(finding, ())
    block = re.search(r"^(`{3,})bash\n(.*?)\n\1$", issue, flags=re.MULTILINE | re.DOTALL)
    assert block is not None
    page = report_html(finding, ())
    pre = re.search(r"<p>Start the server:</p><pre>(.*?)</pre>", page, flags=re.DOTALL)
    assert pre is not None
    for text in (block.group(2), html.unescape(pre.group(1)), server_command(target)):
        argv = run_block(text, tmp_path)
        assert not marker.exists(), text
        assert argv[:1] == ["serve-reference"], (text, argv)
        assert "--host=0.0.0.0" not in argv and "--host" not in argv
        assert "--max-running-requests" in argv and "--page-size" not in argv
        assert argv.count("--fault") == 1 and "overlap-war" in argv
        # The valid variable arrives as exactly the string the finding holds.
        assert argv[-1] == f"GOOD=a'b $(touch {marker}) `touch {marker}`"
    # What was left out is said, by name (never by value).
    assert "# left out, not valid launch settings:" in block.group(2)
    assert "disable_radix_cache" in block.group(2) and "touch" not in block.group(2).split("# left out")[1]


def test_a_clean_target_gives_the_plain_command(tmp_path: Path) -> None:
    target = TargetInfo("reference", "http://127.0.0.1:30000", server_args={"page_size": 16, "disable_radix_cache": True},
                        env={"OMP_NUM_THREADS": "1"}, faults=("overlap-war",))
    command = server_command(target)
    assert command == ("OMP_NUM_THREADS=1 servefuzz serve-reference --page-size 16 --disable-radix-cache "
                       "--fault overlap-war --port 30000")
    argv = run_block(command, tmp_path)
    assert argv[:-1] == ["serve-reference", "--page-size", "16", "--disable-radix-cache", "--fault", "overlap-war",
                         "--port", "30000"]


def test_visible_is_what_the_renderers_use_for_a_log_tail() -> None:
    finding = hostile_finding()
    crash = Anomaly(Oracle.LIVENESS, Verdict.CRASH, "r01", "gone", evidence={"exit_code": 1, "log_tail": f"x {TERM}\ny"})
    finding = dataclasses.replace(finding, anomalies=(crash,), confirmation=None)
    text = issue_markdown(finding, ())
    assert visible(f"x {TERM}\ny") in text  # its lines kept, its controls made visible
