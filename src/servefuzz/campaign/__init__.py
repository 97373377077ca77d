"""The campaign: a greybox loop of generate-or-mutate, run, judge, confirm, keep.

One iteration, all against one target:

1. the schedule (`servefuzz.corpus`) picks a source by energy: a strategy generates a fresh
   scenario, or a corpus entry is mutated (`servefuzz.mutators`); trace seeds run first;
2. `trial.execute` fires the scenario `runs` times under load, sends each request alone on a
   flushed cache and probes a request with a shared prefix warm and primed;
3. `oracles.judge` runs every oracle; `features` (`servefuzz.feedback`) says what the run
   reached, and the corpus keeps the scenario if that includes something new;
4. an anomaly is confirmed (`servefuzz.confirm`: `confirm_runs` replays against fresh alone
   references that vote, the leak check, the content-swap, deterministic and truth controls),
   unless an equal-or-smaller confirmed finding with the same signature is already kept; the
   worker that showed it confirms it, given only `confirm.ConfirmConfig`; findings are
   deduplicated by `Finding.signature` (`servefuzz.store.FindingStore`).

The campaign directory holds everything (`servefuzz.store` says what and how). Budgets (time,
requests) count the whole campaign, resumed sessions included. The campaign stops when one is
spent, when the target goes away, or, if asked, at the first confirmed finding (optionally only
one of given verdicts). A time budget is a deadline: at it, requests in flight are cut and
recorded as indeterminate, nothing new starts (no reference, probe or replay), the iteration in
flight is judged and kept on what it has, and the campaign ends within `BUDGET_GRACE_S` of it
whatever the server does. The caller watches through `on_event`, which gets the state with its last event
(`CampaignState.last`, a `campaign.events` record). A strategy that raises is
benched for the rest of the campaign (its error kept in `progress.json` and shown), and the
campaign goes on with the others.

The loop is one for every executor: scenarios run on `Worker`s (`LocalWorker`: the Runner of this
process; `servefuzz.scaleout`: Ray actors that own their servers), one scenario in flight per
worker, while the corpus, the feedback, the noise model and the dedup stay here.

A target that dies mid-campaign is a crash finding. When servefuzz launched the server itself
the caller passes a `Revival`: the crash finding then carries the server's exit status and the
tail of its log, the server is started again, the scenario is replayed there to confirm the
crash (`CRASH_REPLAYS`), and the campaign goes on (up to `max_restarts`). A target that stops
answering after its requests hang (`trial.stopped_answering`) is lost the same way, alive: its
hang is the finding, and it is started again and replayed like a crash.

The package, in import order: `events` (what the loop tells whoever watches: typed, rendered
by `progress`), `records` (config, state, result, `StopReason`), `stops` (the
stop conditions the loop asks), `workers` (the `Worker` protocol, `LocalWorker`), `choose` (an
iteration's seed and scenario, `shape_of`), `observe` (an execution judged), `objective` (its
finding, confirmed), `iteration` (one iteration: observe -> feedback -> objective), `loop`
(the dispatcher, and resuming from `store.Progress`).
"""

from __future__ import annotations

from servefuzz.campaign.choose import derive_seed, shape_of
from servefuzz.campaign.events import (
    CampaignEvent,
    Chose,
    Confirming,
    FindingKept,
    LeadFollowed,
    NotBackOnRestart,
    ReplayingOnRestart,
    Said,
    ServerLost,
    SourceFailed,
    WorkerDropped,
)
from servefuzz.campaign.loop import run_campaign, run_campaign_on
from servefuzz.campaign.objective import CRASH_REPLAYS
from servefuzz.campaign.records import (
    BUDGET_GRACE_S,
    COVERAGE_FILE,
    CampaignConfig,
    CampaignResult,
    CampaignState,
    Stop,
    StopReason,
)
from servefuzz.campaign.workers import LocalWorker, Revival, Worker, WorkerLost

__all__ = [
    "BUDGET_GRACE_S",
    "COVERAGE_FILE",
    "CRASH_REPLAYS",
    "CampaignConfig",
    "CampaignEvent",
    "CampaignResult",
    "CampaignState",
    "Chose",
    "Confirming",
    "FindingKept",
    "LeadFollowed",
    "LocalWorker",
    "NotBackOnRestart",
    "ReplayingOnRestart",
    "Revival",
    "Said",
    "ServerLost",
    "SourceFailed",
    "Stop",
    "StopReason",
    "Worker",
    "WorkerDropped",
    "WorkerLost",
    "derive_seed",
    "run_campaign",
    "run_campaign_on",
    "shape_of",
]
