"""The tiny model: exact arithmetic, whole-prompt sensitivity, a faithful single-sequence path."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servefuzz.reference import architectures, faults, kvpool, model, radix, recurrent, scheduler, server_args, statecache
from servefuzz.reference.model import EOS_ID, ModelConfig, TinyModel, attend, detokenize


@pytest.mark.parametrize("module", [model, kvpool, radix, faults, server_args, scheduler, recurrent, statecache,
                                    architectures])
def test_docstring_examples_hold(module: object) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)  # type: ignore[arg-type]
    assert result.attempted > 0 and result.failed == 0


def test_every_reduction_stays_exact_in_float64(model: TinyModel) -> None:
    bounds = model.exactness_bounds()
    assert len(bounds) == 7 + 4 * model.config.n_layers
    assert max(bounds.values()) < 2**53, bounds


def test_same_seed_same_weights_other_seed_other_model() -> None:
    a, b, c = (TinyModel(ModelConfig(seed=s)) for s in (3, 3, 4))
    prompt = list(range(10, 60))
    assert a.generate(prompt, 8) == b.generate(prompt, 8)
    assert a.generate(prompt, 8).token_ids != c.generate(prompt, 8).token_ids


def test_changing_any_one_prompt_token_changes_the_continuation(model: TinyModel) -> None:
    # The point of the model: a wrong KV read must show in the output. 60 trials, prompts of
    # 16..300 tokens, one token changed at a random position: >= 90% must change the 32-token
    # greedy continuation (the model reaches 100% on this sample, ~90% at 400-1000 tokens).
    rng = np.random.default_rng(2024)
    changed = 0
    trials = 60
    for _ in range(trials):
        prompt = [int(t) for t in rng.integers(3, 1024, int(rng.integers(16, 300)))]
        other = list(prompt)
        i = int(rng.integers(0, len(prompt)))
        other[i] = 3 + (prompt[i] - 3 + int(rng.integers(1, 1021))) % 1021
        changed += model.generate(prompt, 32).token_ids != model.generate(other, 32).token_ids
    assert changed / trials >= 0.9


def test_incremental_generation_equals_full_recomputation(model: TinyModel) -> None:
    prompt = [int(t) for t in np.random.default_rng(5).integers(3, 1024, 70)]
    gen = model.generate(prompt, 12, top_k=5)
    assert model.score(prompt, gen.token_ids, top_k=5) == gen
    # And score() is itself the greedy argmax of one full forward per step.
    seq = list(prompt)
    for tok in gen.token_ids:
        assert TinyModel.greedy(model.forward(seq)[-1]) == tok
        seq.append(tok)


def test_logprobs_are_a_distribution_and_top_k_is_sorted(model: TinyModel) -> None:
    row = model.forward([5, 6, 7, 8, 9])[-1]
    (lp,) = model.logprobs(row[None], [TinyModel.greedy(row)], [1024])
    total = sum(np.exp(p) for _, p in lp.top)
    assert abs(total - 1.0) < 1e-3
    assert lp.top[0] == (lp.token_id, lp.logprob)
    assert [p for _, p in lp.top] == sorted((p for _, p in lp.top), reverse=True)
    assert {t for t, _ in lp.top[-2:]} == {0, 1}  # pad and bos are never generated


EOS_PROMPT = [223, 16, 51]  # with seed 0, greedy emits EOS (id 2) as its third token


def test_generation_stops_at_eos_only_when_asked(model: TinyModel) -> None:
    assert model.generate(EOS_PROMPT, 8, ignore_eos=False).token_ids == (191, 758, EOS_ID)
    assert len(model.generate(EOS_PROMPT, 8, ignore_eos=True).token_ids) == 8
    assert detokenize([3, 17]) == " w3 w17"


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 4),
    heads=st.integers(1, 3),
    q_len=st.integers(1, 5),
    k_len=st.integers(1, 40),
    pad=st.integers(0, 30),
    seed=st.integers(0, 2**32 - 1),
)
def test_attention_is_invariant_to_padding_and_batch(
    model: TinyModel, batch: int, heads: int, q_len: int, k_len: int, pad: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    shape = (batch, heads)
    q = rng.integers(-4095, 4096, (*shape, q_len, 16)).astype(np.float64)
    k = rng.integers(-4095, 4096, (*shape, k_len + pad, 16)).astype(np.float64)
    v = rng.integers(-4095, 4096, (*shape, k_len + pad, 16)).astype(np.float64)
    valid = np.zeros((batch, 1, q_len, k_len + pad), dtype=bool)
    valid[..., :k_len] = True
    together = attend(q, k, v, valid, model.attn_lut)
    for b in range(batch):  # each row alone, without the padding keys: the same bits
        alone = attend(
            q[b : b + 1],
            k[b : b + 1, :, :k_len],
            v[b : b + 1, :, :k_len],
            valid[b : b + 1, ..., :k_len],
            model.attn_lut,
        )
        assert np.array_equal(alone[0], together[b])
