"""Every engine's spec by name (`spec_of(engine)`), and the tables read from them: every
preset (`PRESETS`), the versions each takes (`PRESET_VERSIONS`, read by `version_of`) and their
feature profiles (`PROFILES`). Pure: where an engine is installed is `engines`' business.

    >>> spec_of("vllm").salts, spec_of("llamacpp").default_port, spec_of("my-engine").issue_match.value
    (True, 8080, 'none')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from servefuzz.anomaly import Promise
from servefuzz.engines.llamacpp import SPEC as LLAMACPP
from servefuzz.engines.openai import GENERIC
from servefuzz.engines.openai import SPEC as OPENAI
from servefuzz.engines.reference import SPEC as REFERENCE
from servefuzz.engines.sglang import SPEC as SGLANG
from servefuzz.engines.spec import Deterministic, EngineSpec, Preset, Profile, ServerFacts, Versions
from servefuzz.engines.vllm import SPEC as VLLM
from servefuzz.errors import UsageError

__all__ = ["GPU_VERSIONS", "PRESETS", "PRESET_VERSIONS", "PROFILES", "SPECS", "deterministic_mode", "facts_of",
           "preset_spec", "promise_of", "spec_of", "version_of"]

SPECS: Mapping[str, EngineSpec] = {s.name: s for s in (SGLANG, VLLM, LLAMACPP, REFERENCE, OPENAI)}

# Every engine's presets by name (`sglang-cpu`, `vllm-gpu`, `reference`): one table, from the
# specs, the CPU's before the GPU machine's.
PRESETS: Mapping[str, Preset] = {
    p.name: p for p in sorted((p for spec in SPECS.values() for p in spec.presets), key=lambda p: p.device != "cpu")
}
# The versions each preset takes: one table, one rule (`version_of`), one place each is installed
# (`engine_files.engine_dir`). The presets alone mean each one's default, what the setup script installs.
PRESET_VERSIONS: Mapping[str, Versions] = {name: p.versions for name, p in PRESETS.items() if p.versions is not None}
# By preset, then by name: the one table `--profile` reads.
PROFILES: Mapping[str, Mapping[str, Profile]] = {
    name: {p.name: p for p in preset.profiles} for name, preset in PRESETS.items() if preset.profiles
}
# The GPU presets and the version of each that scripts/gpu_bundle.sh packs for the lent GPU
# machine (their defaults; `servefuzz engines install` puts the ladder's into the cache with pip).
GPU_VERSIONS: Mapping[str, tuple[str, ...]] = {
    name: (versions.default,) for name, versions in PRESET_VERSIONS.items() if PRESETS[name].device == "cuda"
}


def preset_spec(preset: str) -> EngineSpec | None:
    """The spec of the engine `preset` starts; None for a name that is no preset."""
    return next((s for s in SPECS.values() if any(p.name == preset for p in s.presets)), None)


def version_of(preset: str, asked: str | None) -> str:
    """The version `PRESET[@VERSION]` means in servefuzz's engine cache: the preset's default
    when none is asked; UsageError (one line naming the versions it takes) for one servefuzz does
    not know, or for a preset that takes none.

    >>> version_of("sglang-cpu", None), version_of("llama-server", "b11434")
    ('0.5.23', 'b11434')
    """
    versions = PRESET_VERSIONS.get(preset)
    if versions is None:
        if asked:
            raise UsageError(f"{preset}@{asked[:40]}: {preset} takes no @VERSION (servefuzz installs one version of it)")
        return ""
    chosen = versions.chosen(asked)
    if chosen is None:
        raise UsageError(f"{preset}@{str(asked)[:40]}: not a version servefuzz knows (it knows {versions.summary()})")
    return chosen


def spec_of(engine: str) -> EngineSpec:
    """The spec of `engine`; one servefuzz does not know is a generic server of the openai
    dialect under its own name (never a KeyError)."""
    known = SPECS.get(engine)
    return known if known is not None else dataclasses.replace(GENERIC, name=engine)


def deterministic_mode(engine: str, server_args: Mapping[str, object], env: Mapping[str, str],
                       profile: str | None = None) -> str | None:
    """The deterministic mode a recorded server of `engine` ran in, in words; None for none.

    A variable is read by whichever server runs under it, so a mode set by environment counts
    on any engine's finding (an openai-dialect vLLM's too); a server arg only on its own engine's;
    and so does the engine's launch profile (`profile`, by name) whose variables or flags turn the
    mode on: findings written before a profile's variables were recorded name only the profile.

    >>> deterministic_mode("reference", {}, {"VLLM_BATCH_INVARIANT": "1"})
    'VLLM_BATCH_INVARIANT=1'
    >>> deterministic_mode("vllm", {"enable_deterministic_inference": True}, {}) is None
    True
    >>> deterministic_mode("vllm", {}, {}, profile="batch-invariant")
    'VLLM_BATCH_INVARIANT=1'
    """
    mode = _mode(engine, server_args, env, profile)
    return mode.says if mode is not None else None


def promise_of(engine: str, server_args: Mapping[str, object], env: Mapping[str, str],
               profile: str | None = None) -> Promise | None:
    """The promise of the deterministic mode the server ran in (`deterministic_mode`), where the
    engine documents that mode as one: None for no mode, or a mode that promises nothing.

    >>> promise_of("vllm", {}, {"VLLM_BATCH_INVARIANT": "1"}).source.split("; ")[1]
    'https://github.com/vllm-project/vllm/pull/48694'
    >>> promise_of("llamacpp", {"n_parallel": 1}, {}) is None
    True
    """
    mode = _mode(engine, server_args, env, profile)
    return mode.promise if mode is not None else None


def facts_of(engine: str, server_args: Mapping[str, object], env: Mapping[str, str],
             profile: str | None = None) -> ServerFacts:
    """The server's facts (`ServerFacts`): its engine's reading of its recorded args, with the
    contract mode it ran in (`deterministic_mode`, `promise_of`).

    >>> f = facts_of("sglang", {"page_size": 16, "enable_deterministic_inference": True}, {})
    >>> f.page_size, f.deterministic
    (16, '--enable-deterministic-inference')
    """
    mode = _mode(engine, server_args, env, profile)
    facts = spec_of(engine).facts(server_args)
    if facts.chunk_budget is None and profile is not None:
        facts = dataclasses.replace(facts, chunk_budget=_profile_budget(spec_of(engine), profile))
    return dataclasses.replace(facts, deterministic=mode.says if mode is not None else None,
                               promise=mode.promise if mode is not None else None)


def _profile_budget(spec: EngineSpec, profile: str) -> int | None:
    """The chunked-prefill step budget a profile launched the server with (its `chunk_flag` and
    the number after it), for an engine whose recorded args do not tell (llama-server's `-b`).

    >>> _profile_budget(spec_of("llamacpp"), "prefill-steps"), _profile_budget(spec_of("llamacpp"), "kv-unified")
    (64, None)
    """
    flag = spec.chunk_flag
    for p in (p for preset in spec.presets for p in preset.profiles if p.name == profile):
        if flag and flag in p.flags[:-1]:
            word = p.flags[p.flags.index(flag) + 1]
            return int(word) if word.isdigit() and int(word) > 0 else None
    return None


def _mode(engine: str, server_args: Mapping[str, object], env: Mapping[str, str],
          profile: str | None) -> Deterministic | None:
    for spec in SPECS.values():
        if spec.deterministic is not None and spec.deterministic.set_by_env(env):
            return spec.deterministic
    own = spec_of(engine).deterministic
    if own is None:
        return None
    if own.set_by_args(server_args):
        return own
    profiles = (p for preset in spec_of(engine).presets for p in preset.profiles if p.name == profile)
    if profile is not None and any(own.set_by_env(dict(p.env)) or (own.flag and own.flag in p.flags) for p in profiles):
        return own
    return None
