"""Nemotron-H: a Mamba2 hybrid, in its mixture-of-experts form (Nemotron 3 Nano's). Layers by
`hybrid_override_pattern` "MEM*": a Mamba2 mixer (a recurrent state per request, scanned in
chunks of `SSM_CHUNK` tokens), squared-ReLU experts routed by sigmoid with a shared expert, a
second Mamba2 mixer, then one grouped-query attention layer. Checkpoint names under `backbone.`,
as released.

The experts are there because llama.cpp's converter calls a Nemotron-H dense only when its config
lacks `num_experts_per_tok`, which transformers 5's NemotronHConfig always fills in: a dense
("M-M*") model converts to a GGUF that llama.cpp then reads as all-Mamba and refuses (measured:
"tensor 'blk.1.ssm_in.weight' not found")."""

from __future__ import annotations

from typing import Any

from .parts import (
    EXPERT_FFN,
    EXPERTS,
    EXPERTS_PER_TOKEN,
    HEAD_DIM,
    HIDDEN,
    SSM_CHUNK,
    Shapes,
    attention,
    attention_config,
    ends,
    shared_config,
)

NAME = "nemotron-h"
PATTERN = "MEM*"  # M: Mamba2, E: experts, *: attention
MAMBA_HEADS, MAMBA_HEAD_DIM = 8, 32  # 8 x 32 = the hidden size
STATE, GROUPS, CONV_KERNEL = 16, 1, 4

# The judgeable build's output-layer lean (`models.judgeable.HEAD_GAIN`, 0.3 elsewhere): its residual
# stream keeps less of the current token's embedding than the MoE models' do.
HEAD_GAIN = 0.6


def config(vocab: int, ids: dict[str, int], dtype: str) -> dict[str, Any]:
    return {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", **shared_config(ids, dtype, vocab),
        "num_hidden_layers": len(PATTERN), "hybrid_override_pattern": PATTERN, "mlp_hidden_act": "relu2",
        "n_routed_experts": EXPERTS, "num_experts_per_tok": EXPERTS_PER_TOKEN, "moe_intermediate_size": EXPERT_FFN,
        "n_shared_experts": 1, "moe_shared_expert_intermediate_size": EXPERT_FFN, "n_group": 1, "topk_group": 1,
        "norm_topk_prob": True, "routed_scaling_factor": 1.0, **attention_config(),
        "attention_head_dim": HEAD_DIM, "attention_bias": False, "mlp_bias": False,
        "mamba_num_heads": MAMBA_HEADS, "mamba_head_dim": MAMBA_HEAD_DIM, "ssm_state_size": STATE,
        # Both names of the groups: transformers reads either (`mamba_n_groups` wins), SGLang 0.5.17
        # sizes the Mamba state by `n_groups` and builds the mixer by `mamba_n_groups`, 8 when absent
        # (engines.sglang.gpu_refusal), which the shapes below then do not fit.
        "n_groups": GROUPS, "mamba_n_groups": GROUPS, "conv_kernel": CONV_KERNEL,
        "expand": MAMBA_HEADS * MAMBA_HEAD_DIM // HIDDEN,
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
        elif kind == "E":
            t[m + "gate.weight"] = (EXPERTS, HIDDEN)
            t[m + "gate.e_score_correction_bias"] = (EXPERTS,)
            for j in range(EXPERTS):  # squared ReLU: no gate projection
                t[m + f"experts.{j}.up_proj.weight"] = (EXPERT_FFN, HIDDEN)
                t[m + f"experts.{j}.down_proj.weight"] = (HIDDEN, EXPERT_FFN)
            t[m + "shared_experts.up_proj.weight"] = (EXPERT_FFN, HIDDEN)
            t[m + "shared_experts.down_proj.weight"] = (HIDDEN, EXPERT_FFN)
        else:
            attention(t, m)
    ends(t, vocab, embed="backbone.embeddings", norm="backbone.norm_f")
    return t
