"""The user guide (docs/guide/, issue 55) stays findable and true: README's first screen links it,
no page linked from there is over 400 lines and no guide page over 200, every relative link in the
guide lands on a file, every `servefuzz` command its shell blocks give parses with the real
parser, and the reference page's tables are the code's (the commands the parser has, the
profiles of `servefuzz.engines.PROFILES`, the codes of `servefuzz.errors.Exit`, the fields of the
finding file's schema). Fast: nothing is started."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from scriptload import load_script

from servefuzz import engines
from servefuzz.cli.parser import build_parser
from servefuzz.errors import Exit

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide"
REFERENCE = GUIDE / "reference.md"
FIRST_SCREEN = 40
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
findings = load_script(ROOT / "scripts" / "findings.py")  # its `commands` reads a markdown text's shell blocks


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def linked(path: Path, text: str) -> list[Path]:
    """The local files `text` (a part of `path`) links to; a folder stands for its README.md."""
    found = []
    for target in LINK.findall(text):
        if "://" in target:
            continue
        file = (path.parent / target).resolve()
        found.append(file / "README.md" if file.is_dir() and (file / "README.md").is_file() else file)
    return found


def section(text: str, heading: str) -> str:
    """The body of the `## heading` section of a markdown text."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, heading
    return match.group(1)


def first_column(table: str) -> list[str]:
    """The first cell of each body row of the markdown table(s) in `table`, without backticks."""
    rows = [r for r in table.splitlines() if r.startswith("|") and not r.startswith("|---")]
    return [r.split("|")[1].strip().strip("`") for r in rows[1:]] if rows else []


def rows(table: str) -> list[list[str]]:
    body = [r for r in table.splitlines() if r.startswith("|") and not r.startswith("|---")][1:]
    return [[c.strip() for c in r.strip("|").split("|")] for r in body]


def test_readme_first_screen_links_the_guide_and_no_page_it_links_is_over_400_lines() -> None:
    first = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:FIRST_SCREEN])
    pages = [p for p in linked(ROOT / "README.md", first) if ROOT / "docs" in p.parents]
    assert GUIDE / "README.md" in pages and GUIDE / "gpu.md" in pages
    assert {p.relative_to(ROOT).as_posix(): lines(p) for p in pages if lines(p) > 400} == {}


def test_every_guide_page_is_short_and_its_links_land() -> None:
    pages = sorted(GUIDE.glob("*.md"))
    assert {p.name: lines(p) for p in pages if lines(p) >= 200} == {}
    index = (GUIDE / "README.md").read_text(encoding="utf-8")
    assert set(pages) - {GUIDE / "README.md"} <= set(linked(GUIDE / "README.md", index))  # the index lists every page
    missing = [(p.name, str(t)) for p in pages for t in linked(p, p.read_text(encoding="utf-8")) if not t.exists()]
    assert missing == []


def guide_commands() -> list[tuple[str, list[str]]]:
    """Each `servefuzz ...` command of the guide's shell blocks, as the argv after `servefuzz`,
    with the example workflow's env (`$PRESET`, `$TIME_S`, ...) put in for its variables."""
    env = {k: str(v) for k, v in yaml.safe_load((ROOT / "examples/ci/github-gpu.yml").read_text())["jobs"]["fuzz"]["env"].items()}
    found = []
    for page in sorted(GUIDE.glob("*.md")):
        for command in findings.commands(page.read_text(encoding="utf-8")):
            for part in re.split(r"&&|;", command.replace("\\\n", " ")):
                words = shlex.split(part, comments=True)
                at = next((i for i, w in enumerate(words) if w == "servefuzz" or w.endswith("/servefuzz")), None)
                if at is not None:
                    found.append((page.name, [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], w) for w in words[at + 1:]]))
    return found


def test_every_servefuzz_command_in_the_guide_parses() -> None:
    commands = guide_commands()
    assert len(commands) >= 12 and {page for page, _ in commands} >= {"first-finding.md", "upstream.md", "ci.md", "gpu.md"}
    parser = build_parser()
    for page, argv in commands:
        args = parser.parse_args(argv)
        assert args.command == argv[0], (page, argv)


def check_reference(text: str) -> None:
    """The reference page's tables (`text`) against the code; an AssertionError says which differs."""
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert [c.removeprefix("servefuzz ") for c in first_column(section(text, "Commands"))] == list(sub.choices)
    assert {r[0].strip("`"): [p.strip().strip("`") for p in r[1].split(",")] for r in rows(section(text, "Profiles"))} \
        == {preset: list(profiles) for preset, profiles in engines.PROFILES.items()}
    assert [int(c) for c in first_column(section(text, "Exit codes"))] == sorted(e.value for e in Exit)
    schema = json.loads((ROOT / "src/servefuzz/data/finding.schema.json").read_text())
    fields = [f.strip().strip("`") for cell in first_column(section(text, "The finding file")) for f in cell.split(",")]
    assert sorted(fields) == sorted(schema["properties"])


def test_the_reference_tables_are_the_codes() -> None:
    check_reference(REFERENCE.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("row", "bad"), [
    ("| `sglang-cpu` |", "| `sglang-cpu` | `default`, `page-64` |"),  # a profile list short of the code's
    ("| 130 |", "| 7 | a code servefuzz does not have |"),
])
def test_the_reference_check_fires_on_a_stale_row(row: str, bad: str) -> None:
    """Control for the check above: the page with one row made stale fails it."""
    text = REFERENCE.read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(text) if line.startswith(row))
    with pytest.raises(AssertionError):
        check_reference("\n".join([*text[:at], bad, *text[at + 1:]]))
