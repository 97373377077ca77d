"""vLLM CPU 0.32 and SGLang CPU 0.5.23 refuse some of servefuzz's architectures (docs/engines.md,
the engine x architecture table): each is one line before anything starts, read from the model's
config, and the same preset still takes the form of that architecture it serves (the control)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from servefuzz import engine_files
from servefuzz.errors import UsageError
from servefuzz.launcher import Launch

pytestmark = pytest.mark.engine


def _hf(tmp_path: Path, arch: str, dtype: str = "float32") -> Path:
    """The folder's config.json alone, as `model build --arch` writes it (what the refusal reads):
    the weights and tokenizer cost seconds each and are read by no one before the engine starts."""
    folder = tmp_path / f"{arch}-{dtype}"
    folder.mkdir()
    module = importlib.import_module(f"servefuzz.models.{arch.replace('-', '_')}")
    config = module.config(2048, {"<s>": 0, "</s>": 1, "<pad>": 2}, dtype)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def _installed(preset: str) -> None:
    if not engine_files.installed(preset):
        pytest.skip(f"{preset} is not installed under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")


@pytest.mark.parametrize(("preset", "arch", "says"), [
    ("vllm-cpu", "nemotron-h", "squared-ReLU experts"),
    ("vllm-cpu", "qwen3-next", "gated delta net attention only in bfloat16, this model is float32"),
    ("sglang-cpu", "gpt-oss", "GPT-OSS needs one of SGLang's accelerated attention backends"),
    ("sglang-cpu", "gemma3", "SGLang's Gemma 3 ignores lm_head.weight"),
    ("sglang-cpu", "qwen3-next", "needs GPU snapshots"),
    ("sglang-cpu", "nemotron-h", "needs GPU snapshots"),
    ("sglang-cpu", "deepseek-v3", "needs a rope_scaling"),
])
def test_an_architecture_the_engine_refuses_is_one_line_before_it_starts(preset: str, arch: str, says: str,
                                                                         tmp_path: Path) -> None:
    _installed(preset)
    model = _hf(tmp_path, arch)
    with pytest.raises(UsageError, match="will not serve") as refused:
        Launch.resolve(preset, None, model=model)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_the_refusal_reaches_the_user_as_one_line_and_exit_2(tmp_path: Path) -> None:
    _installed("sglang-cpu")
    model = _hf(tmp_path, "gpt-oss")
    done = subprocess.run([sys.executable, "-m", "servefuzz", "fuzz", "--launch", "sglang-cpu", "--model", str(model),
                           "--time", "1", "--out", str(tmp_path / "c")], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "sglang-cpu 0.5.23 will not serve" in lines[0], done.stderr[-2000:]


def test_the_forms_the_engines_do_serve_are_launched(tmp_path: Path) -> None:
    """The controls: qwen3-next in bfloat16 on vLLM, a Gemma 3 with tied embeddings on SGLang."""
    _installed("vllm-cpu")
    _installed("sglang-cpu")
    argv = Launch.resolve("vllm-cpu", None, model=_hf(tmp_path, "qwen3-next", "bfloat16")).argv
    assert argv[argv.index("--dtype") + 1] == "bfloat16"
    gemma = _hf(tmp_path, "gemma3")
    config = json.loads((gemma / "config.json").read_text())
    (gemma / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    assert str(gemma) in Launch.resolve("sglang-cpu", None, model=gemma).argv

