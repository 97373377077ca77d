"""Nemotron-H: a Mamba2 hybrid. Layers by `hybrid_override_pattern` "M-M*": a Mamba2 mixer (a
recurrent state per request, scanned in chunks of `SSM_CHUNK` tokens), a squared-ReLU MLP, a
second Mamba2 mixer, then one grouped-query attention layer. Checkpoint names under `backbone.`,
as released."""

from __future__ import annotations

from typing import Any

from .parts import FFN, HEAD_DIM, HEADS, HIDDEN, KV_HEADS, SSM_CHUNK, Shapes, attention, common, ends

NAME = "nemotron-h"
PATTERN = "M-M*"  # M: Mamba2, -: MLP, *: attention
MAMBA_HEADS, MAMBA_HEAD_DIM = 8, 32  # 8 x 32 = the hidden size
STATE, GROUPS, CONV_KERNEL = 16, 1, 4


def config(vocab: int, ids: dict[str, int], dtype: str) -> dict[str, Any]:
    return {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", **common(ids, dtype, vocab),
        "num_hidden_layers": len(PATTERN), "hybrid_override_pattern": PATTERN, "intermediate_size": FFN,
        "mlp_hidden_act": "relu2", "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM, "attention_head_dim": HEAD_DIM, "attention_bias": False, "mlp_bias": False,
        "mamba_num_heads": MAMBA_HEADS, "mamba_head_dim": MAMBA_HEAD_DIM, "ssm_state_size": STATE,
        "n_groups": GROUPS, "conv_kernel": CONV_KERNEL, "expand": MAMBA_HEADS * MAMBA_HEAD_DIM // HIDDEN,
        "chunk_size": SSM_CHUNK, "use_conv_bias": True, "mamba_proj_bias": False, "mamba_hidden_act": "silu",
        "layer_norm_epsilon": 1e-5, "residual_in_fp32": False, "rope_theta": 10000.0,
    }


def shapes(vocab: int) -> Shapes:
    inner = MAMBA_HEADS * MAMBA_HEAD_DIM
    conv = inner + 2 * GROUPS * STATE
    t: Shapes = {}
    for i, kind in enumerate(PATTERN):
        p = f"backbone.layers.{i}."
        t[p + "norm.weight"] = (HIDDEN,)
        m = p + "mixer."
        if kind == "M":
            t[m + "in_proj.weight"] = (2 * inner + 2 * GROUPS * STATE + MAMBA_HEADS, HIDDEN)
            t[m + "conv1d.weight"] = (conv, 1, CONV_KERNEL)
            t[m + "conv1d.bias"] = (conv,)
            t[m + "dt_bias"] = (MAMBA_HEADS,)
            t[m + "A_log"] = (MAMBA_HEADS,)
            t[m + "D"] = (MAMBA_HEADS,)
            t[m + "norm.weight"] = (inner,)
            t[m + "out_proj.weight"] = (HIDDEN, inner)
        elif kind == "-":
            t[m + "up_proj.weight"] = (FFN, HIDDEN)
            t[m + "down_proj.weight"] = (HIDDEN, FFN)
        else:
            attention(t, m)
    ends(t, vocab, embed="backbone.embeddings", norm="backbone.norm_f")
    return t
