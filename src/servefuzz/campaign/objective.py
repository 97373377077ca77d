"""The objective of an iteration: whether what it showed is a finding, confirmed on the worker
that saw it unless that is known to be wasted effort (`decide`: a `Decision` the loop carries
out, `Loop.objective`); a finding that took its server down is replayed on the restarted server
instead (`Downed`, `CRASH_REPLAYS`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from servefuzz.anomaly import Verdict
from servefuzz.campaign.observe import Observation
from servefuzz.campaign.records import CampaignConfig, CampaignState, is_confirmed
from servefuzz.confirm import ConfirmConfig
from servefuzz.finding import Finding
from servefuzz.oracles.judge import Judgement
from servefuzz.server_facts import TargetInfo
from servefuzz.store import FindingStore, finding_size
from servefuzz.trial import Executed
from servefuzz.workload import Scenario

__all__ = [
    "CRASH_REPLAYS",
    "Confirm",
    "Decision",
    "Downed",
    "Keep",
    "confirm_settings",
    "decide",
    "downed_by",
]


# A crash that takes the server down (or a hang that wedges it: `trial.stopped_answering`) is
# confirmed by replaying its scenario on the restarted server, up to this many times, stopping
# at the first loss: each costs a restart (vLLM: tens of seconds; a wedge also the request
# timeout), where the five replays of a divergence cost a few requests each.
CRASH_REPLAYS = 2


@dataclass(frozen=True)
class Downed:
    """A scenario whose execution took the server down (it died, or stopped answering: a
    wedge): what replaying it on the restarted server needs (`Loop.confirm_on_restart`)."""

    scenario: Scenario
    done: Executed
    verdict: Judgement
    finding: Finding


@dataclass(frozen=True)
class Keep:
    """Keep `finding` as it is: seen but not confirmable (the server is gone, the budget spent,
    a shift whose tokens agree), or a repeat of a signature already kept confirmed and no larger."""

    finding: Finding


@dataclass(frozen=True)
class Confirm:
    """Replay the execution on the worker that saw it (`Worker.confirm`) and keep what that says."""

    anomalies: int


Decision = Keep | Confirm | None  # None: nothing to keep


def decide(seen: Observation, info: TargetInfo, store: FindingStore) -> Decision:
    """What the objective does with one judged execution: nothing (no anomaly), keep what was
    seen unconfirmed, or confirm it. A pure choice: the loop acts on it and says so once."""
    done, verdict, scenario = seen.done, seen.verdict, seen.scenario
    if not verdict.anomalies:
        return None
    seen_as = Finding(seen.iteration, scenario.seed, scenario, info, verdict.anomalies)
    if done.lost is not None or done.cut is not None:
        # The target is gone, or the budget is spent: keep what was seen, unconfirmed, rather
        # than lose it (requests cut at the budget are indeterminate and back no anomaly).
        return Keep(dataclasses.replace(seen_as, notes=(f"not confirmed: {done.lost or done.cut}",)))
    if all(a.verdict is Verdict.ANOMALOUS_SHIFT for a in verdict.anomalies):
        # The reproduction rule compares tokens, and a shift's tokens agree: replays could only
        # ever say 0/n. Kept as seen, with its numbers, for a person (or a control) to look at.
        return Keep(dataclasses.replace(seen_as, notes=(
            "not confirmed: an anomalous shift is kept as seen (replays compare tokens, and its tokens agree)",)))
    kept = store.known(seen_as.signature)
    if kept is not None and is_confirmed(kept) and finding_size(seen_as)[1:] >= finding_size(kept)[1:]:
        # A confirmed, no larger example of this signature is kept: count it, spare the replays.
        return Keep(seen_as)
    return Confirm(len(verdict.anomalies))


def confirm_settings(config: CampaignConfig, state: CampaignState) -> ConfirmConfig:
    """How a finding is confirmed. An engine measured off the built model's truth gets no truth
    control: it would hold every run to numbers the engine does not compute (`confirm.TruthCheck`)."""
    truth_model = None if state.truth is not None and state.truth.far else config.truth_model
    return ConfirmConfig(runs=config.confirm_runs, truth_model=truth_model, launch=config.launch)


def downed_by(done: Executed) -> Verdict:
    """The verdict of a finding that took its server down: a wedge is a hang, a death a crash."""
    return Verdict.HANG if done.wedged else Verdict.CRASH
