"""The command line on bad input: one clear line, a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def servefuzz(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servefuzz", *args], capture_output=True, text=True, timeout=timeout
    )


def one_error_line(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.fixture
def finding_files(tmp_path: Path) -> dict[str, Path]:
    files = {
        "truncated": '{"schema_version": 1, "iteration": 3, "seed"',
        "wrong-schema": json.dumps({"schema_version": 1, "iteration": "three"}),
        "newer": json.dumps({"schema_version": 99, "iteration": 3}),
        "not-an-object": "[1, 2, 3]",
    }
    out = {}
    for name, text in files.items():
        out[name] = tmp_path / f"{name}.json"
        out[name].write_text(text)
    out["missing"] = tmp_path / "nope.json"
    return out


@pytest.mark.parametrize(
    "case, words",
    [
        ("missing", "no such finding file"),
        ("truncated", "not valid JSON"),
        ("wrong-schema", "schema"),
        ("newer", "newer"),
        ("not-an-object", "schema"),
    ],
)
def test_replay_of_a_bad_finding_file_says_why_in_one_line(finding_files: dict[str, Path], case: str, words: str) -> None:
    line = one_error_line(servefuzz("replay", str(finding_files[case]), "--base-url", "http://127.0.0.1:9"))
    assert words.lower() in line.lower()


def test_fuzz_against_an_unreachable_url_says_so(tmp_path: Path) -> None:
    line = one_error_line(servefuzz("fuzz", "--url", "http://127.0.0.1:9", "--time", "5", "--out", str(tmp_path)))
    assert "cannot reach http://127.0.0.1:9" in line


@pytest.mark.parametrize(
    "args, words",
    [
        (["fuzz", "--url", "ftp://x"], "http://"),
        (["fuzz", "--url", "http://127.0.0.1:9", "--fault", "overlap-war"], "--fault"),
        (["fuzz", "--fault", "none", "--fault", "overlap-war"], "none"),
        (["fuzz", "--strategy", "nope", "--time", "1"], "unknown strategy"),
        (["fuzz", "--engine", "nope", "--url", "http://127.0.0.1:9"], "unknown engine"),
    ],
)
def test_bad_fuzz_arguments_get_one_line(args: list[str], words: str, tmp_path: Path) -> None:
    line = one_error_line(servefuzz(*args, "--out", str(tmp_path)))
    assert words in line


def test_argparse_errors_exit_2_without_traceback() -> None:
    p = servefuzz("fuzz", "--requests", "zero")
    assert p.returncode == 2 and "Traceback" not in p.stderr and "whole number" in p.stderr
