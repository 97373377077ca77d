"""The model writer every repro_full.py embeds (`models/files.py` then `models/llama.py`, as
`reports.repro.model_source` joins them), run on its own with nothing of servefuzz loaded, writes
what servefuzz's own model builder (`servefuzz.models.build_models`) writes for the same seed:
byte for byte, every file, GGUF and Hugging Face, the LoRA adapters of both."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tokenizers")

from servefuzz import truth  # noqa: E402
from servefuzz.models import build_models, hf_tokenizer_json, llama  # noqa: E402
from servefuzz.models.files import hf_tokens  # noqa: E402
from servefuzz.reports.repro import model_source  # noqa: E402


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def embedded() -> dict[str, Any]:
    """The embedded source, executed as repro_full.py runs it: in a namespace of its own."""
    namespace: dict[str, Any] = {"__name__": "repro_model"}
    exec(compile(model_source(), "repro-model", "exec"), namespace)  # noqa: S102 - our own source
    return namespace


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_embedded_writer_writes_what_the_model_builder_writes_byte_for_byte(
    tmp_path: Path, dtype: str, embedded: dict[str, Any]
) -> None:
    built = tmp_path / "built"
    build_models(built, dtype=dtype, seed=3)  # not the presets' seed 0: the seed is carried, not assumed
    ours = tmp_path / "ours"
    embedded["write_model"](ours, "gguf", seed=3)
    embedded["write_model"](ours, "hf", seed=3, dtype=dtype, tokenizer_json=hf_tokenizer_json(3))
    theirs = {k: v for k, v in files(built).items() if not k.startswith("draft/")}  # no finding on CPU uses the draft
    assert sorted(files(ours)) == sorted(theirs)
    for name, data in files(ours).items():
        assert data == theirs[name], name


def test_without_adapters_it_writes_the_model_alone(tmp_path: Path, embedded: dict[str, Any]) -> None:
    written = embedded["write_model"](tmp_path, "gguf", adapters=False)
    assert written == [tmp_path / "tiny.gguf"] and not (tmp_path / "lora").exists()
    with pytest.raises(ValueError, match="tokenizer"):
        embedded["write_model"](tmp_path, "hf")


def test_the_embedded_source_imports_only_the_standard_library_and_numpy() -> None:
    tree = ast.parse(model_source())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - sys.stdlib_module_names == {"numpy"}
    assert not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))


def test_the_embedded_writer_names_the_tensors_as_the_truth_reads_them(embedded: dict[str, Any]) -> None:
    """The tables are written once, in truth.py; repro_full.py carries that text, not a copy of its own."""
    assert llama.GGUF_LAYER_NAMES is truth.GGUF_LAYER_NAMES and llama.GGUF_MODEL_NAMES is truth.GGUF_MODEL_NAMES
    assert embedded["GGUF_LAYER_NAMES"] == truth.GGUF_LAYER_NAMES
    assert embedded["GGUF_MODEL_NAMES"] == truth.GGUF_MODEL_NAMES
    assert embedded["gguf_name"]("model.layers.1.mlp.down_proj.weight") == "blk.1.ffn_down.weight"


def test_the_quiet_tokens_are_the_specials_and_those_tokenizers_decodes_to_a_replacement() -> None:
    tokenizers = pytest.importorskip("tokenizers")
    text = hf_tokenizer_json(0)
    size, quiet, ids = hf_tokens(text)
    tok = tokenizers.Tokenizer.from_str(text)
    assert size == tok.get_vocab_size() == 2048
    broken = {i for i in range(size) if "\ufffd" in tok.decode([i])}
    assert set(quiet) == broken | set(ids.values())
    assert 0 < len(broken) < size // 4  # the control: some tokens are partial UTF-8, most are not
