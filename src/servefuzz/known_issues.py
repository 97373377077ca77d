"""The known-issue catalogue: upstream bugs a finding may be, and why it may be them.

The catalogue is data (`data/known_issues.json`): per issue its engine, versions, trigger (in
words, and as machine-matchable `features`), the flags that cure it, symptom, status, link and
component, plus which planted fault of the reference engine models it. `match` holds a finding
(and its triage, when there is one) against every entry and returns the plausible ones, best
first, each with the reasons for and against it in plain words.

    >>> from servefuzz.finding import load_finding                      # doctest: +SKIP
    >>> for m in match(load_finding("findings/finding_00006_1907863917.json")):  # doctest: +SKIP
    ...     print(m.issue.id, m.score, m.reasons[0])
    sglang#22819 9 the planted fault page-boundary-prefix is the reference engine's model of sglang#22819

    >>> issues = load_catalogue()
    >>> len(issues) >= 17, issues[0].id, issues[0].cures[0]
    (True, 'sglang#22819', '--disable-radix-cache')

Features of a finding (`trigger_features`) come from its scenario (prefix lengths against the
page size, bursts, aborts, prompt lengths against the chunked-prefill budget and the pool) and
from the server args it recorded (radix cache, overlap scheduler, CUDA graphs). A feature the
finding cannot show (speculative decoding, an fp8 KV cache) stays in the issue's trigger text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from servefuzz import stats
from servefuzz.anomaly import Verdict
from servefuzz.engines.registry import SPECS, spec_of
from servefuzz.engines.spec import IssueMatch
from servefuzz.finding import Finding, Triage, TriageOutcome
from servefuzz.triggers import FEATURES, load_features

__all__ = [
    "FEATURES",
    "ENGINES",
    "REFERENCE_FAULTS",
    "KnownIssue",
    "Match",
    "load_catalogue",
    "parse_catalogue",
    "trigger_features",
    "match",
    "release_key",
]

# The catalogue's engine keys, one per engine spec that has one.
ENGINES = tuple(s.issue_key for s in SPECS.values() if s.issue_key)

# The reference engine's fault zoo (servefuzz.reference.faults.FAULTS, which the fuzzer does not
# import: the reference engine is a program apart). A test keeps the two lists equal.
REFERENCE_FAULTS = (
    "page-boundary-prefix",
    "overlap-war",
    "stale-padding",
    "chunk-boundary",
    "abort-reuse",
    "evict-in-use",
    "batch-variant-numerics",
    "deterministic-decode-drift",
    "stale-slot-continuation",
    "salt-ignored",
    "shared-sampler-rng",
    "bitmask-row-skip",
    "lora-prefix-shared",
    "lossy-hit-reload",
    "ssm-checkpoint-batch",
    "stale-state-donated",
    "unwritten-state-published",
    "state-n-minus-1",
    "window-ring-stale",
    "window-modulo-after-saturation",
    "router-tie-numerics",
    "host-loadback-stale-pages",
    "host-key-no-salt",
    "host-loadback-race",
    "transfer-region-dedupe",
)

# Weights of the evidence. The engine's own log naming the bug says the most (`log_says`), then a
# cure seen in the triage matrix; the engine (or the planted fault that models the issue) comes
# next; each shared trigger feature adds a little, a specific one (few findings show it) twice as
# much as a common one.
_W_FAULT = 4
_W_LOG = 4
_W_ENGINE = 3
_W_CURE = 3
_W_VERDICT = 2
_W_SPECIFIC = 2
_W_FEATURE = 1
_W_NOT_CURED = 1
# The finding's engine version against the release that fixed the issue: before it, the issue
# may be there; at or after it, only a regression could be it.
_W_VERSION = 2
# The surfaces few issues share (adapters, tenants' salts, seeded draws, constraints) single an
# issue out as much as a page-aligned prefix does: a LoRA finding on llama.cpp with the #26207
# trigger matched nothing while they counted as common features (2026-12-01).
_SPECIFIC = frozenset(
    {"prefix=page-aligned", "prefix=mid-page", "prefix=full", "chunked-prefill", "eviction", "abort", "high-concurrency", "n>1",
     "lora", "cache-salt", "seeded-sampling", "structured-output"}
)
# Engine and verdict class alone fit too many issues: a match also needs specific evidence (the
# planted fault, a specific trigger feature, or a cure) and this much in all.
_MIN_SCORE = _W_ENGINE + _W_VERDICT + _W_FEATURE


@dataclass(frozen=True)
class KnownIssue:
    """One upstream bug (or pull request) of the catalogue.

    `cures` are server flags with their value where it matters (`--chunked-prefill-size -1`;
    a bare `--chunked-prefill-size` stands for any value) or `KEY=VALUE` environment settings;
    `not_cured_by` lists ones reported *not* to remove it. `verdicts` are the finding verdicts
    its symptom shows as; `upstream_for_faults` the reference engine faults that model it.
    `caveats` says what the sources did not verify. `fixed_in` names the first release with
    the fix (`0.5.11`, llama.cpp's `b5123`), where one is known; `versions` says the rest in words.
    `requires` are features without which a finding cannot be it (a batch-invariance bug needs a
    server in its batch-invariant mode: elsewhere the same drift is only numerics).
    `log_says` are lines the engine writes when it is this bug (an exception's message, verbatim):
    a crash finding whose server log holds one is that bug's by its own words.
    """

    id: str
    engine: str
    title: str
    link: str
    status: str
    versions: str
    component: str
    trigger: str
    features: tuple[str, ...]
    cures: tuple[str, ...]
    not_cured_by: tuple[str, ...]
    symptom: str
    verdicts: tuple[str, ...]
    upstream_for_faults: tuple[str, ...] = ()
    related: tuple[str, ...] = ()
    caveats: str = ""
    fixed_in: str = ""
    requires: tuple[str, ...] = ()
    log_says: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("features", "cures", "not_cured_by", "verdicts", "upstream_for_faults", "related", "requires",
                     "log_says"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        problems = [
            *(f"unknown feature {f!r}" for f in (*self.features, *self.requires) if f not in FEATURES),
            *(f"unknown verdict {v!r}" for v in self.verdicts if v not in {x.value for x in Verdict}),
            *(f"unknown fault {f!r}" for f in self.upstream_for_faults if f not in REFERENCE_FAULTS),
        ]
        if self.engine not in ENGINES:
            problems.append(f"unknown engine {self.engine!r}")
        if not self.link.startswith("https://github.com/"):
            problems.append(f"link {self.link!r} is not a GitHub address")
        if not self.verdicts:
            problems.append("no verdicts")
        if self.fixed_in and release_key(self.fixed_in) is None:
            problems.append(f"fixed_in {self.fixed_in!r} is not a release number")
        if problems:
            raise ValueError(f"known issue {self.id}: {'; '.join(problems)}")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> KnownIssue:
        try:
            return cls(**d)
        except TypeError as e:  # a missing or misspelt field
            raise ValueError(f"known issue {d.get('id', '?')}: {e}") from None


@dataclass(frozen=True)
class Match:
    """A known issue a finding may be: a score (higher is likelier) and the reasons, for and
    against, in words a maintainer can check."""

    issue: KnownIssue
    score: int
    reasons: tuple[str, ...]
    against: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The form `Triage.known_issues` stores."""
        i = self.issue
        return {
            "id": i.id,
            "title": i.title,
            "link": i.link,
            "engine": i.engine,
            "status": i.status,
            "score": self.score,
            "reasons": list(self.reasons),
            "against": list(self.against),
        }


@cache
def load_catalogue() -> tuple[KnownIssue, ...]:
    """The packaged catalogue, validated (a broken data file raises ValueError)."""
    text = resources.files("servefuzz").joinpath("data/known_issues.json").read_text(encoding="utf-8")
    return parse_catalogue(json.loads(text))


def parse_catalogue(data: Mapping[str, Any]) -> tuple[KnownIssue, ...]:
    """Issues from the catalogue's JSON form (`{"issues": [...]}`); ValueError on a bad entry."""
    issues = tuple(KnownIssue.from_json(d) for d in data["issues"])
    ids = [i.id for i in issues]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"known issues listed twice: {', '.join(dupes)}")
    return issues


def trigger_features(finding: Finding) -> dict[str, str]:
    """The trigger features `finding` shows, each with the fact that shows it.

    Features about "a diverging request" look at the requests the finding expects to diverge
    (for a crash or hang: the request that failed first), as the finding's signature does.
    """
    head = finding.headline
    involved = finding.expected_diverging if head.verdict.is_divergence else (head.request_id,)
    return {**load_features(finding.scenario, involved, finding.page_size), **_server_features(finding)}


def _server_features(finding: Finding) -> dict[str, str]:
    """Features of the load against the server's limits, and of the server's own settings.

    An arg the server did not report says nothing: only an explicit value counts.
    """
    feats: dict[str, str] = {}
    target = finding.target
    facts = target.facts
    requests = finding.scenario.requests
    budget = facts.chunk_budget
    if budget is not None and requests:  # a finding may come with none
        longest = max(requests, key=lambda r: r.prompt_len)
        if longest.prompt_len > budget:
            feats["chunked-prefill"] = (
                f"{longest.id}'s prompt ({longest.prompt_len} tokens) is longer than the chunked-prefill budget {budget}"
            )
    pool = target.max_total_tokens or facts.pool_tokens
    need = sum((r.prompt_len + r.max_tokens) * r.n for r in requests)
    if pool is not None and 0 < pool < need:
        feats["eviction"] = f"the scenario needs up to {need} tokens of KV, more than the pool's {pool}"
    args = target.server_args
    for shown in spec_of(target.engine).arg_features:  # SGLang's (and the reference engine's) args
        if args.get(shown.key) is shown.value and not (shown.unless_deterministic and facts.deterministic is not None):
            feats[shown.feature] = shown.says
    if facts.prefix_caching:
        feats["prefix-caching"] = "the server ran with prefix caching on"
    if facts.deterministic is not None:
        feats["deterministic"] = f"the server ran with {facts.deterministic}"
    if target.architecture.recurrent:
        feats["recurrent-state"] = f"the served model ({target.architecture.arch or 'unnamed'}) keeps a recurrent state"
    if target.architecture.window is not None:
        feats["sliding-window"] = (f"the served model ({target.architecture.arch or 'unnamed'}) has a "
                                   f"{target.architecture.window}-token sliding window")
    return feats


def match(finding: Finding, triage: Triage | None = None, catalogue: Sequence[KnownIssue] | None = None) -> list[Match]:
    """The known issues `finding` plausibly is, best first (ties by id).

    `triage` defaults to the finding's own. A reference-engine finding matches only the issues
    its planted faults model; a finding from a generic dialect (`openai`) may match any engine's.
    """
    triage = triage if triage is not None else finding.triage
    feats = trigger_features(finding)
    found = [m for issue in (catalogue or load_catalogue()) if (m := _judge(issue, finding, triage, feats))]
    return sorted(found, key=lambda m: (-m.score, m.issue.id))


def _judge(issue: KnownIssue, finding: Finding, triage: Triage | None, feats: Mapping[str, str]) -> Match | None:
    engine = finding.target.engine
    spec = spec_of(engine)
    if any(f not in feats for f in issue.requires):
        return None
    score, reasons, against = 0, [], []
    specific = False
    if spec.issue_match is IssueMatch.FAULTS:
        planted = [f for f in finding.target.faults if f in issue.upstream_for_faults]
        if not planted:
            return None
        score += _W_FAULT
        specific = True
        reasons.append(f"the planted fault {planted[0]} is the reference engine's model of {issue.id}")
    elif spec.issue_match is IssueMatch.ENGINE and spec.issue_key == issue.engine:
        score += _W_ENGINE
        reasons.append(f"engine {engine} matches")
    elif spec.issue_match is not IssueMatch.ANY:
        return None

    # A suspected corruption matches what a corruption matches: the control that would back it
    # changes how sure the verdict is, not which bug it resembles.
    verdict = finding.verdict.backed
    benign = issue.verdicts == (Verdict.NUMERIC_DRIFT.value,)
    # Near-tie issues: benign numerics, or a mode's promise broken by them (the contract family).
    near_ties = set(issue.verdicts) <= {Verdict.NUMERIC_DRIFT.value, Verdict.CONTRACT_VIOLATION.value}
    if verdict is Verdict.NUMERIC_DRIFT and not benign and verdict.value not in issue.verdicts:
        return None  # benign numerics are not a corruption bug
    if verdict is Verdict.CONTRACT_VIOLATION and verdict.value not in issue.verdicts:
        return None  # a near-tie flip under a promise is neither a corruption bug nor benign numerics
    if verdict is Verdict.CORRUPTION and near_ties:
        return None  # a confident flip is not batch numerics
    if verdict.value in issue.verdicts:
        score += _W_VERDICT
        # Few issues are benign numerics or broken promises: either verdict singles them out.
        specific = specific or benign or verdict is Verdict.CONTRACT_VIOLATION
        reasons.append(f"verdict {verdict.value} matches its symptom ({', '.join(issue.verdicts)})")

    version = finding.target.version
    if issue.fixed_in and version and (have := release_key(version)) is not None:
        fix = release_key(issue.fixed_in)
        assert fix is not None  # checked when the catalogue was read
        if have < fix:
            score += _W_VERSION
            reasons.append(f"{engine} {version} predates the fix, first released in {issue.fixed_in}")
        else:
            score -= _W_VERSION
            against.append(f"{engine} {version} already has the fix (released in {issue.fixed_in}): it would be a regression")

    for feature in issue.features:
        if feature in feats:
            score += _W_SPECIFIC if feature in _SPECIFIC else _W_FEATURE
            specific = specific or feature in _SPECIFIC
            reasons.append(feats[feature])

    for outcome in _judged_variants(triage):
        assert triage is not None
        decided = triage.decision(outcome)[0]
        if decided == stats.UNDECIDED:
            continue  # neither a cure nor a recurrence: it says nothing either way
        for cure in issue.cures:
            if _applies(cure, outcome):
                if decided == stats.CURED:
                    score += _W_CURE
                    specific = True
                    reasons.append(f"cured by {cure}, as {issue.id} is")
                else:
                    score -= _W_CURE
                    against.append(f"still reproduces with {cure} ({outcome.rate}), which cures {issue.id}")
        for flag in issue.not_cured_by:
            if _applies(flag, outcome):
                if decided == stats.CURED:
                    score -= _W_CURE
                    against.append(f"cured by {flag}, which does not cure {issue.id}")
                else:
                    score += _W_NOT_CURED
                    reasons.append(f"still reproduces with {flag} ({outcome.rate}), as {issue.id} does")

    if said := _log_says(issue, finding):
        score += _W_LOG
        specific = True
        reasons.append(f"the server's log says {said!r}, as {issue.id}'s does")

    if not specific or score < _MIN_SCORE:
        return None
    return Match(issue, score, tuple(reasons), tuple(against))


def _log_says(issue: KnownIssue, finding: Finding) -> str | None:
    """The first of `issue.log_says` found in what the finding kept of its server's log (the tail
    and traceback a lost server left, `servers.Launched.death`), or None."""
    if not issue.log_says:
        return None
    kept = [str(a.evidence.get(key, "")) for a in finding.anomalies for key in ("traceback", "log_tail")]
    return next((line for line in issue.log_says if any(line in text for text in kept)), None)


_RELEASE = re.compile(r"v?b?(\d+(?:\.\d+)*)(?:\.?post(\d+))?")


def release_key(version: str) -> tuple[tuple[int, ...], int] | None:
    """`version` as a key that sorts releases in order (`0.5.10.post1` < `0.5.11`, `b998` <
    `b5123`), or None for what has no known order: a pre-release, a local build, a commit.

    >>> release_key("0.5.10.post1") < release_key("0.5.11") < release_key("0.5.23")
    True
    >>> release_key("b11434"), release_key("0.6.0rc1"), release_key("0c1e57098")
    (((11434,), 0), None, None)
    """
    m = _RELEASE.fullmatch(version.strip())
    if m is None:
        return None
    return tuple(int(x) for x in m.group(1).split(".")), int(m.group(2) or 0)


def _judged_variants(triage: Triage | None) -> tuple[TriageOutcome, ...]:
    """Variants whose outcome says something: they ran, and the baseline still reproduced."""
    if triage is None or triage.baseline.reproduced == 0:
        return ()
    return tuple(v for v in triage.variants if v.error is None and v.attempts > 0)


def _applies(setting: str, outcome: TriageOutcome) -> bool:
    """Whether a triage variant applied `setting`: `KEY=VALUE` for the environment, else flag
    words (`--attention-backend triton`) found in a row among the variant's flags."""
    if not setting.startswith("-") and "=" in setting:
        key, _, value = setting.partition("=")
        return outcome.env.get(key) == value
    want = setting.split()
    have = [word for flag in outcome.flags for word in flag.replace("=", " ", 1).split()]
    return any(have[i : i + len(want)] == want for i in range(len(have) - len(want) + 1))
