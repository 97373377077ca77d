"""Gemma 3 (text): sliding-window attention on five layers of six, full attention on the sixth
(the released models' pattern), q/k norms, GeGLU, sandwich norms and embeddings scaled by
sqrt(hidden).

Six layers, not four: llama.cpp 0c1e570's converter writes no per-layer pattern for Gemma 3 and
llama.cpp then assumes the released one-in-six; a 4-layer model with its fourth layer global ran
that layer as a sliding one with the local rotary base there, and its greedy answers left
transformers' (and vLLM's) within 1-5 tokens even on a 40-token prompt (measured)."""

from __future__ import annotations

from typing import Any

from .parts import FFN, HEAD_DIM, HIDDEN, RMS_EPS, WINDOW, Shapes, attention, attention_config, ends, mlp, shared_config

NAME = "gemma3"
LAYERS = 6
PATTERN = 6  # every 6th layer attends to everything
LAYER_TYPES = ["full_attention" if (i + 1) % PATTERN == 0 else "sliding_attention" for i in range(LAYERS)]
# Gemma multiplies the embeddings by sqrt(hidden) = 16: drawn that much smaller, the residual
# stream starts at unit scale as in the other architectures.
EMBED_STD = 1.0 / HIDDEN ** 0.5

# No output-layer lean in the judgeable build (`models.judgeable.HEAD_GAIN`): its sandwich norms
# add every layer's output at unit scale, so the final hidden state keeps too little of the
# current token for the successors to lead (measured: at 0.8 the top margins stayed as the
# random layer's, median 0.65 nats, and the bfloat16 noise rose by 75%).
HEAD_GAIN = 0.0


def config(vocab: int, ids: dict[str, int], dtype: str) -> dict[str, Any]:
    return {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", **shared_config(ids, dtype, vocab),
        "intermediate_size": FFN, "num_hidden_layers": LAYERS, **attention_config(),
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": RMS_EPS, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
        "query_pre_attn_scalar": HEAD_DIM, "sliding_window": WINDOW, "sliding_window_pattern": PATTERN,
        "layer_types": LAYER_TYPES, "attention_bias": False, "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
    }


def shapes(vocab: int) -> Shapes:
    t: Shapes = {}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = (HIDDEN,)
        attention(t, p + "self_attn.", qk_norm=True)
        t[p + "post_attention_layernorm.weight"] = (HIDDEN,)
        t[p + "pre_feedforward_layernorm.weight"] = (HIDDEN,)
        mlp(t, p + "mlp.")
        t[p + "post_feedforward_layernorm.weight"] = (HIDDEN,)
    ends(t, vocab)
    return t


def centred_norm(name: str) -> bool:
    """Gemma's RMS norms all scale by 1 + weight (`models.judgeable` sets them to zero)."""
    return name.endswith("norm.weight")
