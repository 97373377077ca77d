"""GPT-OSS: sliding-window attention alternating with full attention, a learned sink logit per
head, biased projections, and a mixture of experts whose gate and up projections are interleaved
in one stacked tensor (the layout of the released bfloat16 checkpoints)."""

from __future__ import annotations

from typing import Any

from .parts import (
    EXPERT_FFN,
    EXPERTS,
    EXPERTS_PER_TOKEN,
    HEADS,
    HIDDEN,
    RMS_EPS,
    WINDOW,
    Shapes,
    attention,
    attention_config,
    ends,
    shared_config,
)

NAME = "gpt-oss"
LAYERS = 4
LAYER_TYPES = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(LAYERS)]


def config(vocab: int, ids: dict[str, int], dtype: str) -> dict[str, Any]:
    return {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", **shared_config(ids, dtype, vocab),
        "intermediate_size": EXPERT_FFN, "num_hidden_layers": LAYERS, **attention_config(),
        "hidden_act": "silu", "rms_norm_eps": RMS_EPS,
        "attention_bias": True, "num_local_experts": EXPERTS, "num_experts_per_tok": EXPERTS_PER_TOKEN,
        "experts_per_token": EXPERTS_PER_TOKEN, "router_aux_loss_coef": 0.9, "output_router_logits": False,
        "sliding_window": WINDOW, "layer_types": LAYER_TYPES, "swiglu_limit": 7.0, "rope_theta": 150000.0,
        # As the released models: YaRN over an original 4096-token context.
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                         "truncate": False, "original_max_position_embeddings": 4096},
        "initial_context_length": 4096,
    }


def shapes(vocab: int) -> Shapes:
    t: Shapes = {}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = (HIDDEN,)
        attention(t, p + "self_attn.", bias=True)
        t[p + "self_attn.sinks"] = (HEADS,)
        t[p + "post_attention_layernorm.weight"] = (HIDDEN,)
        t[p + "mlp.router.weight"] = (EXPERTS, HIDDEN)
        t[p + "mlp.router.bias"] = (EXPERTS,)
        t[p + "mlp.experts.gate_up_proj"] = (EXPERTS, HIDDEN, 2 * EXPERT_FFN)
        t[p + "mlp.experts.gate_up_proj_bias"] = (EXPERTS, 2 * EXPERT_FFN)
        t[p + "mlp.experts.down_proj"] = (EXPERTS, EXPERT_FFN, HIDDEN)
        t[p + "mlp.experts.down_proj_bias"] = (EXPERTS, HIDDEN)
    ends(t, vocab)
    return t
