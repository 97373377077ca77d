"""servefuzz: find the bugs LLM serving engines show only under concurrent load.

The public API, for engine teams who want servefuzz in their own tests:

    from servefuzz import fuzz, replay, shrink, triage, report, load_finding

Each is documented in `servefuzz.api`. The names are loaded on first use, so that importing
`servefuzz.reference` (the embedded engine, a program apart) does not load the fuzzer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servefuzz._version import __version__

__all__ = ["__version__", "fuzz", "replay", "shrink", "triage", "report", "load_finding", "Finding", "Scenario"]

if TYPE_CHECKING:
    from servefuzz.api import fuzz, replay, report, shrink, triage
    from servefuzz.finding import Finding, load_finding
    from servefuzz.workload import Scenario

_HOMES = {
    "fuzz": "servefuzz.api",
    "replay": "servefuzz.api",
    "shrink": "servefuzz.api",
    "triage": "servefuzz.api",
    "report": "servefuzz.api",
    "load_finding": "servefuzz.finding",
    "Finding": "servefuzz.finding",
    "Scenario": "servefuzz.workload",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'servefuzz' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
