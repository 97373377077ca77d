"""servefuzz.truth: the float64 forward pass agrees with llama.cpp, and it notices a wrong model.

The recorded numbers below are llama-server's own (llama.cpp 0c1e570 built for CPU by
scripts/setup_engines.sh, `-fa off -ctk f32 -ctv f32`, one slot, `cache_prompt: false`,
`n_probs: 5`) on the tiny GGUF of `servefuzz model build --seed 0`; `test_truth_matches_a_live_
llama_server` asks a live server the same when one is built. float32 on a CPU lands within some
1e-5 of the truth; 1e-4 is the bound asserted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

from llama_solo import one_slot_server, solo  # noqa: E402

from servefuzz.errors import UsageError  # noqa: E402
from servefuzz.launcher import ServerProcess  # noqa: E402
from servefuzz.models import ModelPaths, build_models  # noqa: E402
from servefuzz.truth import ROPE_NEOX, ROPE_NORM, HFTruth, LlamaTruth, ModelSpec, Truth  # noqa: E402

TOL = 1e-4


def _prompt(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(259, 1024, size=n)]


# (prompt, output tokens, per position the top-5 as (id, logprob)), from llama-server CPU. The
# 569-token prompt is evaluated in two micro-batches (512 + 57), like the GPU finding's.
RECORDED: list[tuple[list[int], list[int], list[list[tuple[int, float]]]]] = [
    (list(range(300, 340)), [715, 322, 593, 963, 374, 354],
     [[(715, -1.9571445), (409, -2.0191886), (1007, -2.226424), (337, -2.6291835), (261, -3.0358326)],
      [(322, -0.7074347), (789, -1.8466216), (359, -2.1480083), (725, -2.47754), (401, -3.3476162)],
      [(593, -2.5097589), (520, -2.5146456), (741, -2.5969086), (862, -2.6933107), (767, -2.8119187)],
      [(963, -1.9025931), (363, -2.2122531), (370, -2.5620298), (484, -2.6645904), (1014, -3.0584674)],
      [(374, -1.1822811), (1007, -1.3410879), (1013, -2.2979085), (441, -2.7932155), (855, -3.4753234)],
      [(354, -0.5505029), (885, -2.0974846), (647, -2.5175447), (481, -3.5410986), (912, -3.7387784)]]),
    (_prompt(15, 569), [308, 446, 673, 643, 720, 440],
     [[(308, -1.7615079), (519, -2.3395071), (929, -2.6648817), (855, -2.6946752), (902, -2.9239292)],
      [(446, -1.2608231), (620, -2.1407433), (999, -2.799911), (682, -2.883266), (879, -3.1804752)],
      [(673, -1.8865967), (722, -2.6819277), (768, -2.7130237), (983, -2.765358), (782, -2.9755502)],
      [(643, -0.251931), (828, -3.4385002), (482, -3.864537), (297, -3.998492), (714, -4.1714449)],
      [(720, -1.8700225), (754, -2.1538761), (260, -3.0267789), (828, -3.4547098), (810, -3.5101149)],
      [(440, -1.4298152), (419, -2.5148325), (862, -2.9552226), (421, -3.2528732), (288, -3.3759124)]]),
    (_prompt(16, 120), [609, 478, 319, 282, 578, 275],
     [[(609, -0.9689402), (295, -2.4714952), (680, -2.5028281), (670, -3.1501698), (270, -3.2802768)],
      [(478, -0.1366776), (862, -4.2601881), (313, -4.6151628), (954, -4.6715798), (465, -4.7615833)],
      [(319, -1.3063898), (775, -2.7910109), (917, -2.8699856), (989, -3.0221272), (282, -3.2604213)],
      [(282, -1.5921373), (291, -1.837552), (880, -2.3993349), (352, -2.4701128), (979, -2.9426601)],
      [(578, -1.8082379), (466, -1.9115313), (837, -2.160548), (541, -2.4521453), (355, -2.9872844)],
      [(275, -0.8881076), (661, -1.812425), (977, -2.0671589), (566, -3.9578385), (467, -3.9911501)]]),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> ModelPaths:
    return build_models(tmp_path_factory.mktemp("truth-models"), dtype="float32", seed=0)


@pytest.fixture(scope="module")
def truth(models: ModelPaths) -> Truth:
    return Truth.load(models.gguf)


def worst(truth: Truth, prompt: list[int], tokens: list[int], tops: list[list[tuple[int, float]]]) -> float:
    return max(truth.deviation(prompt, tokens, tops))


def test_the_gguf_is_read_as_llama_cpp_reads_it(truth: Truth) -> None:
    s = truth.spec
    assert (s.layers, s.hidden, s.heads, s.kv_heads, s.head_dim, s.ffn, s.vocab) == (2, 256, 4, 4, 64, 512, 1024)
    assert s.rope == ROPE_NORM and s.rope_dims == 64 and s.rope_theta == 10000.0
    assert s.rms_eps == pytest.approx(1e-5)


def test_truth_matches_recorded_llama_server_cpu(truth: Truth) -> None:
    for prompt, tokens, tops in RECORDED:
        positions = truth.logprobs(prompt, tokens, top_k=5)
        assert [p.greedy for p in positions] == tokens  # greedy: the server chose the truth's best
        assert worst(truth, prompt, tokens, tops) < TOL
        for p, top in zip(positions, tops, strict=True):
            assert [t for t, _ in p.top] == [t for t, _ in top]


def test_truth_fires_when_a_weight_is_perturbed(models: ModelPaths) -> None:
    """One row of one key projection (256 of the model's 1.8 million weights) scaled by 1.05
    moves the answer well past the tolerance; a whole projection scaled so moves it by a tenth of
    a nat: the agreement above is not the comparison being blind."""
    bent = Truth.load(models.gguf)
    bent.w["blk.1.attn_k.weight"][7] *= 1.05
    assert max(worst(bent, prompt, tokens, tops) for prompt, tokens, tops in RECORDED) > 10 * TOL
    bent.w["blk.0.attn_v.weight"] *= 1.05
    assert max(worst(bent, prompt, tokens, tops) for prompt, tokens, tops in RECORDED) > 300 * TOL


def test_truth_fires_when_the_rope_style_is_wrong(models: ModelPaths) -> None:
    """The GGUF read with the Hugging Face rotation (halves instead of adjacent pairs) is far:
    the rotation is part of what is checked."""
    right = Truth.load(models.gguf)
    wrong = LlamaTruth(ModelSpec(**{**right.spec.__dict__, "rope": ROPE_NEOX}), right.w)
    assert max(worst(wrong, prompt, tokens, tops) for prompt, tokens, tops in RECORDED) > 100 * TOL


def test_hf_folder_is_the_same_model_as_permuted_gguf_weights(models: ModelPaths) -> None:
    """The Hugging Face folder turns the two halves of each head (NeoX); permuting Q and K the
    way convert_hf_to_gguf.py does and turning adjacent pairs gives the very same logits."""
    hf = Truth.load(models.hf_dir)
    s = hf.spec
    assert s.rope == ROPE_NEOX and s.vocab == models.hf_vocab_size

    def permute(w: np.ndarray, heads: int) -> np.ndarray:  # convert_hf_to_gguf.LlamaModel.permute
        return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    w = dict(hf.w)
    for i in range(s.layers):
        w[f"blk.{i}.attn_q.weight"] = permute(w[f"blk.{i}.attn_q.weight"], s.heads)
        w[f"blk.{i}.attn_k.weight"] = permute(w[f"blk.{i}.attn_k.weight"], s.kv_heads)
    as_gguf = LlamaTruth(ModelSpec(**{**s.__dict__, "rope": ROPE_NORM}), w)
    ids = list(range(100, 160))
    np.testing.assert_allclose(as_gguf.logits(ids), hf.logits(ids), rtol=0, atol=1e-9)
    assert np.abs(LlamaTruth(ModelSpec(**{**s.__dict__, "rope": ROPE_NORM}), hf.w).logits(ids) - hf.logits(ids)).max() > 1e-3


def test_transformers_and_the_numpy_pass_agree_on_the_tiny_llama(models: ModelPaths) -> None:
    """The two truths of the tiny HF folder: numpy (what `Truth.load` picks there, being faster)
    and HF transformers in float64. transformers keeps its softmax, norm variance and rotary
    angles in float32: measured 2.8e-6 (40 tokens) and 3.5e-6 nats (300); 2e-5 is the bound. A
    weight bent on one side only moves them far apart: the agreement is not blindness."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    fast = Truth.load(models.hf_dir)
    hf = Truth.load(models.hf_dir, engine="transformers")
    assert isinstance(fast, LlamaTruth) and isinstance(hf, HFTruth) and hf.vocab == fast.vocab
    rng = np.random.default_rng(3)
    for n in (40, 300):
        ids = [int(t) for t in rng.integers(3, models.hf_vocab_size, size=n)]
        prompt, output = ids[:-8], ids[-8:]
        assert np.abs(fast.vocab_logprobs(prompt, output) - hf.vocab_logprobs(prompt, output)).max() < 2e-5
        assert fast.greedy(prompt, 4) == hf.greedy(prompt, 4)
    fast.w["blk.1.attn_k.weight"][7] *= 1.05
    fast._vocab_logprobs.clear()
    assert np.abs(fast.vocab_logprobs(prompt, output) - hf.vocab_logprobs(prompt, output)).max() > 1e-3


def test_logprobs_are_normalised_and_teacher_forced(truth: Truth) -> None:
    prompt = list(range(300, 340))
    lp = truth.vocab_logprobs(prompt, [500, 600, 700])
    np.testing.assert_allclose(np.exp(lp).sum(axis=1), 1.0, atol=1e-12)
    # Position j is scored after output_ids[:j], whatever they are (here not the greedy ones).
    again = truth.vocab_logprobs(prompt + [500], [600, 700])
    np.testing.assert_allclose(lp[1:], again, atol=1e-12)
    positions = truth.logprobs(prompt, [500, 600, 700], top_k=3)
    assert [p.token for p in positions] == [500, 600, 700]
    assert positions[0].logprob == pytest.approx(lp[0, 500])
    assert positions[0].margin >= 0 and len(positions[0].top) == 3


def test_bad_input_is_a_usage_error(truth: Truth, tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        truth.logits([0, 5000])
    with pytest.raises(UsageError):
        truth.logprobs([], [1])
    with pytest.raises(UsageError):
        Truth.load(tmp_path / "missing")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mistral"}))
    with pytest.raises(UsageError):
        Truth.load(tmp_path, engine="numpy")
    with pytest.raises(UsageError):
        Truth.load(tmp_path, engine="guess")


# -- against a live llama-server (CPU), when scripts/setup_engines.sh has built one ---------------


@pytest.fixture(scope="module")
def llama_server(models: ModelPaths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with one_slot_server(models.gguf, tmp_path_factory.mktemp("truth-llama")) as srv:
        yield srv


@pytest.mark.engine
@pytest.mark.slow
def test_truth_matches_a_live_llama_server(llama_server: ServerProcess, truth: Truth) -> None:
    for prompt in (list(range(300, 340)), _prompt(15, 569), _prompt(17, 700)):
        tokens, tops = solo(llama_server.base_url, prompt, 12)
        assert worst(truth, prompt, tokens, tops) < TOL
        assert [p.greedy for p in truth.logprobs(prompt, tokens)] == tokens
