"""`servefuzz report FINDING [--out DIR] [--histories FILE]`, through the one command line."""

from __future__ import annotations

import doctest
import importlib
import os
from pathlib import Path

import png_pixels
import pytest
from report_findings import loaded_run, seed_like

from servefuzz.cli import main as cli
from servefuzz.finding import write_finding
from servefuzz.history import write_history_jsonl


def test_writes_the_three_files_and_finds_the_campaigns_histories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    finding = seed_like()
    path = write_finding(tmp_path / "campaign" / "findings", finding)
    write_history_jsonl(tmp_path / "campaign" / "histories.jsonl", [loaded_run(finding, 4)])
    assert cli(["report", str(path)]) == 0
    out = capsys.readouterr().out.split()
    report = path.with_name("finding_03330_2142180798-report")
    assert out == [str(report / "repro_full.py"), str(report / "issue.md"), str(report / "report.html")]
    assert os.access(report / "repro_full.py", os.X_OK)
    assert "send and end times of loaded run 4" in (report / "report.html").read_text(encoding="utf-8")
    assert (report / "issue.md").read_text(encoding="utf-8").startswith("# \\[Bug\\] radix cache: a request answers otherwise")
    # A person's write-up beside the finding gives issue.md its words; --writeup names another.
    (path.parent / "writeup.json").write_text('{"title": "a request after a shared prefix", "versions": ["0.1.0"]}',
                                              encoding="utf-8")
    assert cli(["report", str(path)]) == 0
    text = (report / "issue.md").read_text(encoding="utf-8")
    assert text.startswith("# \\[Bug\\] a request after a shared prefix\n") and "- 0.1.0" in text
    (tmp_path / "other.json").write_text('["not an object"]', encoding="utf-8")
    assert cli(["report", str(path), "--writeup", str(tmp_path / "other.json")]) == 2


def test_out_and_histories_can_be_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    finding = seed_like()
    path = write_finding(tmp_path, finding)
    write_history_jsonl(tmp_path / "runs.jsonl", [loaded_run(finding, 2)])
    assert cli(["report", str(path), "--out", str(tmp_path / "r"), "--histories", str(tmp_path / "runs.jsonl")]) == 0
    assert "loaded run 2" in (tmp_path / "r" / "report.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such finding file"), ("{not json", "not valid JSON"), ('{"schema_version": 1}', "does not match the finding schema")],
)
def test_a_bad_finding_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "finding.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    assert cli(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servefuzz: error: ") and message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "finding-report").exists()


def test_a_missing_histories_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_finding(tmp_path, seed_like())
    assert cli(["report", str(path), "--histories", str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "nope.jsonl: no such histories file" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("module", ["reports.facts", "reports.html", "reports.repro", "sanitize"])
def test_the_report_modules_examples_hold(module: str) -> None:
    # issue.md's escaping examples live with the one sanitizer (servefuzz.sanitize) now.
    result = doctest.testmod(importlib.import_module(f"servefuzz.{module}"))
    assert result.attempted > 0 and result.failed == 0


def test_the_png_reader_example_holds() -> None:
    assert doctest.testmod(png_pixels).failed == 0
