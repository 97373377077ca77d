"""llama.cpp's llama-server: `/completion`, slots, a GBNF grammar, LoRA by id."""

from __future__ import annotations

from servefuzz.engine_flags import Flag, FlagVariant, Kind, variant
from servefuzz.engines.spec import Deterministic, EngineSpec

__all__ = ["FLAGS", "ONE_SLOT", "SPEC", "TRIAGE"]

# llama.cpp has no bitwise mode: its control is one slot, so that nothing is batched with the victim.
ONE_SLOT = Deterministic("one slot (-np 1)", slots=("-np", "--parallel"))

# llama.cpp's server: what the adapter reads from /props and a relaunch needs.
FLAGS: tuple[Flag, ...] = (
    Flag("total_slots", "-np", Kind.INT, minimum=1, maximum=4096),
    Flag("slot_n_ctx", "-c", Kind.INT, minimum=1),
)

# Triage's rows and what a cure by each implicates.
TRIAGE: tuple[FlagVariant, ...] = (
    variant("-np 1", "parallel slots (batching)", drop=("--parallel",)),
    variant("cache_prompt: false", "prompt cache (slot reuse)", add=(), target_opts={"cache_prompt": False}),
    variant("--no-cont-batching", "continuous batching", drop=("--cont-batching", "-cb")),
)

SPEC = EngineSpec(
    "llamacpp",
    default_port=8080,
    # `seeds` False: llama.cpp promises nothing across slots.
    choices=True,  # a GBNF `grammar`
    adapters=True,  # `lora: [{id, scale}]`
    cache_prompt=True,
    deterministic=ONE_SLOT,
    flags=FLAGS,
    triage=TRIAGE,
    issue_key="llamacpp",
    cpu_preset="llama-server",
    model_format="gguf",
)
