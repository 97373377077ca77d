"""The public API is `servefuzz.__all__`: the entry points, what they take, return and raise,
and the version; each name is what its documentation says it is, mypy sees the same names as
the interpreter, and importing the package loads none of the fuzzer."""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import subprocess
import sys
import typing
from pathlib import Path

import servefuzz

INIT = Path(servefuzz.__file__)
ENTRY_POINTS = ["fuzz", "replay", "shrink", "triage", "bisect", "report", "load_finding"]
# what each entry point returns, by name
RESULTS = {"fuzz": "CampaignResult", "replay": "ReplayResult", "shrink": "Shrunk", "triage": "Finding",
           "report": "ReportPaths", "load_finding": "Finding"}
RECORDS = ["FuzzOptions", "CampaignState", "CampaignResult", "ReplayResult", "Shrunk", "TriageOutcome", "ReportPaths",
           "Finding", "Scenario", "Verdict"]
ERRORS = ["ServefuzzError", "UsageError", "FindingError", "TargetError", "LaunchError", "DiskFullError", "InstallError"]


def test_the_public_api_is_exactly_the_documented_names() -> None:
    assert sorted(servefuzz.__all__) == sorted(["__version__", *ENTRY_POINTS, *RECORDS, *ERRORS])
    assert len(set(servefuzz.__all__)) == len(servefuzz.__all__)
    doc = servefuzz.__doc__ or ""
    assert [n for n in servefuzz.__all__ if f"`{n}`" not in doc] == []  # each one documented


def test_every_public_name_is_the_documented_kind() -> None:
    from servefuzz import errors

    for name in ENTRY_POINTS:
        assert inspect.isfunction(getattr(servefuzz, name)), name
    for name in RECORDS + ERRORS:
        assert inspect.isclass(getattr(servefuzz, name)), name
    assert issubclass(servefuzz.Verdict, enum.Enum) and servefuzz.Verdict("corruption") is servefuzz.Verdict.CORRUPTION
    # One error root: every error servefuzz raises for its own failures derives from it.
    assert issubclass(servefuzz.ServefuzzError, Exception)
    for name in ERRORS[1:]:
        assert issubclass(getattr(servefuzz, name), servefuzz.ServefuzzError), name
    declared = {n for n in errors.__all__ if inspect.isclass(getattr(errors, n))
                and issubclass(getattr(errors, n), errors.ServefuzzError)}
    assert declared == set(ERRORS)  # an error added to errors.py is exported too (or this says why not)
    assert isinstance(servefuzz.__version__, str)


def test_each_name_is_the_object_its_module_defines() -> None:
    # One object, whichever way it is imported: `except servefuzz.UsageError` catches what
    # `servefuzz.errors` raises, `servefuzz.Verdict.CORRUPTION is finding.verdict` holds.
    for name in servefuzz.__all__:
        value = getattr(servefuzz, name)
        if name != "__version__":
            home = importlib.import_module(servefuzz._HOMES[name])
            assert getattr(home, name) is value, name
            assert getattr(value, "__module__", None) == home.__name__, name  # defined there, not re-exported from elsewhere
    assert set(dir(servefuzz)) >= set(servefuzz.__all__)


def test_the_entry_points_return_the_exported_result_types() -> None:
    for name, result in RESULTS.items():
        assert typing.get_type_hints(getattr(servefuzz, name))["return"] is getattr(servefuzz, result), name


def test_the_entry_points_take_explicit_keywords() -> None:
    # At most one positional (the finding, or fuzz's options object), then named keywords only:
    # nothing hidden from the type checker behind **kwargs, every parameter annotated.
    for name in ENTRY_POINTS:
        fn = getattr(servefuzz, name)
        params = list(inspect.signature(fn).parameters.values())
        assert not [p for p in params if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)], name
        assert len([p for p in params if p.kind is not p.KEYWORD_ONLY]) <= 1, name
        hints = typing.get_type_hints(fn)
        assert {p.name for p in params} <= set(hints), name


def test_mypy_sees_the_names_the_interpreter_does() -> None:
    # The lazy names are declared twice: `_HOMES` for the interpreter, the TYPE_CHECKING imports
    # for mypy. Both must name every public name, from the same module.
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module is not None
                typed |= {a.name: imp.module for a in imp.names}
    assert typed == servefuzz._HOMES
    assert set(servefuzz._HOMES) | {"__version__"} == set(servefuzz.__all__)


def test_importing_the_package_loads_none_of_the_fuzzer() -> None:
    code = ("import sys, servefuzz; servefuzz.__version__; "
            "print(sorted(m for m in sys.modules if m.startswith('servefuzz')))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert p.stdout.strip() == "['servefuzz', 'servefuzz._version']"
