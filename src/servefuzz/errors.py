"""One root for every failure of the tool itself.

Server misbehaviour is *data* (an anomaly in a history); these exceptions are for the tool's own
failures: bad input, an unreadable finding file, a target that cannot be reached at all. The CLI
turns any `ServefuzzError` into one clear line and a non-zero exit, never a traceback.
"""

from __future__ import annotations

__all__ = [
    "ServefuzzError",
    "UsageError",
    "FindingError",
    "TargetError",
    "LaunchError",
]


class ServefuzzError(Exception):
    """Root of all servefuzz errors. `exit_code` is what the CLI exits with."""

    exit_code: int = 2


class UsageError(ServefuzzError):
    """The user asked for something that cannot be done (bad flag, bad value)."""


class FindingError(ServefuzzError):
    """A finding file is missing, truncated, of the wrong schema or of a newer schema."""


class TargetError(ServefuzzError):
    """The target server cannot be used at all (unreachable, wrong dialect)."""


class LaunchError(ServefuzzError):
    """A server the tool launched did not come up healthy."""
