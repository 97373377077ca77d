"""servefuzz's embedded reference engine: SGLang's dialect, planted faults in `/server_info`."""

from __future__ import annotations

from servefuzz.engines.sglang import SERVER_ARG_FEATURES
from servefuzz.engines.spec import Deterministic, EngineSpec, IssueMatch

__all__ = ["SPEC"]

SPEC = EngineSpec(
    "reference",
    default_port=30000,
    salts=True,  # `extra_key`, as SGLang
    seeds=True,
    choices=True,  # SGLang's `regex` alternation, read as token choices
    adapters=True,  # `lora_path`
    # Exact on the CPU too: its deterministic mode is SGLang's flag.
    deterministic=Deterministic("--enable-deterministic-inference", flag="--enable-deterministic-inference",
                                server_arg="enable_deterministic_inference"),
    issue_match=IssueMatch.FAULTS,  # a finding is an issue only where a planted fault models it
    arg_features=SERVER_ARG_FEATURES,
    cpu_preset="reference",
)
