"""reports/tiny_model.py, the model writer every repro.py embeds, writes what servefuzz's own
model builder (`servefuzz.models.build_models`) writes for the same seed: byte for byte, every
file, GGUF and Hugging Face, the LoRA adapters of both; and it needs nothing of servefuzz."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from servefuzz.models import build_models, hf_tokenizer_json  # noqa: E402
from servefuzz.reports import tiny_model  # noqa: E402


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_it_writes_what_the_model_builder_writes_byte_for_byte(tmp_path: Path, dtype: str) -> None:
    built = tmp_path / "built"
    build_models(built, dtype=dtype, seed=3)  # not the presets' seed 0: the seed is carried, not assumed
    ours = tmp_path / "ours"
    tiny_model.write_model(ours, "gguf", seed=3)
    tiny_model.write_model(ours, "hf", seed=3, dtype=dtype, tokenizer_json=hf_tokenizer_json(3))
    theirs = {k: v for k, v in files(built).items() if not k.startswith("draft/")}  # no finding on CPU uses the draft
    assert sorted(files(ours)) == sorted(theirs)
    for name, data in files(ours).items():
        assert data == theirs[name], name


def test_without_adapters_it_writes_the_model_alone(tmp_path: Path) -> None:
    written = tiny_model.write_model(tmp_path, "gguf", adapters=False)
    assert written == [tmp_path / "tiny.gguf"] and not (tmp_path / "lora").exists()
    with pytest.raises(ValueError, match="tokenizer"):
        tiny_model.write_model(tmp_path, "hf")


def test_it_imports_only_the_standard_library_and_numpy() -> None:
    tree = ast.parse(inspect.getsource(tiny_model))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - sys.stdlib_module_names == {"numpy"}
