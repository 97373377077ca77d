"""The architectures the reference engine serves, by the name `--model-arch` takes.

Each is the tiny exact model (`model.TinyModel`) with an architecture's layer layout, taken from
the module that builds that architecture for the real engines (`servefuzz.models.<arch>`), so an
architecture is defined once: the reference engine's qwen3-next interleaves its linear-attention
and full-attention layers exactly as the Qwen3-Next servefuzz builds for vLLM and SGLang does
(three gated-delta-net layers, then one full-attention layer). The sizes are the reference
engine's own (exact fixed point wants them small). gemma3 takes Gemma 3's five sliding-window
layers to one global and its window; qwen3-moe its experts and how many a token takes.

    >>> REFERENCE_ARCHS["qwen3-next"].kinds
    ('linear_attention', 'linear_attention', 'linear_attention', 'full_attention')
    >>> REFERENCE_ARCHS["gemma3"].kinds.count("sliding_attention"), REFERENCE_ARCHS["gemma3"].window
    (5, 64)
    >>> REFERENCE_ARCHS["qwen3-moe"].experts, REFERENCE_ARCHS["qwen3-moe"].experts_per_token
    (8, 2)
    >>> REFERENCE_ARCHS["llama"] == ModelConfig()
    True
    >>> model_config("qwen3-next", seed=3, context_length=512).seed
    3

What a client learns of the served model (`/server_info`'s `architecture`, read by the fuzzer as
`model_facts.ModelFacts`): whether it keeps a recurrent state, and the interval its state is
checkpointed at, which is where a prefix hit can restore it; its sliding window; its experts.

    >>> model_facts("qwen3-next", state_interval=64)["recurrent"], model_facts("llama", state_interval=64)
    (True, {'arch': 'llama', 'window': None, 'recurrent': False, 'state_chunk': None, 'experts': 0, 'experts_per_token': 0})
    >>> model_facts("gemma3", state_interval=64)["window"], model_facts("qwen3-moe", state_interval=64)["experts"]
    (64, 8)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from servefuzz.models import gemma3, parts, qwen3_moe, qwen3_next
from servefuzz.reference.model import ModelConfig

__all__ = ["DEFAULT_ARCH", "REFERENCE_ARCHS", "model_config", "model_facts"]

DEFAULT_ARCH = "llama"

REFERENCE_ARCHS: dict[str, ModelConfig] = {
    DEFAULT_ARCH: ModelConfig(),
    qwen3_next.NAME: ModelConfig(n_layers=qwen3_next.LAYERS, layer_types=tuple(qwen3_next.LAYER_TYPES)),
    gemma3.NAME: ModelConfig(n_layers=gemma3.LAYERS, layer_types=tuple(gemma3.LAYER_TYPES), window=parts.WINDOW),
    # Every layer's MLP a mixture of experts, as Qwen3-MoE (decoder_sparse_step 1, no mlp_only_layers).
    qwen3_moe.NAME: ModelConfig(n_layers=qwen3_moe.LAYERS, experts=parts.EXPERTS,
                                experts_per_token=parts.EXPERTS_PER_TOKEN),
}


def model_config(arch: str, *, seed: int, context_length: int) -> ModelConfig:
    """The model of `arch` (a key of `REFERENCE_ARCHS`) with these weights' seed and context."""
    return dataclasses.replace(REFERENCE_ARCHS[arch], seed=seed, context_length=context_length)


def model_facts(arch: str, *, state_interval: int) -> dict[str, Any]:
    """What the model of `arch` keeps per request beside per-token KV, in `model_facts.ModelFacts`'
    JSON shape (the fuzzer's record; the engine imports nothing of the fuzzer, so the keys are
    written here again, and tests/reference holds the two equal)."""
    c = REFERENCE_ARCHS[arch]
    recurrent = bool(c.recurrent_layers)
    return {"arch": arch, "window": c.window or None, "recurrent": recurrent,
            "state_chunk": state_interval if recurrent else None,
            "experts": c.experts, "experts_per_token": c.experts_per_token}
