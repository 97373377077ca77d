"""Target adapters, one module per HTTP dialect, registered by engine name.

Importing this package registers the built-in dialects; `make_target("sglang", url)` then
builds one. See `servefuzz.targets.base` for the Protocol every adapter follows.
"""

from __future__ import annotations

from servefuzz.targets import llamacpp, openai, sglang, vllm
from servefuzz.targets.base import (
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_MAX_STREAM_BYTES,
    Target,
    TargetInfo,
    auth_headers,
    available_engines,
    get_target_class,
    make_target,
    register,
)
from servefuzz.targets.detect import Detection, detect_engine

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_MAX_STREAM_BYTES",
    "Detection",
    "Target",
    "TargetInfo",
    "auth_headers",
    "available_engines",
    "detect_engine",
    "get_target_class",
    "make_target",
    "register",
    "llamacpp",
    "openai",
    "sglang",
    "vllm",
]
