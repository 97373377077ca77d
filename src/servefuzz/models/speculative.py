"""A next-token-prediction layer that agrees with its main model, by construction (the
`speculative` build, opt-in: `--model-build speculative`, the `judgeable` build plus this).

MTP speculative decoding drafts the token after next with the model's own next-token-prediction
layer: it reads the next token's embedding and the main model's last hidden state, fuses them
(`eh_proj` on DeepSeek-V3, `fc` on Qwen3-Next: a [hidden, 2 x hidden] matrix over the two,
normed, side by side), runs one decoder layer and the main model's output layer over the result.
A random layer guesses at random: vLLM's MTP on the H200 accepted 8 of 9,900 drafts
(docs/gpu/nondense-and-features.md), so the accept path, the KV it keeps and the bonus tokens it
hands out were never exercised.

In the judgeable build the main model's next token is nearly a function of the current one: one
of its two successors, picked by the context's `switch` dimension (`judgeable._head`). So a
layer that hands the next token's embedding to the output layer guesses the main model's choice
for that token, the token after next, whenever the switch agrees. `agree` builds such a layer:

- the fusing matrix passes the embedding half through (the identity) and the switch dimension
  of the main model's hidden state (`ECHO` times it: the previous position's context, the best
  guess of the next one's without attention of its own) in place of the embedding's own, which
  the judgeable build keeps at zero;
- the decoder layer's writers into the residual stream (attention's `o_proj`, the MLPs' and
  experts' `down_proj`) are scaled to `BLOCK_SCALE`: the layer still attends over its own KV and
  routes, so a corruption of the draft's cache still moves a draft, but it barely moves the
  embedding the guess rests on;
- the layer's own copies of the embeddings and the output layer (DeepSeek's checkpoint carries
  them per layer, as released; engines share the main model's or load these) are the main
  model's.

Where the main model's switch at the next position differs from the echo, the draft is the other
successor and is rejected: drafts are accepted often, not always (measured in float64 by
bench/mtp_agreement.py, docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .judgeable import WRITER

__all__ = ["BLOCK_SCALE", "ECHO", "NextTokenLayer", "agree"]

ECHO = 1.0
BLOCK_SCALE = 0.1


@dataclass(frozen=True)
class NextTokenLayer:
    """Where an architecture keeps its next-token-prediction layer, under Hugging Face names:
    the fusing matrix ([hidden, 2 x hidden], embedding half first, as the engines concatenate),
    the prefix of its decoder layer's tensors, and the tensors of its own that equal the main
    model's (own, main)."""

    fuse: str
    block: str
    copies: tuple[tuple[str, str], ...] = ()


def agree(w: dict[str, Any], layer: NextTokenLayer, *, hidden: int, switch: int) -> dict[str, Any]:
    """Rewrite the next-token-prediction layer of `w` (the judgeable build's float32 arrays) in
    place so that its greedy guess follows the main model's (the module docstring); `switch`:
    the judgeable build's context dimension. Deterministic: no random draw."""
    for own, main in layer.copies:
        w[own] = w[main].copy()
    fuse = np.zeros((hidden, 2 * hidden), np.float32)
    fuse[:, :hidden] = np.eye(hidden, dtype=np.float32)
    fuse[switch, switch] = 0.0
    fuse[switch, hidden + switch] = ECHO
    w[layer.fuse] = fuse
    for name in [n for n in w if n.startswith(layer.block) and WRITER.search(n)]:
        w[name] = w[name] * np.float32(BLOCK_SCALE)
    return w
