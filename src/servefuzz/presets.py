"""What a `--launch` preset starts, found on this machine: the engine (`find`: the user's own
install, servefuzz's interpreter's, or the engine cache's), and the engine's own plan
(`Preset.plan`, in its module) given that engine and the model folder (`plan`), fitted to what
that build or version takes (`fit`, read from its own `--help`).

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

import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from servefuzz import engine_files, engines
from servefuzz.engine_flags import unknown_flags
from servefuzz.engines.request import LaunchRequest
from servefuzz.engines.spec import EngineSource, Installed, LaunchInputs, Plan, Preset, Profile
from servefuzz.errors import LaunchError, UsageError
from servefuzz.sanitize import one_line
from servefuzz.server_facts import TargetInfo

__all__ = ["PLANS", "Plan", "built_model", "engine_version", "find", "fit", "install_hint", "interpreter", "plan"]

# Each preset servefuzz starts from a plan, by name (the launcher's PRESETS are these and `reference`).
PLANS: Mapping[str, Preset] = {name: p for name, p in engines.PRESETS.items() if p.plan is not None}


def install_hint(preset: str, version: str) -> str:
    """What installs `preset` at `version`: the setup script for its default, else what the
    preset says (`servefuzz engines install`, the GPU machine's unpacking)."""
    return engines.PRESETS[preset].install_hint(version)


def find(request: LaunchRequest) -> Installed:
    """The engine `request`'s preset starts: the install `engine_python` names; else, where no
    version was asked for, servefuzz's own interpreter's when it finds the engine's package;
    else the engine cache's (the version asked for, or the preset's default). UsageError, one
    line: an `engine_python` that is no interpreter or does not import the engine, a version
    asked that the install is not, an engine the cache lacks (saying what installs it)."""
    assert request.preset is not None and request.preset in PLANS, request
    preset = PLANS[request.preset]
    if request.engine_python is not None:
        return _users(request, interpreter(request.engine_python), EngineSource.ENGINE_PYTHON)
    if not request.version and preset.module and importlib.util.find_spec(preset.module) is not None:
        # Found, not imported: servefuzz never loads an engine into its own process.
        return _users(request, sys.executable, EngineSource.INTERPRETER)
    version = engines.version_of(preset.name, request.version or None)
    if not engine_files.installed(preset.name, version):
        raise UsageError(f"{preset.name} {version} is not installed under {engine_files.cache_dir()}: "
                         f"run {install_hint(preset.name, version)}")
    site = engine_files.engine_dir(preset.name, version) / "site"
    return Installed(preset.name, version, engine_files.program(preset.name, version), EngineSource.CACHE,
                     str(site) if site.is_dir() else "")


def _users(request: LaunchRequest, python: str, source: EngineSource) -> Installed:
    """The user's install at `python` (`engine_python`'s, or servefuzz's own interpreter's), its
    version read from the engine itself."""
    preset = PLANS[request.name]
    version, why = engine_version(python, preset.module)
    whose = f"engine_python={python!r}" if source is EngineSource.ENGINE_PYTHON else f"servefuzz's interpreter {python}"
    if version is None:
        raise UsageError(f"{whose} does not import {preset.module}, the engine of {preset.name}: {one_line(why)[:200]}")
    if request.version and request.version != version:
        raise UsageError(f"launch={request.given!r} asks for {preset.module} {request.version}, and {whose} has "
                         f"{one_line(version)[:40]}")
    return Installed(preset.name, version, python, source)


def interpreter(path: Path) -> str:
    """The interpreter `engine_python` names: the file itself, or a venv folder's `bin/python`;
    UsageError (one line) for a path that is neither. Kept as given (absolute), never resolved:
    a venv's interpreter is a link whose target would not find the venv's packages."""
    if not path.exists():
        raise UsageError(f"engine_python={str(path)[:120]!r}: no such file or folder")
    if path.is_dir():
        found = next((path / "bin" / name for name in ("python", "python3") if (path / "bin" / name).is_file()), None)
        if found is None:
            raise UsageError(f"engine_python={str(path)[:120]!r}: a folder without bin/python (name a venv's folder "
                             "or its interpreter)")
        path = found
    if not os.access(path, os.X_OK):
        raise UsageError(f"engine_python={str(path)[:120]!r}: not an executable interpreter")
    return str(path.absolute())


# Run by the engine's interpreter: its package's version from the distribution that installed it
# (the engine's own record; the import of vLLM or SGLang takes 15-20 s on a busy 2-core box, the
# record under a second), else from the package itself (`__version__`: a source tree on the path
# has no record). One JSON line last: the engine's imports may print before it.
_PROBE = """
import importlib, importlib.metadata as md, importlib.util, json, sys
name = sys.argv[1]
if importlib.util.find_spec(name) is None:
    print(json.dumps({"version": None, "why": f"no module named {name!r}"})); sys.exit(0)
dists = sorted(set(md.packages_distributions().get(name) or ()))
version = md.version(dists[0]) if len(dists) == 1 else None
if version is None:
    version = str(getattr(importlib.import_module(name), "__version__", "") or "") or None
print(json.dumps({"version": version, "why": "" if version else f"{name} says no version"}))
"""


def engine_version(python: str, module: str) -> tuple[str | None, str]:
    """The version of `module` (`vllm`, `sglang`) that `python` imports, read by `python` itself
    under servefuzz's environment (its PYTHONPATH may hold the engine), and why there is none
    ((None, the reason): it is not there, does not import, or `python` does not run). Asked once
    a process per interpreter and path."""
    return _probe(python, module, os.environ.get("PYTHONPATH", ""))


@functools.cache
def _probe(python: str, module: str, pythonpath: str) -> tuple[str | None, str]:
    try:
        done = subprocess.run([python, "-c", _PROBE, module], capture_output=True, text=True, timeout=300,
                              check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"cannot run it: {getattr(e, 'strerror', None) or e}"
    last = (done.stdout.strip().splitlines() or [""])[-1]
    try:
        said = json.loads(last)
    except ValueError:
        said = None
    if done.returncode != 0 or not isinstance(said, dict):
        tail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return None, tail
    version = said.get("version")
    return (version, "") if isinstance(version, str) and version else (None, str(said.get("why") or "no version"))


def plan(found: Installed, target: TargetInfo | None, model: Path | None, flags: Sequence[str] = ()) -> Plan:
    """The server `found` starts, rebuilt from `target` (the finding's server; None for a new
    campaign), serving `model` (None: the tiny models in the engine cache), under the profile's
    `flags`. UsageError (one line) for a model that is not there or that the engine will not
    serve (under those flags)."""
    chosen = PLANS[found.preset]
    served = engine_files.served_model(found.preset, model)
    assert chosen.plan is not None  # PLANS holds only presets with a plan
    return chosen.plan(LaunchInputs(
        program=found.program,
        model=served,
        version=found.version,
        model_dtype=engine_files.model_dtype(served) if served.is_dir() else "auto",
        model_config=engine_files.model_config(served) if served.is_dir() else {},
        server_args={} if target is None else target.server_args,
        page_size=target.page_size if target is not None and target.page_size else None,
        flags=tuple(flags),
        standins=str(engine_files.standin_path()),
        site=found.site,
        pythonpath=os.environ.get("PYTHONPATH", ""),
        scratch=tempfile.gettempdir(),
    ))


def fit(found: Installed, argv: Sequence[str], env: Mapping[str, str], profile: Profile | None = None) -> list[str]:
    """`argv`, the preset's whole command line (a profile's flags included), as the engine
    `found` takes it, read from its own `--help` (run with the server's `env`):

    - a build of servefuzz's cache as its preset spells it there (`Preset.fit`: an older
      llama.cpp tree of the ladder lacks flags that only ask for what it does anyway);
    - the user's own install (`engine_python`, servefuzz's interpreter's) as it is, once its
      `--help` names every flag: a flag it lacks is refused in one line (UsageError), naming the
      profile that asks for it, since the version was never tried with these presets. LaunchError
      when its `--help` cannot be read (the engine would not start either).
    """
    chosen = PLANS[found.preset]
    if found.source is EngineSource.CACHE:
        if chosen.fit is None:
            return list(argv)
        return chosen.fit(found.version, argv, lambda: engine_files.help_of((found.program,)))
    # A Python engine is run as a module (`python -m vllm.entrypoints.openai.api_server`): its
    # `--help` is the module's.
    command = tuple(argv[:3]) if tuple(argv[1:2]) == ("-m",) else tuple(argv[:1])
    text = engine_files.help_of(command, tuple(sorted(env.items())))
    if "usage:" not in text.lower():
        tail = (text.strip().splitlines() or ["no output"])[-1]
        raise LaunchError(f"{found.preset} {found.version} ({found.program}): its --help did not run: {one_line(tail)[:200]}")
    missing = unknown_flags(argv, text)
    if not missing:
        return list(argv)
    profiled = profile is not None and any(flag in profile.flags for flag in missing)
    asks = f"profile {profile.name} asks for" if profiled and profile is not None else "the preset starts it with"
    raise UsageError(f"{found.preset}: {chosen.module} {found.version} ({found.program}) has no "
                     f"{', '.join(missing)} (read from its --help), which {asks}")


def built_model(preset: str) -> Path | None:
    """The tiny model `preset` serves when no --model is given, as servefuzz built it into the
    cache (the GGUF or the HF folder, by the engine spec's `model_format`); None for a preset of
    no engine's (or the reference engine's own), or when it is not built."""
    spec = engines.preset_spec(preset) if preset else None
    if spec is None or not spec.model_format:
        return None
    path = engine_files.served_model(preset, None)
    return path if path.exists() else None
