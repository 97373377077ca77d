"""llama.cpp's llama-server: `/completion`, slots, a GBNF grammar, LoRA by id."""

from __future__ import annotations

from servefuzz.engines.spec import Deterministic, EngineSpec

__all__ = ["ONE_SLOT", "SPEC"]

# llama.cpp has no bitwise mode: its control is one slot, so that nothing is batched with the victim.
ONE_SLOT = Deterministic("one slot (-np 1)", slots=("-np", "--parallel"))

SPEC = EngineSpec(
    "llamacpp",
    default_port=8080,
    # `seeds` False: llama.cpp promises nothing across slots.
    choices=True,  # a GBNF `grammar`
    adapters=True,  # `lora: [{id, scale}]`
    cache_prompt=True,
    deterministic=ONE_SLOT,
    issue_key="llamacpp",
    cpu_preset="llama-server",
)
