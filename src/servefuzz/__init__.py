"""servefuzz: find the bugs LLM serving engines show only under concurrent load."""

from __future__ import annotations

from servefuzz.errors import FindingError, LaunchError, ServefuzzError, TargetError, UsageError

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "ServefuzzError",
    "UsageError",
    "FindingError",
    "TargetError",
    "LaunchError",
]
