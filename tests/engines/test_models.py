"""The tiny models: deterministic from the seed, loadable, shaped as the engines expect."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
import tokenizers
from safetensors.numpy import load_file

from servefuzz import models
from servefuzz.cli import main as cli
from servefuzz.errors import UsageError, extra_module
from servefuzz.models import ADAPTERS, TINY, ModelPaths, build_models


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModelPaths]:
    def build(name: str, dtype: str, seed: int) -> ModelPaths:
        return build_models(tmp_path_factory.mktemp(name), dtype=dtype, seed=seed)

    return {
        "a": build("a", "float32", 0),
        "b": build("b", "float32", 0),
        "seed1": build("seed1", "float32", 1),
        "bf16": build("bf16", "bfloat16", 0),
    }


def _files(p: ModelPaths) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in (*p.hf_dir.iterdir(), p.gguf)}


def test_same_seed_same_bytes_other_seed_other_weights(built: dict[str, ModelPaths]) -> None:
    assert _files(built["a"]) == _files(built["b"])
    other = _files(built["seed1"])
    same = _files(built["a"])
    assert other["model.safetensors"] != same["model.safetensors"]
    assert other["tiny.gguf"] != same["tiny.gguf"]


def test_hf_folder_is_a_llama_with_its_own_tokenizer(built: dict[str, ModelPaths]) -> None:
    p = built["a"]
    config = json.loads((p.hf_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["max_position_embeddings"]) == (2, 256, 2048)
    tok = tokenizers.Tokenizer.from_file(str(p.hf_dir / "tokenizer.json"))
    assert tok.get_vocab_size() == config["vocab_size"] == p.hf_vocab_size == 2048
    text = "Kaitou strai bomel. Vouzan?"
    assert tok.decode(tok.encode(text).ids) == text
    assert json.loads((p.hf_dir / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    weights = load_file(str(p.hf_dir / "model.safetensors"))
    assert weights["model.embed_tokens.weight"].shape == (2048, TINY.hidden)
    assert weights["model.layers.1.mlp.down_proj.weight"].shape == (TINY.hidden, TINY.ffn)
    assert all(w.dtype == np.float32 for w in weights.values())


def test_special_and_partial_utf8_tokens_cannot_win(built: dict[str, ModelPaths]) -> None:
    p = built["a"]
    tok = tokenizers.Tokenizer.from_file(str(p.hf_dir / "tokenizer.json"))
    head = load_file(str(p.hf_dir / "model.safetensors"))["lm_head.weight"]
    zero = {i for i in range(p.hf_vocab_size) if not head[i].any()}
    quiet = {tok.token_to_id(t) for t in ("<s>", "</s>", "<pad>")}
    quiet |= {i for i in range(p.hf_vocab_size) if "\ufffd" in tok.decode([i])}
    assert zero == quiet and 100 < len(quiet) < 200  # the specials and the 128 non-ASCII bytes


def test_bfloat16_weights_are_the_float32_ones_rounded(built: dict[str, ModelPaths]) -> None:
    raw = (built["bf16"].hf_dir / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    entry = header["model.embed_tokens.weight"]
    assert entry["dtype"] == "BF16"
    begin, end = entry["data_offsets"]
    bits = np.frombuffer(raw[8 + n + begin : 8 + n + end], dtype="<u2").astype(np.uint32) << 16
    bf16 = bits.view(np.float32).reshape(entry["shape"])
    f32 = load_file(str(built["a"].hf_dir / "model.safetensors"))["model.embed_tokens.weight"]
    assert not np.array_equal(bf16, f32)
    np.testing.assert_allclose(bf16, f32, rtol=2**-8, atol=0)  # half an ulp of an 8-bit mantissa
    assert json.loads((built["bf16"].hf_dir / "config.json").read_text())["dtype"] == "bfloat16"


def test_gguf_is_a_llama_with_a_sentencepiece_vocabulary(built: dict[str, ModelPaths]) -> None:
    reader = gguf.GGUFReader(str(built["a"].gguf))
    field = reader.get_field("general.architecture")
    assert field is not None and field.contents() == "llama"
    tokens = reader.get_field("tokenizer.ggml.tokens").contents()
    types = reader.get_field("tokenizer.ggml.token_type").contents()
    assert len(tokens) == built["a"].gguf_vocab_size == 1024
    assert tokens[3:259] == [f"<0x{b:02X}>" for b in range(256)]
    assert set(types[3:259]) == {int(gguf.TokenType.BYTE)}
    tensors = {t.name: t for t in reader.tensors}
    assert {"token_embd.weight", "blk.1.attn_q.weight", "blk.1.ffn_down.weight", "output.weight"} <= set(tensors)
    head = np.asarray(tensors["output.weight"].data).reshape(1024, TINY.hidden)
    assert not head[:259].any() and all(head[i].any() for i in range(259, 1024))


def _adapter_bytes(p: ModelPaths) -> list[bytes]:
    """Every adapter file's bytes, in a fixed order (the folders' files by name, then the GGUFs)."""
    assert p.adapters is not None
    return [f.read_bytes() for d in p.adapters.hf for f in sorted(d.iterdir())] + [f.read_bytes() for f in p.adapters.gguf]


def test_adapters_are_peft_folders_and_lora_ggufs_deterministic_from_the_seed(built: dict[str, ModelPaths]) -> None:
    a, b, other = (built[k].adapters for k in ("a", "b", "seed1"))
    assert a is not None and b is not None and other is not None
    assert [d.name for d in a.hf] == [f.stem for f in a.gguf] == list(models.ADAPTERS)
    assert _adapter_bytes(built["a"]) == _adapter_bytes(built["b"]) != _adapter_bytes(built["seed1"])
    config = json.loads((a.hf[0] / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"], config["target_modules"]) == ("LORA", 8, 16.0, ["q_proj", "v_proj"])
    tensors = load_file(str(a.hf[0] / "adapter_model.safetensors"))
    assert tensors["base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight"].shape == (8, TINY.hidden)
    assert tensors["base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"].shape == (TINY.hidden, 8)
    assert len(tensors) == 2 * 2 * TINY.layers  # A and B, q and v, each layer
    reader = gguf.GGUFReader(str(a.gguf[0]))
    said = {k: reader.get_field(k).contents() for k in ("general.type", "adapter.type", "adapter.lora.alpha")}
    assert said == {"general.type": "adapter", "adapter.type": "lora", "adapter.lora.alpha": 16.0}
    shapes = {t.name: tuple(int(x) for x in t.shape) for t in reader.tensors}  # ggml order: [in, out]
    assert shapes["blk.0.attn_q.weight.lora_a"] == (TINY.hidden, 8) and shapes["blk.0.attn_q.weight.lora_b"] == (8, TINY.hidden)
    # The base models' bytes do not depend on the adapters (their own random streams).
    assert _files(built["a"]) == _files(built["b"])


def test_the_draft_is_the_gguf_s_vocabulary_with_noisy_weights_deterministic_from_the_seed(built: dict[str, ModelPaths]) -> None:
    # llama-server takes a draft (-md) only with the target's vocabulary; the same seed writes the
    # same bytes, and the target's bytes do not depend on the draft (its own random stream).
    drafts = {k: built[k].draft for k in ("a", "b", "seed1")}
    assert all(d is not None and d.name == models.DRAFT_GGUF and d.parent.name == "draft" for d in drafts.values())
    a, b, other = (d.read_bytes() for d in drafts.values() if d is not None)
    assert a == b != other
    target, draft = (gguf.GGUFReader(str(p)) for p in (built["a"].gguf, drafts["a"]))
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.model",
                "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token",
                "llama.block_count", "llama.embedding_length", "llama.context_length"):
        assert draft.get_field(key).contents() == target.get_field(key).contents(), key
    assert draft.get_field("general.name").contents() == "servefuzz-tiny-draft"
    t = {x.name: np.asarray(x.data) for x in target.tensors}
    d = {x.name: np.asarray(x.data) for x in draft.tensors}
    assert t.keys() == d.keys()
    for name, weights in t.items():
        if name.endswith("norm.weight"):
            assert np.array_equal(d[name], weights), name
            continue
        # Noise of DRAFT_NOISE times the tensor's own spread: close, never equal.
        spread = float((d[name] - weights).std()) / float(weights.std())
        assert abs(spread - models.DRAFT_NOISE) < 0.2 * models.DRAFT_NOISE, (name, spread)
    head = d["output.weight"].reshape(-1, TINY.hidden)
    assert not head[:259].any() and all(head[i].any() for i in range(259, head.shape[0]))  # quiet tokens stay quiet
    assert _files(built["a"]) == _files(built["b"])


def test_the_spec_draft_profile_takes_the_draft_built_beside_its_model_or_refuses(
    built: dict[str, ModelPaths], tmp_path: Path
) -> None:
    from servefuzz import engine_files

    assert engine_files.draft_for(built["seed1"].gguf) == built["seed1"].draft
    assert engine_files.draft_for(built["seed1"].gguf.parent) == built["seed1"].draft  # a model build folder
    flags = engine_files.profile("llama-server", "spec-draft", model=built["a"].gguf).flags
    assert flags[flags.index("-md") + 1] == str(built["a"].draft)
    # A GGUF with no draft beside it: refused in one line, not launched to draft nothing (a
    # draft of another vocabulary starts, says the vocabularies differ, and turns speculation off).
    lone = tmp_path / "lone" / "tiny.gguf"
    lone.parent.mkdir()
    lone.write_bytes(built["seed1"].gguf.read_bytes())
    with pytest.raises(UsageError, match="no draft model beside it") as e:
        engine_files.profile("llama-server", "spec-draft", model=lone)
    assert "\n" not in str(e.value)


def test_the_lora_profile_takes_the_adapters_built_beside_its_model_or_refuses(
    built: dict[str, ModelPaths], tmp_path: Path
) -> None:
    from servefuzz import engine_files

    seed1 = built["seed1"]
    assert seed1.adapters is not None
    flags = engine_files.profile("llama-server", "lora", model=seed1.gguf).flags
    assert flags[flags.index("--lora-scaled") + 1] == ",".join(f"{p}:0" for p in seed1.adapters.gguf)
    flags = engine_files.profile("vllm-cpu", "lora", model=seed1.hf_dir.parent).flags  # a model build folder
    assert flags[flags.index("--lora-modules") + 1:] == tuple(
        f"{name}={path}" for name, path in zip(ADAPTERS, seed1.adapters.hf, strict=True))
    # No --model: the cache's default models' adapters, never those of a model given elsewhere.
    assert str(seed1.gguf.parent) not in " ".join(engine_files.profile("llama-server", "lora").flags)
    # A GGUF with no adapters beside it: refused in one line (another model's adapters would not fit).
    lone = tmp_path / "lone" / "tiny.gguf"
    lone.parent.mkdir()
    lone.write_bytes(seed1.gguf.read_bytes())
    with pytest.raises(UsageError, match="no adapters beside it") as e:
        engine_files.profile("llama-server", "lora", model=lone)
    assert "\n" not in str(e.value)


def test_cli_builds_and_says_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["model", "build", str(tmp_path / "m"), "--dtype", "bfloat16", "--seed", "4"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "m" / "hf-bfloat16") in out and str(tmp_path / "m" / "tiny.gguf") in out
    assert str(tmp_path / "m" / "draft" / "tiny-draft.gguf") in out


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert cli(["model", "build", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servefuzz: error: cannot create") and err.count("\n") == 1
    assert cli(["model", "build", str(tmp_path), "--seed", "-1"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert cli(["model", "build", str(tmp_path), "--dtype", "float16"]) == 2
    assert "float16" in capsys.readouterr().err


def test_a_missing_extra_is_named_with_its_install_command() -> None:
    with pytest.raises(UsageError, match=r"^building models needs .*: pip install 'servefuzz\[models\]'$"):
        extra_module("servefuzz_no_such_package", "building models")
