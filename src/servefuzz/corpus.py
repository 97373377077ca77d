"""The corpus and the schedule: which scenario to run next, by energy.

The corpus keeps every scenario that reached a feature (see `servefuzz.feedback`) no earlier
scenario reached. Each iteration either *generates* a fresh scenario from a strategy or
*mutates* a corpus entry; both choices are weighted by a simple energy schedule:

- an entry's energy is `(1 + the novelty of what it was first to reach) x (2 if an oracle flagged it)
  x (1 + its rarity) / (1 + times it was picked)`: novel and suspicious scenarios are mutated
  first, and none is mutated forever. The rarity is what the engine did under the entry's
  load and few other entries made it do (`feedback.did_features`: an eviction, a preemption,
  an abort): the sum, over its `did:` features, of 1 / the entries holding that feature. A
  scenario that alone made the pool evict keeps twice the energy of one like it that did
  not, for as long as it stays the only one (AFL++'s rare-edge schedule, over what the engine
  reported rather than branches). Engine coverage (`feedback.COV`: the reference engine's own
  edges in context) counts the same way, per point (its hit buckets together): an entry that
  alone reached some code of the scheduler has that much more energy, AFL's rare-edge schedule
  over real edges. Its new points count in `novelty` by their log2, not one each: a scenario's
  first execution reaches thousands, and counted one each they would outweigh everything else
  the schedule knows;
- a strategy's weight is `(1 + the novelty of what its scenarios were first to reach, engine
  coverage left out: `credit`) / (1 +
  seconds its scenarios took / 10)`, so strategies that keep finding something run more often, costly
  ones that find nothing new fade, and every strategy keeps a chance. With `contexts` on (opt-in,
  with engine coverage steering: `CampaignConfig.credit_contexts`), that
  weight is further multiplied by `CONTEXT_FLOOR + ` the strategy's decayed count of new engine
  step contexts per fresh scenario (`Schedule.reward`): a bandit that gives the fresh turns to
  the generators whose scenarios keep reaching new mixes of requests in flight (the covering
  arrays, on the reference engine), none starving;

A *lead* is a scenario that showed a confident flip no replay showed again (`Corpus.follow`):
an objective glimpsed and lost, where a bug that needs state the scenario only sometimes builds
lives (llama.cpp's RAM prompt cache: one such scenario flipped once in 30 replays, while 2 of 14
of its mutants flipped in 6 of 6). After the first round its next `LEAD_MUTATIONS` picks are
all mutations of it, ahead of anything else; one lead at a time, one per signature, so a
noisy engine's glimpses cost at most that many scenarios each.

The first round runs every strategy once, in the mix's order (`first_round`: the covering
arrays right after the strategies written for the capabilities they draw, not last). Everything
here is pure state; the campaign persists it (`to_json` / `from_json`) after every iteration.

    >>> import random
    >>> from servefuzz.workload import RequestSpec, Scenario
    >>> c = Corpus()
    >>> sc = Scenario(1, (RequestSpec("r01", 0.0, (5, 6), 4),))
    >>> c.consider(sc, frozenset({"conc:1"}), origin="random", iteration=0, flagged=False).id
    0
    >>> c.consider(sc, frozenset({"conc:1"}), origin="random", iteration=1, flagged=False) is None
    True
    >>> s = Schedule(("page-boundary", "random"))
    >>> [s.next(random.Random(0), i, c)[0] for i in range(2)]
    ['generate', 'generate']
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from servefuzz.feedback import COV, CTX, DID, EDGE
from servefuzz.workload import Scenario

__all__ = ["CONTEXT_DECAY", "CONTEXT_FLOOR", "FAST_CAP", "LEAD_MUTATIONS", "MUTATE_SHARE", "POWER_SCHEDULES", "SPEED_RANGE",
           "Corpus", "CorpusEntry", "Lead", "Power", "Schedule", "credit", "first_round", "new_contexts", "novelty"]

# After the first round, the share of iterations that mutate a corpus entry rather than
# generate afresh (when the corpus is not empty).
MUTATE_SHARE = 0.5
# Seconds of execution that weigh as much as one use in a strategy's weight.
COST_UNIT_S = 10.0
# How many mutations of a lead (`Corpus.follow`) come before anything else: its mutants made the
# glimpsed flip again in 6 of 6 replays for 2 of 14 (the RAM-cache lead above), so twelve find such a
# mutant five times in six.
LEAD_MUTATIONS = 12
# The power schedules (`Corpus.energy`): `rare`, the default, divides by the picks and weighs an
# entry by its rarest engine edge or context among the *entries*; `fast`, AFL's path-frequency
# schedule (Boehme et al., "Coverage-based Greybox Fuzzing as Markov Chain"), by how often the
# *executions* exercised the entry's rarest edge or context, rising with its picks while that stays
# rare; `breadth`, by how many distinct engine step contexts the entry's execution reached (a
# scenario that mixes many kinds of requests is a door to more mixes; no execution-time factor).
# `fast` and `breadth` are off by default: not measured to beat `rare` on every seed (docs/benchmarks.md).
Power = Literal["rare", "fast", "breadth"]
POWER_SCHEDULES: tuple[Power, ...] = ("rare", "fast", "breadth")
# `fast`'s bound on 2**picks / frequency (AFL's MAX_FACTOR is 32 x its beta): one entry whose rare
# context stays rare may outweigh a fresh one by this much, and no more.
FAST_CAP = 32.0
# `fast`'s execution-time factor's bounds (`Corpus.speed`): AFL's are 0.1 and 3.
SPEED_RANGE = (0.25, 3.0)
# The context bandit (`Schedule.reward`): a strategy's score is its fresh scenarios' new engine step
# contexts, each new reward weighing 1 - CONTEXT_DECAY against the score before (recent yield counts
# most: contexts saturate as a campaign goes on); CONTEXT_FLOOR is added to every score, so a strategy
# whose scenarios reached nothing new keeps a share (one new context's worth of score outweighs it 3:1).
CONTEXT_DECAY = 0.5
CONTEXT_FLOOR = 0.5


def _rare(feature: str) -> str | None:
    """What a feature counts as in the rarity (`Corpus.rarity`): a `did:` feature, an engine
    edge or an engine context itself; None for the rest (an engine point among them: a new
    context brings hundreds, and it is the context, or the edge, that is rare)."""
    return feature if feature.startswith((DID, EDGE, CTX)) else None


def novelty(new: Iterable[str]) -> int:
    """How much a set of features never seen before counts for: one each, a new engine context
    (a new mix of requests in flight) among them; new engine edges and new engine points by the
    log2 of their number (one: 1; 1,000: 10), so that a first execution's hundreds of edges and
    thousands of points do not drown everything else the schedule knows.

    >>> novelty({"conc:1", "n:2"}), novelty({"cov:1:1"}), novelty({f"cov:{p:x}:1" for p in range(1000)} | {"n:2"})
    (2, 1, 11)
    >>> novelty({"cov:201:1", "edge:1", "ctx:1"})  # new code, in a new mix of requests
    3
    """
    new = list(new)
    points = len({f.rpartition(":")[0] for f in new if f.startswith(COV)})
    edges = sum(1 for f in new if f.startswith(EDGE))
    rest = sum(1 for f in new if not f.startswith((COV, EDGE)))
    return rest + math.ceil(math.log2(1 + edges)) + math.ceil(math.log2(1 + points))


def credit(new: Iterable[str]) -> int:
    """What a strategy is credited for a scenario's new features (`Schedule.credit`): their
    novelty, the engine's own coverage left out. Engine points reward the corpus entry that
    reached them (its energy); credited to the strategy too, they drew the schedule to the few
    strategies whose scenarios reach many points, and a campaign steered so reached fewer
    contexts per request than one not steered by them (docs/benchmarks.md).

    >>> credit({"conc:1", "cov:201:1", "edge:1", "ctx:1"})
    1
    """
    return novelty(f for f in new if not f.startswith((COV, EDGE, CTX)))


def new_contexts(new: Iterable[str]) -> int:
    """How many engine step contexts (`feedback.CTX`) among features never seen before: what the
    context bandit rewards a strategy for (`Schedule.reward`). Contexts, not points or edges: a
    new context is a new mix of requests in flight, a few tens in a campaign; points come by the
    thousand with any context and, credited to strategies, drew the schedule onto the few whose
    scenarios are large (docs/benchmarks.md).

    >>> new_contexts({"ctx:1a", "ctx:2", "cov:1a0001:1", "edge:1", "conc:8"})
    2
    """
    return sum(1 for f in new if f.startswith(CTX))


def _decayed(before: float | None, now: int) -> float:
    """A bandit's score after one more reward (`CONTEXT_DECAY`); the first one sets it."""
    return float(now) if before is None else CONTEXT_DECAY * before + (1 - CONTEXT_DECAY) * now


def first_round(names: tuple[str, ...], covering: str | None, after: Collection[str] = ()) -> tuple[str, ...]:
    """The first round's turns: `names` once each, in order, with `covering` (one of them, the
    covering arrays) moved to right after the last of `after` (the strategies written for the
    capabilities the arrays draw too: salts, seeds, constraints, adapters), where it stood last
    before. Behind those, a capability bug their own strategy finds cheaply is found by it
    first (a covering scenario is larger, and so is its confirmation); ahead of the costly
    generic ones (long prompts, pool pressure), so that a short campaign without that strategy
    meets the arrays' capabilities (issue 41). None of `after` among `names`: as they are.

    >>> first_round(("a", "s1", "s2", "costly", "P"), "P", after=("s1", "s2"))
    ('a', 's1', 's2', 'P', 'costly')
    >>> first_round(("a", "costly", "P"), "P", after=("s1",)), first_round(("a", "P"), None, after=("a",))
    (('a', 'costly', 'P'), ('a', 'P'))
    """
    last = max((names.index(n) for n in after if n in names), default=None)
    if covering is None or covering not in names or last is None:
        return names
    rest = [n for n in names if n != covering]
    at = rest.index(names[last]) + 1
    return (*rest[:at], covering, *rest[at:])


@dataclass(frozen=True)
class Lead:
    """Why an entry is a lead, and for how long: the signature of the flip it glimpsed, and the
    pick count up to which it is mutated ahead of anything else."""

    signature: str
    until: int


@dataclass(frozen=True)
class CorpusEntry:
    """A kept scenario and what it reached. `origin` is the strategy or `mutate:<parent id>`."""

    id: int
    scenario: Scenario
    features: frozenset[str]
    new: frozenset[str]
    origin: str
    iteration: int
    flagged: bool
    lead: Lead | None = None
    seconds: float = 0.0  # its execution took (0: not measured, an entry of an older campaign)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "origin": self.origin,
            "iteration": self.iteration,
            "flagged": self.flagged,
            **({} if self.lead is None else {"lead": {"signature": self.lead.signature, "until": self.lead.until}}),
            **({"seconds": round(self.seconds, 3)} if self.seconds else {}),
            "features": sorted(self.features),
            "new": sorted(self.new),
            "scenario": self.scenario.to_json(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CorpusEntry:
        lead = d.get("lead")
        return cls(
            id=int(d["id"]), scenario=Scenario.from_json(d["scenario"]), features=frozenset(d["features"]),
            new=frozenset(d["new"]), origin=str(d["origin"]), iteration=int(d["iteration"]), flagged=bool(d["flagged"]),
            lead=None if not lead else Lead(str(lead["signature"]), int(lead["until"])),
            seconds=float(d.get("seconds", 0.0)),
        )


class Corpus:
    """Kept scenarios, the features seen so far, and how often each entry was picked."""

    def __init__(self, entries: Iterable[CorpusEntry] = (), picks: Mapping[int, int] | None = None,
                 power: Power = "rare") -> None:
        self.power = power
        self.entries: list[CorpusEntry] = sorted(entries, key=lambda e: e.id)
        self.seen: set[str] = set().union(*(e.features for e in self.entries)) if self.entries else set()
        self.picks: Counter[int] = Counter(picks or {})
        # How many entries hold each engine-did feature and each engine-coverage point (`_rare`):
        # derived from the entries, so a resumed campaign weighs them as the one it resumes did.
        self.holders: Counter[str] = Counter()
        for e in self.entries:
            self._hold(e.features)
        # How many executions reached each engine edge and context (`fast`'s f(i)), kept or not:
        # a resumed campaign starts from its entries' holders (the executions it threw away are
        # not on disk), which undercounts, so its entries start with more energy, not less.
        self.exercised: Counter[str] = Counter(
            {f: n for f, n in self.holders.items() if f.startswith((EDGE, CTX))})
        # The timed entries' seconds and count (`speed`'s mean), kept as entries come rather than
        # summed again for every entry a pick weighs.
        timed = [e.seconds for e in self.entries if e.seconds > 0]
        self._timed = (sum(timed), len(timed))

    def _hold(self, features: Iterable[str]) -> None:
        self.holders.update({k for f in features if (k := _rare(f)) is not None})

    def __len__(self) -> int:
        return len(self.entries)

    def novel(self, features: Iterable[str]) -> frozenset[str]:
        return frozenset(features) - self.seen

    def consider(
        self, scenario: Scenario, features: frozenset[str], *, origin: str, iteration: int, flagged: bool,
        seconds: float = 0.0,
    ) -> CorpusEntry | None:
        """Keep `scenario` if it reached a feature never seen; return the new entry, else None.
        Every execution is counted towards the frequency of the engine edges and contexts it
        reached (`fast`), kept or not."""
        self.exercised.update(f for f in features if f.startswith((EDGE, CTX)))
        new = self.novel(features)
        if not new:
            return None
        entry = CorpusEntry(len(self.entries), scenario, features, new, origin, iteration, flagged, seconds=seconds)
        self.entries.append(entry)
        if seconds > 0:
            self._timed = (self._timed[0] + seconds, self._timed[1] + 1)
        self.seen |= features
        self._hold(features)
        return entry

    def follow(self, scenario: Scenario, features: frozenset[str], *, signature: str, origin: str,
               iteration: int) -> CorpusEntry | None:
        """Make `scenario` (kept already, or kept now though it reached nothing new) the lead for
        the flip of `signature` it showed once and no replay showed again; the entry, or None
        when a lead is still being followed or this signature had one (each is followed once).

            >>> from servefuzz.workload import RequestSpec
            >>> c = Corpus()
            >>> sc = Scenario(1, (RequestSpec("r01", 0.0, (5, 6), 4),))
            >>> c.follow(sc, frozenset({"conc:1"}), signature="x:replay:corruption:", origin="random", iteration=3).lead
            Lead(signature='x:replay:corruption:', until=12)
            >>> [c.lead_pick().id for _ in range(12)] == [0] * 12, c.lead_pick()
            (True, None)
            >>> c.follow(sc, frozenset(), signature="x:replay:corruption:", origin="random", iteration=9) is None
            True
        """
        if self.leading() is not None or any(e.lead and e.lead.signature == signature for e in self.entries):
            return None
        kept = next((e for e in reversed(self.entries) if e.scenario == scenario), None)
        if kept is None:
            kept = CorpusEntry(len(self.entries), scenario, features, frozenset(), origin, iteration, True)
            self.entries.append(kept)
            self.seen |= features
            self._hold(features)
        entry = dataclasses.replace(kept, lead=Lead(signature, self.picks[kept.id] + LEAD_MUTATIONS))
        self.entries[entry.id] = entry
        return entry

    def leading(self) -> CorpusEntry | None:
        """The lead being followed: an entry picked fewer times than its lead allows."""
        return next((e for e in self.entries if e.lead is not None and self.picks[e.id] < e.lead.until), None)

    def lead_pick(self) -> CorpusEntry | None:
        """The lead being followed, picked (None when there is none)."""
        entry = self.leading()
        if entry is not None:
            self.picks[entry.id] += 1
        return entry

    def rarity(self, entry: CorpusEntry) -> float:
        """What the engine did under `entry`'s load, and the code of its own it ran, that few
        entries made it do: the sum, over its `did:` features, of 1 / the entries holding each,
        plus 1 / the holders of its rarest engine edge or context (AFL++'s rare-edge schedule:
        the rarest is what to climb from; summed, the hundreds of common ones an entry holds
        would weigh by its size). 0 for an entry that made the engine do nothing the spec
        meters, on an engine without coverage."""
        engine = [1 / self.holders[f] for f in entry.features if f.startswith((EDGE, CTX)) and self.holders[f]]
        return self._did_rarity(entry) + max(engine, default=0.0)

    def _did_rarity(self, entry: CorpusEntry) -> float:
        """The `did:` part of `rarity`: what the engine did under `entry` that few entries made it do."""
        return sum(1 / self.holders[f] for f in entry.features if f.startswith(DID) and self.holders[f])

    def frequency(self, entry: CorpusEntry) -> int | None:
        """`fast`'s f(i): how many executions reached `entry`'s rarest engine edge or context
        (its own first execution among them); None for an entry with no engine coverage."""
        return min((self.exercised[f] for f in entry.features if f.startswith((EDGE, CTX))), default=None)

    def energy(self, entry: CorpusEntry) -> float:
        """`rare`: novelty x flagged x (1 + rarity) / (1 + picks). `fast` (on an entry with engine
        coverage): novelty x flagged x (1 + the rarity of its `did:` features) x
        min(`FAST_CAP`, 2**picks / f(i)): an entry whose rarest edge or context the search keeps
        exercising (its mutants reach it again and again) fades; one whose stays rare gains
        with every pick, where `rare` would have let it fade by its picks alone. `breadth`:
        novelty x flagged x (1 + the rarity of its `did:` features) x (1 + `breadth`) / (1 + picks).

            >>> from servefuzz.workload import RequestSpec
            >>> c = Corpus(power="fast")
            >>> sc = Scenario(1, (RequestSpec("r01", 0.0, (5, 6), 4),))
            >>> common = c.consider(sc, frozenset({"ctx:1", "edge:1"}), origin="x", iteration=0, flagged=False)
            >>> for i in range(3):  # three more executions reach its context, none anything new
            ...     _ = c.consider(sc, frozenset({"ctx:1", "edge:1"}), origin="x", iteration=i + 1, flagged=False)
            >>> rare = c.consider(sc, frozenset({"ctx:1", "ctx:2", "edge:1"}), origin="x", iteration=4, flagged=False)
            >>> c.frequency(common), c.frequency(rare), round(c.energy(common), 2), c.energy(rare)
            (5, 1, 0.6, 2.0)
            >>> c.picks[rare.id] = 3; c.energy(rare)  # picked three times, its context still rare
            16.0
        """
        base = (1 + novelty(entry.new)) * (2 if entry.flagged else 1)
        if self.power == "breadth":
            return base * (1 + self._did_rarity(entry)) * (1 + self.breadth(entry)) / (1 + self.picks[entry.id])
        f = self.frequency(entry) if self.power == "fast" else None
        if f is None:
            return base * (1 + self.rarity(entry)) / (1 + self.picks[entry.id])
        return (base * (1 + self._did_rarity(entry)) * self.speed(entry)
                * min(FAST_CAP, float(2 ** min(self.picks[entry.id], 16)) / max(f, 1)))

    @staticmethod
    def breadth(entry: CorpusEntry) -> int:
        """`breadth`'s measure: the distinct engine step contexts `entry`'s execution reached (0
        on an engine without coverage), however common each one is.

            >>> from servefuzz.workload import RequestSpec
            >>> sc = Scenario(1, (RequestSpec("r01", 0.0, (5, 6), 4),))
            >>> Corpus.breadth(CorpusEntry(0, sc, frozenset({"ctx:1", "ctx:2", "edge:1", "conc:1"}), frozenset(), "x", 0, False))
            2
        """
        return sum(1 for f in entry.features if f.startswith(CTX))

    def speed(self, entry: CorpusEntry) -> float:
        """AFL's execution-time factor, which every one of its schedules applies: the corpus's mean
        seconds per entry over this entry's, within `SPEED_RANGE` (1 for an entry not timed).
        Under `fast` one entry may get most of the picks; when its mutants are slow a campaign of
        some tens of scenarios spends its budget on a few of them."""
        if entry.seconds <= 0 or not self._timed[1]:
            return 1.0
        low, high = SPEED_RANGE
        return min(high, max(low, self._timed[0] / self._timed[1] / entry.seconds))

    def pick(self, rng: random.Random) -> CorpusEntry:
        entry = rng.choices(self.entries, weights=[self.energy(e) for e in self.entries])[0]
        self.picks[entry.id] += 1
        return entry

    def state_json(self) -> dict[str, Any]:
        """What changes after an entry is written: the pick counts (entries are stored apart)."""
        return {str(k): v for k, v in sorted(self.picks.items())}


class Schedule:
    """Chooses each iteration's source: a strategy to generate from, or a corpus entry to mutate."""

    def __init__(self, names: tuple[str, ...], uses: Mapping[str, int] | None = None,
                 gains: Mapping[str, int] | None = None, seconds: Mapping[str, float] | None = None,
                 mutate_share: float = MUTATE_SHARE, first: tuple[str, ...] | None = None,
                 contexts: bool = False, scores: Mapping[str, float] | None = None, turns: bool = False,
                 mutating: float | None = None) -> None:
        if not names:
            raise ValueError("a schedule needs at least one strategy")
        self.names = names
        self.first = names if first is None else first  # the first round's turns (`first_round`)
        self.mutate_share = mutate_share
        self.uses: Counter[str] = Counter(uses or {})
        self.gains: Counter[str] = Counter(gains or {})
        self.seconds: defaultdict[str, float] = defaultdict(float, seconds or {})
        self.benched: dict[str, str] = {}  # strategy -> the error that benched it
        # The strategies aimed at the campaign's goals still at zero (`goals.Pursuit.focus`) and the
        # share of turns they get while there are any (`aim`).
        self.focus: tuple[str, ...] = ()
        self.focus_share = 0.0
        # The context bandit (`reward`), on when the campaign steers by engine coverage and asks for
        # it: each strategy's decayed count of new step contexts per fresh scenario.
        self.contexts = contexts
        self.scores: dict[str, float] = dict(scores or {})
        # With `turns` too, the mutation turns are an arm of the same bandit: `mutating` is the
        # decayed count of new step contexts per mutation turn (`reward_mutation`, `mutation_chance`).
        self.turns = contexts and turns
        self.mutating = mutating

    def weight(self, name: str) -> float:
        base = (1 + self.gains[name]) / (1 + self.seconds[name] / COST_UNIT_S)
        if not self.contexts:
            return base
        # A strategy not yet scored (none of its fresh scenarios ran) gets the mean of those that
        # are: neither favoured nor starved before it has shown anything.
        known = [v for k, v in self.scores.items() if k in self.names]
        score = self.scores.get(name, sum(known) / len(known) if known else 0.0)
        return base * (CONTEXT_FLOOR + score)

    @property
    def active(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if n not in self.benched)

    def aim(self, names: Sequence[str], share: float) -> None:
        """Give `share` of the turns after the first round to `names` (none: the usual schedule)."""
        self.focus, self.focus_share = tuple(names), share

    def bench(self, name: str, error: str) -> None:
        """Never pick `name` again: its generator raised `error` (a bug of ours, not the target's)."""
        self.benched[name] = error

    def next(
        self, rng: random.Random, iteration: int, corpus: Corpus
    ) -> tuple[Literal["generate"], str] | tuple[Literal["mutate"], CorpusEntry]:
        active = self.active
        if not active:
            raise ValueError("every strategy of the schedule is benched")
        aimed = [n for n in self.focus if n in active]
        if iteration < len(self.first) and self.first[iteration] in active:
            name = self.first[iteration]
        elif aimed and rng.random() < self.focus_share:
            # A goal's strategies in turn, not by what they gained per second before: the goal is
            # pursued because nothing reached it yet, and the likeliest strategy (a retraction's
            # long decodes) is often the slowest.
            name = rng.choice(aimed)
        elif self.mutate_share > 0 and (lead := corpus.lead_pick()) is not None:
            return "mutate", lead
        elif corpus.entries and rng.random() < self.mutation_chance():
            return "mutate", corpus.pick(rng)
        else:
            name = rng.choices(active, weights=[self.weight(n) for n in active])[0]
        self.uses[name] += 1
        return "generate", name

    def credit(self, strategy: str, new_features: int, seconds: float) -> None:
        """Book one scenario of `strategy` (generated by it, or mutated from one of its): the
        features it was first to reach and the seconds it took."""
        if strategy in self.names:
            self.gains[strategy] += new_features
            self.seconds[strategy] += seconds

    def reward(self, strategy: str, contexts: int) -> None:
        """Book the new engine step contexts (`new_contexts`) one fresh scenario of `strategy`
        reached (a mutant's go to its corpus entry's energy, not here): its score moves
        `1 - CONTEXT_DECAY` of the way to `contexts`; the first one sets it. Nothing while the
        bandit is off.

            >>> s = Schedule(("pairwise", "random"), contexts=True)
            >>> s.reward("pairwise", 9); s.reward("random", 1); s.reward("pairwise", 1)
            >>> s.scores, s.weight("pairwise") / s.weight("random")
            ({'pairwise': 5.0, 'random': 1.0}, 3.6666666666666665)
        """
        if not self.contexts or strategy not in self.names:
            return
        self.scores[strategy] = _decayed(self.scores.get(strategy), contexts)

    def reward_mutation(self, contexts: int) -> None:
        """Book the new engine step contexts one mutant reached, as `reward` books a fresh
        scenario's (nothing unless the bandit weighs the turns too)."""
        if self.turns:
            self.mutating = _decayed(self.mutating, contexts)

    def fresh_yield(self) -> float | None:
        """What a fresh turn is expected to reach: the strategies' scores, each by its chance of
        being picked (`weight`); None before any is scored."""
        scored = [n for n in self.active if n in self.scores]
        if not scored:
            return None
        weights = [self.weight(n) for n in scored]
        return sum(w * self.scores[n] for w, n in zip(weights, scored, strict=True)) / sum(weights)

    def mutation_chance(self) -> float:
        """The chance that a turn after the first round mutates a corpus entry: `mutate_share`,
        moved, when the bandit weighs the turns too, by the new step contexts mutants have reached
        against what fresh scenarios reach (`CONTEXT_FLOOR` on both sides, so neither stops);
        alike, it is `mutate_share`.

            >>> s = Schedule(("pairwise",), contexts=True, turns=True)
            >>> s.reward("pairwise", 3); s.reward_mutation(0)
            >>> round(s.mutation_chance(), 3)
            0.125
        """
        fresh = self.fresh_yield()
        if not self.turns or self.mutating is None or fresh is None or self.mutate_share <= 0:
            return self.mutate_share
        m = self.mutate_share * (CONTEXT_FLOOR + self.mutating)
        return m / (m + (1 - self.mutate_share) * (CONTEXT_FLOOR + fresh))

    def state_json(self) -> dict[str, Any]:
        return {
            "uses": dict(sorted(self.uses.items())),
            "gains": dict(sorted(self.gains.items())),
            "seconds": {k: round(v, 3) for k, v in sorted(self.seconds.items())},
            **({"scores": {k: round(v, 4) for k, v in sorted(self.scores.items())}} if self.scores else {}),
            **({"mutating": round(self.mutating, 4)} if self.mutating is not None else {}),
        }
