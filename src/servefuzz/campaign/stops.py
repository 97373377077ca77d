"""When a campaign stops: a list of stop conditions the loop asks (as guidellm's constraints),
each a tiny object that answers a `Moment` with a `Stop` or None.

The loop asks the whole list between iterations (before it sends the next scenario) and of
every finding it keeps; a condition speaks only of the moment it is about: the budgets and the
benched strategies between iterations, the first confirmed finding of a finding kept. Where
only the budgets matter ("is it past the budget?": no restart, no replay past it) the loop asks
the conditions that are budgets (`budget`). A lost target is no condition: it is what a restart
that fails (or may not be tried) says (`StopReason.TARGET_LOST`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from servefuzz.campaign.records import CampaignConfig, CampaignState, Stop, StopReason, is_confirmed
from servefuzz.corpus import Schedule
from servefuzz.finding import Finding

__all__ = [
    "EveryStrategyFailed",
    "FirstConfirmed",
    "Moment",
    "RequestBudget",
    "StopCondition",
    "TimeBudget",
    "budgets",
    "first_stop",
    "stop_conditions",
]


@dataclass(frozen=True)
class Moment:
    """What a stop condition is asked about: the campaign between iterations (`kept` None), or
    a finding it has just kept (`kept`)."""

    state: CampaignState
    schedule: Schedule
    kept: Finding | None = None


class StopCondition(Protocol):
    @property
    def budget(self) -> bool:
        """Whether this is a budget: past it nothing more starts (a restart, a replay)."""
        ...

    def __call__(self, now: Moment) -> Stop | None:
        """Why the campaign must stop now; None: not for this."""
        ...


@dataclass(frozen=True)
class TimeBudget:
    seconds: float
    budget = True

    @property
    def spent(self) -> Stop:
        return Stop(StopReason.TIME_BUDGET, f"time budget of {self.seconds:g} s spent")

    def __call__(self, now: Moment) -> Stop | None:
        return self.spent if now.kept is None and now.state.elapsed_s >= self.seconds else None


@dataclass(frozen=True)
class RequestBudget:
    requests: int
    budget = True

    def __call__(self, now: Moment) -> Stop | None:
        if now.kept is None and now.state.requests >= self.requests:
            return Stop(StopReason.REQUEST_BUDGET, f"request budget of {self.requests:,} spent")
        return None


@dataclass(frozen=True)
class FirstConfirmed:
    """`stop_at_first`: a confirmed finding stops the campaign (only one of `verdicts`, if any)."""

    verdicts: tuple[str, ...] = ()
    budget = False

    def __call__(self, now: Moment) -> Stop | None:
        f = now.kept
        if f is None or not is_confirmed(f) or (self.verdicts and f.verdict.value not in self.verdicts):
            return None
        return Stop(StopReason.FIRST_CONFIRMED, "first confirmed finding")


@dataclass(frozen=True)
class EveryStrategyFailed:
    """Every strategy raised and is benched (`Schedule.bench`): nothing is left to generate from."""

    budget = False

    def __call__(self, now: Moment) -> Stop | None:
        if now.kept is not None or now.schedule.active:
            return None
        return Stop(StopReason.STRATEGIES_FAILED,
                    "every strategy failed: " + "; ".join(f"{k}: {v}" for k, v in now.schedule.benched.items()))


def stop_conditions(config: CampaignConfig) -> tuple[StopCondition, ...]:
    """The conditions `config` sets, in the order they are asked (the first to answer is the
    reason given): every strategy benched first (it is true only just after the last one was
    benched), then the time budget before the request budget, then the first confirmed finding
    (which alone answers a finding kept)."""
    conditions: list[StopCondition] = [EveryStrategyFailed()]
    if config.time_budget_s is not None:
        conditions.append(TimeBudget(config.time_budget_s))
    if config.request_budget is not None:
        conditions.append(RequestBudget(config.request_budget))
    if config.stop_at_first:
        conditions.append(FirstConfirmed(config.stop_verdicts))
    return tuple(conditions)


def budgets(conditions: Iterable[StopCondition]) -> tuple[StopCondition, ...]:
    return tuple(c for c in conditions if c.budget)


def first_stop(conditions: Iterable[StopCondition], now: Moment) -> Stop | None:
    """The first condition's answer that is a stop; None when none is."""
    for condition in conditions:
        if (stop := condition(now)) is not None:
            return stop
    return None
