"""llama.cpp's llama-server: `/completion`, slots, a GBNF grammar, LoRA by id."""

from __future__ import annotations

import re

from servefuzz.engine_flags import Flag, FlagVariant, Kind, variant
from servefuzz.engines.spec import BugForm, Deterministic, EngineSpec

__all__ = ["BUG_FORM", "FLAGS", "ONE_SLOT", "SPEC", "TRIAGE", "version_name"]

# llama.cpp has no bitwise mode: its control is one slot, so that nothing is batched with the victim.
ONE_SLOT = Deterministic("one slot (-np 1)", slots=("-np", "--parallel"))

# llama.cpp's server: what the adapter reads from /props and a relaunch needs.
FLAGS: tuple[Flag, ...] = (
    Flag("total_slots", "-np", Kind.INT, minimum=1, maximum=4096),
    Flag("slot_n_ctx", "-c", Kind.INT, minimum=1),
)

# Triage's rows and what a cure by each implicates.
TRIAGE: tuple[FlagVariant, ...] = (
    variant("-np 1", "parallel slots (batching)", drop=("--parallel",)),
    variant("cache_prompt: false", "prompt cache (slot reuse)", add=(), target_opts={"cache_prompt": False}),
    variant("--no-cont-batching", "continuous batching", drop=("--cont-batching", "-cb")),
)

# ggml-org/llama.cpp's "Bug (misc.)" form (.github/ISSUE_TEMPLATE/019-bug-misc.yml, read
# upstream), the one whose module list names llama-server. Its CONTRIBUTING.md: "It is strictly
# prohibited to use AI to write your posts for you (bug reports, ...)": servefuzz's draft is
# the material a person writes the report from, and opens by saying so.
BUG_FORM = BugForm(
    source="ggml-org/llama.cpp .github/ISSUE_TEMPLATE/019-bug-misc.yml (Bug (misc.))",
    title_prefix="Misc. bug: ",
    component="server",
    fields=(
        ("Name and Version", "versions"),
        ("Operating systems", "os"),
        ("Which llama.cpp modules do you know to be affected?", "modules"),
        ("Command line", "command"),
        ("Problem description & steps to reproduce", "problem"),
        ("First Bad Commit", "bisect"),
        ("Relevant log output", "logs"),
        ("servefuzz's evidence", "evidence"),
    ),
    notice=("> **Not a bug report yet: material for a person to rewrite.** llama.cpp's CONTRIBUTING.md "
            "forbids bug reports written by AI or by tools. servefuzz generated this draft from a finding file; "
            "whoever files it must check every claim, run the reproducer and write the report in their own words."),
    modules=("llama-server",),
)

_UNTAGGED = re.compile(r"b1-([0-9a-f]{7,40})")


def version_name(version: str) -> str:
    """A llama-server build's version as llama.cpp names releases: `b<build>` tags. A tree
    built without git metadata (the llama-cpp-python sdist's vendored copy) reports build 1
    and its commit, "b1-0c1e570": that is the commit 0c1e570, not release b1.

    >>> version_name("b1-0c1e570"), version_name("b11434-abc1234"), version_name("b11434")
    ('commit 0c1e570 (built without git tags, so it reports b1-0c1e570)', 'b11434 (b11434-abc1234)', 'b11434')
    """
    if (m := _UNTAGGED.fullmatch(version)) is not None:
        return f"commit {m.group(1)} (built without git tags, so it reports {version})"
    tag, sep, _ = version.partition("-")
    return f"{tag} ({version})" if sep and tag.startswith("b") and tag[1:].isdigit() else version

SPEC = EngineSpec(
    "llamacpp",
    default_port=8080,
    # `seeds` False: llama.cpp promises nothing across slots.
    choices=True,  # a GBNF `grammar`
    adapters=True,  # `lora: [{id, scale}]`
    cache_prompt=True,
    deterministic=ONE_SLOT,
    flags=FLAGS,
    triage=TRIAGE,
    issue_key="llamacpp",
    cpu_preset="llama-server",
    model_format="gguf",
    bug_form=BUG_FORM,
    version_name=version_name,
)
