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
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from servefuzz.anomaly import Anomaly, Variant, Verdict, worst
from servefuzz.errors import FindingError
from servefuzz.workload import Scenario

__all__ = [
    "SCHEMA_VERSION",
    "REDACTED",
    "TargetInfo",
    "Confirmation",
    "TriageOutcome",
    "Triage",
    "Finding",
    "write_finding",
    "load_finding",
    "finding_schema",
    "redact_argv",
    "redact_text",
]

SCHEMA_VERSION = 1
REDACTED = "<redacted>"

# Keys whose values are credentials. Matched on whole `_`-separated words so that `max_tokens`
# or `tokenizer` survive while `api_key`, `--api-key`, `hf_token` and `authorization` do not.
# `token` counts only as the last word (`hf_token`, `access_token`), so ids such as
# `eos_token_id` stay readable.
_SECRET = re.compile(
    r"(^|_)(api_?key|secret|password|passwd|authorization|auth|credentials?|cookie)(_|$)|(^|_)token$"
)


@dataclass(frozen=True)
class TargetInfo:
    """What a server says about itself, as adapters read it and findings record it.

    `None` where the engine does not tell. `page_size` is the KV page (block) size that
    page-boundary strategies aim at (read from the resolved server args when not given);
    `faults` are the reference engine's planted bugs (empty for real engines). Credentials are
    redacted on construction, so a finding never holds one, in memory or on disk.
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "server_args", _redact(self.server_args))
        object.__setattr__(self, "env", _redact(self.env))
        object.__setattr__(self, "faults", tuple(self.faults))
        if self.page_size is None:
            object.__setattr__(self, "page_size", _page_size_of(self.server_args))

    def __hash__(self) -> int:
        return hash((self.engine, self.base_url, self.version, self.faults, self.page_size))

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
        )


def _page_size_of(server_args: Mapping[str, Any]) -> int | None:
    for key in ("page_size", "page-size", "block_size", "block-size"):
        value = server_args.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


@dataclass(frozen=True)
class Confirmation:
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
    def rate(self) -> str:
        return f"{self.reproduced}/{self.attempts}"

    def to_json(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
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
class TriageOutcome:
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

    @property
    def rate(self) -> str:
        return f"{self.reproduced}/{self.attempts}"

    @property
    def cured(self) -> bool:
        """The variant ran and the finding never came back under it."""
        return self.error is None and self.attempts > 0 and self.reproduced == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "flags": list(self.flags),
            "env": dict(self.env),
            "component": self.component,
            "rate": self.rate,
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

    @property
    def cures(self) -> tuple[TriageOutcome, ...]:
        """The variants that removed the finding, when the baseline still shows it."""
        if self.baseline.reproduced == 0:
            return ()
        return tuple(v for v in self.variants if v.cured)

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
class Finding:
    """A finding: what was sent, to what, what went wrong and how sure we are."""

    iteration: int
    seed: int
    scenario: Scenario
    target: TargetInfo
    anomalies: tuple[Anomaly, ...]
    confirmation: Confirmation | None = None
    notes: tuple[str, ...] = ()
    triage: Triage | None = None
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def __post_init__(self) -> None:
        if not self.anomalies:
            raise ValueError("a finding needs at least one anomaly")
        if self.iteration < 0:
            raise ValueError(f"iteration must be >= 0, got {self.iteration}")
        object.__setattr__(self, "anomalies", tuple(self.anomalies))
        object.__setattr__(self, "notes", tuple(self.notes))

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
        deciding = [d for d in head.divergences if d.verdict is head.verdict]
        return deciding[0].reason if deciding else head.summary

    @property
    def expected_diverging(self) -> tuple[str, ...]:
        """Requests a replay should see diverge: the confirmed ones, else those with a divergence."""
        if self.confirmation is not None:
            return self.confirmation.expected
        ids = (a.request_id for a in self.anomalies if a.verdict.is_divergence)
        return tuple(dict.fromkeys(ids))

    @property
    def signature(self) -> str:
        """A dedup key: engine, oracle and verdict of the headline anomaly, and trigger features
        of the requests involved (their prefix length against the page size, n > 1, streaming,
        aborts elsewhere in the scenario).

        Two findings with one signature are most likely one bug; the campaign keeps the first.
        """
        head = self.headline
        specs = self.scenario.by_id()
        involved = self.expected_diverging if head.verdict.is_divergence else (head.request_id,)
        page = self.target.page_size or self.scenario.meta.get("page_size")
        features: set[str] = set()
        for rid in involved:
            spec = specs.get(rid)
            if spec is None:
                continue
            if spec.prefix_len == 0:
                features.add("prefix=none")
            elif not isinstance(page, int) or page <= 0:
                features.add("prefix=shared")
            else:
                features.add("prefix=page-aligned" if spec.prefix_len % page == 0 else "prefix=mid-page")
            if spec.n > 1:
                features.add("n>1")
            if spec.stream:
                features.add("stream")
        if any(r.cancelled for r in self.scenario.requests):
            features.add("aborts")
        return ":".join([self.target.engine, head.oracle.value, head.verdict.value, ",".join(sorted(features)) or "-"])

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
        raise FindingError(f"{directory}: cannot create the findings directory: {e.strerror}") from None
    name = name or finding.filename
    path = directory / name
    if path.exists() and not replace:
        return _keep_existing(path, finding)
    data = (json.dumps(finding.to_json(), indent=2) + "\n").encode("utf-8")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    except OSError as e:
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
        _fsync_dir(directory)
    except OSError as e:
        raise FindingError(f"{path}: cannot write: {e.strerror or e}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def load_finding(path: Path | str) -> Finding:
    """Read and validate a finding file; any problem is a FindingError with one line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FindingError(f"{path}: no such finding file") from None
    except IsADirectoryError:
        raise FindingError(f"{path}: is a directory, not a finding file") from None
    except UnicodeDecodeError:
        raise FindingError(f"{path}: not a text file, so not a finding") from None
    except OSError as e:
        raise FindingError(f"{path}: cannot read: {e.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise FindingError(
            f"{path}: not valid JSON (truncated or damaged?): {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise FindingError(f"{path}: not a servefuzz finding (no schema_version)")
    version = data["schema_version"]
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise FindingError(
            f"{path}: schema_version {version} was written by a newer servefuzz "
            f"(this one reads up to {SCHEMA_VERSION}); upgrade servefuzz to read it"
        )
    error = jsonschema.exceptions.best_match(_validator().iter_errors(data))
    if error is not None:
        message = " ".join(error.message.split())
        message = message if len(message) <= 160 else message[:157] + "..."
        raise FindingError(f"{path}: does not match the finding schema at {error.json_path}: {message}")
    try:
        return Finding.from_json(data)
    except (ValueError, KeyError, TypeError) as e:
        raise FindingError(f"{path}: inconsistent finding: {' '.join(str(e).split())}") from None


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


def _fsync_dir(directory: Path) -> None:
    # The new name is durable only once the directory entry is on disk.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _redact(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: REDACTED if _is_secret(str(k)) else _redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return _redact_argv(value)
    return value


# The same credentials in free text (a server's log): a flag and its value, a `key: value` or
# `key=value` pair (quoted or not), or an HTTP bearer token.
_SECRET_WORD = r"[\w-]*(?:api[_-]?key|secret|password|passwd|authorization|credentials?|cookie|token)(?![\w])"
_SECRET_TEXT = re.compile(
    rf"(?i)(?P<flag>--{_SECRET_WORD}(?:=|\s+))(?P<fv>[^\s\"',}}]+)"
    rf"|(?P<key>[\"']?{_SECRET_WORD}[\"']?\s*[:=]\s*[\"']?)(?P<kv>(?:Bearer\s+)?[^\s\"',}}]+)"
    r"|(?P<bearer>\bBearer\s+)(?P<bv>\S+)"
)


def redact_text(text: str) -> str:
    """`text` with credential values replaced, for logs that go into findings.

    >>> redact_text("args: {'api_key': 'sk-1', 'max_tokens': 8} --api-key sk-2 eos_token_id=2")
    "args: {'api_key': '<redacted>', 'max_tokens': 8} --api-key <redacted> eos_token_id=2"
    """

    def hide(m: re.Match[str]) -> str:
        prefix = m.group("flag") or m.group("key") or m.group("bearer")
        return prefix + REDACTED

    return _SECRET_TEXT.sub(hide, text)


def redact_argv(items: Sequence[Any]) -> list[Any]:
    """`items` with `--api-key VALUE` and `--api-key=VALUE` redacted (argv-like lists).

    >>> redact_argv(["serve", "--api-key", "sk-1", "--token=abc", "--port", "80"])
    ['serve', '--api-key', '<redacted>', '--token=<redacted>', '--port', '80']
    """
    return _redact_argv(items)


def _redact_argv(items: Sequence[Any]) -> list[Any]:
    """Redact `--api-key VALUE` and `--api-key=VALUE` in argv-like lists."""
    out: list[Any] = []
    hide_next = False
    for item in items:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif isinstance(item, str) and item.startswith("-"):
            name, eq, _ = item.partition("=")
            if _is_secret(name):
                out.append(f"{name}={REDACTED}" if eq else item)
                hide_next = not eq
            else:
                out.append(item)
        else:
            out.append(_redact(item))
    return out


def _is_secret(key: str) -> bool:
    return bool(_SECRET.search(key.strip("-").lower().replace("-", "_")))
