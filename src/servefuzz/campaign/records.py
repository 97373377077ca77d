"""The campaign's records: what it is asked to do (`CampaignConfig`), what it has done so far
(`CampaignState`), what it did (`CampaignResult`), and why it stopped (`StopReason`, in words
`Stop.detail`)."""

from __future__ import annotations

import enum
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servefuzz.anomaly import Verdict
from servefuzz.campaign.events import CampaignEvent
from servefuzz.confirm import TruthCheck
from servefuzz.corpus import MUTATE_SHARE, Power
from servefuzz.coverage import Coverage
from servefuzz.exercise import Exercise
from servefuzz.finding import Finding
from servefuzz.flushcheck import FlushCheck
from servefuzz.goals import Goal
from servefuzz.launcher import Launch

__all__ = [
    "BUDGET_GRACE_S",
    "COVERAGE_FILE",
    "CampaignConfig",
    "CampaignResult",
    "CampaignState",
    "Stop",
    "StopReason",
    "is_confirmed",
]

# The campaign's pairwise coverage (`coverage.Coverage.to_json`), rewritten atomically after
# every iteration (before progress.json) when `CampaignConfig.coverage` is on.
COVERAGE_FILE = "coverage.json"
# How long past its time budget a campaign may still run. At the budget the runner cuts every
# request in flight (recorded as cancelled: indeterminate) and starts nothing more, so what is
# left is the iteration's own bookkeeping: judging what it has, appending its histories, writing
# corpus, coverage and progress (pure computation and a few fsyncs: well under a second even for
# the largest scenario on a busy 2-core machine). 5 s is that many times over, and small beside
# any budget worth setting; past it the loop cancels whatever it still waits for (a remote
# worker's scenario, which no local deadline cuts) and ends, unrecorded, rather than wait.
BUDGET_GRACE_S = 5.0


class StopReason(enum.Enum):
    """Why a campaign stopped, one member per way it can (as Hypothesis's `ExitReason`); what
    happened in words is the `Stop.detail` beside it."""

    TIME_BUDGET = "time-budget"  # the time budget is spent (past its grace: what was in flight is cut)
    REQUEST_BUDGET = "request-budget"  # the request budget is spent
    FIRST_CONFIRMED = "first-confirmed"  # `stop_at_first`: a confirmed finding (of `stop_verdicts`)
    STRATEGIES_FAILED = "strategies-failed"  # every strategy raised and is benched: nothing left to run
    TARGET_LOST = "target-lost"  # the server died or wedged and could not be (or may not be) started again


@dataclass(frozen=True)
class Stop:
    """Why a campaign stopped: the reason, and the line the campaign prints and stores for it
    (`CampaignResult.stopped_because`, `fuzz --json`'s `stopped_because`)."""

    reason: StopReason
    detail: str

    def __str__(self) -> str:
        return self.detail


@dataclass(frozen=True)
class CampaignConfig:
    """What a campaign does and when it stops. None budgets mean "no limit of that kind".

    `stop_verdicts`: with `stop_at_first`, only a confirmed finding of one of these verdicts
    stops the campaign (empty: any). `cache_probes`: requests per scenario probed warm and
    primed. `performance`: noisy-neighbour slowdowns become findings (otherwise they only steer,
    as the `slow:` feature). `resume`: continue the campaign in `out_dir`; without it a
    directory that already holds a campaign is refused. `greybox=False` never mutates the
    corpus: every scenario comes fresh from a strategy (how anchor batteries are replayed).
    `max_restarts`: how many times a launched server that died is started again (a server that
    dies on every scenario would otherwise be restarted forever). `truth_model`: the GGUF or HF
    folder the target serves, when servefuzz built it (`servefuzz.truth` computes it exactly): a
    suspected corruption the content swap left unbacked is then held against the truth too.
    `launch`: how the target was started, when servefuzz started it: a suspected corruption the
    content swap left unbacked then gets the deterministic control (a fresh server in the
    engine's deterministic mode, `servers.deterministic_control`), where the engine has one.
    Confirmation reads `confirm_runs`, `truth_model` and `launch` alone, as `confirm.ConfirmConfig`.
    `aims`: strategies the first round runs first (a feature profile's `Profile.aims`), ahead of
    those the target's shape points at (`strategies.shape_aims`: eviction first on a small pool).
    `coverage`: track pairwise feature coverage (`servefuzz.coverage`, kept in `coverage.json`):
    the `pairwise` covering generator joins the mix, the `cross` mutator joins the havoc, and
    every pair a scenario is first to exercise counts as a new feature (`pair:...`), so it gives
    the scenario energy and its strategy weight. Off by default until it is measured.
    `flush_check`: prove the flush first (`servefuzz.flushcheck`: a probe at the start, every cold
    reference after); off only for a battery that must send nothing but its own scenarios.
    `engine_coverage`: steer by the engine's own code where it reports it (the reference
    engine's `--coverage`, which a launched one gets unless `--no-engine-coverage`; a launched vLLM
    or SGLang, servefuzz's tracer, with `--engine-coverage`): each point
    of its code in context a scenario is first to reach (`feedback.COV`) is a new feature, and
    the rarer its points the more energy (`corpus.Corpus.rarity`). False: the points are still
    read (`Executed.engine_coverage`) but steer nothing: the benchmark's control arm.
    `power`: the corpus's power schedule (`corpus.POWER_SCHEDULES`; `fast` is AFL's
    path-frequency one, not measured to beat the default on every seed); `mutate_share`: the share of
    turns after the first round that mutate a corpus entry (`corpus.MUTATE_SHARE`; greybox off: none).
    `credit_contexts`: with `engine_coverage`, the strategy schedule gives more fresh turns to the
    strategies whose fresh scenarios recently reached new engine step contexts (`corpus.Schedule.reward`,
    a decayed score with a floor); with `share_by_contexts` too, the share of mutation turns moves
    the same way, by the new step contexts mutants reached against fresh scenarios
    (`corpus.Schedule.mutation_chance`). Opt-in: per request the bandit reached more engine context
    points than no feedback on 3 of 3 seeds, beyond two replicas' spread, but the zoo's
    leave-one-out with it on missed abort-reuse on the one seed run (docs/benchmarks.md), so it
    waits for that measure on more seeds; `share_by_contexts` stays opt-in too.
    """

    out_dir: Path
    seed: int = 0
    runs: int = 2
    confirm_runs: int = 5
    time_budget_s: float | None = None
    request_budget: int | None = None
    stop_at_first: bool = False
    stop_verdicts: tuple[str, ...] = ()
    isolation: bool = True
    cache_probes: int = 1
    performance: bool = False
    resume: bool = False
    greybox: bool = True
    max_restarts: int = 5
    truth_model: Path | None = None
    launch: Launch | None = None
    coverage: bool = False
    aims: tuple[str, ...] = ()
    engine_coverage: bool = True
    flush_check: bool = True
    power: Power = "rare"
    mutate_share: float = MUTATE_SHARE
    credit_contexts: bool = False
    share_by_contexts: bool = False

    def __post_init__(self) -> None:
        if self.runs < 2:
            raise ValueError("runs must be >= 2: replay consistency compares runs")
        if self.confirm_runs < 1:
            raise ValueError("confirm_runs must be >= 1")


@dataclass
class CampaignState:
    """Live, mutable counters for the progress display (persisted only as totals)."""

    started: float = field(default_factory=time.monotonic)
    elapsed_before_s: float = 0.0  # spent by earlier sessions of a resumed campaign
    iteration: int = 0
    requests: int = 0
    features: int = 0
    corpus: int = 0
    anomalies: Counter[str] = field(default_factory=Counter)
    findings: list[tuple[Path, Finding]] = field(default_factory=list)
    seen: Counter[str] = field(default_factory=Counter)  # signature -> times found
    restarts: int = 0  # of a launched server that died, this campaign, resumed sessions included
    last: CampaignEvent | None = None  # what happened last (`campaign.events`), for the display
    coverage: Coverage | None = None  # pairwise feature coverage, when the campaign tracks it
    workers: dict[str, str] = field(default_factory=dict)  # a named (remote) worker -> what it does now
    exercise: Exercise = field(default_factory=Exercise)  # what the engine did (servefuzz.exercise)
    truth: TruthCheck | None = None  # whether the engine computes the built model (`truth_model`), once read
    flush: FlushCheck | None = None  # whether a flush empties every tier (`servefuzz.flushcheck`)

    @property
    def elapsed_s(self) -> float:
        return self.elapsed_before_s + time.monotonic() - self.started

    @property
    def findings_by_verdict(self) -> Counter[str]:
        return Counter(f.verdict.value for _, f in self.findings)


@dataclass(frozen=True)
class CampaignResult:
    iterations: int
    requests: int
    elapsed_s: float
    findings: tuple[tuple[Path, Finding], ...]
    stop: Stop
    features: int = 0
    corpus: int = 0
    seen: Mapping[str, int] = field(default_factory=dict)
    # verdict -> (requests, seconds) at its first confirmed finding: the detection-power numbers
    first_confirmed: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    restarts: int = 0
    coverage: Coverage | None = None
    exercise: Exercise = field(default_factory=Exercise)  # what the engine did (servefuzz.exercise)
    truth: TruthCheck | None = None  # whether the engine computes the built model (`CampaignState.truth`)
    # The engine's meters as goals (`servefuzz.goals`): each goal's record, and one line per goal
    # that stayed at zero with why, which the summary says first.
    goals: tuple[Goal, ...] = ()
    unreached: tuple[str, ...] = ()
    flush: FlushCheck | None = None  # whether a flush empties every tier (`CampaignState.flush`)

    @property
    def stopped_because(self) -> str:
        """Why the campaign stopped, in words (the `stopped_because` every summary has held)."""
        return self.stop.detail

    @property
    def found(self) -> bool:
        """Whether a finding is more than benign numerics: what `fuzz`'s exit 1 means. A
        numeric-drift finding is kept and listed, but its verdict is that it is no bug, and a CI
        job that gates on the exit code must not fail on it. On a server whose mode promised
        that even those would not happen, the same flip is a `contract-violation` (a finding)."""
        return any(f.verdict is not Verdict.NUMERIC_DRIFT for _, f in self.findings)

    def to_json(self) -> dict[str, Any]:
        # Pairwise coverage only when the campaign tracked it: the summary's shape is otherwise unchanged.
        tracked = {} if self.coverage is None else {"coverage": {
            "covered_pairs": self.coverage.covered, "total_pairs": self.coverage.total,
            "covered_triples": len(self.coverage.triples), "total_triples": len(self.coverage.space.triples),
        }}
        # The truth check only where the campaign had a built model to hold the engine to.
        checked = {} if self.truth is None else {"truth_check": self.truth.to_json()}
        flushed = {} if self.flush is None else {"flush_check": self.flush.to_json()}
        return {
            **tracked,
            **checked,
            **flushed,
            "exercise": self.exercise.to_json(),
            "goals": [g.to_json() for g in self.goals],
            "unreached": list(self.unreached),
            "iterations": self.iterations,
            "requests": self.requests,
            "elapsed_s": round(self.elapsed_s, 3),
            "stopped_because": self.stop.detail,
            "stop_reason": self.stop.reason.value,
            "features": self.features,
            "corpus": self.corpus,
            "restarts": self.restarts,
            "first_confirmed": {v: {"requests": r, "elapsed_s": round(s, 3)} for v, (r, s) in self.first_confirmed.items()},
            "findings": [
                {
                    "path": str(p),
                    "verdict": f.verdict.value,
                    "why": f.why,
                    "rate": f.confirmation.rate if f.confirmation else None,
                    "diverged": list(f.expected_diverging),
                    "signature": f.signature,
                    "count": self.seen.get(f.signature, 1),
                }
                for p, f in self.findings
            ],
        }


def is_confirmed(f: Finding) -> bool:
    return f.confirmation is not None and f.confirmation.reproduced > 0
