"""vLLM: the openai dialect plus a prefix-cache reset, salts, seeds, structured outputs, LoRA."""

from __future__ import annotations

from servefuzz.engines.spec import Deterministic, EngineSpec

__all__ = ["BATCH_INVARIANT", "SPEC"]

# Batch-invariant kernels exist on NVIDIA GPUs of compute capability 8.0 and up only: a server
# known to compute on the CPU has no such mode.
BATCH_INVARIANT = Deterministic("VLLM_BATCH_INVARIANT=1", env=(("VLLM_BATCH_INVARIANT", "1"),), on_cpu=False)

SPEC = EngineSpec(
    "vllm",
    default_port=8000,
    salts=True,  # `cache_salt`
    # `seed`: the same draws alone and under load (a generator per seeded request since PR #2514);
    # a sampled n > 1 seeds child i with seed + i.
    seeds=True,
    choices=True,  # `structured_outputs.choice`
    adapters=True,  # an adapter is the request's `model`
    deterministic=BATCH_INVARIANT,
    issue_key="vllm",
    cpu_preset="vllm-cpu",
    gpu_preset="vllm-gpu",
)
