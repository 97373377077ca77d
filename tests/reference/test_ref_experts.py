"""A mixture-of-experts model on the serving core: routing is a function of each token alone (so
the engine stays exact whatever the batch), continuous at the top-k's edge (so a near-tie that
flips is benign by construction), and the planted router-tie-numerics fault moves answers as
benign numerics do, only in a batch of more than one request."""

from __future__ import annotations

import doctest

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ref_core import assert_exact, assert_no_leaks, engine_args, fault_run, run, tokens, workloads

from servefuzz.reference import experts as experts_module
from servefuzz.reference.experts import ROUTER_DRIFT_UNITS, WEIGHT_ONE, route
from servefuzz.reference.model import CLIP, TinyModel, _rms_norm
from servefuzz.reference.scheduler import Engine, Request, RequestError
from servefuzz.reference.server_args import ServerArgs


def test_docstring_examples_hold() -> None:
    result = doctest.testmod(experts_module)
    assert result.attempted > 0 and result.failed == 0


def dense_weights(scores: np.ndarray, k: int) -> np.ndarray:
    """Each expert's weight per token [T, E] (0 where not chosen)."""
    chosen, weights = route(scores, k)
    out = np.zeros_like(scores)
    np.put_along_axis(out, chosen, weights, axis=1)
    return out


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4))
def test_routing_is_continuous_at_the_top_k_edge(seed: int, drift: int) -> None:
    """Scores moved by at most `drift` move no expert's weight by more than 2 * drift, whichever
    experts the move swaps in or out: an expert enters and leaves the top k with weight 0."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(-40, 40, (16, 8)).astype(float)  # a narrow range: ties and near-ties abound
    moved = scores + rng.integers(-drift, drift + 1, scores.shape)
    assert np.abs(dense_weights(moved, 2) - dense_weights(scores, 2)).max() <= 2 * drift


def test_a_tie_goes_to_the_lower_index_and_weighs_nothing() -> None:
    chosen, weights = route(np.array([[5.0, 9.0, 5.0, 5.0]]), 2)
    assert chosen.tolist() == [[1, 0]] and weights.tolist() == [[4.0, 0.0]]
    assert route(np.array([[900.0, 0.0, 0.0]]), 1)[1].tolist() == [[WEIGHT_ONE]]  # capped at one


def test_a_tokens_experts_do_not_depend_on_its_batch(moe: TinyModel) -> None:
    experts = moe.experts[0]
    assert experts is not None
    x = _rms_norm(moe.embed(np.array(tokens(1, 64))))
    together = experts(x, CLIP)
    alone = np.concatenate([experts(x[i : i + 1], CLIP) for i in range(len(x))])
    assert np.array_equal(together, alone)
    assert len(np.unique(route(experts.scores(x), 2)[0])) == 8  # every expert gets tokens


def test_changing_a_prompt_token_changes_the_continuation(moe: TinyModel) -> None:
    rng = np.random.default_rng(7)
    changed = 0
    for _ in range(20):
        prompt = [int(t) for t in rng.integers(3, 1024, int(rng.integers(16, 300)))]
        other = list(prompt)
        i = int(rng.integers(0, len(prompt)))
        other[i] = 3 + (prompt[i] - 3 + int(rng.integers(1, 1021))) % 1021
        changed += moe.generate(prompt, 32).token_ids != moe.generate(other, 32).token_ids
    assert changed >= 18


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=engine_args(), plan=workloads())
def test_moe_engine_is_bit_exact_under_any_schedule(moe: TinyModel, args: ServerArgs, plan: list) -> None:
    engine = Engine(args, model=moe)
    servable = []
    for item in plan:
        try:
            engine.check(item[1])
        except RequestError:
            continue
        servable.append(item)
    outcomes = run(engine, servable)
    assert_exact(moe, outcomes, aborted={r.rid for _, r, a in servable if a is not None})
    assert_no_leaks(engine)


# -- router-tie-numerics, in-process ----------------------------------------------------------


def test_the_router_fault_needs_more_than_one_request_and_moves_little(moe: TinyModel) -> None:
    fault = {"faults": ("router-tie-numerics",), "model_arch": "qwen3-moe"}
    many = [(0, Request(f"N{i}", tuple(tokens(60 + i, 100)), 32, top_logprobs_num=2), None) for i in range(8)]
    assert fault_run(moe, many, **fault)  # flips beside others
    assert fault_run(moe, many, **fault, enable_deterministic_inference=True) == set()
    assert fault_run(moe, [(0, Request("n", tuple(tokens(60, 100)), 32, n=4), None)], **fault) == set()
    engine = Engine(ServerArgs(**fault), model=moe)  # type: ignore[arg-type]
    outcomes = run(engine, many)
    flips = 0
    for o in outcomes.values():
        got = o.steps[0]
        ref = moe.score(o.req.prompt, [s.token_id for s in got], top_k=2)
        first = next((i for i, (a, b) in enumerate(zip(ref.steps, got, strict=True)) if a.token_id != b.token_id), len(got))
        for a, b in zip(ref.steps[:first], got[:first], strict=True):
            assert abs(a.logprob - b.logprob) < 0.1  # the same tokens: logprobs moved a little
        if first < len(got):
            flips += 1
            (_, best), (_, second) = ref.steps[first].top
            assert best - second < 0.1, "a routing flip must sit at a near-tie"
    assert flips >= 1
    assert ROUTER_DRIFT_UNITS <= 4
