"""What a `--launch` preset starts, found on this machine: the engine's own plan (`Preset.plan`,
in its module) given what the engine cache and the model folder hold.

A preset (`vllm-cpu`, `llama-server`, `sglang-cpu`, and on the GPU machine `vllm-gpu`,
`sglang-gpu`) is the engine's own command line on servefuzz's tiny model, the environment it
needs, how long it may take to start and which stand-ins it runs with. This module finds the
program, the model and the stand-ins and says what to install when something is missing; it
names no engine. (The `reference` preset is the launcher's own: servefuzz's embedded engine,
started from its own flags.)

A plan is read from the finding's server (`target`: its dtype, page size, slots), never from its
free text: every value passes through the argv builders' typed parameters.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from servefuzz import engines
from servefuzz.engines.spec import LaunchInputs, Plan, Preset
from servefuzz.errors import UsageError
from servefuzz.server_facts import TargetInfo

__all__ = ["PLANS", "Plan", "built_model", "install_hint", "plan"]

# Each preset servefuzz starts from a plan, by name (the launcher's PRESETS are these and `reference`).
PLANS: Mapping[str, Preset] = {name: p for name, p in engines.PRESETS.items() if p.plan is not None}


def install_hint(preset: str, version: str) -> str:
    """What installs `preset` at `version`: the setup script for its default, else what the
    preset says (`servefuzz engines install`, the GPU machine's unpacking)."""
    return engines.PRESETS[preset].install_hint(version)


def plan(preset: str, version: str, target: TargetInfo | None, model: Path | None) -> Plan:
    """The server `preset` at `version` starts, rebuilt from `target` (the finding's server;
    None for a new campaign), serving `model` (None: the tiny models in the engine cache).
    UsageError (one line) for an engine not installed here or a model that is not there."""
    chosen = PLANS[preset]
    given = engines.served_model(preset, model) if model is not None else None  # a bad --model first
    if not engines.installed(preset, version):
        raise UsageError(f"{preset} {version} is not installed under {engines.cache_dir()}: run "
                         f"{install_hint(preset, version)}")
    folder = engines.engine_dir(preset, version)
    served = given or engines.served_model(preset, None)
    assert chosen.plan is not None  # PLANS holds only presets with a plan
    return chosen.plan(LaunchInputs(
        program=engines.program(preset, version),
        model=served,
        version=version,
        model_dtype=engines.model_dtype(served) if served.is_dir() else "auto",
        model_config=engines.model_config(served) if served.is_dir() else {},
        server_args={} if target is None else target.server_args,
        page_size=target.page_size if target is not None and target.page_size else None,
        standins=str(engines.standin_path()),
        site=str(folder / "site"),
        pythonpath=os.environ.get("PYTHONPATH", ""),
        scratch=tempfile.gettempdir(),
    ))


def built_model(preset: str) -> Path | None:
    """The tiny model `preset` serves when no --model is given, as servefuzz built it into the
    cache (the GGUF or the HF folder, by the engine spec's `model_format`); None for a preset of
    no engine's (or the reference engine's own), or when it is not built."""
    spec = engines.preset_spec(preset) if preset else None
    if spec is None or not spec.model_format:
        return None
    path = engines.served_model(preset, None)
    return path if path.exists() else None
