"""Which version a finding came in with: the search, pure (no I/O, no clock).

The versions are a ladder, oldest first (an engine spec's `Versions.ladder`); `span` cuts the
range `A..B` out of it. Each version tried is decided by the replay's sequential test
(`stats.decide`) and `outcome_of` names it: **bad** (the finding reproduced), **good** (it did
not), or **undecided** (the test reached its cap without deciding, or the version could not be
judged at all: a build or a start that failed). `Search` says which version to try next and,
when it has none left, the last good and the first bad version.

The search, like `git bisect` with its `skip`:

1. The newest version first: the finding must be there (bad), else there is nothing to bisect.
2. Then the oldest: good, or the finding is older than the range ("no good version").
3. Then between the last good and the first bad, the untried version nearest the midpoint
   (the older of two as near). An undecided version is said as such and stepped around: the
   search goes on with the untried versions on either side, never counting it good or bad.
   When only undecided versions are left between the two, the change is in one of them and
   the conclusion names them.

    >>> ladder = tuple(f"b{n}" for n in range(1, 9))
    >>> s = Search(ladder)
    >>> s.next()                                    # the newest first
    'b8'
    >>> s = s.with_step(step("b8", "bad")); s.next()  # then the oldest
    'b1'
    >>> s = s.with_step(step("b1", "good")); s.next()  # midway between b1 (0) and b8 (7): b4 and b5 tie, the older
    'b4'
    >>> s = s.with_step(step("b4", "undecided")); s.next()  # stepped around: the untried nearest the middle
    'b5'
    >>> s = s.with_step(step("b5", "bad")); s.next()  # between b1 and b5 now; b4 stays undecided
    'b3'
    >>> s = s.with_step(step("b3", "good")); s.next() is None
    True
    >>> s.last_good, s.first_bad
    ('b3', 'b5')
    >>> s.conclusion()
    'first bad b5, last good b3; undecided between them: b4 (the change is in b4 or b5)'

A finding already there at the oldest version is a result too:

    >>> old = Search(("b1", "b2", "b3")).with_step(step("b3", "bad")).with_step(step("b1", "bad"))
    >>> old.next() is None, old.last_good, old.first_bad
    (True, None, 'b1')
    >>> old.conclusion()
    'present at the oldest version tried, b1: no good version in b1..b3'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servefuzz import stats
from servefuzz.errors import UsageError
from servefuzz.finding import Bisect, BisectStep, derived_name

__all__ = ["BAD", "GOOD", "UNDECIDED", "Search", "bisected_name", "outcome_of", "render_bisect", "span", "step"]

GOOD = "good"
BAD = "bad"
UNDECIDED = stats.UNDECIDED


def outcome_of(decision: str) -> str:
    """What the sequential test's decision makes a version.

    >>> outcome_of(stats.REPRODUCED), outcome_of(stats.NOT_REPRODUCED), outcome_of(stats.UNDECIDED)
    ('bad', 'good', 'undecided')
    """
    return {stats.REPRODUCED: BAD, stats.NOT_REPRODUCED: GOOD}.get(decision, UNDECIDED)


def step(version: str, outcome: str, reproduced: int = 0, attempts: int = 0) -> BisectStep:
    """A step of `outcome` at `version` (the doctests' shorthand)."""
    return BisectStep(version, outcome, reproduced, attempts)


def span(ladder: Sequence[str], versions: str) -> tuple[str, ...]:
    """The versions `A..B` names on `ladder` (oldest first), both ends included; UsageError (one
    line) for a range that is not two versions of the ladder, the older first.

    >>> span(("b1", "b2", "b3", "b4"), "b2..b4")
    ('b2', 'b3', 'b4')
    >>> span(("b1", "b2"), "b2..b1")
    Traceback (most recent call last):
    ...
    servefuzz.errors.UsageError: --versions b2..b1: b2 is newer than b1 (give the older first)
    """
    older, sep, newer = versions.partition("..")
    if not sep or not older or not newer:
        raise UsageError(f"--versions {versions[:80]!r}: give a range OLDER..NEWER, e.g. b9093..b11434")
    where = {v: i for i, v in enumerate(ladder)}
    for v in (older, newer):
        if v not in where:
            ends = f"{ladder[0]}..{ladder[-1]}" if ladder else "none"
            raise UsageError(f"--versions {versions[:80]}: {v[:40]} is not on the ladder ({ends})")
    lo, hi = where[older], where[newer]
    if lo >= hi:
        raise UsageError(f"--versions {versions}: " + (f"{older} is newer than {newer} (give the older first)"
                                                       if lo > hi else "a range needs two versions"))
    return tuple(ladder[lo:hi + 1])


@dataclass(frozen=True)
class Search:
    """A bisection over `versions` (oldest first) and the steps taken so far, in order."""

    versions: tuple[str, ...]
    steps: tuple[BisectStep, ...] = ()

    def __post_init__(self) -> None:
        if len(self.versions) < 2:
            raise ValueError("a bisection needs at least two versions")

    def with_step(self, done: BisectStep) -> Search:
        if done.version not in self.versions:
            raise ValueError(f"{done.version} is not in the range searched")
        return Search(self.versions, (*self.steps, done))

    def outcome(self, version: str) -> str | None:
        """What the last step at `version` made it (None: not tried)."""
        return next((s.outcome for s in reversed(self.steps) if s.version == version), None)

    def _bounds(self) -> tuple[int, int] | None:
        """(last good, first bad) as indexes, once both ends are decided so; None before. The first
        bad is the oldest bad version; the last good the newest good one below it (a version good
        above a bad one is left out, as `git bisect` leaves it)."""
        bad = [i for i, v in enumerate(self.versions) if self.outcome(v) == BAD]
        if not bad:
            return None
        good = [i for i, v in enumerate(self.versions[:bad[0]]) if self.outcome(v) == GOOD]
        return (good[-1], bad[0]) if good else None

    def next(self) -> str | None:
        """The version to try next; None when the search is over (see `conclusion`)."""
        newest, oldest = self.versions[-1], self.versions[0]
        if self.outcome(newest) is None:
            return newest
        if self.outcome(newest) != BAD:
            return None  # not there at the newest: nothing to bisect
        if self.outcome(oldest) is None:
            return oldest
        bounds = self._bounds()
        if bounds is None:
            return None  # bad at the oldest, or the oldest undecided: no good version to start from
        lo, hi = bounds
        untried = [i for i in range(lo + 1, hi) if self.outcome(self.versions[i]) is None]
        if not untried:
            return None
        middle = (lo + hi) / 2
        return self.versions[min(untried, key=lambda i: (abs(i - middle), i))]

    @property
    def finished(self) -> bool:
        """Whether the search has nothing left to try (its conclusion is final)."""
        return self.next() is None

    @property
    def last_good(self) -> str | None:
        bounds = self._bounds()
        return None if bounds is None else self.versions[bounds[0]]

    @property
    def first_bad(self) -> str | None:
        bounds = self._bounds()
        if bounds is not None:
            return self.versions[bounds[1]]
        # Bad at the oldest: the oldest is the first bad version the range shows.
        return self.versions[0] if self.outcome(self.versions[0]) == BAD else None

    def undecided_between(self) -> tuple[str, ...]:
        """The undecided versions between the last good and the first bad (the change may be
        in any of them)."""
        bounds = self._bounds()
        if bounds is None:
            return ()
        lo, hi = bounds
        return tuple(v for v in self.versions[lo + 1:hi] if self.outcome(v) == UNDECIDED)

    def conclusion(self) -> str:
        """What the search found, in words (or where it stands, before it is over)."""
        newest, oldest = self.versions[-1], self.versions[0]
        span_text = f"{oldest}..{newest}"
        at_newest = self.outcome(newest)
        if at_newest is None:
            return "not started"
        if at_newest == GOOD:
            return f"not reproduced at the newest version, {newest}: nothing to bisect in {span_text}"
        if at_newest == UNDECIDED:
            return f"undecided at the newest version, {newest}: no bad version to bisect from"
        at_oldest = self.outcome(oldest)
        if at_oldest == BAD:
            return f"present at the oldest version tried, {oldest}: no good version in {span_text}"
        if at_oldest == UNDECIDED:
            return f"undecided at the oldest version, {oldest}: no good version to bisect from"
        if self.next() is not None:
            return f"between {self.last_good} (good) and {self.first_bad} (bad), not finished"
        text = f"first bad {self.first_bad}, last good {self.last_good}"
        skipped = self.undecided_between()
        if skipped:
            text += (f"; undecided between them: {', '.join(skipped)} "
                     f"(the change is in {' or '.join((*skipped, str(self.first_bad)))})")
        return text

    def record(self, preset: str, versions: str) -> Bisect:
        """The search as a finding's `bisect` field."""
        return Bisect(preset, versions, self.steps, self.last_good, self.first_bad, self.conclusion(), self.finished)


def bisected_name(path: Path) -> str:
    """The bisected finding's file name, beside the original (`..._bisected.json`; bisected
    again, `..._bisected2.json`).

    >>> bisected_name(Path("finding_min_triaged.json"))
    'finding_min_triaged_bisected.json'
    """
    return derived_name(path, "bisected")


def render_bisect(record: Bisect) -> list[str]:
    """The bisection as the terminal (and a package's bisect.txt) shows it: the conclusion, every
    version tried with its outcome, rate and the version its server reported, in ladder order
    (newest first), then the last good and first bad version with their rates.

    >>> b = Search(("b1", "b2", "b3")).with_step(step("b3", "bad", 2, 2)).with_step(step("b1", "good", 0, 8))
    >>> b = b.with_step(step("b2", "bad", 2, 2))
    >>> print("\\n".join(render_bisect(b.record("llama-server", "b1..b3"))))
    llama-server b1..b3: first bad b2, last good b1
    version   outcome    rate (95% CI)                  server reported
    b3        bad        2/2 (100%, 95% CI 34-100%)     -
    b2        bad        2/2 (100%, 95% CI 34-100%)     -
    b1        good       0/8 (0%, 95% CI 0-32%)         -
    last good: b1, 0/8 (0%, 95% CI 0-32%)
    first bad: b2, 2/2 (100%, 95% CI 34-100%)
    """
    order = {s.version: i for i, s in enumerate(record.steps)}
    tried = sorted(record.steps, key=lambda s: _ladder_key(s.version, order[s.version]), reverse=True)
    width = max(len("version"), *(len(s.version) for s in tried)) + 2
    lines = [f"{record.preset} {record.versions}: {record.conclusion}",
             f"{'version':<{width}} {'outcome':<10} {'rate (95% CI)':<30} server reported"]
    for s in tried:
        rate = str(s.interval) if s.attempts else "-"
        lines.append(f"{s.version:<{width}} {s.outcome:<10} {rate:<30} {s.reported or '-'}"
                     + (f"  ({s.error})" if s.error else ""))
    for word, version in (("last good", record.last_good), ("first bad", record.first_bad)):
        found = record.step(version)
        lines.append(f"{word}: " + ("none" if found is None else f"{found.version}, {found.interval}"))
    return lines


def _ladder_key(version: str, tried: int) -> tuple[int, int]:
    """A release tag's build number (b11434), else the order it was tried: what sorts a table."""
    digits = version.lstrip("b").split(".")[0]
    return (int(digits), tried) if digits.isdigit() and version[:1] == "b" else (-1, tried)
