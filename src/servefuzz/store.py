"""The campaign directory: everything a campaign writes, written so that `kill -9` loses nothing.

| path                  | written                                       | on resume                          |
|-----------------------|-----------------------------------------------|------------------------------------|
| `config.json`         | once, atomically                              | the seed and strategies must match |
| `progress.json`       | atomically after every iteration (`Progress`) | iteration, totals, schedule, counts|
| `corpus/entry_N.json` | once per kept scenario, atomically            | reloaded: the corpus continues     |
| `findings/*.json`     | atomically; a smaller duplicate replaces its  | rescanned: the files are the truth |
|                       | file only once it is durable                  |                                    |
| `scenarios.jsonl`     | appended and fsynced before each execution    | a torn last line is cut; appended  |
|                       |                                               | to (an iteration cut by a kill     |
|                       |                                               | runs again: its last line counts)  |
| `histories.jsonl`     | appended and fsynced after every execution;   | a torn last line is cut; appended  |
|                       | each run's `meta.iteration` names its scenario| to                                 |
| `noise.json`          | atomically after every iteration (before      | reloaded: the noise model goes on  |
|                       | progress.json): the campaign's benign shifts  | (replay, shrink, triage read it)   |
| `coverage.json`       | with `CampaignConfig.coverage` only:          | reloaded, held to the target's     |
|                       | atomically after every iteration (before      | space: the counts go on            |
|                       | progress.json), `campaign.COVERAGE_FILE`      |                                    |
| `coverage.html`       | at the campaign's end, with coverage only     | rewritten at the next end          |
|                       | (`api.COVERAGE_PAGE`)                         |                                    |
| `campaign.lock`       | `flock`ed while a campaign runs here          | refused while another holds it; a  |
|                       | (`campaign_lock`), with the holder's pid      | holder's death (`kill -9` too)     |
|                       |                                               | frees it: taken over, never stale  |

Every write goes through `servefuzz.durable`: a full disk ends the campaign with one line
(`DiskFullError`, exit 5) and leaves every file above whole, so `--resume` goes on once there is
room again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servefuzz import durable
from servefuzz.corpus import CorpusEntry
from servefuzz.errors import FindingError, UsageError
from servefuzz.exercise import Exercise
from servefuzz.finding import Finding, load_finding, write_finding
from servefuzz.oracles.noise import NOISE_FILE, CampaignNoise

__all__ = [
    "FindingStore",
    "Progress",
    "finding_size",
    "LOCK_FILE",
    "campaign_lock",
    "check_campaign_dir",
    "check_not_in_use",
    "open_campaign_dir",
    "load_entries",
    "read_json",
    "stored_config",
    "write_progress",
    "write_json",
    "append_json_line",
    "read_noise",
    "write_noise",
    "finding_noise",
]


def finding_size(f: Finding) -> tuple[int, int, int]:
    """Dedup order, smaller is better: unconfirmed after confirmed, then the shrink order
    (requests, then total tokens)."""
    confirmed = f.confirmation is not None and f.confirmation.reproduced > 0
    tokens = sum(r.prompt_len + r.max_tokens * r.n for r in f.scenario.requests)
    return (0 if confirmed else 1, len(f.scenario.requests), tokens)


# The names the store writes (`Finding.filename`). What shrink and triage write beside them
# (`finding_00003_123_min.json`) shares the signature and may be smaller: counted as the store's
# own, a resume deleted the original finding (2026-12-02).
_OWN_NAME = re.compile(r"finding_\d{5,}_-?\d+\.json")


class FindingStore:
    """The findings directory, deduplicated by `Finding.signature`.

    The store owns the files it names (`finding_<iteration>_<seed>.json`); others beside them
    (shrink's, triage's) it leaves alone. The first finding of a signature is written as a new
    file; later ones only count, unless
    smaller by `finding_size`, in which case the smaller one is written (atomically, fsynced)
    and only then the old file removed. Opening a directory rescans it: the files are the
    truth, so a finding written just before a `kill -9` is never lost or written twice, and of
    two files with one signature (a kill between writing a replacement and removing the old)
    the larger is removed, its replacement being durable.
    """

    def __init__(self, directory: Path, counts: Mapping[str, int] | None = None) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.kept: dict[str, tuple[Path, Finding]] = {}
        self.counts: Counter[str] = Counter()
        self.latest_iteration = -1
        for path in sorted(directory.glob("finding_*.json")):
            if not _OWN_NAME.fullmatch(path.name):
                continue  # shrink's `_min`, triage's `_triaged`: the user's files, never deduped away
            try:
                f = load_finding(path)
            except FindingError:
                continue  # not ours to judge or delete; it is simply not part of the dedup table
            self.latest_iteration = max(self.latest_iteration, f.iteration)
            self.counts[f.signature] += 1
            old = self.kept.get(f.signature)
            if old is None or finding_size(f) < finding_size(old[1]):
                self.kept[f.signature] = (path, f)
                if old is not None:
                    durable.unlink(old[0])
            else:
                durable.unlink(path)
        for sig, n in (counts or {}).items():
            if sig in self.kept:
                self.counts[sig] = max(self.counts[sig], n)

    def known(self, signature: str) -> Finding | None:
        kept = self.kept.get(signature)
        return None if kept is None else kept[1]

    def add(self, finding: Finding, *, again: bool = False) -> tuple[Path, str]:
        """Record `finding`; returns its file and what happened: new, smaller or duplicate.

        `again`: the same sighting as one added before, now confirmed (a crash replayed on the
        restarted server): it may replace that one but is not counted as seen twice."""
        sig = finding.signature
        if not again:
            self.counts[sig] += 1
        old = self.kept.get(sig)
        if old is not None and finding_size(finding) >= finding_size(old[1]):
            return old[0], "duplicate"
        # The same sighting confirmed later has the same name: renamed over it, still atomically.
        same_name = old is not None and old[0].name == finding.filename
        path = write_finding(self.directory, finding, replace=same_name)
        self.kept[sig] = (path, finding)
        if old is None:
            return path, "new"
        if not same_name:
            durable.unlink(old[0])
        return path, "confirmed" if again else "smaller"

    def findings(self) -> list[tuple[Path, Finding]]:
        return sorted(self.kept.values(), key=lambda pf: pf[1].iteration)


def check_campaign_dir(out: Path, *, resume: bool) -> bool:
    """Whether `out` already holds a campaign; refused (UsageError) unless resuming it."""
    existing = (out / "config.json").exists() or (out / "progress.json").exists()
    if existing and not resume:
        raise UsageError(f"{out} already holds a campaign; continue it with --resume, or choose another --out")
    return existing


# One campaign writes a directory at a time. The lock is `flock` on this file rather than a pid
# file: the kernel drops it when its holder's last descriptor closes, however the holder ends
# (`kill -9`, an OOM kill, a power cut), so it can never go stale and never needs a liveness
# guess (a pid checked alive can be a reused pid). The file stays: removing it while another
# process waits to open it would let two campaigns hold locks on two different files.
LOCK_FILE = "campaign.lock"
_LOCK_TRIES = 10  # half a second of asking before a holder is taken for a campaign


def _busy(out: Path) -> str:
    """The one line for a campaign directory another campaign holds."""
    try:
        pid = (out / LOCK_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        pid = ""
    holder = f" (pid {pid})" if pid.isdigit() else ""
    return (f"{out} is in use by another servefuzz campaign{holder}; wait for it to end (or stop it), "
            "or choose another --out")


@contextlib.contextmanager
def campaign_lock(out: Path) -> Iterator[None]:
    """Hold `out` for one campaign for the block: a campaign already running there is refused
    (UsageError, one line naming its pid), one killed any way at all is not (see LOCK_FILE).

    Taken by `api.fuzz` before the server starts, since the server's log and `server.json` are
    the directory's too, and held until the coverage page is written. The descriptor is not
    inherited (Python's default), so a launched server that outlives us cannot keep it held.
    """
    out.mkdir(parents=True, exist_ok=True)
    with durable.reporting_full_disk(out):
        fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        for attempt in range(_LOCK_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == _LOCK_TRIES - 1:
                    raise UsageError(_busy(out)) from None
                time.sleep(0.05)  # perhaps only `check_not_in_use`'s moment-long look, not a campaign
        with contextlib.suppress(OSError):  # the pid is for the refusal's message only; a full disk may refuse it
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def check_not_in_use(out: Path) -> None:
    """Refuse `out` (UsageError) if a campaign holds it now: checked with the other options,
    before a banner or a server, so that the refusal is the only line. Creates nothing; the
    campaign's own `campaign_lock` is what excludes (this only answers early)."""
    try:
        fd = os.open(out / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return  # no lock file: no campaign has run here (or it cannot be read: the lock will say)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UsageError(_busy(out)) from None
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Progress:
    """`progress.json`: where a campaign stands, rewritten atomically after every iteration and
    read back on resume. `picks`: corpus entry id -> times picked (`Corpus.picks`); `schedule`:
    `Schedule.state_json()`, its keyword arguments; `seen`: signature -> times found;
    `first_confirmed`: verdict -> (requests, seconds) at its first confirmed finding;
    `benched`: strategy -> the error that benched it."""

    next_iteration: int = 0
    requests: int = 0
    elapsed_s: float = 0.0
    picks: Mapping[int, int] = field(default_factory=dict)
    schedule: Mapping[str, Any] = field(default_factory=dict)
    seen: Mapping[str, int] = field(default_factory=dict)
    first_confirmed: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    restarts: int = 0
    benched: Mapping[str, str] = field(default_factory=dict)
    exercise: Exercise = field(default_factory=Exercise)  # what the engine did (servefuzz.exercise)

    def to_json(self) -> dict[str, Any]:
        return {
            "next_iteration": self.next_iteration, "requests": self.requests, "elapsed_s": round(self.elapsed_s, 3),
            "picks": {str(k): v for k, v in sorted(self.picks.items())}, "schedule": dict(self.schedule),
            "seen": dict(self.seen), "first_confirmed": {v: list(x) for v, x in self.first_confirmed.items()},
            "restarts": self.restarts, "benched": dict(self.benched), "exercise": self.exercise.to_json(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Progress:
        """Every key optional (an empty mapping: a new campaign)."""
        return cls(
            next_iteration=int(d.get("next_iteration", 0)), requests=int(d.get("requests", 0)),
            elapsed_s=float(d.get("elapsed_s", 0.0)), picks={int(k): v for k, v in d.get("picks", {}).items()},
            schedule=dict(d.get("schedule", {})), seen=dict(d.get("seen", {})),
            first_confirmed={v: (int(x[0]), float(x[1])) for v, x in d.get("first_confirmed", {}).items()},
            restarts=int(d.get("restarts", 0)), benched=dict(d.get("benched", {})),
            exercise=Exercise.from_json(d.get("exercise")),
        )


def open_campaign_dir(out: Path, *, resume: bool, identity: Mapping[str, Any], settings: Mapping[str, Any]) -> Progress:
    """Create or reopen the campaign directory; return the saved progress (`Progress()` when new).

    `identity` (seed, strategies) must match on resume; `settings` are written beside it.
    """
    existing = check_campaign_dir(out, resume=resume)
    (out / "findings").mkdir(parents=True, exist_ok=True)
    (out / "corpus").mkdir(exist_ok=True)
    if existing:
        saved = read_json(out / "config.json")
        clash = [k for k, v in identity.items() if k in saved and saved[k] != v]
        if clash:
            raise UsageError(
                f"{out} was started with {', '.join(f'{k} {saved[k]}' for k in clash)}; resume it with the same values"
            )
        return Progress.from_json(read_json(out / "progress.json"))
    write_json(out / "config.json", {**identity, **settings})
    return Progress()


def write_progress(out: Path, progress: Progress) -> None:
    write_json(out / "progress.json", progress.to_json())


def stored_config(out: Path) -> dict[str, Any]:
    """The campaign's `config.json` (seed, strategies, settings, target), for a resume to go on as
    it was started: empty when there is none or it does not parse; UsageError when its
    strategies are not a list of names (nothing could be resumed from it)."""
    path = out / "config.json"
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    names = stored.get("strategies", []) if isinstance(stored, dict) else None
    if not isinstance(stored, dict) or not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise UsageError(f"{path} is damaged (its strategies are not a list of names): cannot resume it")
    return stored


def load_entries(directory: Path) -> list[CorpusEntry]:
    """The corpus entries kept in `directory`, in id order."""
    entries = []
    for path in sorted(directory.glob("entry_*.json")):
        try:
            entries.append(CorpusEntry.from_json(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError, TypeError, OverflowError):
            continue  # written atomically, so only a foreign file lands here; skip it (1e400 as an int: overflow)
    # Ids must run 0..n-1 for new entries to get fresh ones; keep the unbroken run.
    return [e for i, e in enumerate(entries) if e.id == i]


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(path: Path, obj: Any) -> None:
    durable.write_atomic(path, json.dumps(obj, indent=1, sort_keys=True))


def append_json_line(path: Path, obj: Any) -> None:
    durable.append_line(path, json.dumps(obj, sort_keys=True))


def read_noise(out: Path) -> CampaignNoise:
    """The campaign's noise model (`oracles.noise`) from its directory; empty when there is none
    (a campaign from before the model, or a directory that is not a campaign's)."""
    data = read_json(out / NOISE_FILE)
    try:
        return CampaignNoise.from_json(data) if data else CampaignNoise.empty()
    except (KeyError, TypeError, ValueError):
        return CampaignNoise.empty()  # a damaged model only loses the campaign-wide threshold


def write_noise(out: Path, model: CampaignNoise) -> None:
    write_json(out / NOISE_FILE, model.to_json())


def finding_noise(path: Path) -> CampaignNoise | None:
    """The noise model of the campaign a finding file belongs to (`<campaign>/findings/*.json`,
    a shrunk or triaged one beside it included); None when its directory holds no `noise.json`
    (a campaign from before the model, or a finding file kept elsewhere): replay, shrink and
    triage then judge by the scenario's own noise."""
    findings = Path(path).parent
    if findings.name != "findings" or not (findings.parent / NOISE_FILE).is_file():
        return None
    return read_noise(findings.parent)
