"""The finding file: one self-contained, versioned JSON document per finding.

A finding holds everything needed to replay and argue about a bug: the scenario (exact token
ids), the target (engine, version, resolved server args), the anomalies with their evidence, the
overall verdict and why, how often it reproduced, and a signature for dedup.

    >>> import tempfile
    >>> from servefuzz.server_facts import TargetInfo
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from servefuzz import durable, stats
from servefuzz.anomaly import Anomaly, Variant, Verdict, deciding, held_to, worst
from servefuzz.errors import FindingError
from servefuzz.exercise import Trigger
from servefuzz.server_facts import TargetInfo, redact
from servefuzz.stats import Rate
from servefuzz.triggers import load_features, signature_features
from servefuzz.workload import Scenario

__all__ = [
    "SCHEMA_VERSION",
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
    "MAX_FINDING_BYTES",
]

SCHEMA_VERSION = 1

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
        object.__setattr__(self, "env", redact(self.env))

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
