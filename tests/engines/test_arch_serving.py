"""llama-server 0c1e570 serves every architecture `servefuzz model build --arch` writes, from the
GGUF llama.cpp's own converter makes of its Hugging Face folder: it starts, answers a prompt longer
than every window and state chunk, and two copies of that request in flight at once answer what
one alone does (greedy, float32 KV). One server per architecture, short runs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from servefuzz import engine_files
from servefuzz.launcher import Launch, ServerProcess
from servefuzz.models import ARCHITECTURES, build_arch

pytestmark = pytest.mark.engine

PROMPT = [300 + (i * 7) % 1500 for i in range(150)]


async def _complete(url: str, copies: int) -> list[list[int]]:
    body = {"prompt": PROMPT, "n_predict": 32, "temperature": 0, "cache_prompt": False, "return_tokens": True}
    async with aiohttp.ClientSession() as session:
        async def one() -> list[int]:
            async with session.post(url + "/completion", json=body, timeout=aiohttp.ClientTimeout(total=120)) as r:
                assert r.status == 200, await r.text()
                return list((await r.json())["tokens"])
        return list(await asyncio.gather(*(one() for _ in range(copies))))


@pytest.mark.slow
@pytest.mark.parametrize("arch", [a for a in ARCHITECTURES if a != "llama"])
def test_llama_server_serves_the_architecture_and_a_batch_answers_as_one_alone(arch: str, tmp_path: Path) -> None:
    if not engine_files.installed("llama-server"):
        pytest.skip(f"llama-server is not built under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    if engine_files.gguf_converter() is None:
        pytest.skip(f"no llama.cpp converter beside llama-server: run {engine_files.SETUP_SCRIPT} or set {engine_files.GGUF_CONVERTER_ENV}")
    # The cache's build (`engine_files.arch_models`: `build_arch` with this converter, keyed by the
    # builder's source), which the campaign below serves too: one conversion per architecture.
    folder = engine_files.arch_models(arch)
    gguf = folder / f"{arch}.gguf"
    assert gguf.is_file(), f"no GGUF of {arch}: `servefuzz model build DIR --arch {arch}` says why"
    assert build_arch(tmp_path / arch, arch, seed=0).hf_dir.joinpath("model.safetensors").read_bytes() \
        == (folder / "hf-float32" / "model.safetensors").read_bytes()  # what build_arch writes today
    launch = Launch.resolve("llama-server", None, model=folder)  # `--model` of the built folder
    assert str(gguf) in launch.argv
    server = ServerProcess(launch.argv, log_path=tmp_path / "server.log", start_timeout_s=60)
    server.start()
    try:
        (alone,) = asyncio.run(_complete(server.base_url, 1))
        together = asyncio.run(_complete(server.base_url, 2))
    finally:
        server.stop()
    assert len(alone) == 32
    assert together == [alone, alone]


@pytest.mark.slow
def test_a_campaign_launched_with_model_arch_serves_that_architecture(tmp_path: Path) -> None:
    if not engine_files.installed("llama-server") or engine_files.gguf_converter() is None:
        pytest.skip("needs llama-server and llama.cpp's converter beside it")
    out = tmp_path / "campaign"
    done = subprocess.run([sys.executable, "-m", "servefuzz", "fuzz", "--launch", "llama-server", "--model-arch", "gemma3",
                           "--requests", "8", "--out", str(out)], capture_output=True, text=True, timeout=500, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    config = json.loads((out / "config.json").read_text())
    served = config["target"]["server_args"]["model_path"]
    assert served == str(engine_files.arch_models("gemma3") / "gemma3.gguf"), served
    # servefuzz read the model's window from its config.json, and the first round aims at it.
    assert config["target"]["architecture"]["window"] == 64
    assert config["strategies"][:2] == ["window-prefix", "window-edge"] and "state-restore" in config["left_out"]
