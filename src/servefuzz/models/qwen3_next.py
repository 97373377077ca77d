"""Qwen3-Next: three gated-delta-net linear-attention layers (a recurrent state per request, a
causal convolution over the last 4 tokens) then one gated full-attention layer, every layer a
mixture of experts with a gated shared expert; and, as released, one multi-token-prediction layer
(`mtp.*`: a full-attention layer over the fused embedding and last hidden state, what MTP
speculative decoding runs and llama.cpp's converter expects; transformers ignores it)."""

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
    mlp,
    shared_config,
)
from .speculative import NextTokenLayer

NAME = "qwen3-next"
LAYERS = 4
FULL_ATTENTION_INTERVAL = 4
LAYER_TYPES = ["full_attention" if (i + 1) % FULL_ATTENTION_INTERVAL == 0 else "linear_attention" for i in range(LAYERS)]
LINEAR_KEY_HEADS, LINEAR_VALUE_HEADS = 2, 4
LINEAR_KEY_DIM = LINEAR_VALUE_DIM = 64
CONV_KERNEL = 4

# The judgeable build's output-layer lean (`models.judgeable.HEAD_GAIN`, 0.3 elsewhere): its residual
# stream keeps less of the current token's embedding than the MoE models' do.
HEAD_GAIN = 0.45
# The MTP layer (vLLM's and SGLang's qwen3_next_mtp.py: `fc` over the normed embedding, then the
# normed hidden state; the main model's embeddings and output layer, no copies of its own).
NEXT_TOKEN_LAYER = NextTokenLayer(fuse="mtp.fc.weight", block="mtp.layers.0.")


def config(vocab: int, ids: dict[str, int], dtype: str) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", **shared_config(ids, dtype, vocab),
        "intermediate_size": FFN, "num_hidden_layers": LAYERS, **attention_config(),
        "hidden_act": "silu", "rms_norm_eps": RMS_EPS,
        "rope_theta": 10000000.0, "partial_rotary_factor": 0.25, "attention_bias": False,
        "full_attention_interval": FULL_ATTENTION_INTERVAL, "layer_types": LAYER_TYPES,
        "linear_num_key_heads": LINEAR_KEY_HEADS, "linear_num_value_heads": LINEAR_VALUE_HEADS,
        "linear_key_head_dim": LINEAR_KEY_DIM, "linear_value_head_dim": LINEAR_VALUE_DIM,
        "linear_conv_kernel_dim": CONV_KERNEL, "num_experts": EXPERTS, "num_experts_per_tok": EXPERTS_PER_TOKEN,
        "moe_intermediate_size": EXPERT_FFN, "shared_expert_intermediate_size": EXPERT_FFN,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True, "num_nextn_predict_layers": 1,
    }


def shapes(vocab: int) -> Shapes:
    key, value = LINEAR_KEY_HEADS * LINEAR_KEY_DIM, LINEAR_VALUE_HEADS * LINEAR_VALUE_DIM
    t: Shapes = {}
    for i, kind in enumerate(LAYER_TYPES):
        _layer(t, f"model.layers.{i}.", kind, key, value)
    ends(t, vocab)
    t["mtp.fc.weight"] = (HIDDEN, 2 * HIDDEN)
    t["mtp.pre_fc_norm_embedding.weight"] = (HIDDEN,)
    t["mtp.pre_fc_norm_hidden.weight"] = (HIDDEN,)
    _layer(t, "mtp.layers.0.", "full_attention", key, value)
    t["mtp.norm.weight"] = (HIDDEN,)
    return t


def _layer(t: Shapes, p: str, kind: str, key: int, value: int) -> None:
    t[p + "input_layernorm.weight"] = (HIDDEN,)
    if kind == "linear_attention":
        a = p + "linear_attn."
        t[a + "in_proj_qkvz.weight"] = (2 * key + 2 * value, HIDDEN)
        t[a + "in_proj_ba.weight"] = (2 * LINEAR_VALUE_HEADS, HIDDEN)
        t[a + "conv1d.weight"] = (2 * key + value, 1, CONV_KERNEL)
        t[a + "dt_bias"] = (LINEAR_VALUE_HEADS,)
        t[a + "A_log"] = (LINEAR_VALUE_HEADS,)
        t[a + "norm.weight"] = (LINEAR_VALUE_DIM,)
        t[a + "out_proj.weight"] = (HIDDEN, value)
    else:
        attention(t, p + "self_attn.", qk_norm=True, q_gate=True)
    t[p + "post_attention_layernorm.weight"] = (HIDDEN,)
    experts(t, p + "mlp.")
    mlp(t, p + "mlp.shared_expert.", EXPERT_FFN)
    t[p + "mlp.shared_expert_gate.weight"] = (1, HIDDEN)


def centred_norm(name: str) -> bool:
    """Qwen3-Next's RMS norms scale by 1 + weight, all but the gated delta net's own output norm
    (`models.judgeable` sets them to zero)."""
    return "norm" in name.rsplit(".", 2)[-2] and not name.endswith("linear_attn.norm.weight")
