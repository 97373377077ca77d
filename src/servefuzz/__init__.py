"""servefuzz: find the bugs LLM serving engines show only under concurrent load.

The public API, for engine teams who want servefuzz in their own tests (`__all__` is all of it):

    from servefuzz import fuzz, replay, shrink, triage, bisect, report, load_finding

- the commands as functions, keyword arguments only, each documented in `servefuzz.api`:
  `fuzz` (-> `CampaignResult`; its options are also a `FuzzOptions`, its progress a
  `CampaignState`), `replay` (-> `ReplayResult`), `shrink` (-> `Shrunk`), `triage` (-> the
  `Finding` with its matrix; each row a `TriageOutcome`), `bisect` (-> the `Finding` with the
  versions it came in with), `report` (-> `ReportPaths`), and
  `load_finding` (a finding file -> `Finding`);
- the records they speak of: `Finding`, its `Scenario`, and its `Verdict`;
- the errors they raise: `ServefuzzError`, the root (catch it to catch every failure of
  servefuzz itself, never a server's misbehaviour, which is a finding), and its subclasses
  `UsageError` (bad input), `FindingError` (a finding file that cannot be read),
  `TargetError` (a server that cannot be used), `LaunchError` (a server servefuzz started
  that did not come up), `DiskFullError` (a full disk, what was written kept), `InstallError`
  (an engine version, or a real model's pinned wheel, that could not be installed into the cache);
- `__version__`.

The names are loaded on first use, so that importing `servefuzz.reference` (the embedded
engine, a program apart) does not load the fuzzer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servefuzz._version import __version__

__all__ = [
    "__version__",
    # the entry points
    "fuzz",
    "replay",
    "shrink",
    "triage",
    "bisect",
    "report",
    "load_finding",
    # what they take and return
    "FuzzOptions",
    "CampaignState",
    "CampaignResult",
    "ReplayResult",
    "Shrunk",
    "TriageOutcome",
    "ReportPaths",
    "Finding",
    "Scenario",
    "Verdict",
    # what they raise
    "ServefuzzError",
    "UsageError",
    "FindingError",
    "TargetError",
    "LaunchError",
    "DiskFullError",
    "InstallError",
]

if TYPE_CHECKING:
    from servefuzz.anomaly import Verdict
    from servefuzz.api import FuzzOptions, bisect, fuzz, replay, report, shrink, triage
    from servefuzz.campaign.records import CampaignResult, CampaignState
    from servefuzz.errors import (
        DiskFullError,
        FindingError,
        InstallError,
        LaunchError,
        ServefuzzError,
        TargetError,
        UsageError,
    )
    from servefuzz.finding import Finding, TriageOutcome, load_finding
    from servefuzz.replay_report import ReplayResult
    from servefuzz.reports import ReportPaths
    from servefuzz.shrinker import Shrunk
    from servefuzz.workload import Scenario

# Where each public name is defined (the TYPE_CHECKING imports above say the same to mypy;
# tests/test_public_api.py holds the two and __all__ together).
_HOMES = {
    "fuzz": "servefuzz.api",
    "replay": "servefuzz.api",
    "shrink": "servefuzz.api",
    "triage": "servefuzz.api",
    "bisect": "servefuzz.api",
    "report": "servefuzz.api",
    "load_finding": "servefuzz.finding",
    "FuzzOptions": "servefuzz.api",
    "CampaignState": "servefuzz.campaign.records",
    "CampaignResult": "servefuzz.campaign.records",
    "ReplayResult": "servefuzz.replay_report",
    "Shrunk": "servefuzz.shrinker",
    "TriageOutcome": "servefuzz.finding",
    "ReportPaths": "servefuzz.reports",
    "Finding": "servefuzz.finding",
    "Scenario": "servefuzz.workload",
    "Verdict": "servefuzz.anomaly",
    "ServefuzzError": "servefuzz.errors",
    "UsageError": "servefuzz.errors",
    "FindingError": "servefuzz.errors",
    "TargetError": "servefuzz.errors",
    "LaunchError": "servefuzz.errors",
    "DiskFullError": "servefuzz.errors",
    "InstallError": "servefuzz.errors",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'servefuzz' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
