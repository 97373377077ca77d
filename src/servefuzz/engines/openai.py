"""The plain OpenAI completions dialect, which many engines speak: no flush, salts or constraints."""

from __future__ import annotations

from servefuzz.engines.spec import EngineSpec, IssueMatch

__all__ = ["GENERIC", "SPEC"]

SPEC = EngineSpec("openai", default_port=8000, issue_match=IssueMatch.ANY)

# An engine servefuzz has no spec of: spoken to as openai, matched to no known issue.
GENERIC = EngineSpec("", default_port=8000, issue_match=IssueMatch.NONE)
