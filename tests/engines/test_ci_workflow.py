"""The example CI workflow (examples/ci/github-gpu.yml, issue 55) runs as written: its `run:` steps'
shell text, each in bash as GitHub Actions runs it (`bash --noprofile --norc -eo pipefail`), in a
job folder laid out as the install step leaves it, with the job's own `env:`, where only the GPU
is stood in for: `PRESET=sglang-cpu` and `.venv` the cache's SGLang CPU venv (what `pip install
sglang` leaves on a GPU runner is the same package, built for CUDA), the tiny model as `MODEL`, and
a budget of seconds as `TIME_S`.

The install step is not run: it is `pip install` of an engine release (a GPU build, gigabytes),
and the cache's venv stands in for what it leaves; `servefuzz` on PATH is this checkout's. Then
the gate means what docs/guide/ci.md says (exit 1 exactly when the JUnit file has a failure, 0
otherwise), the JUnit file it writes validates against the JUnit schema, and every path the
workflow uploads exists.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import xmlschema
import yaml
from junitparser import JUnitXml

from servefuzz import engine_files
from servefuzz.errors import Exit

WORKFLOW = Path(__file__).parents[2] / "examples" / "ci" / "github-gpu.yml"
SCHEMA = Path(__file__).parents[1] / "reports" / "junit-10.xsd"
STANDIN = ("sglang-cpu", "0.5.23")
# The engine's start (about 30 s idle, more beside other work), the campaign and its report.
STEP_TIMEOUT_S = 420
BUDGET_S = "20"

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(2 * STEP_TIMEOUT_S)]


def workflow() -> dict[str, Any]:
    loaded = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(loaded, dict)
    return loaded


def job() -> dict[str, Any]:
    [the_job] = workflow()["jobs"].values()
    assert isinstance(the_job, dict)
    return the_job


def is_install(step: dict[str, Any]) -> bool:
    """The step that pip-installs the engine release and servefuzz: what the test stands in for."""
    return "pip install" in step.get("run", "")


def bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One `run:` step, as GitHub Actions runs it on Linux; Ctrl-C (which stops the server
    servefuzz launched) if it runs over."""
    proc = subprocess.Popen(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=STEP_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_the_workflow_reads_the_preset_and_budget_from_its_env_and_names_no_engine_command() -> None:
    """What the run below stands in for is only env: the GPU preset, the model, the budget."""
    the_job = job()
    env = the_job["env"]
    assert (env["PRESET"], env["PROFILE"]) == ("sglang-gpu", "default") and float(env["TIME_S"]) >= 600
    steps = [s for s in the_job["steps"] if "run" in s]
    [gate] = [s for s in steps if "servefuzz fuzz" in s["run"]]
    for flag in ('--launch "$PRESET"', "--engine-python .venv/bin/python", '--profile "$PROFILE"', '--time "$TIME_S"',
                 "--keep-going", "--out campaign", "--junit servefuzz.xml"):
        assert flag in gate["run"], flag
    assert "launch_server" not in gate["run"] and "if" not in gate  # the preset, not a raw command; the gate itself


def test_the_workflow_runs_on_a_cpu_engine_standing_in_for_the_gpu(tmp_path: Path) -> None:
    preset, version = STANDIN
    if not engine_files.installed(preset, version):
        pytest.skip(f"{preset} {version} is not installed under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    the_job = job()
    # The job folder as the install step leaves it: the engine's venv at .venv, servefuzz on PATH.
    (tmp_path / ".venv").symlink_to(engine_files.engine_dir(preset, version) / "venv")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "servefuzz"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m servefuzz "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GITHUB_PATH": str(tmp_path / "github_path"),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    env |= {k: str(v) for k, v in the_job["env"].items() if "${{" not in str(v)}
    env |= {"PRESET": preset, "MODEL": str(engine_files.hf_model_dir(None)), "TIME_S": BUDGET_S}

    gate: subprocess.CompletedProcess[str] | None = None
    ran: list[str] = []
    for step in the_job["steps"]:
        if "run" not in step or is_install(step):
            continue  # an action (checkout, upload, report), or the install the cache stands in for
        # Every step after the gate runs whatever the gate said: `if: failure()` and `always()`
        # steps are what a failed gate runs too, and they must not fail on a passing one.
        done = bash(step["run"], tmp_path, env)
        ran.append(step["name"])
        if "servefuzz fuzz" in step["run"]:
            gate = done
        else:
            assert done.returncode == 0, (step["name"], done.stderr[-3000:])
    assert gate is not None and len(ran) >= 2, ran
    assert gate.returncode in (Exit.OK, Exit.FOUND) and "Traceback" not in gate.stderr, gate.stderr[-3000:]

    xml = tmp_path / "servefuzz.xml"
    xmlschema.XMLSchema(SCHEMA).validate(xml)
    [suite] = list(JUnitXml.fromfile(str(xml)))
    failed = [case for case in suite if case.is_failure]
    # The gate: exit 1 exactly when the CI page shows a failed test.
    assert (gate.returncode == Exit.FOUND) == bool(failed)
    assert any(case.classname == "servefuzz.exercise" for case in suite)  # the engine's meters were read
    # Every path the workflow uploads is there, and the campaign ran the stand-in's install.
    [upload] = [s for s in the_job["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    for path in upload["with"]["path"].split():
        assert (tmp_path / path).exists(), path
    [report] = [s for s in the_job["steps"] if "action-junit-report" in s.get("uses", "")]
    assert (tmp_path / report["with"]["report_paths"]).is_file()
    target = json.loads((tmp_path / "campaign" / "config.json").read_text())["target"]
    assert (target["install"], target["version"]) == ("engine-python", version)
    for finding in (tmp_path / "campaign" / "findings").glob("finding_*.json"):
        assert (finding.parent / f"{finding.stem}-report" / "issue.md").is_file()  # the report step wrote it
