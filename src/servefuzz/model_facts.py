"""What a served model's architecture keeps per request, beyond per-token KV: the sliding window,
the recurrent state and the chunk it is scanned in, the experts it routes to. Read from the
model's own `config.json` (Hugging Face's keys, which every engine here reads), never from an
engine's arguments: servefuzz knows the folder when it launches the model (`--model`,
`--model-arch`), and the campaign hands these facts to the strategies (`TargetShape.model`).

    >>> f = facts_from_config({"model_type": "gemma3_text", "sliding_window": 64,
    ...                        "layer_types": ["sliding_attention", "full_attention"]})
    >>> f.window, f.recurrent, sorted(f.traits)
    (64, False, ['stateful', 'window'])
    >>> sorted(facts_from_config({"model_type": "nemotron_h", "hybrid_override_pattern": "MEM*", "chunk_size": 32,
    ...                           "n_routed_experts": 8, "num_experts_per_tok": 2}).traits)
    ['experts', 'state', 'stateful']
    >>> ModelFacts().traits
    frozenset()
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["GDN_CHUNK", "TRAITS", "ModelFacts", "facts_from_config", "read_model_facts"]

# The chunk the gated-delta-net layers (Qwen3-Next, Qwen3.5) scan their state in: fixed in the
# chunked kernels the engines run (flash-linear-attention's `chunk_gated_delta_rule`, 64), not a
# config key.
GDN_CHUNK = 64
# The traits a strategy may need (its `needs`: `window`, ...): a sliding window, a recurrent state,
# either of the two (state a prefix hit or a cut prefill leaves behind other than per-token KV),
# a mixture of experts.
TRAITS = ("window", "state", "stateful", "experts")
# Layer kinds that keep a recurrent state instead of per-token KV.
_RECURRENT_LAYERS = frozenset({"linear_attention", "mamba", "mamba2"})
_RECURRENT_TYPES = frozenset({"mamba", "mamba2", "falcon_mamba", "rwkv", "rwkv7"})


@dataclass(frozen=True)
class ModelFacts:
    """The served model's state, as its config says. Empty (no trait) where unknown.

    `window`: the sliding window in tokens where some layers attend only that far back;
    `recurrent`: some layers keep a recurrent state (Mamba2, gated delta net) that a prefix hit
    must restore at exactly the hit's length; `state_chunk`: the tokens that state is scanned in,
    where known; `experts`, `experts_per_token`: a mixture of experts' size and fan-out (0: dense).
    """

    arch: str = ""
    window: int | None = None
    recurrent: bool = False
    state_chunk: int | None = None
    experts: int = 0
    experts_per_token: int = 0

    @property
    def traits(self) -> frozenset[str]:
        """Which of `TRAITS` the model has: what the strategies aimed at them need."""
        have = {"window": self.window is not None, "state": self.recurrent,
                "stateful": self.window is not None or self.recurrent, "experts": self.experts > 1}
        return frozenset(k for k, v in have.items() if v)

    def to_json(self) -> dict[str, Any]:
        return {"arch": self.arch, "window": self.window, "recurrent": self.recurrent,
                "state_chunk": self.state_chunk, "experts": self.experts, "experts_per_token": self.experts_per_token}

    @classmethod
    def from_json(cls, d: Any) -> ModelFacts:
        """A record back from a finding or config file; anything malformed reads as unknown."""
        if not isinstance(d, Mapping):
            return cls()
        return cls(arch=str(d.get("arch") or "")[:64], window=_positive(d.get("window")),
                   recurrent=d.get("recurrent") is True, state_chunk=_positive(d.get("state_chunk")),
                   experts=_positive(d.get("experts")) or 0, experts_per_token=_positive(d.get("experts_per_token")) or 0)


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def facts_from_config(config: Mapping[str, Any]) -> ModelFacts:
    """The facts a Hugging Face `config.json` states (pure). A window counts only where a layer
    uses it: `layer_types` names sliding layers, or (no `layer_types`) every layer does unless
    `use_sliding_window` is false (Qwen3-MoE writes a window it does not use).

    >>> facts_from_config({"model_type": "qwen3_moe", "sliding_window": None, "use_sliding_window": False,
    ...                    "num_experts": 8, "num_experts_per_tok": 2})
    ModelFacts(arch='qwen3_moe', window=None, recurrent=False, state_chunk=None, experts=8, experts_per_token=2)
    >>> facts_from_config({"model_type": "qwen3_next", "layer_types": ["linear_attention", "full_attention"]}).state_chunk
    64
    """
    arch = str(config.get("model_type") or "")
    layers = config.get("layer_types")
    kinds = {str(k) for k in layers} if isinstance(layers, list) else set()
    window = _positive(config.get("sliding_window"))
    if window is not None and ("sliding_attention" not in kinds if kinds else config.get("use_sliding_window") is False):
        window = None
    pattern = config.get("hybrid_override_pattern")
    blocks = config.get("layers_block_type")
    mamba = (isinstance(pattern, str) and "M" in pattern) or (isinstance(blocks, list) and "mamba" in blocks)
    gdn = "linear_attention" in kinds
    recurrent = bool(kinds & _RECURRENT_LAYERS) or mamba or arch in _RECURRENT_TYPES
    chunk = _positive(config.get("chunk_size")) if recurrent and not gdn else GDN_CHUNK if gdn else None
    experts = next((v for k in ("num_experts", "n_routed_experts", "num_local_experts")
                    if (v := _positive(config.get(k))) is not None), 0)
    per_token = next((v for k in ("num_experts_per_tok", "experts_per_token")
                      if (v := _positive(config.get(k))) is not None), 0)
    return ModelFacts(arch=arch[:64], window=window, recurrent=recurrent, state_chunk=chunk,
                      experts=experts if experts > 1 else 0, experts_per_token=per_token if experts > 1 else 0)


def read_model_facts(model: Path) -> ModelFacts:
    """The facts of the model at `model`: a Hugging Face folder (its `config.json`), a folder
    `servefuzz model build`/`model fetch` wrote (its `hf-*/config.json`: every form has the same
    architecture), or a GGUF file inside such a folder. Empty where no config is found or it
    does not parse: the strategies then aim at nothing the model may lack."""
    folder = model if model.is_dir() else model.parent
    found = [folder / "config.json", *sorted(folder.glob("hf-*/config.json"))]
    for path in found:
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(config, dict):
            return facts_from_config(config)
    return ModelFacts()
