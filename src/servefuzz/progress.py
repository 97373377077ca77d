"""What a person watching a campaign sees: a live status panel and a final summary table.

This is the only module that imports rich. Machines get `--json` instead and never see it.
Text that a server or a finding wrote (the last event, a finding's reason, request ids, file
names) goes to rich as a `Text` of `sanitize.one_line` (never parsed as markup, no control
character left), or through `sanitize.terminal` where it sits inside a markup string.
"""

from __future__ import annotations

import shlex
import textwrap
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from servefuzz.campaign import CampaignResult, CampaignState, FindingKept
from servefuzz.exercise import Exercise
from servefuzz.finding import Finding
from servefuzz.sanitize import one_line, terminal, visible

__all__ = ["LiveProgress", "print_banner", "print_exercise", "print_summary"]


class LiveProgress:
    """A live panel fed by `update(state)`; a no-op display when the console is not a terminal."""

    def __init__(self, console: Console, title: str) -> None:
        self.console = console
        self.title = title
        self._live = Live(console=console, refresh_per_second=4, transient=True)
        self._told_truth = False  # a console that is no terminal hears the truth check once

    def __enter__(self) -> LiveProgress:
        self._live.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._live.__exit__(exc_type, exc, tb)

    def update(self, state: CampaignState) -> None:
        rate = state.requests / state.elapsed_s if state.elapsed_s > 0 else 0.0
        found = ", ".join(f"{v} {k}" for k, v in sorted(state.findings_by_verdict.items())) or "none yet"
        repeats = sum(state.seen.values()) - len(state.findings)
        body = Text.assemble(
            ("elapsed ", "dim"), f"{state.elapsed_s:6.1f} s   ",
            ("scenarios ", "dim"), f"{state.iteration:,}   ",
            ("requests ", "dim"), f"{state.requests:,} ({rate:.1f}/s)   ",
            ("features ", "dim"), f"{state.features:,}   ",
            ("corpus ", "dim"), f"{state.corpus:,}",
            *((("   coverage ", "dim"), state.coverage.summary()) if state.coverage is not None else ()),
            "\n",
            ("findings ", "dim"), (found, "bold red" if state.findings else "green"),
            (f"   (+{repeats} seen again)" if repeats > 0 else "", "dim"),
        )
        for name, doing in sorted(state.workers.items()):  # remote workers only (`fuzz --ray`)
            body.append("\n" + one_line(name), style="bold")
            body.append("  " + one_line(doing))
        far = state.truth is not None and state.truth.far
        if state.truth is not None and far:  # stays on the panel: every finding below reads in its light
            body.append("\n" + one_line(state.truth.said()), style="bold red")
        if state.last is not None:
            body.append("\n" + one_line(state.last.words()), style="dim")
        self._live.update(Panel(body, title=Text(one_line(self.title)), title_align="left"))
        if not self.console.is_terminal and state.truth is not None and far and not self._told_truth:
            self._told_truth = True
            self.console.print(Text(one_line(state.truth.said()), style="bold red"))
        if not self.console.is_terminal and isinstance(state.last, FindingKept):
            self.console.print(Text(one_line(state.last.words())))


def print_banner(console: Console, text: str) -> None:
    console.print(Panel(Text(visible(text)), style="yellow", title="servefuzz", title_align="left"))


_ID_WIDTH = 12  # a request id grows a suffix per mutator (r02_b_s_c...): its head names it


def shorten_path(path: str, width: int) -> str:
    """`path` in at most `width` characters: its middle replaced by '…', the file name kept
    whole where it fits (it is what `servefuzz replay` is given), else its end.

    >>> shorten_path("campaigns/long-run-2026/findings/finding_00012_7.json", 30)
    'campaign…/finding_00012_7.json'
    >>> shorten_path("f.json", 30)
    'f.json'
    """
    if len(path) <= width:
        return path
    name = path.rsplit("/", 1)[-1]
    head = width - len(name) - 2  # room for '…/' before the name
    if head < 1:
        return "…" + path[-(width - 1):]
    return path[:head] + "…/" + name


def _votes(f: Finding) -> str:
    """How many fresh alone references agreed on the headline request's answer ('3/3'), '-'
    where no vote was taken (a crash, or a finding confirmed before votes)."""
    vote = f.headline.vote
    return one_line(vote.agree) if vote is not None and vote.agree else "-"


def print_exercise(console: Console, exercise: Exercise) -> None:
    """What the engine did, per mechanism (`servefuzz.exercise`): a mechanism on but never
    exercised in yellow, one the profile aimed at and never happened in bold red."""
    marked = exercise.marked()
    if not marked:
        return
    console.print("What the engine did:")
    aimed = set(exercise.missed_aims)
    for feature, line, gap in marked:
        style = "bold red" if feature in aimed else "yellow" if gap else ""
        _print_wrapped(console, one_line(line), style)


def _print_wrapped(console: Console, line: str, style: str = "") -> None:
    """`line` two spaces in, wrapped at the console's width (80 at most) with its continuation
    lines four spaces in: a line of counts and their sources is read whole, never cut off."""
    width = max(40, min(80, console.width))
    for part in textwrap.wrap(line, width, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False):
        console.print(Text(part, style=style), soft_wrap=True)


def print_summary(console: Console, result: CampaignResult) -> None:
    if result.truth is not None and result.truth.far:  # first: it is how every finding below must be read
        console.print(Text(one_line(result.truth.said()), style="bold red"), soft_wrap=True)
    if result.unreached:  # first too: a clean campaign proves nothing about what it never made happen
        console.print(Text("Goals the engine's meters never showed reached:", style="bold red"))
        for line in result.unreached:
            _print_wrapped(console, one_line(line), "bold red")
    if result.flush is not None and not result.flush.trusted:  # so is a flush that left a tier full
        console.print(Text(one_line(result.flush.said()), style="bold red"), soft_wrap=True)
    console.print(
        f"[bold]{result.iterations:,}[/] scenarios, [bold]{result.requests:,}[/] requests in "
        f"{result.elapsed_s:.1f} s; {result.features:,} features, corpus of {result.corpus:,}; "
        + (f"coverage: {result.coverage.summary()}; " if result.coverage is not None else "") +
        f"stopped: {terminal(one_line(result.stopped_because))}."
    )
    print_exercise(console, result.exercise)
    if not result.findings:
        console.print("[green]No findings.[/]")
        return
    # One line a finding, inside 80 columns whatever the console's width: the file (its path
    # shortened in the middle, so the name stays whole), the verdict, the replay rate, the fresh
    # alone references' vote, the repeats and the flagged request. The reason is not here: it is
    # in the file and `servefuzz replay` prints it, and cut to what was left it read as noise.
    rows = [(f.verdict.value, f.confirmation.rate if f.confirmation else "-", _votes(f),
             str(result.seen.get(f.signature, 1)), one_line(f.headline.request_id)[:_ID_WIDTH])
            for _, f in result.findings]
    heads = ("file", "verdict", "rate", "votes", "seen", "request")
    fixed = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads[1:])]
    room = max(12, min(80, console.width) - sum(fixed) - 2 * (len(heads) - 1))  # two spaces after each but the last
    table = Table(title="Findings (one per signature, smallest example kept)", title_justify="left",
                  box=None, pad_edge=False, padding=(0, 2, 0, 0), header_style="bold")
    table.add_column("file", no_wrap=True, max_width=room)
    for head, width in zip(heads[1:], fixed):
        table.add_column(head, no_wrap=True, min_width=width, justify="left" if head in ("verdict", "request") else "right")
    for (path, _), (verdict, *rest) in zip(result.findings, rows):
        style = "red" if verdict in ("corruption", "suspected-corruption", "contract-violation") else "yellow"
        table.add_row(Text(shorten_path(one_line(str(path)), room)), Text(verdict, style=style), *map(Text, rest))
    console.print(table)
    if not result.found:
        console.print("[green]Benign numerics only[/] (numeric-drift: flips at near-ties within the measured noise); exit 0.")
    elif (broken := [f for _, f in result.findings if f.verdict.value == "contract-violation"]):
        promise = broken[0].headline.promise
        words = f", which promises {terminal(one_line(promise.words))} ({terminal(one_line(promise.source))})" \
            if promise is not None else ""
        console.print(f"[red]Contract violation[/]: the server ran with {terminal(broken[0].target.deterministic or '')}"
                      f"{words}; {len(broken)} finding{'s' if len(broken) > 1 else ''} show an answer that depends on "
                      "the batch or the cache (near-tie flips, benign elsewhere); exit 1.", soft_wrap=True)
    first = result.findings[0][0]
    # soft_wrap: a command cut by a hard newline could not be pasted back
    console.print(f"Replay one with: [bold]servefuzz replay {terminal(shlex.quote(str(first)))} --base-url URL --runs 10[/]",
                  soft_wrap=True)
