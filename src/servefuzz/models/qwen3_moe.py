"""Qwen3-MoE: grouped-query attention with per-head q/k norms, every layer a mixture of experts."""

from __future__ import annotations

from typing import Any

from .parts import (
    EXPERT_FFN,
    EXPERTS,
    EXPERTS_PER_TOKEN,
    FFN,
    HIDDEN,
    RMS_EPS,
    Shapes,
    attention,
    attention_config,
    ends,
    experts,
    shared_config,
)

NAME = "qwen3-moe"
LAYERS = 2


def config(vocab: int, ids: dict[str, int], dtype: str) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", **shared_config(ids, dtype, vocab),
        "intermediate_size": FFN, "num_hidden_layers": LAYERS, **attention_config(),
        "hidden_act": "silu", "rms_norm_eps": RMS_EPS,
        "rope_theta": 1000000.0, "attention_bias": False, "num_experts": EXPERTS,
        "num_experts_per_tok": EXPERTS_PER_TOKEN, "moe_intermediate_size": EXPERT_FFN, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "norm_topk_prob": True, "use_sliding_window": False,
    }


def shapes(vocab: int) -> Shapes:
    t: Shapes = {}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = (HIDDEN,)
        attention(t, p + "self_attn.", qk_norm=True)
        t[p + "post_attention_layernorm.weight"] = (HIDDEN,)
        experts(t, p + "mlp.")
    ends(t, vocab)
    return t
