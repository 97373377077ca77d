"""Every engine's spec by name: `spec_of(engine)`.

    >>> spec_of("vllm").salts, spec_of("llamacpp").default_port, spec_of("my-engine").issue_match.value
    (True, 8080, 'none')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from servefuzz.engines.llamacpp import SPEC as LLAMACPP
from servefuzz.engines.openai import GENERIC
from servefuzz.engines.openai import SPEC as OPENAI
from servefuzz.engines.reference import SPEC as REFERENCE
from servefuzz.engines.sglang import SPEC as SGLANG
from servefuzz.engines.spec import EngineSpec
from servefuzz.engines.vllm import SPEC as VLLM

__all__ = ["SPECS", "deterministic_mode", "spec_of"]

SPECS: Mapping[str, EngineSpec] = {s.name: s for s in (SGLANG, VLLM, LLAMACPP, REFERENCE, OPENAI)}


def spec_of(engine: str) -> EngineSpec:
    """The spec of `engine`; one servefuzz does not know is a generic server of the openai
    dialect under its own name (never a KeyError)."""
    known = SPECS.get(engine)
    return known if known is not None else dataclasses.replace(GENERIC, name=engine)


def deterministic_mode(engine: str, server_args: Mapping[str, object], env: Mapping[str, str]) -> str | None:
    """The deterministic mode a recorded server of `engine` ran in, in words; None for none.

    A variable is read by whichever server runs under it, so a mode set by environment counts
    on any engine's finding (an openai-dialect vLLM's too); a server arg only on its own engine's.

    >>> deterministic_mode("reference", {}, {"VLLM_BATCH_INVARIANT": "1"})
    'VLLM_BATCH_INVARIANT=1'
    >>> deterministic_mode("vllm", {"enable_deterministic_inference": True}, {}) is None
    True
    """
    for spec in SPECS.values():
        if spec.deterministic is not None and spec.deterministic.set_by_env(env):
            return spec.deterministic.says
    own = spec_of(engine).deterministic
    return own.says if own is not None and own.set_by_args(server_args) else None
