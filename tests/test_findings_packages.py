"""Each finding package (docs/findings/<name>/) agrees with its one record, package.toml (issue 54,
item 2): the status line on every draft, every command a draft gives recorded byte for byte in
the package's outputs, every number of a draft to post backed by a file, upstream states as the
record has them, a minimal_repro.py of at most 60 lines with its output or its reason; and
README's table of real bugs is the records'. The check is scripts/findings.py's; the control
below shows it fires on a planted stale draft and stays quiet on the package as it is. Fast, no
servers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from scriptload import load_script

ROOT = Path(__file__).resolve().parents[1]
findings = load_script(ROOT / "scripts/findings.py")
PACKAGES = sorted(p.parent.name for p in (ROOT / "docs/findings").glob("*/package.toml"))


@pytest.mark.parametrize("name", PACKAGES)
def test_the_package_agrees_with_its_record(name: str) -> None:
    assert findings.problems(findings.Package.load(ROOT / "docs/findings" / name)) == []


def test_every_package_has_a_record_and_the_readme_table_lists_each_with_its_status() -> None:
    folders = sorted(d.name for d in (ROOT / "docs/findings").iterdir() if d.is_dir())
    assert folders == PACKAGES
    assert findings.readme_problems(findings.packages()) == []


def test_a_stale_draft_fails_the_check_and_the_package_as_it_is_passes(tmp_path: Path) -> None:
    name = "llamacpp-ram-prompt-cache"
    copy = tmp_path / name
    shutil.copytree(ROOT / "docs/findings" / name, copy)
    assert findings.problems(findings.Package.load(copy)) == []  # the control: quiet as it is
    issue = copy / "issue.md"
    text = issue.read_text(encoding="utf-8")
    pkg = findings.Package.load(copy)
    command = next(c for c in findings.commands(text) if c.startswith("llama-server"))
    stale = (text.replace(command, command.replace("-np 3", "-np 4"), 1)   # a command never run
             .replace(pkg.status_line, "")                              # the status line gone
             + "\nr13 was wrong in 7/9 runs.\n"                         # a number with no file
             + "\nSee llama.cpp #27148 (closed).\n")                    # a state the record does not say
    issue.write_text(stale, encoding="utf-8")
    found = "\n".join(findings.problems(findings.Package.load(copy)))
    assert "a command no output of the package records: 'llama-server" in found and "-np 4" in found
    assert "issue.md: no status line" in found
    assert "issue.md: 7/9 has no file behind it" in found
    assert "issue.md: calls #27148 closed; the record: open" in found
    # A number whose file does not hold it is caught too, and a status of no known kind.
    (copy / "package.toml").write_text((copy / "package.toml").read_text(encoding="utf-8")
                                       .replace('status = "', 'status = "maybe: ', 1), encoding="utf-8")
    assert any("the status must be one line" in p for p in findings.problems(findings.Package.load(copy)))


def test_commands_are_read_from_shell_blocks_whole_and_console_blocks_by_their_prompt() -> None:
    text = ("```bash\nllama-server -m ./tiny/tiny.gguf \\\n    -np 3\n# a comment\n\npython3 x.py\n```\n"
            "```console\n$ python3 y.py 8\nrun 1/8: ok\n```\n```text\n$ not a command\n```\n")
    assert findings.commands(text) == ["llama-server -m ./tiny/tiny.gguf \\\n    -np 3", "python3 x.py", "python3 y.py 8"]
    said = "8/16 and 0.79 nats, 1.2e-05; not 0.5.23, b11434, #22819, https://x.org/1/2 or a/12/13"
    assert findings.numbers(said) == {"8/16", "0.79", "1.2e-05"}
