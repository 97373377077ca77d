"""A mixture of experts in exact fixed point, shaped like Qwen3-MoE's sparse MLP.

Each token's router scores (one integer per expert) pick its top k of E experts, ties broken by
the lower index (a stable sort), and the token's MLP output is the weighted sum of those experts'
outputs. Everything a token computes depends on that token's row alone and every sum is an exact
integer, so its output is the same whatever else is in the batch (tests/reference/test_ref_experts.py).

    >>> scores = np.array([[50., 10., 50., 40.], [300., 7., 7., 7.]])
    >>> chosen, weights = route(scores, 2)
    >>> chosen.tolist(), weights.tolist()   # a tie goes to the lower index; the weights are leads
    ([[0, 2], [0, 1]], [[10.0, 10.0], [256.0, 0.0]])

The weights: each chosen expert weighs its score's lead over the best expert left out, up to
one (`WEIGHT_ONE`, in whose units the weights are integers). An expert so enters and leaves a
token's top k with weight zero, and a weight moves by at most what the scores moved: the output
is continuous in the scores, and a near-tie that flips which expert is chosen moves the output no
more than the rounding that flipped it. Qwen3-MoE renormalises a softmax over the top k instead,
where the k-th expert weighs its full share up to the moment it drops out, so that a bfloat16
rounding flipping a near-tie changes the output by a whole expert's share: the routing
amplification docs/gpu/nondense-and-features.md could not tell from corruption. Here the benign
case is benign by construction (the zoo's `router-tie-numerics` flips near-ties and must stay
`numeric-drift`), and a routing flip that moves an answer far is a bug.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = ["ROUTER_DRIFT_UNITS", "WEIGHT_ONE", "Experts", "route", "router_offsets"]

WEIGHT_ONE = 256  # expert weights are integers in 1/256: a lead of 256 score units weighs one
# FAULT router-tie-numerics: batch-variant rounding moves each expert's router score by at most
# this many units (a token's scores spread by ~160 units over the experts; the second and third
# are within 4 of each other for 4% of tokens): the near-tied choices flip, every weight moves a
# little. In the last layer, its greedy flips sat at margins up to 0.03 nats and its top-1/top-2
# gaps moved 0.006 nats at the median and 0.06 at most (40 prompts, batches of 2-8).
ROUTER_DRIFT_UNITS = 2


def route(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer router scores [T, E] -> the chosen experts [T, k] (highest score first, ties to the
    lower index) and their integer weights [T, k] (see the module docstring). Row by row: each
    row's result depends on that row alone."""
    order = np.argsort(-scores, axis=1, kind="stable")
    chosen = order[:, :k]
    edge = np.take_along_axis(scores, order[:, k : k + 1], axis=1)  # the best expert left out
    return chosen, np.minimum(np.take_along_axis(scores, chosen, axis=1) - edge, WEIGHT_ONE)  # exact


@lru_cache(maxsize=64)
def router_offsets(n_requests: int, n_experts: int) -> np.ndarray:
    """FAULT router-tie-numerics: integer offsets on the router scores that depend on the forward
    batch's number of requests, as a split-K reduction whose split follows the batch: a batch of
    one is the reference order (no offset). Choices of one request count as one request."""
    if n_requests <= 1:
        return np.zeros(n_experts)
    rng = np.random.default_rng(0x70E5 + n_requests)
    out = rng.integers(-ROUTER_DRIFT_UNITS, ROUTER_DRIFT_UNITS + 1, n_experts).astype(np.float64)
    out.flags.writeable = False
    return out


class Experts:
    """One layer's router [d, E] and E two-layer ReLU experts (w1 [E, d, f], w2 [E, f, d]), all
    integer-valued, drawn from `rng`."""

    # Power-of-two requantisation, as the dense MLP's (model.TinyModel): the router's scores come
    # out ~180 units apart, each expert's output at about the dense MLP's scale.
    SHIFT_ROUTER = 9
    SHIFT_1 = 9
    SHIFT_2 = 8

    def __init__(self, rng: np.random.Generator, d_model: int, d_expert: int, n_experts: int, per_token: int) -> None:
        if not 1 <= per_token < n_experts:
            raise ValueError("experts_per_token must be in 1..experts-1 (the best expert left out sets the weights)")
        self.per_token = per_token
        self.router = np.round(rng.normal(0.0, 32.0, (d_model, n_experts)))
        self.w1 = np.round(rng.normal(0.0, 32.0, (n_experts, d_model, d_expert)))
        self.w2 = np.round(rng.normal(0.0, 32.0, (n_experts, d_expert, d_model)))

    @property
    def n_experts(self) -> int:
        return self.router.shape[1]

    def scores(self, x: np.ndarray) -> np.ndarray:
        """Normalised activations [T, d] -> integer router scores [T, E]."""
        return np.round((x @ self.router) * 2.0**-self.SHIFT_ROUTER)

    def __call__(self, x: np.ndarray, clip: int, offsets: np.ndarray | None = None) -> np.ndarray:
        """Normalised activations [T, d] (|x| <= clip) -> the layer's MLP output [T, d], integers.

        Tokens are grouped by expert, each expert one matmul over its tokens; every product and
        sum is an exact integer, so grouping changes no bit. `offsets` [E] is the planted
        router-tie-numerics fault's rounding, added to every row's scores."""
        scores = self.scores(x)
        if offsets is not None:
            scores = scores + offsets
        chosen, weights = route(scores, self.per_token)
        out = np.zeros_like(x)
        for e in range(self.n_experts):
            rows, slot = np.nonzero(chosen == e)
            if len(rows) == 0:
                continue
            u = np.maximum(np.clip(np.round((x[rows] @ self.w1[e]) * 2.0**-self.SHIFT_1), -clip, clip), 0.0)
            y = np.clip(np.round((u @ self.w2[e]) * 2.0**-self.SHIFT_2), -clip, clip)
            out[rows] += weights[rows, slot][:, None] * y
        return np.round(out * (1.0 / WEIGHT_ONE))

    def bounds(self, clip: int) -> dict[str, float]:
        """Worst-case |value| of each reduction (model.TinyModel.exactness_bounds)."""

        def mm(w: np.ndarray) -> float:
            return clip * float(np.abs(w).sum(axis=-2).max())

        return {"router": mm(self.router), "expert_up": mm(self.w1), "expert_down": mm(self.w2),
                "expert_sum": float(self.per_token * WEIGHT_ONE * clip)}
