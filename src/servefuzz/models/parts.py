"""The tensor shapes the architectures share, under Hugging Face checkpoint names: each function
adds one block's tensors, in order, to a name -> shape table (`files.random_weights` fills it).

The names are those of the released checkpoints the engines load (per-expert MoE tensors, not
transformers 5's fused in-memory ones); tests/models/ loads every table in transformers."""

from __future__ import annotations

from typing import Any

Shapes = dict[str, tuple[int, ...]]

# One size for every architecture's common dimensions, chosen so the engines pick their real
# kernels: head_dim 64 (FlashAttention's and the Triton kernels' smallest common size), grouped
# query attention (4 query heads share 2 KV heads), a hidden size of 256 that builds in a second
# (an architecture may take another where an engine's kernel refuses 256: `hidden` below).
HIDDEN = 256
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64
FFN = 512
EXPERTS = 8
EXPERTS_PER_TOKEN = 2
EXPERT_FFN = 128
CONTEXT = 4096
# Sliding windows and state chunks well under the prompts the strategies send (up to hundreds of
# tokens), so a request crosses a window edge or a chunk boundary, often in the middle of decoding.
WINDOW = 64
SSM_CHUNK = 32
RMS_EPS = 1e-6


def shared_config(ids: dict[str, int], dtype: str, vocab: int, hidden: int = HIDDEN) -> dict[str, Any]:
    """The config keys every architecture takes the same way."""
    return {
        "vocab_size": vocab, "hidden_size": hidden, "max_position_embeddings": CONTEXT,
        "tie_word_embeddings": False, "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"],
        "pad_token_id": ids["<pad>"], "dtype": dtype,
    }


def attention_config() -> dict[str, Any]:
    """The config keys of `attention`'s grouped-query heads, as every architecture's config names them."""
    return {"num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM}


def attention(t: Shapes, p: str, *, bias: bool = False, qk_norm: bool = False, q_gate: bool = False) -> None:
    """Grouped-query attention `p`q/k/v/o_proj (q doubled when a gate rides on it: Qwen3-Next)."""
    q = HEADS * HEAD_DIM * (2 if q_gate else 1)
    for name, rows in (("q_proj", q), ("k_proj", KV_HEADS * HEAD_DIM), ("v_proj", KV_HEADS * HEAD_DIM)):
        t[f"{p}{name}.weight"] = (rows, HIDDEN)
        if bias:
            t[f"{p}{name}.bias"] = (rows,)
    t[f"{p}o_proj.weight"] = (HIDDEN, HEADS * HEAD_DIM)
    if bias:
        t[f"{p}o_proj.bias"] = (HIDDEN,)
    if qk_norm:
        t[f"{p}q_norm.weight"] = (HEAD_DIM,)
        t[f"{p}k_norm.weight"] = (HEAD_DIM,)


def mlp(t: Shapes, p: str, ffn: int = FFN, hidden: int = HIDDEN) -> None:
    """A SwiGLU MLP `p`gate/up/down_proj."""
    t[f"{p}gate_proj.weight"] = (ffn, hidden)
    t[f"{p}up_proj.weight"] = (ffn, hidden)
    t[f"{p}down_proj.weight"] = (hidden, ffn)


def experts(t: Shapes, p: str, hidden: int = HIDDEN) -> None:
    """A router `p`gate and `EXPERTS` SwiGLU experts `p`experts.J, one tensor each (as released)."""
    t[f"{p}gate.weight"] = (EXPERTS, hidden)
    for j in range(EXPERTS):
        mlp(t, f"{p}experts.{j}.", EXPERT_FFN, hidden)


def ends(t: Shapes, vocab: int, *, embed: str = "model.embed_tokens", norm: str = "model.norm",
         hidden: int = HIDDEN) -> None:
    t[f"{embed}.weight"] = (vocab, hidden)
    t[f"{norm}.weight"] = (hidden,)
    t["lm_head.weight"] = (vocab, hidden)
