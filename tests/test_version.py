"""The version is written in one place, `servefuzz/_version.py`: the package, the command line,
the issue draft and the build all read it from there."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "servefuzz"


def test_the_package_exports_the_one_version() -> None:
    import servefuzz
    from servefuzz import _version

    assert re.fullmatch(r"\d+\.\d+\.\d+(\S*)", _version.__version__)
    assert servefuzz.__version__ is _version.__version__
    assert "__version__" in servefuzz.__all__


def test_pyproject_reads_the_version_from_the_module() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]  # written nowhere else
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "servefuzz._version.__version__"}


def test_no_module_writes_the_version_or_takes_it_from_the_package_root() -> None:
    # The root package is the front door (the edges layer): a module below it that imports the
    # version from there points up. The reference engine is a program apart with its own version.
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(("reference/", "standins/")) or rel == "_version.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "servefuzz" and any(
                    a.name == "__version__" for a in node.names):
                wrong.append(f"{rel} imports __version__ from the package root")
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == "__version__" for t in targets):
                wrong.append(f"{rel} assigns __version__")
    assert wrong == []


def test_the_command_line_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    from servefuzz._version import __version__
    from servefuzz.cli.parser import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--version"])
    assert f"servefuzz {__version__}" in capsys.readouterr().out
