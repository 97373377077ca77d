"""The finding file: one self-contained, versioned JSON document per finding.

A finding holds everything needed to replay and argue about a bug: the scenario (exact token
ids), the target (engine, version, resolved server args), the anomalies with their evidence, the
overall verdict and why, how often it reproduced, and a signature for dedup.

    >>> import tempfile
    >>> from servefuzz.anomaly import Anomaly, Oracle, Verdict
    >>> from servefuzz.workload import RequestSpec, Scenario
    >>> sc = Scenario(seed=7, requests=(RequestSpec("r01", 0.0, (5, 6, 7), max_tokens=4),))
    >>> f = Finding(12, 7, sc, TargetInfo("reference", "http://127.0.0.1:8000", server_args={"api_key": "sk-1"}),
    ...             (Anomaly(Oracle.LIVENESS, Verdict.HANG, "r01", "r01: no answer in time in 1/1 runs"),))
    >>> d = Path(tempfile.mkdtemp())
    >>> path = write_finding(d, f)
    >>> path.name, load_finding(path) == f, load_finding(path).target.server_args
    ('finding_00012_7.json', True, {'api_key': '<redacted>'})

Files are written atomically (a temp file in the same directory, fsynced, then linked into
place) and never replace an existing, different finding. `load_finding` raises `FindingError`
with one line for a missing, truncated, wrong-schema or newer-schema file.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tempfile
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from servefuzz import durable, stats
from servefuzz.anomaly import Anomaly, Promise, Variant, Verdict, deciding, held_to, worst
from servefuzz.engines.registry import deterministic_mode, promise_of
from servefuzz.errors import FindingError
from servefuzz.exercise import Trigger
from servefuzz.stats import Rate
from servefuzz.triggers import load_features, signature_features
from servefuzz.workload import ADAPTER_NAME, Scenario

__all__ = [
    "SCHEMA_VERSION",
    "REDACTED",
    "TargetInfo",
    "Confirmation",
    "TriageOutcome",
    "Triage",
    "BISECT_OUTCOMES",
    "Bisect",
    "BisectStep",
    "Finding",
    "write_finding",
    "derived_name",
    "load_finding",
    "finding_schema",
    "redact_argv",
    "redact_text",
    "public_url",
    "MAX_FINDING_BYTES",
]

SCHEMA_VERSION = 1
REDACTED = "<redacted>"

# Keys whose values are credentials. Matched on whole `_`-separated words so that `max_tokens`
# or `tokenizer` survive while `api_key`, `--api-key`, `hf_token` and `authorization` do not.
# `token` and `key` count only as the last word (`hf_token`, `access_token`, `--key`,
# `ANTHROPIC_KEY`), so ids such as `eos_token_id` stay readable.
_SECRET = re.compile(
    r"(^|_)(api_?key|secrets?|password|passwd|pass|authorization|auth|credentials?|cookie)(_|$)|(^|_)(token|key)$"
)


# What ran in place of the engine's own machinery (a finding file names only these; anything else
# is dropped): servefuzz's stand-in `sgl_kernel`, and Triton's interpreter running SGLang's own
# kernels on a CPU (engines.sglang.INTERPRETED).
KNOWN_STANDINS = frozenset({"sgl_kernel", "triton-interpreter"})
# What a launch preset's server computes on (`launcher.Launch.device`).
DEVICES = frozenset({"cpu", "cuda"})


@dataclass(frozen=True)
class TargetInfo:
    """What a server says about itself, as adapters read it and findings record it.

    `None` where the engine does not tell. `page_size` is the KV page (block) size that
    page-boundary strategies aim at (read from the resolved server args when not given);
    `faults` are the reference engine's planted bugs (empty for real engines). `auth` says that
    requests carried credentials (an API key, headers), never what they were. Credentials are
    redacted on construction (server args, environment, and the URL: no `user:password@`, no
    secret query value), so a finding or a campaign's config.json never holds one.
    """

    engine: str
    base_url: str
    version: str | None = None
    server_args: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    faults: tuple[str, ...] = ()
    page_size: int | None = None
    max_total_tokens: int | None = None
    vocab_size: int | None = None
    eos_token_id: int | None = None
    auth: bool = False
    # The launch preset's feature profile (`engines.PROFILES`) the server ran under, by name;
    # None when servefuzz did not launch it under one (and in findings older than profiles).
    profile: str | None = None
    # The LoRA adapters the server says it serves, by name. A server's word is untrusted: names
    # outside `workload.ADAPTER_NAME` are dropped, so a request can only ever carry a safe one.
    adapters: tuple[str, ...] = ()
    # The stand-in packages servefuzz put on the server's path in place of the engine's own
    # (`sgl_kernel` for SGLang on a CPU host: src/servefuzz/standins), by name; said by
    # servefuzz, never by the server. Empty when the server ran only its own code.
    standins: tuple[str, ...] = ()
    # What the server computed on when servefuzz launched it from a preset ("cpu", "cuda"), so
    # a report rebuilds the right preset's command (`vllm-gpu`, not `vllm-cpu`); "" when unknown.
    device: str = ""
    # Where the served model came from, when servefuzz fetched it (`realmodel.provenance_of`: the
    # package, its version and sha256, the licence, the form and how it was converted); said by
    # servefuzz from the model's folder, never by the server. Empty for any other model.
    model: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", public_url(self.base_url))
        object.__setattr__(self, "model", dict(self.model) if isinstance(self.model, Mapping) else {})
        if self.device not in DEVICES:
            object.__setattr__(self, "device", "")  # a finding file's word, kept only when known
        object.__setattr__(self, "adapters", tuple(dict.fromkeys(
            a for a in self.adapters if isinstance(a, str) and ADAPTER_NAME.fullmatch(a)))[:64])
        object.__setattr__(self, "server_args", _redact(self.server_args))
        object.__setattr__(self, "env", _redact(self.env))
        object.__setattr__(self, "faults", tuple(self.faults))
        object.__setattr__(self, "standins", tuple(s for s in self.standins if s in KNOWN_STANDINS))
        if self.page_size is None:
            object.__setattr__(self, "page_size", _page_size_of(self.server_args))

    def __hash__(self) -> int:
        return hash((self.engine, self.base_url, self.version, self.faults, self.page_size))

    @property
    def deterministic(self) -> str | None:
        """The server's deterministic (batch-invariant) mode, in words, when it ran in one; None
        otherwise. Under it a request's output is promised not to depend on its batch, so even
        a near-tie flip (`numeric-drift`) breaks the engine's own contract.

        >>> TargetInfo("vllm", "http://127.0.0.1:1", env={"VLLM_BATCH_INVARIANT": "1"}).deterministic
        'VLLM_BATCH_INVARIANT=1'
        >>> TargetInfo("sglang", "http://127.0.0.1:1", server_args={"enable_deterministic_inference": True}).deterministic
        '--enable-deterministic-inference'
        >>> TargetInfo("vllm", "http://127.0.0.1:1").deterministic is None
        True
        """
        return deterministic_mode(self.engine, self.server_args, self.env, self.profile)

    @property
    def promise(self) -> Promise | None:
        """What the server's deterministic mode promises, in the engine's own words (the engine
        spec's), when it ran in a mode documented as batch- and cache-invariant; None otherwise.
        A finding holds its near-tie flips to it (`anomaly.held_to`)."""
        return promise_of(self.engine, self.server_args, self.env, self.profile)

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "base_url": self.base_url,
            "version": self.version,
            "server_args": dict(self.server_args),
            "env": dict(self.env),
            "faults": list(self.faults),
            "page_size": self.page_size,
            "max_total_tokens": self.max_total_tokens,
            "vocab_size": self.vocab_size,
            "eos_token_id": self.eos_token_id,
            "auth": self.auth,
            **({"profile": self.profile} if self.profile is not None else {}),
            **({"adapters": list(self.adapters)} if self.adapters else {}),
            **({"standins": list(self.standins)} if self.standins else {}),
            **({"device": self.device} if self.device else {}),
            **({"model": dict(self.model)} if self.model else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TargetInfo:
        return cls(
            engine=d["engine"],
            base_url=d["base_url"],
            version=d.get("version"),
            server_args=dict(d.get("server_args", {})),
            env=dict(d.get("env", {})),
            faults=tuple(d.get("faults", ())),
            page_size=d.get("page_size"),
            max_total_tokens=d.get("max_total_tokens"),
            vocab_size=d.get("vocab_size"),
            eos_token_id=d.get("eos_token_id"),
            auth=bool(d.get("auth", False)),
            profile=d.get("profile"),
            adapters=tuple(d.get("adapters", ())),
            standins=tuple(d.get("standins", ())),
            device=str(d.get("device", "")),
            model=d.get("model") or {},
        )


def _page_size_of(server_args: Mapping[str, Any]) -> int | None:
    for key in ("page_size", "page-size", "block_size", "block-size"):
        value = server_args.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class _Tally:
    """Reproductions counted over attempts (a confirmation, a triage row, a bisection step): the
    one way each prints its rate and interval. The records declare the two fields."""

    reproduced: int
    attempts: int

    @property
    def rate(self) -> str:
        return f"{self.reproduced}/{self.attempts}"

    @property
    def interval(self) -> Rate:
        """The rate with its Wilson interval (`str` prints "8/10 (80%, 95% CI 49-94%)")."""
        return Rate(self.reproduced, self.attempts)


@dataclass(frozen=True)
class Confirmation(_Tally):
    """How a finding held up under replay: reproduced in `reproduced` of `attempts` replays,
    the output variants of each diverging request with counts, which requests were expected
    to diverge and which stayed stable."""

    reproduced: int
    attempts: int
    variants: Mapping[str, tuple[Variant, ...]]
    expected: tuple[str, ...]
    stable: tuple[str, ...]

    def __post_init__(self) -> None:
        if not 0 <= self.reproduced <= self.attempts:
            raise ValueError(f"reproduction rate {self.reproduced}/{self.attempts} is impossible")
        object.__setattr__(self, "variants", {k: tuple(v) for k, v in self.variants.items()})

    def __hash__(self) -> int:
        return hash((self.reproduced, self.attempts, self.expected, self.stable))


    @property
    def decision(self) -> str:
        """What the evidence decides (`stats.decide`, a sequential test with 1% error rates):
        "reproduced", "not reproduced" or "undecided"."""
        return stats.decide(self.reproduced, self.attempts)

    def to_json(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "rate_ci": str(self.interval),  # derived, for readers of the file; recomputed on load
            "decision": self.decision,
            "expected": list(self.expected),
            "stable": list(self.stable),
            "variants": {rid: [v.to_json() for v in vs] for rid, vs in self.variants.items()},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Confirmation:
        reproduced, attempts = (int(x) for x in d["rate"].split("/"))
        return cls(
            reproduced=reproduced,
            attempts=attempts,
            variants={rid: tuple(Variant.from_json(v) for v in vs) for rid, vs in d["variants"].items()},
            expected=tuple(d["expected"]),
            stable=tuple(d["stable"]),
        )


@dataclass(frozen=True)
class TriageOutcome(_Tally):
    """One row of a triage matrix: the finding replayed on a server launched with one variant.

    `flags` and `env` are what the variant changed (the baseline row changes nothing);
    `component` is what a cure by this variant implicates ("radix cache", "overlap scheduler").
    `error` says why the variant could not be judged (the server did not start, ...).
    """

    name: str
    flags: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    component: str = ""
    reproduced: int = 0
    attempts: int = 0
    error: str | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.reproduced <= self.attempts:
            raise ValueError(f"{self.name}: reproduction {self.reproduced}/{self.attempts} is impossible")
        object.__setattr__(self, "flags", tuple(self.flags))
        object.__setattr__(self, "env", _redact(self.env))

    def __hash__(self) -> int:
        return hash((self.name, self.flags, self.component, self.reproduced, self.attempts, self.error))


    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "flags": list(self.flags),
            "env": dict(self.env),
            "component": self.component,
            "rate": self.rate,
            "rate_ci": str(self.interval),  # derived, for readers of the file
            "error": self.error,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TriageOutcome:
        reproduced, attempts = (int(x) for x in d["rate"].split("/"))
        return cls(
            name=d["name"], flags=tuple(d.get("flags", ())), env=dict(d.get("env", {})),
            component=d.get("component", ""), reproduced=reproduced, attempts=attempts, error=d.get("error"),
        )


@dataclass(frozen=True)
class Triage:
    """The flag matrix of a finding: its baseline (unchanged server) and every variant tried,
    plus the known upstream issues it matches, each with the reasons it matches."""

    baseline: TriageOutcome
    variants: tuple[TriageOutcome, ...]
    known_issues: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "variants", tuple(self.variants))
        object.__setattr__(self, "known_issues", tuple(dict(k) for k in self.known_issues))

    def __hash__(self) -> int:
        return hash((self.baseline, self.variants))

    def decision(self, row: TriageOutcome) -> tuple[str, float | None]:
        """What a variant's row says against the baseline (`stats.CureTest`: "cured" only when
        0/n is significantly below the baseline's rate, p < 0.01), with its p-value; a row
        that could not run decides nothing."""
        if row.error is not None or row.attempts == 0 or self.baseline.attempts == 0:
            return stats.UNDECIDED, None
        test = stats.CureTest()
        return test.decide(row.interval, self.baseline.interval), test.p_value(row.interval, self.baseline.interval)

    @property
    def cures(self) -> tuple[TriageOutcome, ...]:
        """The variants that removed the finding, significantly (see `decision`)."""
        return tuple(v for v in self.variants if self.decision(v)[0] == stats.CURED)

    @property
    def implicated(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v.component for v in self.cures if v.component))

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline.to_json(),
            "variants": [v.to_json() for v in self.variants],
            "known_issues": [dict(k) for k in self.known_issues],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Triage:
        return cls(
            baseline=TriageOutcome.from_json(d["baseline"]),
            variants=tuple(TriageOutcome.from_json(v) for v in d["variants"]),
            known_issues=tuple(d.get("known_issues", ())),
        )


@dataclass(frozen=True)
class BisectStep(_Tally):
    """One version a bisection tried: the finding replayed on a server of that version until the
    sequential test decided (`stats.decide`), and what that made the version: `outcome` "good"
    (not reproduced), "bad" (reproduced) or "undecided" (the test reached its cap, or the version
    could not be judged: `error` says why, a build or start that failed). `reported`: the version
    the server itself reported (llama-server's build_info), None where it said none.

        >>> BisectStep("b9093", "bad", 2, 2, reported="b9093-unknown").rate
        '2/2'
    """

    version: str
    outcome: str
    reproduced: int = 0
    attempts: int = 0
    reported: str | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if self.outcome not in BISECT_OUTCOMES:
            raise ValueError(f"{self.version}: outcome {self.outcome!r} is not one of {', '.join(BISECT_OUTCOMES)}")
        if not 0 <= self.reproduced <= self.attempts:
            raise ValueError(f"{self.version}: reproduction {self.reproduced}/{self.attempts} is impossible")


    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "outcome": self.outcome, "rate": self.rate,
                "rate_ci": str(self.interval), "reported": self.reported, "error": self.error}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BisectStep:
        reproduced, attempts = (int(x) for x in str(d["rate"]).split("/"))
        reported, error = d.get("reported"), d.get("error")
        return cls(str(d["version"]), str(d["outcome"]), reproduced, attempts,
                   reported=None if reported is None else str(reported), error=None if error is None else str(error))


# What a bisection makes of a version (`BisectStep.outcome`).
BISECT_OUTCOMES = ("good", "bad", "undecided")


@dataclass(frozen=True)
class Bisect:
    """Which version a finding came in with (`servefuzz bisect`, `servefuzz.bisection`): the
    preset, the range asked (`A..B`), every step in the order tried, the last good and the first
    bad version found (None where there is none: present at the oldest version, or not at the
    newest), the conclusion in words, and whether the search was over (False: cut short by
    `--max-versions`, its last good and first bad only the bounds reached so far)."""

    preset: str
    versions: str
    steps: tuple[BisectStep, ...]
    last_good: str | None
    first_bad: str | None
    conclusion: str
    finished: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))

    def step(self, version: str | None) -> BisectStep | None:
        """The step that tried `version` (None: not tried)."""
        return next((s for s in self.steps if s.version == version), None)

    def to_json(self) -> dict[str, Any]:
        return {"preset": self.preset, "versions": self.versions, "steps": [s.to_json() for s in self.steps],
                "last_good": self.last_good, "first_bad": self.first_bad, "conclusion": self.conclusion,
                "finished": self.finished}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Bisect:
        good, bad = d.get("last_good"), d.get("first_bad")
        return cls(str(d["preset"]), str(d["versions"]), tuple(BisectStep.from_json(s) for s in d["steps"]),
                   None if good is None else str(good), None if bad is None else str(bad), str(d["conclusion"]),
                   finished=d.get("finished", True) is True)


@dataclass(frozen=True)
class Finding:
    """A finding: what was sent, to what, what went wrong and how sure we are.

    Its anomalies are held to the target's promise on construction (`anomaly.held_to`): on a
    server whose mode promises batch- and cache-invariant answers, a near-tie flip is a
    `contract-violation`, wherever the finding was made (a campaign, a replay, a file written
    before the tier existed); elsewhere nothing changes.
    """

    iteration: int
    seed: int
    scenario: Scenario
    target: TargetInfo
    anomalies: tuple[Anomaly, ...]
    confirmation: Confirmation | None = None
    notes: tuple[str, ...] = ()
    triage: Triage | None = None
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    # Which version it came in with (`servefuzz bisect`); None until bisected. Written only when
    # set, so files from before bisection load and write as they were.
    bisect: Bisect | None = None
    # The evidence that its trigger happened in the execution that showed it (`exercise.triggered`:
    # for a cache-state finding, the cached tokens of the warm and primed runs). Written only when
    # read, so files from before it load and write as they were.
    triggered: tuple[Trigger, ...] = ()

    def __post_init__(self) -> None:
        if not self.anomalies:
            raise ValueError("a finding needs at least one anomaly")
        if self.iteration < 0:
            raise ValueError(f"iteration must be >= 0, got {self.iteration}")
        object.__setattr__(self, "anomalies", held_to(self.anomalies, self.target.promise))
        object.__setattr__(self, "notes", tuple(self.notes))
        object.__setattr__(self, "triggered", tuple(self.triggered))

    @property
    def filename(self) -> str:
        return f"finding_{self.iteration:05d}_{self.seed}.json"

    @property
    def headline(self) -> Anomaly:
        """The anomaly that decides the verdict: the most severe, first found among equals."""
        return min(self.anomalies, key=lambda a: a.verdict.rank)

    @property
    def verdict(self) -> Verdict:
        v = worst(a.verdict for a in self.anomalies)
        assert v is not None  # __post_init__ guarantees anomalies
        return v

    @property
    def why(self) -> str:
        """The reason for the verdict: the deciding divergence's reason, or the anomaly's summary."""
        head = self.headline
        d = deciding(head.divergences)
        return d.reason if d is not None else head.summary

    @property
    def expected_diverging(self) -> tuple[str, ...]:
        """Requests a replay should see diverge: the confirmed ones, else those with a divergence."""
        if self.confirmation is not None:
            return self.confirmation.expected
        ids = (a.request_id for a in self.anomalies if a.verdict.is_divergence)
        return tuple(dict.fromkeys(ids))

    @property
    def page_size(self) -> int | None:
        """The KV page size the finding was made with: the server's, else the scenario's."""
        page = self.target.page_size or self.scenario.meta.get("page_size")
        return page if isinstance(page, int) and page > 0 else None

    @property
    def signature(self) -> str:
        """A dedup key: engine, oracle and verdict of the headline anomaly, and the trigger
        features (`servefuzz.triggers.SIGNATURE`) of the requests involved: their prefix length
        against the page size, n > 1, streaming, aborts elsewhere in the scenario. The known-issue
        matcher reads the same features.

        Two findings with one signature are most likely one bug; the campaign keeps the first.
        A suspected corruption keys as a corruption (`Verdict.backed`): a control changes how
        sure the verdict is, not which bug it is.
        """
        head = self.headline
        involved = self.expected_diverging if head.verdict.is_divergence else (head.request_id,)
        features = signature_features(load_features(self.scenario, involved, self.page_size))
        return ":".join([self.target.engine, head.oracle.value, head.verdict.backed.value, ",".join(features) or "-"])

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "iteration": self.iteration,
            "seed": self.seed,
            "created_at": self.created_at,
            # Derived, stored for readers of the file (jq, other tools); recomputed on load.
            "verdict": self.verdict.value,
            "verdict_reason": self.why,
            "signature": self.signature,
            "target": self.target.to_json(),
            "scenario": self.scenario.to_json(),
            "anomalies": [a.to_json() for a in self.anomalies],
            "confirmation": None if self.confirmation is None else self.confirmation.to_json(),
            "notes": list(self.notes),
            "triage": None if self.triage is None else self.triage.to_json(),
            **({"bisect": self.bisect.to_json()} if self.bisect is not None else {}),
            **({"triggered": [t.to_json() for t in self.triggered]} if self.triggered else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Finding:
        conf = d.get("confirmation")
        return cls(
            iteration=int(d["iteration"]),
            seed=int(d["seed"]),
            created_at=str(d["created_at"]),
            scenario=Scenario.from_json(d["scenario"]),
            target=TargetInfo.from_json(d["target"]),
            anomalies=tuple(Anomaly.from_json(a) for a in d["anomalies"]),
            confirmation=None if conf is None else Confirmation.from_json(conf),
            notes=tuple(d.get("notes", ())),
            triage=None if d.get("triage") is None else Triage.from_json(d["triage"]),
            bisect=None if d.get("bisect") is None else Bisect.from_json(d["bisect"]),
            triggered=tuple(Trigger.from_json(t) for t in d.get("triggered", ())),
        )


def write_finding(directory: Path | str, finding: Finding, *, name: str | None = None, replace: bool = False) -> Path:
    """Write `finding` as `<directory>/finding_<iteration:05d>_<seed>.json`; return its path.

    Atomic: readers see the whole file or none. The file is linked into place rather than
    renamed because a link fails when the name exists, so a finding that appeared meanwhile is
    never replaced. Writing the same finding again (up to `created_at`) returns the existing
    path; a *different* finding under the same name raises FindingError and leaves the old one.

    `name` writes under another file name (shrink and triage write `..._min.json` and
    `..._triaged.json` beside the original); `replace=True` is for such derived files, which a
    later run refreshes: the new file is renamed over the old one, still atomically.
    """
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if durable.is_disk_full(e):  # the machine's state, not a bad finding: its own line and exit code
            raise durable.disk_full(directory) from None
        raise FindingError(f"{directory}: cannot create the findings directory: {e.strerror}") from None
    name = name or finding.filename
    path = directory / name
    if path.exists() and not replace:
        return _keep_existing(path, finding)
    data = (json.dumps(finding.to_json(), indent=2) + "\n").encode("utf-8")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    except OSError as e:
        if durable.is_disk_full(e):
            raise durable.disk_full(directory) from None
        raise FindingError(f"{directory}: cannot write a finding there: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            if replace:
                os.replace(tmp, path)
            else:
                os.link(tmp, path)
        except FileExistsError:
            return _keep_existing(path, finding)
        except OSError:  # a filesystem without hard links: rename, having checked the name is free
            if path.exists():
                return _keep_existing(path, finding)
            os.replace(tmp, path)
        durable.fsync_dir(directory)
    except OSError as e:
        if durable.is_disk_full(e):
            raise durable.disk_full(path) from None
        raise FindingError(f"{path}: cannot write: {e.strerror or e}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


# The largest finding file read: a scenario of a thousand 4,096-token prompts is about 30 MB.
MAX_FINDING_BYTES = 64 << 20
# The deepest nesting a finding has is about six (target, server_args, a nested arg); anything
# far deeper is not a finding, and would exhaust recursion in the validator.
_MAX_DEPTH = 48


def derived_name(path: Path, kind: str) -> str:
    """The file name for what `kind` (shrink's "min", triage's "triaged") makes of the finding
    at `path`, beside it. Made from a file of its own kind, it takes the next number, so the
    finding it was made from is never written over:

    >>> derived_name(Path("finding_00003_123.json"), "min")
    'finding_00003_123_min.json'
    >>> derived_name(Path("finding_00003_123_min.json"), "min")
    'finding_00003_123_min2.json'
    >>> derived_name(Path("finding_00003_123_min2.json"), "min")
    'finding_00003_123_min3.json'
    >>> derived_name(Path("finding_00003_123_min.json"), "triaged")
    'finding_00003_123_min_triaged.json'
    """
    made = re.fullmatch(rf"(.*)_{re.escape(kind)}(\d*)", path.stem)
    if made is None:
        return f"{path.stem}_{kind}.json"
    return f"{made[1]}_{kind}{int(made[2] or 1) + 1}.json"


def load_finding(path: Path | str) -> Finding:
    """Read and validate a finding file; any problem is a FindingError with one line.

    The file comes from anyone, and what it holds is replayed against servers and relaunched, so
    it is checked before anything runs: a regular file (a FIFO, a device or a directory is
    refused without blocking on it), at most `MAX_FINDING_BYTES`, UTF-8 JSON with finite numbers
    only (no NaN or Infinity, no float that overflows), integers within Python's 4,300 digits,
    nesting no deeper than a finding's, and then the schema's ranges (offsets and cancel times
    0..1 h, max_tokens and n positive and bounded, token ids 0..2**31-1, a non-empty scenario).
    """
    path = Path(path)
    text = _read_regular(path)
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as e:
        raise FindingError(
            f"{path}: not valid JSON (truncated or damaged?): {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    except RecursionError:
        raise FindingError(f"{path}: not a finding (JSON nested too deeply)") from None
    except ValueError as e:  # an integer past 4,300 digits, NaN, Infinity, an overflowing float
        raise FindingError(f"{path}: not a finding ({str(e).split(';')[0]})") from None
    if _too_deep(data, _MAX_DEPTH):
        raise FindingError(f"{path}: not a finding (JSON nested deeper than {_MAX_DEPTH} levels)")
    if not isinstance(data, dict) or "schema_version" not in data:
        raise FindingError(f"{path}: not a servefuzz finding (no schema_version)")
    version = data["schema_version"]
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise FindingError(
            f"{path}: schema_version {version} was written by a newer servefuzz "
            f"(this one reads up to {SCHEMA_VERSION}); upgrade servefuzz to read it"
        )
    try:
        error = jsonschema.exceptions.best_match(_validator().iter_errors(data))
    except (RecursionError, ValueError) as e:
        raise FindingError(f"{path}: does not match the finding schema ({type(e).__name__})") from None
    if error is not None:
        message = " ".join(error.message.split())
        message = message if len(message) <= 160 else message[:157] + "..."
        where = error.json_path if len(error.json_path) <= 120 else error.json_path[:117] + "..."
        raise FindingError(f"{path}: does not match the finding schema at {where}: {message}")
    try:
        return Finding.from_json(data)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, OverflowError, RecursionError) as e:
        reason = " ".join(str(e).split())
        raise FindingError(f"{path}: inconsistent finding: {reason[:200]}") from None


def _read_regular(path: Path) -> str:
    """The text of `path`, if it is a regular file of at most MAX_FINDING_BYTES.

    Checked with stat before opening, and opened non-blocking: opening a FIFO for reading
    would otherwise wait for a writer forever. The descriptor is checked again (the name may
    have been swapped between the two calls).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FindingError(f"{path}: no such finding file") from None
    except OSError as e:
        raise FindingError(f"{path}: cannot read: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise FindingError(f"{path}: is a directory, not a finding file")
    if not stat.S_ISREG(st.st_mode):
        raise FindingError(f"{path}: not a regular file (a pipe, socket or device), so not a finding")
    if st.st_size > MAX_FINDING_BYTES:
        raise FindingError(f"{path}: {st.st_size} bytes, larger than any finding ({MAX_FINDING_BYTES >> 20} MiB at most)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise FindingError(f"{path}: cannot read: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise FindingError(f"{path}: not a regular file (a pipe, socket or device), so not a finding")
        try:
            raw = f.read(MAX_FINDING_BYTES + 1)
        except OSError as e:
            raise FindingError(f"{path}: cannot read: {e.strerror}") from None
    if len(raw) > MAX_FINDING_BYTES:
        raise FindingError(f"{path}: larger than any finding ({MAX_FINDING_BYTES >> 20} MiB at most)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FindingError(f"{path}: not a text file, so not a finding") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a finding may hold")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _too_deep(value: Any, limit: int) -> bool:
    """Whether JSON `value` nests deeper than `limit` (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


@cache
def finding_schema() -> dict[str, Any]:
    """The packaged JSON Schema of finding files (schema_version 1)."""
    text = resources.files("servefuzz").joinpath("data/finding.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator() -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(finding_schema())


def _keep_existing(path: Path, finding: Finding) -> Path:
    try:
        existing = load_finding(path)
    except FindingError as e:
        raise FindingError(f"{path}: exists and is unreadable, so it was left alone ({e})") from None
    if _comparable(existing) != _comparable(finding):
        raise FindingError(f"{path}: a different finding already has this name; it was left alone")
    return path


def _comparable(f: Finding) -> dict[str, Any]:
    # Through JSON, so that tuples and lists compare equal; the write time does not matter.
    d: dict[str, Any] = json.loads(json.dumps(f.to_json()))
    del d["created_at"]
    return d


def _redact(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: REDACTED if _is_secret(str(k)) else _redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return _redact_argv(value)
    if isinstance(value, str):
        return redact_text(value)
    return value


# A name that holds a credential, in free text: `token`, `key` and the like as its last word
# (`HF_TOKEN`, `OPENAI_API_KEY`, `--api-key`), `secret` anywhere (`CLIENT_SECRET_ID`).
_SECRET_WORD = (
    r"(?:[\w-]*[_-])?"
    r"(?:(?:api[_-]?key|key|token|password|passwd|authorization|credentials?|cookie)(?![\w-])|secrets?[\w-]*)"
)
# The same credentials in free text (a server's log): a flag and its value, a `key: value` or
# `key=value` pair (quoted or not), an HTTP bearer or basic token, or a URL's `user:password@`.
_SECRET_TEXT = re.compile(
    rf"(?i)(?P<flag>(?<![\w-])--{_SECRET_WORD}(?:=|\s+))(?P<fv>[^\s\"',}}]+)"
    rf"|(?P<key>(?<![\w-])[\"']?{_SECRET_WORD}[\"']?\s*[:=]\s*[\"']?)(?P<kv>(?:(?:Bearer|Basic)\s+)?[^\s\"',}}]+)"
    r"|(?P<bearer>\b(?:Bearer|Basic)\s+)(?P<bv>[^\s\"',}]+)"
    r"|(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/\s@\"'<>]+)@"
)


def redact_text(text: str) -> str:
    """`text` with credential values replaced, for logs, argv words and URLs that get stored.

    >>> redact_text("args: {'api_key': 'sk-1', 'max_tokens': 8} --api-key sk-2 eos_token_id=2")
    "args: {'api_key': '<redacted>', 'max_tokens': 8} --api-key <redacted> eos_token_id=2"
    >>> redact_text("HF_TOKEN=hf_1 OPENAI_API_KEY=sk-3 url=http://bob:pw@h:1/x Authorization: Bearer t")
    'HF_TOKEN=<redacted> OPENAI_API_KEY=<redacted> url=http://<redacted>@h:1/x Authorization: <redacted>'
    """

    def hide(m: re.Match[str]) -> str:
        if m.group("scheme"):
            return m.group("scheme") + REDACTED + "@"
        prefix = m.group("flag") or m.group("key") or m.group("bearer")
        return prefix + REDACTED

    return _SECRET_TEXT.sub(hide, text)


def public_url(url: str) -> str:
    """`url` without credentials: no `user:password@`, and the value of a secret query
    parameter redacted. What TargetInfo (so every finding and config.json) stores.

    >>> public_url("https://bob:pw@example.com:8443/v1?api_key=sk-1&x=2")
    'https://example.com:8443/v1?api_key=<redacted>&x=2'
    """
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return redact_text(url)
    netloc = parts.netloc.rpartition("@")[2]
    query = "&".join(
        f"{name}={REDACTED}" if eq and _is_secret(urllib.parse.unquote(name)) else f"{name}{eq}{value}"
        for name, eq, value in (item.partition("=") for item in parts.query.split("&") if item)
    )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_argv(items: Sequence[Any]) -> list[Any]:
    """`items` with credentials redacted in every form an argv holds them.

    >>> redact_argv(["serve", "--api-key", "sk-1", "--token=abc", "--key", "k", "--port", "80"])
    ['serve', '--api-key', '<redacted>', '--token=<redacted>', '--key', '<redacted>', '--port', '80']
    >>> redact_argv(["env", "HF_TOKEN=hf1", "MY_SECRET=x", "A=1", "-H", "X-Key: v", "http://u:p@h"])
    ['env', 'HF_TOKEN=<redacted>', 'MY_SECRET=<redacted>', 'A=1', '-H', 'X-Key: <redacted>', 'http://<redacted>@h']
    """
    return _redact_argv(items)


# Flags whose value is a whole HTTP header (`curl -H`, servefuzz's own `--header`): the name
# stays readable, the value goes, whatever the header is called.
_HEADER_FLAGS = ("--header", "-H")
_ENV_WORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)


def _redact_argv(items: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    hide_next = header_next = False
    for item in items:
        if hide_next or header_next:
            out.append(_redact_header(item) if header_next else REDACTED)
            hide_next = header_next = False
        elif isinstance(item, str) and item.startswith("-"):
            name, eq, value = item.partition("=")
            if name in _HEADER_FLAGS:
                out.append(f"{name}={_redact_header(value)}" if eq else item)
                header_next = not eq
            elif _is_secret(name):
                out.append(f"{name}={REDACTED}" if eq else item)
                hide_next = not eq
            else:
                out.append(redact_text(item))
        elif isinstance(item, str) and (env := _ENV_WORD.fullmatch(item)) and _is_secret(env.group(1)):
            out.append(f"{env.group(1)}={REDACTED}")  # `HF_TOKEN=...` before a command
        else:
            out.append(_redact(item))
    return out


def _redact_header(value: Any) -> Any:
    if not isinstance(value, str):
        return REDACTED
    name, colon, _ = value.partition(":")
    return f"{name}: {REDACTED}" if colon else REDACTED


def _is_secret(key: str) -> bool:
    return bool(_SECRET.search(key.strip("-").lower().replace("-", "_")))
