"""What a campaign tells whoever watches it, as typed events (LibAFL's `Event`): the loop says
*what* happened in a record; the progress display says it in words (`words()`); a caller or a
test matches on the type, never on the words.

    >>> FindingKept("finding_00003_1.json", "new", "corruption", "r02 diverged at token 4").words()
    'finding finding_00003_1.json (new): corruption, r02 diverged at token 4'
    >>> ServerLost("exit status -9", restarted_at=None).words()
    'the server is lost (exit status -9); starting it again'
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CampaignEvent",
    "Chose",
    "Confirming",
    "FindingKept",
    "LeadFollowed",
    "NotBackOnRestart",
    "ReplayingOnRestart",
    "Said",
    "ServerLost",
    "SourceFailed",
    "WorkerDropped",
]


@dataclass(frozen=True)
class Chose:
    """An iteration's scenario is chosen and about to run."""

    iteration: int
    source: str  # the strategy, or the corpus origin and the strategy it came from
    requests: int

    def words(self) -> str:
        return f"iteration {self.iteration}: {self.source}, {self.requests} requests"


@dataclass(frozen=True)
class SourceFailed:
    """A strategy (or mutator) raised: a bug of ours, which never ends the campaign."""

    iteration: int
    source: str
    error: str
    benched: bool  # the strategy sits out the rest of the campaign

    def words(self) -> str:
        return f"iteration {self.iteration}: {self.source} failed ({self.error})" + ("; benched it" if self.benched else "")


@dataclass(frozen=True)
class WorkerDropped:
    """A (remote) worker was lost in the middle of an iteration; its scenario is dropped."""

    iteration: int
    why: str

    def words(self) -> str:
        return f"iteration {self.iteration}: {self.why}; dropped"


@dataclass(frozen=True)
class Confirming:
    """An execution was flagged; its anomalies are being confirmed."""

    iteration: int
    anomalies: int
    worker: str | None = None

    def words(self) -> str:
        return f"iteration {self.iteration}: {self.anomalies} anomalies, confirming" + (
            "" if self.worker is None else f" on worker {self.worker}")


@dataclass(frozen=True)
class Said:
    """A line a step of the campaign says in its own words: a rung of the confirmation ladder,
    the truth check's warning."""

    text: str

    def words(self) -> str:
        return self.text


@dataclass(frozen=True)
class LeadFollowed:
    """A confident flip no replay showed again: its scenario's mutations come next."""

    iteration: int
    verdict: str
    mutations: int

    def words(self) -> str:
        return f"iteration {self.iteration}: a {self.verdict} seen once and in no replay: its next {self.mutations} mutations come first"


@dataclass(frozen=True)
class FindingKept:
    """A finding was written to the campaign's findings (new, smaller, or seen again)."""

    file: str
    what_happened: str  # the store's words: new, replaced a larger one, seen again
    verdict: str
    summary: str

    def words(self) -> str:
        return f"finding {self.file} ({self.what_happened}): {self.verdict}, {self.summary}"


@dataclass(frozen=True)
class ServerLost:
    """The server went away: being started again (`restarted_at` None), or started again there."""

    why: str
    restarted_at: str | None

    def words(self) -> str:
        if self.restarted_at is None:
            return f"the server is lost ({self.why}); starting it again"
        return f"the server is lost ({self.why}); restarted it at {self.restarted_at}"


@dataclass(frozen=True)
class ReplayingOnRestart:
    """A scenario that took the server down is replayed on the restarted server."""

    iteration: int

    def words(self) -> str:
        return f"iteration {self.iteration}: the server was lost; replaying the scenario on the restarted server"


@dataclass(frozen=True)
class NotBackOnRestart:
    """The replays on the restarted server did not take it down again: the finding stays as seen."""

    iteration: int
    verdict: str
    tried: int

    def words(self) -> str:
        return f"iteration {self.iteration}: the {self.verdict} did not come back in {self.tried} replay(s); kept as seen"


CampaignEvent = (Chose | SourceFailed | WorkerDropped | Confirming | Said | LeadFollowed | FindingKept | ServerLost
                 | ReplayingOnRestart | NotBackOnRestart)
