"""The objective of an iteration: whether what it showed is a finding, confirmed on the worker
that saw it unless that is known to be wasted effort (`finding_of`); a finding that took its
server down is replayed on the restarted server instead (`Downed`, `CRASH_REPLAYS`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servefuzz.anomaly import Verdict
from servefuzz.campaign.events import Confirming, Said
from servefuzz.campaign.records import CampaignConfig, CampaignState, is_confirmed
from servefuzz.campaign.workers import Worker
from servefuzz.confirm import ConfirmConfig
from servefuzz.finding import Finding
from servefuzz.oracles.judge import Judgement
from servefuzz.oracles.noise import CampaignNoise
from servefuzz.store import FindingStore, finding_size
from servefuzz.trial import Executed
from servefuzz.workload import Scenario

__all__ = [
    "CRASH_REPLAYS",
    "Downed",
    "downed_by",
    "finding_of",
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


async def finding_of(
    worker: Worker,
    scenario: Scenario,
    iteration: int,
    done: Executed,
    verdict: Judgement,
    config: CampaignConfig,
    store: FindingStore,
    state: CampaignState,
    on_event: Callable[[CampaignState], None],
    noise: CampaignNoise | None = None,
) -> tuple[Finding | None, str | None]:
    """The finding of one execution, confirmed (on the worker that saw it) unless that is known
    to be wasted effort, and why the server is gone after it (`done.lost`, or what went away
    under the confirmation)."""
    info = worker.info
    if not verdict.anomalies:
        return None, done.lost
    if done.lost is not None or done.cut is not None:
        # The target is gone, or the budget is spent: keep what was seen, unconfirmed, rather
        # than lose it (requests cut at the budget are indeterminate and back no anomaly).
        return Finding(iteration, scenario.seed, scenario, info, verdict.anomalies,
                       notes=(f"not confirmed: {done.lost or done.cut}",)), done.lost
    if all(a.verdict is Verdict.ANOMALOUS_SHIFT for a in verdict.anomalies):
        # The reproduction rule compares tokens, and a shift's tokens agree: replays could only
        # ever say 0/n. Kept as seen, with its numbers, for a person (or a control) to look at.
        return Finding(iteration, scenario.seed, scenario, info, verdict.anomalies,
                       notes=("not confirmed: an anomalous shift is kept as seen (replays compare tokens, and its "
                              "tokens agree)",)), done.lost
    provisional = Finding(iteration, scenario.seed, scenario, info, verdict.anomalies)
    kept = store.known(provisional.signature)
    if kept is not None and is_confirmed(kept) and finding_size(provisional)[1:] >= finding_size(kept)[1:]:
        # A confirmed, no larger example of this signature is kept: count it, spare the replays.
        return provisional, done.lost
    state.last = Confirming(iteration, len(verdict.anomalies), worker.name)
    if worker.name is not None:
        state.workers[worker.name] = f"iteration {iteration}: confirming {len(verdict.anomalies)} anomalies"
    on_event(state)

    def say(what: str) -> None:
        state.last = Said(what)
        on_event(state)

    # An engine measured off the built model's truth gets no truth control: it would hold every
    # run to numbers the engine does not compute (`confirm.TruthCheck`).
    truth_model = None if state.truth is not None and state.truth.far else config.truth_model
    settings = ConfirmConfig(runs=config.confirm_runs, truth_model=truth_model, launch=config.launch)
    confirmed = await worker.confirm(scenario, iteration, done, verdict, settings, noise, say)
    state.requests += confirmed.sent
    return confirmed.finding, confirmed.lost


def downed_by(done: Executed) -> Verdict:
    """The verdict of a finding that took its server down: a wedge is a hang, a death a crash."""
    return Verdict.HANG if done.wedged else Verdict.CRASH
