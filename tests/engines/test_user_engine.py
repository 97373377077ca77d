"""The user's own engine as a preset, on real installs: the cache's vLLM CPU and SGLang CPU venvs
stand in for "the venv the user installed the engine into", named with `--engine-python`.

- `servefuzz fuzz --launch vllm-cpu --engine-python VENV --profile chunked-prefill` (and SGLang's
  with `page-64`) runs the preset under that profile on that install: the server is that
  interpreter's, and the campaign's target records the version read from the install and where
  it came from (`install: engine-python`).
- Read without starting anything: an interpreter without the engine, and an install that is not
  the version asked for, are one line and exit 2; the help check passes every flag the presets
  and their profiles give these versions.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from servefuzz import engine_files, engines
from servefuzz.engines.request import LaunchRequest
from servefuzz.errors import Exit
from servefuzz.launcher import Launch

# The engine's start (vLLM: 20-50 s idle, more beside other work) and a 30 s campaign.
CAMPAIGN_TIMEOUT_S = 600

pytestmark = [pytest.mark.engine, pytest.mark.timeout(CAMPAIGN_TIMEOUT_S + 60)]


def _venv(preset: str, version: str) -> Path:
    """The cache's venv of `preset` at `version`, standing in for the user's."""
    if not engine_files.installed(preset, version):
        pytest.skip(f"{preset} {version} is not installed under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    return engine_files.engine_dir(preset, version) / "venv"


def _servefuzz(*args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess; Ctrl-C (which stops the server it launched) if it runs over."""
    proc = subprocess.Popen([sys.executable, "-m", "servefuzz", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=CAMPAIGN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.parametrize(("preset", "version", "profile"), [
    ("vllm-cpu", "0.32.0", "chunked-prefill"),
    ("sglang-cpu", "0.5.23", "page-64"),
])
def test_a_campaign_runs_the_preset_and_profile_on_the_users_install_and_records_its_version(
    preset: str, version: str, profile: str, tmp_path: Path
) -> None:
    venv = _venv(preset, version)
    out = tmp_path / "campaign"
    done = _servefuzz("fuzz", "--launch", preset, "--engine-python", str(venv), "--profile", profile,
                      "--time", "30", "--keep-going", "--out", str(out), "--json")
    assert done.returncode in (Exit.OK, Exit.FOUND) and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert json.loads(done.stdout)["requests"] > 0
    target = json.loads((out / "config.json").read_text())["target"]
    assert (target["install"], target["version"], target["profile"]) == ("engine-python", version, profile)
    argv = json.loads((out / "server.json").read_text())["argv"]
    assert argv[0] == str(venv / "bin" / "python")  # that install's interpreter, as named
    chosen = engine_files.profile(preset, profile)
    assert all(flag in argv for flag in chosen.flags if flag.startswith("--"))


def test_an_install_without_the_engine_or_at_another_version_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vllm_venv, sglang_venv = _venv("vllm-cpu", "0.32.0"), _venv("sglang-cpu", "0.5.23")
    for launch, python, said in (
        ("sglang-cpu", vllm_venv, f"engine_python='{vllm_venv}/bin/python' does not import sglang, the engine of "
                                  "sglang-cpu: no module named 'sglang'"),
        ("sglang-cpu@0.5.10.post1", sglang_venv, f"launch='sglang-cpu@0.5.10.post1' asks for sglang 0.5.10.post1, "
                                                 f"and engine_python='{sglang_venv}/bin/python' has 0.5.23"),
    ):
        done = _servefuzz("fuzz", "--launch", launch, "--engine-python", str(python), "--out", str(tmp_path / "c"))
        assert done.returncode == Exit.USAGE and done.stderr == f"servefuzz: error: {said}\n"
        assert not (tmp_path / "c").exists()  # refused before the campaign's directory is made


def test_the_help_check_passes_every_flag_of_the_cpu_presets_and_profiles_on_these_versions() -> None:
    """Control for the refusal (tests/test_user_engine.py): read from the real `--help` of each
    version, no flag a CPU preset or profile gives it is missing, so none is refused."""
    for preset, version in (("vllm-cpu", "0.32.0"), ("sglang-cpu", "0.5.23"), ("sglang-cpu", "0.5.10.post1")):
        venv = _venv(preset, version)
        for name in engines.PROFILES[preset]:
            if engines.PROFILES[preset][name].adapters:
                continue  # its adapters are built on first use; its flags are the lora profile's own test's
            launch = Launch.resolve(LaunchRequest.parse(preset, engine_python=venv), profile=name)
            assert launch.version == version and launch.argv[0] == str(venv / "bin" / "python"), name
