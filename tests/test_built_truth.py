"""Which truth a campaign on a preset holds a `--model` to (`api._built_model`,
`engine_files.built_truth`): servefuzz's own builds in its cache, `--model-arch`'s included, and
nothing else. Folders laid out as the cache lays them; nothing is built or served here."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefuzz.api import _built_model


def _build(root: Path, name: str, *parts: str) -> Path:
    folder = root / "models" / name
    for part in parts:
        (folder / part).parent.mkdir(parents=True, exist_ok=True)
        (folder / part).write_text("{}")
    return folder


def test_a_model_servefuzz_built_is_held_to_its_truth_and_no_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVEFUZZ_CACHE", str(tmp_path / "cache"))
    arch = _build(tmp_path / "cache", "tiny-deepseek-v3-seed0-0123abcd", ".complete", "hf-float32/config.json",
                  "deepseek-v3.gguf")
    # --model-arch deepseek-v3: the HF folder, whichever format the preset serves (the GGUF is its copy).
    assert _built_model("vllm-cpu", arch) == arch / "hf-float32"
    assert _built_model("llama-server", arch) == arch / "hf-float32"
    # The default llama: its GGUF is another model than its HF folder, so each preset its own.
    default = _build(tmp_path / "cache", "tiny-seed0", ".complete", "hf-float32/config.json", "tiny.gguf")
    assert _built_model("vllm-cpu", default) == default / "hf-float32"
    assert _built_model("llama-server", default) == default / "tiny.gguf"
    # A build cut short, a user's folder laid out the same way, or no preset: no truth.
    half = _build(tmp_path / "cache", "tiny-qwen3-moe-seed0-4567", "hf-float32/config.json")
    assert _built_model("vllm-cpu", half) is None
    theirs = _build(tmp_path / "elsewhere", "tiny-gemma3-seed0-89ab", ".complete", "hf-float32/config.json")
    assert _built_model("vllm-cpu", theirs) is None
    assert _built_model(None, arch) is None
