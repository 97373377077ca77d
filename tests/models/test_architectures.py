"""Every architecture `servefuzz model build --arch` writes: its config keeps the shapes that make
the engines pick their real kernels, and HF transformers (the engines' own version, 5.19) loads
every tensor by name and generates from it. llama.cpp's side is tests/engines/test_architectures.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tokenizers")

import servefuzz  # noqa: E402
from servefuzz import engine_files  # noqa: E402
from servefuzz.errors import UsageError  # noqa: E402
from servefuzz.models import ARCHITECTURES, ArchPaths, build_arch, build_key  # noqa: E402
from servefuzz.models.files import hf_tokens, safetensors_file  # noqa: E402
from servefuzz.models.parts import SSM_CHUNK, WINDOW  # noqa: E402

OTHERS = [a for a in ARCHITECTURES if a != "llama"]
# The shortest prompt the strategies send across a window or a chunk is longer than this: a
# window or a chunk must fit in a prompt several times over.
SHORTEST_LONG_PROMPT = 128
# Tensors transformers leaves out by design: the next-token-prediction layers (DeepSeek's is
# layer LAYERS, Qwen3-Next's `mtp.*`), which the engines' MTP reads.
MTP_PREFIXES = {"deepseek-v3": ("model.layers.2.",), "qwen3-next": ("mtp.",)}


class _Builds(dict[str, ArchPaths]):
    """Each architecture built on first use: the suite's workers share this module's tests, and
    each builds only the architectures its own tests read."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        super().__init__()
        self.factory = factory

    def __missing__(self, arch: str) -> ArchPaths:
        self[arch] = build_arch(self.factory.mktemp(arch), arch, seed=0)
        return self[arch]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ArchPaths]:
    return _Builds(tmp_path_factory)


def _config(paths: ArchPaths) -> dict[str, Any]:
    return dict(json.loads((paths.hf_dir / "config.json").read_text()))


def test_every_architecture_is_built_from_one_seed_the_same_and_from_another_differently(tmp_path: Path) -> None:
    a = build_arch(tmp_path / "a", "qwen3-moe", seed=0)
    b = build_arch(tmp_path / "b", "qwen3-moe", seed=0)
    c = build_arch(tmp_path / "c", "qwen3-moe", seed=1)
    weights = [(p.hf_dir / "model.safetensors").read_bytes() for p in (a, b, c)]
    assert weights[0] == weights[1] != weights[2]
    assert a.gguf is None and "converter" in a.gguf_missing  # none given: said, not guessed
    with pytest.raises(UsageError, match="unknown architecture 'mamba9'"):
        build_arch(tmp_path / "d", "mamba9")


def _key_in(src: Path) -> str:
    """`build_key("gemma3")` as the servefuzz package under `src` computes it."""
    done = subprocess.run([sys.executable, "-c", "from servefuzz.models import build_key; print(build_key('gemma3'))"],
                          capture_output=True, text=True, timeout=120, check=True, env={**os.environ, "PYTHONPATH": str(src)})
    return done.stdout.strip()


def test_the_cached_build_of_an_architecture_is_named_by_a_key_that_follows_the_builders_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`engine_files.arch_models` builds once per key, and the key (`build_key`) changes with any
    module of the builder: a cached tiny-ARCH-seed0 is never an older builder's output."""
    monkeypatch.setenv("SERVEFUZZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(engine_files.GGUF_CONVERTER_ENV, str(tmp_path / "no-converter.py"))  # the HF folder alone
    first = engine_files.arch_models("gemma3")
    assert first.parent == tmp_path / "cache" / "models" and first.name.startswith("tiny-gemma3-seed0-")
    assert (first / "hf-float32" / "config.json").is_file() and not any(first.glob("*.gguf"))
    (first / "hf-float32" / "mark").touch()
    assert engine_files.arch_models("gemma3") == first and (first / "hf-float32" / "mark").is_file()  # not rebuilt
    monkeypatch.setenv(engine_files.GGUF_CONVERTER_ENV, str(tmp_path / "another-converter.py"))
    assert engine_files.arch_models("gemma3") != first  # another converter: another build
    # A copy of the package: the same sources give the same key wherever they lie, and one
    # changed byte in a builder's module gives another.
    copy = tmp_path / "src"
    shutil.copytree(Path(servefuzz.__file__).parent, copy / "servefuzz", ignore=shutil.ignore_patterns("__pycache__"))
    assert _key_in(copy) == build_key("gemma3")
    parts = copy / "servefuzz" / "models" / "parts.py"
    parts.write_text(parts.read_text() + "\n# changed\n")
    assert _key_in(copy) != build_key("gemma3")


@pytest.mark.parametrize("arch", OTHERS)
def test_the_config_keeps_the_shapes_the_kernels_take(built: dict[str, ArchPaths], arch: str) -> None:
    config = _config(built[arch])
    assert config["hidden_size"] == 256 and config["vocab_size"] == built[arch].vocab_size == 2048
    if arch == "deepseek-v3":  # MLA: the latent and rotary widths FlashMLA and the MLA kernels take
        assert (config["kv_lora_rank"], config["qk_rope_head_dim"]) == (512, 64)
        assert config["num_nextn_predict_layers"] == 1 and config["first_k_dense_replace"] == 1
    else:
        assert config["head_dim"] == 64
        assert config["num_key_value_heads"] < config["num_attention_heads"]  # grouped-query
    experts = config.get("num_experts") or config.get("n_routed_experts") or config.get("num_local_experts")
    if arch != "gemma3":
        assert experts and experts > config["num_experts_per_tok"] >= 2
    kinds = set(config.get("layer_types") or ())
    if arch in ("gemma3", "gpt-oss"):
        assert kinds == {"sliding_attention", "full_attention"}
        assert config["sliding_window"] == WINDOW <= SHORTEST_LONG_PROMPT // 2
    if arch == "qwen3-next":
        assert kinds == {"linear_attention", "full_attention"}
    if arch == "nemotron-h":
        assert set(config["hybrid_override_pattern"]) == {"M", "E", "*"}
        assert config["chunk_size"] == SSM_CHUNK <= SHORTEST_LONG_PROMPT // 4
        assert config["mamba_num_heads"] * config["mamba_head_dim"] == config["hidden_size"]
        # SGLang sizes the Mamba state by the one and builds the mixer by the other (default 8).
        assert config["mamba_n_groups"] == config["n_groups"] == 1


@pytest.mark.parametrize("arch", OTHERS)
def test_the_quiet_tokens_rows_of_the_output_layer_are_zero(built: dict[str, ArchPaths], arch: str) -> None:
    np = pytest.importorskip("numpy")
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    weights = safetensors_numpy.load_file(str(built[arch].hf_dir / "model.safetensors"))
    _, quiet, _ = hf_tokens((built[arch].hf_dir / "tokenizer.json").read_text())
    head = weights["lm_head.weight"]
    assert not np.any(head[quiet]) and np.all(np.abs(head).sum(axis=1)[[i for i in range(len(head)) if i not in set(quiet)]] > 0)


def _load(hf_dir: Path) -> tuple[Any, dict[str, Any]]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    return transformers.AutoModelForCausalLM.from_pretrained(  # type: ignore[no-any-return]
        str(hf_dir), dtype=torch.float32, output_loading_info=True)


@pytest.mark.slow
@pytest.mark.parametrize("arch", OTHERS)
def test_transformers_loads_every_tensor_by_name_and_generates(built: dict[str, ArchPaths], arch: str) -> None:
    torch = pytest.importorskip("torch")
    model, info = _load(built[arch].hf_dir)
    assert not info["missing_keys"], info["missing_keys"]
    assert not info["mismatched_keys"]
    unexpected = set(info["unexpected_keys"])
    assert all(k.startswith(MTP_PREFIXES.get(arch, ("-",))) for k in unexpected), sorted(unexpected)[:5]
    # A prompt longer than every window and several state chunks, then greedy decoding.
    prompt = torch.tensor([[300 + (i * 7) % 1500 for i in range(150)]])
    out = model.generate(prompt, max_new_tokens=8, do_sample=False)
    new = out[0, 150:].tolist()
    _, quiet, _ = hf_tokens((built[arch].hf_dir / "tokenizer.json").read_text())
    assert len(new) == 8 and not set(new) & set(quiet)


@pytest.mark.slow
def test_a_tensor_missing_from_the_checkpoint_is_caught(built: dict[str, ArchPaths], tmp_path: Path) -> None:
    """The control of the load check: the same folder with one tensor dropped reports it missing."""
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    source = built["gemma3"].hf_dir
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in source.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    weights = safetensors_numpy.load_file(str(source / "model.safetensors"))
    gone = "model.layers.0.mlp.up_proj.weight"
    del weights[gone]
    safetensors_file(broken / "model.safetensors", weights, "float32")
    _, info = _load(broken)
    assert gone in info["missing_keys"]


def test_the_command_builds_an_architecture_and_says_why_there_is_no_gguf(tmp_path: Path) -> None:
    env = {"SERVEFUZZ_GGUF_CONVERTER": str(tmp_path / "no-such-converter.py"), "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    done = subprocess.run([sys.executable, "-m", "servefuzz", "model", "build", str(tmp_path / "m"), "--arch", "gpt-oss"],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "m" / "hf-float32" / "config.json").is_file()
    assert "not written: no llama.cpp converter at" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "servefuzz", "model", "build", str(tmp_path / "x"), "--arch", "mamba9"],
                         capture_output=True, text=True, env={**os.environ, **env}, timeout=120, check=False)
    assert bad.returncode != 0 and "invalid choice: 'mamba9'" in bad.stderr and "Traceback" not in bad.stderr


def test_model_arch_needs_a_preset_and_no_second_model_and_says_so_in_one_line(tmp_path: Path) -> None:
    # Without a target the reference engine serves the architectures it has, exactly; the others
    # need a preset, as does a server someone else runs.
    for extra, said in ((["--model-arch", "deepseek-v3"], "--model-arch deepseek-v3: the reference engine serves llama, "
                                                         "qwen3-next"),
                        (["--url", "http://127.0.0.1:9", "--model-arch", "qwen3-next"], "--model-arch needs --launch PRESET"),
                        (["--launch", "llama-server", "--model-arch", "gemma3", "--model", str(tmp_path)],
                         "--model and --model-arch both name a model: give one")):
        done = subprocess.run([sys.executable, "-m", "servefuzz", "fuzz", "--requests", "1", "--out", str(tmp_path / "o"), *extra],
                              capture_output=True, text=True, timeout=120, check=False,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")})
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("arch", OTHERS)
def test_the_truth_control_computes_every_architecture_in_float64(built: dict[str, ArchPaths], arch: str) -> None:
    """`Truth.load` of each folder is transformers in float64 and gives a forward pass (the MoE
    ones raised at the first one until their experts ran eager), its greedy token that of
    transformers in float32 on a prompt longer than the window and the state chunks."""
    torch = pytest.importorskip("torch")
    from servefuzz.truth import HFTruth, Truth

    truth = Truth.load(built[arch].hf_dir)
    assert isinstance(truth, HFTruth)
    prompt = [300 + (i * 7) % 1500 for i in range(100)]
    logits = truth.logits(prompt)
    assert logits.shape == (100, truth.vocab) and bool(np.isfinite(logits).all())
    model, _ = _load(built[arch].hf_dir)
    with torch.no_grad():
        single = model(input_ids=torch.tensor([prompt])).logits[0, -1].double().numpy()
    assert int(np.argmax(logits[-1])) == int(np.argmax(single))
    assert float(np.abs(logits[-1] - single).max()) < 1e-3
