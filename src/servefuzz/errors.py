"""One root for every failure of the tool itself.

Server misbehaviour is *data* (an anomaly in a history); these exceptions are for the tool's own
failures: bad input, an unreadable finding file, a target that cannot be reached at all. The CLI
turns any `ServefuzzError` into one clear line and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import enum
import importlib
from types import ModuleType

__all__ = [
    "Exit",
    "ServefuzzError",
    "UsageError",
    "FindingError",
    "TargetError",
    "LaunchError",
    "DiskFullError",
    "InstallError",
    "extra_module",
]


class Exit(enum.IntEnum):
    """What the command line's exit status means, for every command (README: "Exit codes").

    `FOUND` is only ever the answer to the question a command asks (a campaign found
    something; a replay did not reproduce, a shrink or triage had nothing to work on): never
    a failure of servefuzz itself, which a CI job would otherwise read as a finding.
    """

    OK = 0  # fuzz: nothing found; replay: reproduced; shrink, triage, report: done
    # fuzz: found something (a contract violation too; numeric drift alone is not);
    # replay, shrink, triage: the finding did not come back
    FOUND = 1
    USAGE = 2  # bad flags, a bad or unreadable finding file, a trace that is not one
    TARGET = 3  # the server cannot be reached, could not be started, or went away for good
    INTERNAL = 4  # a bug in servefuzz (the traceback is written to a file, never shown as output)
    # The disk (or the quota) under a file servefuzz writes is full: the machine's state, not a bug
    # of ours (4) nor bad input (2). What was written before is kept whole, so once there is room
    # `fuzz --resume` goes on.
    DISK = 5
    # `servefuzz engines install` (or a bisect installing a version) could not put an engine into
    # the cache: its download, checksum, build or import failed; or `servefuzz model fetch` could
    # not download a real model's pinned wheel (pip failed, or its sha256 is not the pinned one). Not bad input (2, said before
    # anything starts) nor a server (3): the machine's toolchain or the registry.
    INSTALL = 6
    # Ctrl-C, or SIGTERM (a job scheduler's stop, `kill`): one exit status for "stopped from
    # outside", the shell's 128 + SIGINT; what was written so far is kept.
    INTERRUPTED = 130


class ServefuzzError(Exception):
    """Root of all servefuzz errors. `exit_code` is what the CLI exits with."""

    exit_code: int = Exit.USAGE


class UsageError(ServefuzzError):
    """The user asked for something that cannot be done (bad flag, bad value)."""


class FindingError(ServefuzzError):
    """A finding file is missing, truncated, of the wrong schema or of a newer schema."""


class TargetError(ServefuzzError):
    """The target server cannot be used at all (unreachable, wrong dialect)."""

    exit_code = Exit.TARGET


class LaunchError(ServefuzzError):
    """A server the tool launched did not come up healthy."""

    exit_code = Exit.TARGET


class DiskFullError(ServefuzzError):
    """A write failed because its filesystem is full (ENOSPC) or the user's quota is (EDQUOT)."""

    exit_code = Exit.DISK


class InstallError(ServefuzzError):
    """An engine version could not be installed into servefuzz's cache (download, checksum, build,
    or its first run failed; the line names the log that says why), or a real model's pinned
    wheel could not be downloaded (`servefuzz model fetch`: pip failed, or its sha256 differs)."""

    exit_code = Exit.INSTALL


def extra_module(module: str, needed_for: str, extra: str = "models") -> ModuleType:
    """`module` imported; where it is not installed, one line (a `UsageError`) saying that
    `needed_for` needs it and which of servefuzz's optional extras brings it.

        >>> extra_module("servefuzz_no_such_package", "building models")
        Traceback (most recent call last):
        servefuzz.errors.UsageError: building models needs the Python package 'servefuzz_no_such_package': pip install 'servefuzz[models]'
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{needed_for} needs the Python package {module.split('.')[0]!r}: "
                         f"pip install 'servefuzz[{extra}]'") from None
