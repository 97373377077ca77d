"""DeepSeek-V3: multi-head latent attention (queries through a low-rank projection, keys and
values through a 512-wide latent with a 64-wide shared rotary key: the cache holds the latent),
a dense first layer, then sigmoid-routed experts in groups with a shared expert, and one
next-token-prediction layer after the last (`model.layers.LAYERS.*`, what MTP speculative decoding
runs; transformers ignores it)."""

from __future__ import annotations

from typing import Any

from .parts import (
    EXPERT_FFN,
    EXPERTS,
    EXPERTS_PER_TOKEN,
    FFN,
    HEADS,
    HIDDEN,
    RMS_EPS,
    Shapes,
    ends,
    experts,
    mlp,
    shared_config,
)
from .speculative import NextTokenLayer

NAME = "deepseek-v3"
LAYERS = 2
DENSE_LAYERS = 1  # first_k_dense_replace
MTP_LAYERS = 1
# The real model's MLA sizes but for the head count: FlashMLA and the engines' MLA kernels take
# exactly a 512-wide latent and a 64-wide rotary part.
KV_LORA_RANK = 512
Q_LORA_RANK = 128  # the released model's is 1536; llama.cpp 0c1e570 refuses a GGUF without one
QK_ROPE = 64
QK_NOPE = 128
V_HEAD = 128
GROUPS, TOPK_GROUPS = 2, 1
# The speculative build's hidden size (`models.speculative`): SGLang's MTP fuses the two norms
# before `eh_proj` in one CUDA kernel that takes a hidden size in (256, 8192], a multiple of 256
# (sglang/kernels/ops/layernorm/fused_eh_norm.py: "fused_eh_norm: unsupported hidden_size=256"
# on the H200), so the build SGLang's MTP is served is one step wider than the others.
SPECULATIVE_HIDDEN = 512
# The next-token-prediction layer as released: its own copies of the embeddings and the output
# layer beside the fusing `eh_proj` (vLLM's deepseek_mtp.py and SGLang's deepseek_nextn.py read
# `enorm(embedding)` then `hnorm(hidden)`, in that order, through it).
_MTP = f"model.layers.{LAYERS}."
NEXT_TOKEN_LAYER = NextTokenLayer(
    fuse=_MTP + "eh_proj.weight", block=_MTP,
    copies=((_MTP + "embed_tokens.weight", "model.embed_tokens.weight"), (_MTP + "shared_head.head.weight", "lm_head.weight")))


def config(vocab: int, ids: dict[str, int], dtype: str, hidden: int = HIDDEN) -> dict[str, Any]:
    return {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", **shared_config(ids, dtype, vocab, hidden),
        "intermediate_size": FFN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS, "hidden_act": "silu", "rms_norm_eps": RMS_EPS, "rope_theta": 10000.0,
        "attention_bias": False, "q_lora_rank": Q_LORA_RANK, "kv_lora_rank": KV_LORA_RANK,
        "qk_rope_head_dim": QK_ROPE, "qk_nope_head_dim": QK_NOPE, "v_head_dim": V_HEAD,
        "n_routed_experts": EXPERTS, "num_experts_per_tok": EXPERTS_PER_TOKEN, "n_shared_experts": 1,
        "moe_intermediate_size": EXPERT_FFN, "first_k_dense_replace": DENSE_LAYERS, "moe_layer_freq": 1,
        "n_group": GROUPS, "topk_group": TOPK_GROUPS, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
        "norm_topk_prob": True, "routed_scaling_factor": 2.5, "num_nextn_predict_layers": MTP_LAYERS,
        "ep_size": 1,
    }


def _layer(t: Shapes, i: int, hidden: int) -> None:
    p = f"model.layers.{i}."
    t[p + "input_layernorm.weight"] = (hidden,)
    a = p + "self_attn."
    t[a + "q_a_proj.weight"] = (Q_LORA_RANK, hidden)
    t[a + "q_a_layernorm.weight"] = (Q_LORA_RANK,)
    t[a + "q_b_proj.weight"] = (HEADS * (QK_NOPE + QK_ROPE), Q_LORA_RANK)
    t[a + "kv_a_proj_with_mqa.weight"] = (KV_LORA_RANK + QK_ROPE, hidden)
    t[a + "kv_a_layernorm.weight"] = (KV_LORA_RANK,)
    t[a + "kv_b_proj.weight"] = (HEADS * (QK_NOPE + V_HEAD), KV_LORA_RANK)
    t[a + "o_proj.weight"] = (hidden, HEADS * V_HEAD)
    t[p + "post_attention_layernorm.weight"] = (hidden,)
    if i < DENSE_LAYERS:
        mlp(t, p + "mlp.", hidden=hidden)
        return
    experts(t, p + "mlp.", hidden)
    t[p + "mlp.gate.e_score_correction_bias"] = (EXPERTS,)
    mlp(t, p + "mlp.shared_experts.", EXPERT_FFN, hidden)


def shapes(vocab: int, hidden: int = HIDDEN) -> Shapes:
    t: Shapes = {}
    for i in range(LAYERS):
        _layer(t, i, hidden)
    ends(t, vocab, hidden=hidden)
    for i in range(LAYERS, LAYERS + MTP_LAYERS):  # the next-token-prediction layer, as released
        p = f"model.layers.{i}."
        t[p + "embed_tokens.weight"] = (vocab, hidden)
        t[p + "enorm.weight"] = (hidden,)
        t[p + "hnorm.weight"] = (hidden,)
        t[p + "eh_proj.weight"] = (hidden, 2 * hidden)
        _layer(t, i, hidden)
        t[p + "shared_head.norm.weight"] = (hidden,)
        t[p + "shared_head.head.weight"] = (vocab, hidden)
    return t
