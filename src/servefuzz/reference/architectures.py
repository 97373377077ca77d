"""The architectures the reference engine serves, by the name `--model-arch` takes.

Each is the tiny exact model (`model.TinyModel`) with an architecture's layer layout, taken from
the module that builds that architecture for the real engines (`servefuzz.models.<arch>`), so an
architecture is defined once: the reference engine's qwen3-next interleaves its linear-attention
and full-attention layers exactly as the Qwen3-Next servefuzz builds for vLLM and SGLang does
(three gated-delta-net layers, then one full-attention layer). The sizes are the reference
engine's own (exact fixed point wants them small).

    >>> REFERENCE_ARCHS["qwen3-next"].kinds
    ('linear_attention', 'linear_attention', 'linear_attention', 'full_attention')
    >>> REFERENCE_ARCHS["llama"] == ModelConfig()
    True
    >>> model_config("qwen3-next", seed=3, context_length=512).seed
    3

What a client learns of the served model (`/server_info`'s `architecture`, read by the fuzzer as
`model_facts.ModelFacts`): whether it keeps a recurrent state, and the interval its state is
checkpointed at, which is where a prefix hit can restore it.

    >>> model_facts("qwen3-next", state_interval=64)["recurrent"], model_facts("llama", state_interval=64)
    (True, {'arch': 'llama', 'window': None, 'recurrent': False, 'state_chunk': None, 'experts': 0, 'experts_per_token': 0})
"""

from __future__ import annotations

import dataclasses
from typing import Any

from servefuzz.models import qwen3_next
from servefuzz.reference.model import ModelConfig

__all__ = ["DEFAULT_ARCH", "REFERENCE_ARCHS", "model_config", "model_facts"]

DEFAULT_ARCH = "llama"

REFERENCE_ARCHS: dict[str, ModelConfig] = {
    DEFAULT_ARCH: ModelConfig(),
    qwen3_next.NAME: ModelConfig(n_layers=qwen3_next.LAYERS, layer_types=tuple(qwen3_next.LAYER_TYPES)),
}


def model_config(arch: str, *, seed: int, context_length: int) -> ModelConfig:
    """The model of `arch` (a key of `REFERENCE_ARCHS`) with these weights' seed and context."""
    return dataclasses.replace(REFERENCE_ARCHS[arch], seed=seed, context_length=context_length)


def model_facts(arch: str, *, state_interval: int) -> dict[str, Any]:
    """What the model of `arch` keeps per request beside per-token KV, in `model_facts.ModelFacts`'
    JSON shape (the fuzzer's record; the engine imports nothing of the fuzzer, so the keys are
    written here again, and tests/reference holds the two equal)."""
    recurrent = bool(REFERENCE_ARCHS[arch].recurrent_layers)
    return {"arch": arch, "window": None, "recurrent": recurrent, "state_chunk": state_interval if recurrent else None,
            "experts": 0, "experts_per_token": 0}
