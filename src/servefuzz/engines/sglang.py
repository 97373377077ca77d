"""SGLang: its native dialect (`/generate`, `/flush_cache`, `/server_info`)."""

from __future__ import annotations

from servefuzz.engines.spec import ArgFeature, Deterministic, EngineSpec

__all__ = ["DETERMINISTIC", "SERVER_ARG_FEATURES", "SPEC"]

# SGLang's deterministic inference (batch-invariant kernels) refuses to start with its CPU
# attention backend (measured): on the CPU there is none.
DETERMINISTIC = Deterministic("--enable-deterministic-inference", flag="--enable-deterministic-inference",
                              on_cpu=False, server_arg="enable_deterministic_inference")

# The trigger features SGLang's `/server_info` args show (the reference engine reports the same).
SERVER_ARG_FEATURES = (
    ArgFeature("radix-cache", "disable_radix_cache", False, "the server ran with the radix cache on"),
    ArgFeature("overlap", "disable_overlap_schedule", False, "the server ran with the overlap scheduler on",
               unless_deterministic=True),
    ArgFeature("cuda-graph", "disable_cuda_graph", False, "the server ran with (padded) CUDA-graph decode on"),
)

SPEC = EngineSpec(
    "sglang",
    default_port=30000,
    salts=True,  # `extra_key`, what SGLang's own OpenAI layer makes of `cache_salt`
    # `seeds` False: its `sampling_params.sampling_seed` is sent, but its promise is not measured
    # here (docs/engines.md, Seeds).
    choices=True,  # a `regex` alternation
    adapters=True,  # `lora_path`
    deterministic=DETERMINISTIC,
    issue_key="sglang",
    arg_features=SERVER_ARG_FEATURES,
    cpu_preset="sglang-cpu",
    gpu_preset="sglang-gpu",
)
