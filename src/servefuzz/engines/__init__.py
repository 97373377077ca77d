"""The engines: one spec each (`spec_of`; one module per engine in this package, holding its
spec, its presets' pure argv builders, environments and profiles), the tables read from them
(`registry`: the presets, the versions each takes, `version_of`, the feature profiles) and what a
launch asks for (`request.LaunchRequest`). Pure: where the engines and their models are on this
machine is `servefuzz.engine_files`'s, what a `--launch` preset starts `servefuzz.presets`'s.

    >>> spec_of("llamacpp").model_format, PROFILES["llama-server"]["context-shift"].flags
    ('gguf', ('-c', '2048', '--context-shift'))

The version pins mirror the ones at the top of scripts/setup_engines.sh (a test keeps them in step).
Nothing here names an engine: a new one is a module and its line in `registry`.
"""

from __future__ import annotations

from servefuzz.engine_flags import flag_pairs, with_flags, without_flags  # the one argv rule, re-exported
from servefuzz.engines.registry import (
    GPU_VERSIONS,
    PRESET_VERSIONS,
    PRESETS,
    PROFILES,
    SPECS,
    preset_spec,
    spec_of,
    version_of,
)
from servefuzz.engines.spec import EngineSpec, Preset, Profile

__all__ = [
    "EngineSpec",
    "GPU_VERSIONS",
    "PRESETS",
    "PRESET_VERSIONS",
    "PROFILES",
    "SPECS",
    "Preset",
    "Profile",
    "flag_pairs",
    "preset_spec",
    "spec_of",
    "version_of",
    "with_flags",
    "without_flags",
]
