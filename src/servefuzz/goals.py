"""Goals: the engine's own meters as objectives of the search (issue 53).

Each mechanism the server has on, or its profile aims at (`exercise.Setting`), is a goal, reached
once its meter shows it at work (`exercise.Exercise.exercised`: hits, splits, evictions, accepted
drafts, read from the answers and `/metrics`). "Nothing about it was tested" is a diagnosis; a
search that then goes and tests it is the cure. A goal still at zero once a share of the budget is
spent (`GOAL_AFTER`) is *pursued*: the schedule gives part of its turns (`corpus.Schedule.focus`)
to the strategies aimed at it (`AIMED_AT`), until its meter moves or they have run `GOAL_TRIES`
scenarios for it and it is given up. The closing summary then says, first, what stayed at zero,
what was tried for the rest, and why it cannot have worked where servefuzz can tell (`why_unreached`).

A goal may have parts (`goal_parts`: the engine's meters that count one kind of its work, such as
retractions of seeded requests): it is reached only once each part the target can move has moved,
so a retraction of a greedy request does not close the goal of retracting a seeded one.

    >>> from servefuzz.exercise import Count, Exercise, Setting
    >>> on = (Setting(Feature.PREFIX_CACHE, True, "x"), Setting(Feature.EVICTION, True, "profile p", aimed=True))
    >>> p = Pursuit(offered=("burst-reuse", "eviction", "random"))
    >>> p.update(Exercise(settings=on), iteration=3, spent=0.05)  # too early: nothing pursued yet
    >>> p.focus
    ()
    >>> hit = Exercise(counts=(Count(Feature.PREFIX_CACHE, "hits", 4, "cached_tokens", 9),), settings=on)
    >>> p.update(hit, iteration=9, spent=0.2)
    >>> p.focus, [g.feature.value for g in p.open]
    (('eviction',), ['eviction'])
    >>> for i in range(GOAL_TRIES):
    ...     p.ran("eviction")
    >>> p.update(hit, iteration=30, spent=0.4)
    >>> p.focus, p.goals[Feature.EVICTION].given_up
    ((), True)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from servefuzz.engines.spec import Feature, Meter
from servefuzz.exercise import Exercise
from servefuzz.strategies import TargetShape
from servefuzz.strategies.prefix import EvictionPressure

__all__ = ["AIMED_AT", "GOAL_AFTER", "GOAL_SHARE", "GOAL_TRIES", "Goal", "Pursuit", "budget_spent", "goal_parts",
           "standing_goals", "why_unreached"]

# The share of the budget (time or requests) a campaign spends as it likes before it pursues a goal
# still at zero: the first round and the feedback's own choices reach most mechanisms by then.
GOAL_AFTER = 0.15
# While a goal is pursued, this share of the schedule's turns goes to the strategies aimed at it.
GOAL_SHARE = 0.5
# Scenarios of its strategies a pursued goal gets before it is given up: enough that a strategy
# that reaches a mechanism one scenario in four (chunk-boundary's split past the budget) misses it
# with odds of 3% (0.75 ** 12), few enough that a mechanism out of reach costs little.
GOAL_TRIES = 12
# A campaign with no budget (it runs until stopped) counts this many scenarios as its whole.
UNBUDGETED_SCENARIOS = 200

# The strategies that aim at each mechanism, the first the likeliest to move its meter. Strategies
# a target is not offered (`strategies.offered`) are left out of its pursuit.
AIMED_AT: Mapping[Feature, tuple[str, ...]] = {
    Feature.PREFIX_CACHE: ("burst-reuse", "page-boundary", "state-restore"),
    Feature.HOST_CACHE: ("host-tier-return", "eviction"),
    Feature.PREEMPTION: ("retraction", "eviction", "long-decode"),
    Feature.EVICTION: ("eviction", "host-tier-return"),
    Feature.CHUNKED_PREFILL: ("chunk-boundary", "prefill-abort"),
    Feature.SPECULATIVE: ("spec-echo", "long-decode"),
    Feature.ADAPTERS: ("lora-alternation",),
    Feature.ABORTS: ("cancel-storm", "prefill-abort"),
    # Every request of a prefill/decode pair moves its KV; a burst puts transfers in flight at once.
    Feature.KV_TRANSFER: ("burst-reuse",),
}


@dataclass(frozen=True)
class Goal:
    """One mechanism's goal: when it was first pursued and first reached (iterations; None: not
    yet), and the scenarios each strategy ran for it while it was pursued."""

    feature: Feature
    strategies: tuple[str, ...]  # the offered strategies aimed at it
    pursued_at: int | None = None
    reached_at: int | None = None
    tried: Mapping[str, int] = field(default_factory=dict)
    # The parts still at zero (their counters' names) where the feature's meter has moved.
    missing: tuple[str, ...] = ()

    @property
    def given_up(self) -> bool:
        """Not reached, and each strategy aimed at it has had its share of `GOAL_TRIES` (a strategy
        the mix runs often anyway, eviction, must not use up the tries of a rarer one), or twice
        `GOAL_TRIES` were run in all."""
        if self.reached_at is not None:
            return False
        each = max(1, GOAL_TRIES // max(1, len(self.strategies)))
        return (all(self.tried.get(n, 0) >= each for n in self.strategies)
                or sum(self.tried.values()) >= 2 * GOAL_TRIES)

    @property
    def pursued(self) -> bool:
        """Being pursued now: opened, not reached, not given up, with a strategy to pursue it by."""
        return self.pursued_at is not None and self.reached_at is None and not self.given_up and bool(self.strategies)

    def to_json(self) -> dict[str, Any]:
        return {"feature": self.feature.value, "strategies": list(self.strategies), "pursued_at": self.pursued_at,
                "reached_at": self.reached_at, "tried": dict(self.tried),
                **({"missing": list(self.missing)} if self.missing else {})}


class Pursuit:
    """The campaign's goals, updated after every execution (`update`) and every scenario a pursued
    goal's strategy ran (`ran`); `focus` is what the schedule is asked to favour."""

    def __init__(self, offered: Sequence[str], parts: Mapping[Feature, Sequence[str]] | None = None,
                 standing: Sequence[Feature] = ()) -> None:
        self.offered = tuple(offered)
        self.parts = {f: tuple(p) for f, p in (parts or {}).items()}  # `goal_parts`
        self.standing = tuple(standing)  # `standing_goals`: goals whatever the server's switches say
        self.goals: dict[Feature, Goal] = {}

    def update(self, exercise: Exercise, *, iteration: int, spent: float) -> None:
        """Take in what the engine has done so far (the campaign's cumulative `exercise`) at
        `iteration`, `spent` the share of the budget used (0-1)."""
        wanted = [s.feature for s in exercise.settings if s.on or s.aimed] + list(self.standing)
        for f in wanted:
            if f not in self.goals:
                self.goals[f] = Goal(f, tuple(n for n in AIMED_AT.get(f, ()) if n in self.offered))
        for f, g in self.goals.items():
            if g.reached_at is not None:
                continue
            moved = {c.source for c in exercise.of(f) if c.shows and c.value > 0}
            missing = tuple(m for m in self.parts.get(f, ()) if m not in moved) if moved else ()
            if moved and not missing:
                self.goals[f] = replace(g, reached_at=iteration, missing=())
            elif g.pursued_at is None and spent >= GOAL_AFTER:
                self.goals[f] = replace(g, pursued_at=iteration, missing=missing)
            elif missing != g.missing:
                self.goals[f] = replace(g, missing=missing)

    def ran(self, strategy: str) -> None:
        """Book one scenario of `strategy` against every goal it is pursued for."""
        for f, g in self.goals.items():
            if g.pursued and strategy in g.strategies:
                self.goals[f] = replace(g, tried={**g.tried, strategy: g.tried.get(strategy, 0) + 1})

    @property
    def open(self) -> tuple[Goal, ...]:
        return tuple(g for g in self.goals.values() if g.pursued)

    @property
    def focus(self) -> tuple[str, ...]:
        """The strategies of the goals pursued now, each once, in the goals' order."""
        return tuple(dict.fromkeys(n for g in self.open for n in g.strategies))

    def said(self, shape: TargetShape) -> tuple[str, ...]:
        """One line per goal never reached, with why (`why_unreached`): the summary's first lines."""
        return tuple(f"{g.feature.words}: {'not every kind reached' if g.missing else 'still at zero'}: "
                     f"{why_unreached(g, shape)}" for g in self.missed())

    def missed(self) -> tuple[Goal, ...]:
        """The goals never reached, in `Feature` order: what the summary says first."""
        return tuple(self.goals[f] for f in Feature if f in self.goals and self.goals[f].reached_at is None)

    def to_json(self) -> list[dict[str, Any]]:
        return [self.goals[f].to_json() for f in Feature if f in self.goals]


def budget_spent(*, elapsed_s: float, time_budget_s: float | None, requests: int, request_budget: int | None,
                 scenarios: int) -> float:
    """The share of its budget a campaign has spent: the larger of time and requests where it has
    either, else its scenarios against `UNBUDGETED_SCENARIOS`.

    >>> budget_spent(elapsed_s=30, time_budget_s=300, requests=900, request_budget=1000, scenarios=40)
    0.9
    >>> budget_spent(elapsed_s=30, time_budget_s=None, requests=900, request_budget=None, scenarios=40)
    0.2
    """
    shares = [elapsed_s / time_budget_s] if time_budget_s else []
    shares += [requests / request_budget] if request_budget else []
    return max(shares) if shares else scenarios / UNBUDGETED_SCENARIOS


def standing_goals(shape: TargetShape) -> tuple[Feature, ...]:
    """The mechanisms the target's own size puts within reach, whatever its switches say: a pool
    one scenario can fill past (`small-pool`) retracts or preempts, so preemption is a goal there.

    >>> standing_goals(TargetShape(max_total_tokens=4096)), standing_goals(TargetShape())
    ((<Feature.PREEMPTION: 'preemption'>,), ())
    """
    return (Feature.PREEMPTION,) if "small-pool" in shape.conditions else ()


def goal_parts(meters: Sequence[Meter], capabilities: Collection[str]) -> dict[Feature, tuple[str, ...]]:
    """Each feature's parts on this target: the counters (`Meter.part`) that count one kind of its
    work and that the target can move (a part named "any", or one of its `capabilities`).

    >>> m = (Meter("r", Feature.PREEMPTION, "retracted"), Meter("r{s}", Feature.PREEMPTION, "seeded", part="seeds"),
    ...      Meter("r{n}", Feature.PREEMPTION, "forks", part="any"), Meter("r{a}", Feature.PREEMPTION, "adapter", part="adapters"))
    >>> goal_parts(m, {"seeds"})
    {<Feature.PREEMPTION: 'preemption'>: ('r{s}', 'r{n}')}
    """
    out: dict[Feature, tuple[str, ...]] = {}
    for m in meters:
        if m.part is not None and (m.part == "any" or m.part in capabilities):
            out[m.feature] = (*out.get(m.feature, ()), m.metric)
    return out


def why_unreached(goal: Goal, shape: TargetShape) -> str:
    """Why the goal's meter stayed at zero, where servefuzz can tell from the target's facts; else
    what was tried and that it did not move the meter.

    >>> why_unreached(Goal(Feature.CHUNKED_PREFILL, ("chunk-boundary",), 5, None, {"chunk-boundary": 12}),
    ...               TargetShape(context_length=4096, chunked_prefill_size=8192))
    'the step budget (8,192 tokens) is above the longest prompt the server takes (4,032): only prompts batched together past it can be cut'
    >>> why_unreached(Goal(Feature.SPECULATIVE, ()), TargetShape())
    'no strategy offered to this target aims at it'
    """
    room = shape.pool_tokens - 64  # what the strategies leave of the pool for one prompt
    budget = shape.chunked_prefill_size
    if goal.feature is Feature.CHUNKED_PREFILL and budget is not None and budget >= room:
        return (f"the step budget ({budget:,} tokens) is above the longest prompt the server takes ({room:,}): "
                "only prompts batched together past it can be cut")
    pool = shape.max_total_tokens
    if goal.feature in (Feature.EVICTION, Feature.PREEMPTION, Feature.HOST_CACHE) and pool is not None \
            and pool * 1.1 > EvictionPressure.cap_tokens:
        return (f"the pool holds {pool:,} tokens; the pressure a scenario sends is capped at "
                f"{EvictionPressure.cap_tokens:,} (a smaller pool, e.g. a pressure profile, reaches it)")
    if goal.missing:
        tried = Counter(goal.tried)
        ran = ", ".join(f"{n} {k}" for n, k in tried.most_common()) or "none yet"
        return (f"its meter moved, but not for {', '.join(goal.missing)} (scenarios aimed at it: {ran})")
    if not goal.strategies:
        return "no strategy offered to this target aims at it"
    if goal.pursued_at is None:
        return "the campaign ended before it was pursued"
    tried = Counter(goal.tried)
    ran = ", ".join(f"{n} {k}" for n, k in tried.most_common()) or "none yet"
    return f"pursued from iteration {goal.pursued_at} (scenarios: {ran}); its meter never moved"
