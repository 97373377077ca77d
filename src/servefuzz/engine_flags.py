"""The typed allow-list of launch flags: the only way a server argument becomes argv.

A finding's `server_args` are copied from the server's own `/server_info`, so a hostile server
writes them; a finding file can be edited by anyone. Turning such a value into a command line
naively (`--flag VALUE` for anything that is not `True`) lets `"disable_radix_cache":
"--host=0.0.0.0"` relaunch the engine listening everywhere. Here every flag servefuzz would ever
pass on is a row of a table with its type, and a value reaches argv only as servefuzz's own
rendering of a value of that type (an int printed by Python, a bool as the bare flag, a name
from a fixed alphabet that cannot start with `-`). Keys outside the table are facts about the
server (vocabulary, version, bind address), never flags.

    >>> table = (Flag("page_size", "--page-size", Kind.INT, minimum=1),
    ...          Flag("disable_radix_cache", "--disable-radix-cache", Kind.BOOL))
    >>> flag_argv(table, {"page_size": 16, "disable_radix_cache": True, "vocab_size": 1024})
    ['--page-size=16', '--disable-radix-cache']
    >>> flag_argv(table, {"disable_radix_cache": "--host=0.0.0.0"})
    Traceback (most recent call last):
    ...
    servefuzz.errors.UsageError: server arg disable_radix_cache: expected true or false, got '--host=0.0.0.0'; refusing to launch with it

Each engine's table is its spec's (`EngineSpec.flags`, in its module of `servefuzz.engines`),
as are the rows of its triage matrix (`EngineSpec.triage`, `FlagVariant`s). This module holds
the rule they are read by, and the one rule by which servefuzz edits a command line
(`flag_pairs`, `with_flags`, `without_flags`).

Launch argv uses the `--flag=value` form, so that no value, whatever it holds, can be read as an
option of its own. Reports (`flag_words`) show the `--flag value` form, each word shell-quoted by
the caller, and leave out what does not type-check, saying so.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, TypeVar

from servefuzz.errors import UsageError

__all__ = [
    "Kind",
    "Flag",
    "Checked",
    "FlagVariant",
    "Relaunchable",
    "check_flags",
    "flag_argv",
    "flag_pairs",
    "flag_words",
    "variant",
    "with_flags",
    "without_flags",
    "fault_name",
    "path_word",
    "env_name",
    "show",
    "typed_value",
    "unknown_flags",
]


class Kind(enum.Enum):
    """What a flag's value is; the value servefuzz passes on is its own rendering of it."""

    BOOL = "bool"  # True: the bare flag; False or absent: nothing (or the flag's `off` form)
    INT = "int"  # a JSON integer (not a bool) within [minimum, maximum]
    FLOAT = "float"  # a finite JSON number within [minimum, maximum]
    CHOICE = "choice"  # one of `choices`, exactly
    NAME = "name"  # a word of letters, digits and `_.:/+-`, not starting with `-` (a backend, a model name)
    PATH = "path"  # a file path: printable, no leading `-` (shown in reports, never launched from a finding)


# A name: what backends, dtypes and served-model names are spelled with. No leading `-`, so it
# can never be read as an option; no space, quote or shell character.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/+-]{0,199}")
# The reference engine's fault names (`page-boundary-prefix`): lower-case words and hyphens.
_FAULT = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
# An environment variable name, as a POSIX shell accepts it in `NAME=value`.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT_LIMIT = 2**31 - 1  # no engine flag counts beyond this; a longer number is not a setting


@dataclass(frozen=True)
class Flag:
    """One launch flag: the server-args key it comes from, the flag, its kind and bounds."""

    key: str
    flag: str
    kind: Kind
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    off: str | None = None  # a BOOL flag's spelling for False, where the engine's default is on

    def check(self, value: Any) -> Any:
        """The value, typed, or ValueError with a short reason; None means "leave the flag out"."""
        if value is None:
            return None
        if self.kind is Kind.BOOL:
            if value is True or value is False:
                return value
            raise ValueError(f"expected true or false, got {show(value)}")
        if self.kind is Kind.INT:
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"expected an integer, got {show(value)}")
            self._bounds(value)
            return value
        if self.kind is Kind.FLOAT:
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"expected a finite number, got {show(value)}")
            self._bounds(value)
            return float(value)
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {show(value)}")
        if self.kind is Kind.CHOICE:
            if value not in self.choices:
                raise ValueError(f"expected one of {', '.join(self.choices)}, got {show(value)}")
            return value
        if self.kind is Kind.NAME:
            if not _NAME.fullmatch(value):
                raise ValueError(f"expected a name (letters, digits, _.:/+-, not starting with -), got {show(value)}")
            return value
        if not value or value.startswith("-") or len(value) > 4096 or not value.isprintable():
            raise ValueError(f"expected a path not starting with -, got {show(value)}")
        return value

    def _bounds(self, value: float) -> None:
        low = self.minimum if self.minimum is not None else -_INT_LIMIT
        high = self.maximum if self.maximum is not None else _INT_LIMIT
        if not low <= value <= high:
            raise ValueError(f"expected a value in {low:g}..{high:g}, got {show(value)}")

    def words(self, value: Any, *, joined: bool) -> list[str]:
        """The argv words of a checked value: `--flag=value` when `joined`, else `--flag value`."""
        if value is None:
            return []
        if self.kind is Kind.BOOL:
            spelled = self.flag if value else self.off
            return [spelled] if spelled else []
        text = repr(value) if isinstance(value, float) else str(value)
        return [f"{self.flag}={text}"] if joined else [self.flag, text]


def show(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**18:
        return f"an integer of {value.bit_length()} bits"  # repr of a huge one raises, or floods
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- the argv edit rule: every change to a command line goes through these -----------------


def _is_flag(token: str) -> bool:
    # "-1" is a value (--chunked-prefill-size -1); "-np" and "--page-size" are flags.
    return token.startswith("-") and not token.lstrip("-").replace(".", "", 1).isdigit()


def flag_pairs(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """(flag, value or None) for each flag of an argv; `--flag=value` counts as the pair.

    >>> flag_pairs(["-np", "8", "--metrics", "--page-size=16"])
    [('-np', '8'), ('--metrics', None), ('--page-size', '16')]
    """
    out: list[tuple[str, str | None]] = []
    for i, token in enumerate(argv):
        if not _is_flag(token):
            continue
        if "=" in token:
            flag, _, value = token.partition("=")
            out.append((flag, value))
        else:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out.append((token, nxt if nxt is not None and not _is_flag(nxt) else None))
    return out


def unknown_flags(argv: Sequence[str], help_text: str) -> tuple[str, ...]:
    """The flags of `argv` that a program's `--help` (`help_text`) never names, each once, in
    order: what that build or version of an engine lacks. A flag is named where it stands as a
    word of its own (`--page-size`, not the `--page-size-64` of another option); argparse's
    `--flag, --no-flag` pairs name both.

    >>> unknown_flags(["py", "--page-size", "16", "--sleep-on-idle", "--chunked-prefill-size", "-1"],
    ...               "usage: [--page-size PAGE_SIZE] [--chunked-prefill-size N] [--sleep-on-idle-x]")
    ('--sleep-on-idle',)
    """
    named = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", help_text))
    return tuple(dict.fromkeys(flag for flag, _ in flag_pairs(argv) if flag not in named))


def without_flags(argv: Sequence[str], flags: set[str]) -> list[str]:
    """`argv` without the given flags, each with every value that follows it (vLLM's
    `--lora-modules A=P B=Q` takes several).

    >>> without_flags(["srv", "--lora-modules", "a=/p", "b=/q", "--metrics"], {"--lora-modules"})
    ['srv', '--metrics']
    """
    out: list[str] = []
    dropping = False
    for token in argv:
        if _is_flag(token):
            dropping = token.partition("=")[0] in flags
            if not dropping:
                out.append(token)
        elif not dropping:
            out.append(token)
    return out


def with_flags(argv: Sequence[str], add: Sequence[str], drop: Sequence[str] = ()) -> list[str]:
    """`argv` with the flags of `add` (a flag already there gets the new value) and without `drop`.

    >>> with_flags(["srv", "-c", "8192", "--metrics"], ["-c", "1024", "--context-shift"])
    ['srv', '--metrics', '-c', '1024', '--context-shift']
    """
    replaced = {flag for flag, _ in flag_pairs(add)}
    return without_flags(argv, {*replaced, *drop}) + list(add)


class Relaunchable(Protocol):
    """What a variant relaunches: a launch's argv, environment and adapter options
    (`launcher.Launch`, which this layer does not import)."""

    @property
    def argv(self) -> Sequence[str]: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def target_opts(self) -> Mapping[str, Any]: ...

    def with_changes(self, argv: Sequence[str], env: Mapping[str, str], target_opts: Mapping[str, Any]) -> Self: ...


_L = TypeVar("_L", bound=Relaunchable)


@dataclass(frozen=True)
class FlagVariant:
    """One way of relaunching a server, a row of an engine's triage matrix
    (`EngineSpec.triage`): argv tokens to add (a flag already there gets the new value),
    switches to drop, environment to set, adapter options, and the component a cure by this
    variant implicates.

    >>> v = FlagVariant("-np 1", "parallel slots", add=("-np", "1"), drop=("--cont-batching",))
    >>> v.apply_argv(["llama-server", "-np", "8", "--cont-batching", "--port", "{port}"])
    ['llama-server', '--port', '{port}', '-np', '1']
    """

    name: str
    component: str
    add: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    target_opts: Mapping[str, Any] = field(default_factory=dict)
    # The variant starts only on a GPU (a CUDA kernel backend, a deterministic mode with GPU
    # kernels only): left out of the matrix of a launch known to compute on the CPU.
    gpu_only: bool = False

    def apply_argv(self, argv: Sequence[str]) -> list[str]:
        return with_flags(argv, self.add, self.drop)

    def changes(self, launch: Relaunchable) -> bool:
        """Whether relaunching `launch` with this variant changes anything at all."""
        present = flag_pairs(launch.argv)
        return (
            any(pair not in present for pair in flag_pairs(self.add))
            or any(flag in dict(present) for flag in self.drop)
            or any(launch.env.get(k) != v for k, v in self.env.items())
            or any(launch.target_opts.get(k) != v for k, v in self.target_opts.items())
        )

    def apply(self, launch: _L) -> _L:
        return launch.with_changes(self.apply_argv(launch.argv), self.env, self.target_opts)

    @property
    def flags(self) -> tuple[str, ...]:
        """What the triage row records as this variant's flags (known issues match on them)."""
        return self.add + tuple(f"{k}={v}" for k, v in self.target_opts.items())


def variant(name: str, component: str, *, add: tuple[str, ...] | None = None, **kw: Any) -> FlagVariant:
    """A variant named by its flags (`"--page-size 1"` adds exactly that) unless told otherwise."""
    return FlagVariant(name, component, add=tuple(name.split()) if add is None else add, **kw)


@dataclass(frozen=True)
class Checked:
    """The typed values of the flags a server's args set, and the keys refused with why."""

    values: tuple[tuple[Flag, Any], ...]
    refused: tuple[tuple[str, str], ...]

    def why(self) -> str:
        """The first refusal as one line (its value shown as a Python repr, so on one line)."""
        key, reason = self.refused[0]
        return f"server arg {key}: {reason}"


def check_flags(table: Sequence[Flag], server_args: Mapping[str, Any]) -> Checked:
    """Check every key of `table` that `server_args` holds; collect refusals rather than raise."""
    values: list[tuple[Flag, Any]] = []
    refused: list[tuple[str, str]] = []
    for flag in table:
        if flag.key not in server_args:
            continue
        try:
            value = flag.check(server_args[flag.key])
        except ValueError as e:
            refused.append((flag.key, str(e)))
            continue
        if value is not None:
            values.append((flag, value))
    return Checked(tuple(values), tuple(refused))


def flag_words(table: Sequence[Flag], server_args: Mapping[str, Any]) -> tuple[list[str], tuple[str, ...]]:
    """For reports: the `--flag value` words of the values that type-check, and the refused keys.

    >>> table = (Flag("page_size", "--page-size", Kind.INT, minimum=1),
    ...          Flag("disable_radix_cache", "--disable-radix-cache", Kind.BOOL))
    >>> flag_words(table, {"page_size": 64, "disable_radix_cache": "yes", "tp_size": 1})
    (['--page-size', '64'], ('disable_radix_cache',))
    """
    checked = check_flags(table, server_args)
    words = [w for flag, value in checked.values for w in flag.words(value, joined=False)]
    return words, tuple(key for key, _ in checked.refused)


def typed_value(table: Sequence[Flag], server_args: Mapping[str, Any], key: str) -> Any:
    """One server arg, checked against its engine's `table` (None when absent); a value of the
    wrong type is a UsageError. For code that relaunches an engine from a finding (vLLM's dtype,
    llama.cpp's slots) and passes a single value on.

    >>> slots = (Flag("total_slots", "-np", Kind.INT, minimum=1),)
    >>> typed_value(slots, {"total_slots": 4}, "total_slots"), typed_value(slots, {}, "total_slots")
    (4, None)
    """
    flags = {f.key: f for f in table}
    if key not in flags:
        raise UsageError(f"{key} is not a known launch setting")
    try:
        return flags[key].check(server_args.get(key))
    except ValueError as e:
        raise UsageError(f"server arg {key}: {e}; refusing to launch with it") from None


def flag_argv(table: Sequence[Flag], server_args: Mapping[str, Any]) -> list[str]:
    """The `--flag=value` argv of the keys of `table` that `server_args` holds; each value must
    have its flag's type (a UsageError with one line otherwise). Keys that are not flags
    (vocabulary, version, the bind address) are left out."""
    checked = check_flags(table, server_args)
    if checked.refused:
        raise UsageError(f"{checked.why()}; refusing to launch with it")
    return [w for flag, value in checked.values for w in flag.words(value, joined=True)]


def path_word(value: Any, placeholder: str) -> str:
    """A recorded path as a command-line word when it checks as one, else `placeholder`.

    >>> path_word("/m/tiny.gguf", "MODEL"), path_word("--host=0.0.0.0", "MODEL"), path_word(None, "MODEL")
    ('/m/tiny.gguf', 'MODEL', 'MODEL')
    """
    try:
        return str(Flag("path", "-m", Kind.PATH).check(value) or placeholder)
    except ValueError:
        return placeholder


def fault_name(name: Any) -> str:
    """A planted fault's name, if it is spelled like one (lower-case words and hyphens)."""
    if not isinstance(name, str) or not _FAULT.fullmatch(name) or len(name) > 64:
        raise UsageError(f"fault {show(name)}: not a fault name (lower-case words joined by -); refusing to launch with it")
    return name


def env_name(key: Any) -> bool:
    """Whether `key` is a valid environment variable name (`NAME=value` in a shell means that and
    nothing else).

    >>> env_name("VLLM_BATCH_INVARIANT"), env_name("X=1;touch /tmp/x;Y")
    (True, False)
    """
    return isinstance(key, str) and _ENV_NAME.fullmatch(key) is not None
