"""The shell command a report prints to start a server like the one a finding was made on.

Each preset's own builder (`Preset.command`, in its engine's module) writes it from that preset's
argv builder, so that a report prints the command servefuzz ran; for a server servefuzz did not
start, the engine's plain command with the flags its typed table lets through. This module
gathers what the finding says (`CommandInputs`) and quotes the words; it names no engine.
Everything comes from the finding file, so from the server or whoever wrote the file: flags only
through `engine_flags`, environment names only when they are variable names, every word
shell-quoted, and what does not type-check is left out and named (its key, never its value).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from servefuzz.engine_flags import env_name
from servefuzz.engines import PRESETS, PROFILES
from servefuzz.engines.registry import spec_of
from servefuzz.engines.spec import CommandInputs, EngineSpec
from servefuzz.sanitize import one_line
from servefuzz.server_facts import TargetInfo

__all__ = ["server_command"]


def server_command(target: TargetInfo, *, multiline: bool = False) -> str:
    """A shell command that starts a server like the one the finding was made on; `multiline`
    puts each flag on a line of its own, as the seed report does.

    The server args and environment come from the finding, so from the server or whoever wrote
    the file: flags only through each engine's typed table (`engine_flags`), environment names
    only when they are variable names, every word shell-quoted. What does not type-check is left
    out and named in a comment line (its key, never its value), so the block is safe to paste.
    The command is the one of the preset that starts the engine on the finding's device
    (`EngineSpec.preset`).
    """
    spec = spec_of(target.engine)
    port = str(spec.default_port)
    env = {k: str(v) for k, v in sorted(target.env.items()) if env_name(k)}
    refused = [] if len(env) == len(target.env) else ["environment entries whose names are not variable names"]
    preset = PRESETS.get(spec.preset(target.device))
    if preset is None or preset.command is None:
        served = target.server_args.get("model")
        return f"# start the OpenAI-compatible server{f' serving {one_line(served)}' if served else ''} on port {port}"
    built = preset.command(CommandInputs(
        server_args=target.server_args, page_size=target.page_size or None, version=target.version or "", env=env,
        profile=PROFILES.get(preset.name, {}).get(target.profile or ""), standins=tuple(target.standins),
        faults=tuple(target.faults), adapters=_placeholder_adapters(spec), draft=_placeholder_draft()))
    if isinstance(built, str):
        return built
    argv, env, more = built
    refused += more
    argv += ["--port", port]
    words = [*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *(shlex.quote(a) for a in argv)]
    if not multiline:
        command = " ".join(words)
    else:
        # A quoted value starts with a quote, so only real flags start a line.
        command = "".join((" \\\n    " if w.startswith("--") and i else " " if i else "") + w for i, w in enumerate(words))
    if refused:
        command += "\n# left out, not valid launch settings: " + ", ".join(refused)
    return command


def _placeholder_adapters(spec: EngineSpec) -> tuple[tuple[str, Path], ...]:
    """servefuzz's adapters as LORA_DIR/... (LORA_DIR: `servefuzz model build DIR`'s DIR/lora),
    in the engine's model format, since their real paths are the cache's."""
    from servefuzz.models import ADAPTERS, adapter_paths

    paths = adapter_paths(Path("LORA_DIR"))
    return tuple(zip(ADAPTERS, paths.gguf if spec.model_format == "gguf" else paths.hf, strict=True))


def _placeholder_draft() -> Path:
    """The draft model as DRAFT_DIR/tiny-draft.gguf (DRAFT_DIR: `servefuzz model build DIR`'s DIR/draft)."""
    from servefuzz.models import draft_path

    return draft_path(Path("DRAFT_DIR"))
