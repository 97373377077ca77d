"""The corpus keeps what reached something new; the schedule spends effort by energy."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest

from servefuzz.corpus import FAST_CAP, Corpus, CorpusEntry, Schedule, first_round, new_contexts, novelty
from servefuzz.workload import RequestSpec, Scenario


def sc(seed: int) -> Scenario:
    return Scenario(seed, (RequestSpec("r01", 0.0, (5, 6, seed + 7), 4),))


def test_only_scenarios_reaching_an_unseen_feature_are_kept() -> None:
    c = Corpus()
    a = c.consider(sc(1), frozenset({"conc:1", "prefix:1p+0"}), origin="page-boundary", iteration=0, flagged=False)
    assert a is not None and a.new == {"conc:1", "prefix:1p+0"}
    assert c.consider(sc(2), frozenset({"conc:1"}), origin="random", iteration=1, flagged=True) is None
    b = c.consider(sc(3), frozenset({"conc:1", "shrink:2>1"}), origin="batch-sweep", iteration=2, flagged=False)
    assert b is not None and b.id == 1 and b.new == {"shrink:2>1"}
    assert c.seen == {"conc:1", "prefix:1p+0", "shrink:2>1"} and len(c) == 2


def test_energy_favours_novel_and_flagged_entries_and_decays_with_picks() -> None:
    c = Corpus()
    plain = c.consider(sc(1), frozenset({"a"}), origin="x", iteration=0, flagged=False)
    rich = c.consider(sc(2), frozenset({"b", "c", "d"}), origin="x", iteration=1, flagged=True)
    assert plain is not None and rich is not None
    assert c.energy(rich) == 8 and c.energy(plain) == 2
    picks = Counter(c.pick(random.Random(i)).id for i in range(400))
    assert picks[rich.id] > picks[plain.id] > 0
    assert c.energy(rich) < 8, "an entry picked often loses energy"


def test_the_first_round_runs_every_strategy_in_order_then_mutation_and_weights_take_over() -> None:
    c = Corpus()
    c.consider(sc(1), frozenset({"a"}), origin="x", iteration=0, flagged=False)
    s = Schedule(("page-boundary", "batch-sweep", "random"))
    rng = random.Random(0)
    assert [s.next(rng, i, c) for i in range(3)] == [("generate", n) for n in ("page-boundary", "batch-sweep", "random")]
    later = Counter(s.next(rng, i, c)[0] for i in range(3, 403))
    assert 120 < later["mutate"] < 280
    s.credit("batch-sweep", 30, 20.0)
    s.credit("random", 0, 40.0)  # costly and finding nothing new: fades, but keeps a chance
    made = Counter(what for kind, what in (s.next(rng, i, c) for i in range(403, 1003)) if kind == "generate")
    assert made["batch-sweep"] > made["random"] and made["random"] > 0


def test_without_greybox_the_schedule_never_mutates() -> None:
    c = Corpus()
    c.consider(sc(1), frozenset({"a"}), origin="x", iteration=0, flagged=False)
    s = Schedule(("random",), mutate_share=0.0)
    assert {s.next(random.Random(i), i, c)[0] for i in range(200)} == {"generate"}


def test_state_survives_a_round_trip() -> None:
    c = Corpus()
    e = c.consider(sc(1), frozenset({"a", "b"}), origin="mutate:0", iteration=4, flagged=True)
    assert e is not None and CorpusEntry.from_json(e.to_json()) == e
    c.pick(random.Random(0))
    again = Corpus([e], {int(k): v for k, v in c.state_json().items()})
    assert again.seen == {"a", "b"} and again.energy(e) == c.energy(e)
    s = Schedule(("x", "y"), uses={"x": 3}, gains={"y": 2}, seconds={"y": 20.0})
    assert Schedule(("x", "y"), **s.state_json()).weight("y") == s.weight("y") == 1.0


def test_an_entry_that_alone_made_the_engine_do_something_keeps_more_energy_until_others_do_it_too() -> None:
    c = Corpus()
    common = c.consider(sc(1), frozenset({"conc:1", "did:prefix-cache:hits:1"}), origin="x", iteration=0, flagged=False)
    rare = c.consider(sc(2), frozenset({"conc:2", "did:eviction:evicted-tokens:64"}), origin="x", iteration=1,
                      flagged=False)
    control = c.consider(sc(3), frozenset({"conc:4", "did:prefix-cache:hits:1"}), origin="x", iteration=2,
                         flagged=False)
    assert common is not None and rare is not None and control is not None
    # `common` and `rare` were first to two features each: what the engine did tells them apart.
    assert c.rarity(rare) == 1 and c.rarity(common) == c.rarity(control) == 0.5
    assert c.energy(rare) == 6 and c.energy(common) == 4.5 and c.energy(control) == 3
    plain = c.consider(sc(4), frozenset({"conc:8"}), origin="x", iteration=3, flagged=False)
    assert plain is not None and c.rarity(plain) == 0 and c.energy(plain) == 2
    # Another entry that evicted as much: no longer rare, and a resumed corpus weighs it the same.
    again = c.consider(sc(5), frozenset({"n:2", "did:eviction:evicted-tokens:64"}), origin="x", iteration=4,
                       flagged=False)
    assert again is not None and c.rarity(rare) == 0.5
    assert Corpus(c.entries).rarity(rare) == 0.5


def test_the_covering_generator_comes_right_after_the_capability_strategies_in_the_first_round() -> None:
    names = ("page-boundary", "batch-sweep", "tenant-salt", "seeded-sampling", "tile-boundary", "eviction", "pairwise")
    turns = first_round(names, "pairwise", after=("tenant-salt", "seeded-sampling"))
    assert turns == ("page-boundary", "batch-sweep", "tenant-salt", "seeded-sampling", "pairwise", "tile-boundary",
                     "eviction")
    s = Schedule(names, first=turns)
    rng, c = random.Random(0), Corpus()
    assert [s.next(rng, i, c)[1] for i in range(len(turns))] == list(turns)
    # Leave-one-out: without seeded-sampling the arrays come right after tenant-salt.
    loo = tuple(n for n in names if n != "seeded-sampling")
    assert first_round(loo, "pairwise", after=("tenant-salt", "seeded-sampling")).index("pairwise") == 3
    # No coverage, or no capability strategy offered: the mix's order, each once.
    assert first_round(names, None, after=("tenant-salt",)) == names
    assert first_round(names, "pairwise", after=()) == names


def test_an_entry_that_alone_reached_engine_code_keeps_more_energy_and_its_many_points_count_by_log2() -> None:
    from servefuzz.feedback import COV_CONTEXT_BITS as B
    from servefuzz.feedback import coverage_features

    def reached(*points: int) -> frozenset[str]:
        return coverage_features([(p, 1) for p in points])

    c = Corpus()
    shared = reached(*range(100 << B, 200 << B, 1 << B))  # 100 edges in context 0
    first = c.consider(sc(1), shared | {"conc:1"}, origin="x", iteration=0, flagged=False)
    # One more edge (in hit buckets 1 and 4: one point, one edge), in a context no one else ran.
    rare = c.consider(sc(2), shared | reached(0xabc << B | 5) | coverage_features([(0xabc << B | 5, 4)]) | {"conc:2"},
                      origin="x", iteration=1, flagged=False)
    control = c.consider(sc(3), shared | {"conc:4"}, origin="x", iteration=2, flagged=False)
    assert first is not None and rare is not None and control is not None
    # The rarest edge or context counts, not the sum: the 100 shared edges are held by all three.
    assert c.rarity(rare) == pytest.approx(1.0) and c.rarity(control) == pytest.approx(1 / 3)
    assert c.energy(rare) > c.energy(control)
    # A hundred new points, and a hundred new edges, count as log2 of them, not as a hundred
    # features each; a new context counts in full (a new mix of requests in flight).
    assert novelty(first.new) == 1 + 1 + 7 + 7 and novelty(rare.new) == 1 + 1 + 1 + 1
    assert novelty(control.new) == 1
    assert Corpus(c.entries).rarity(rare) == c.rarity(rare)  # a resumed corpus weighs them the same


def test_the_fast_schedule_climbs_from_a_context_the_search_keeps_missing_and_leaves_one_it_keeps_reaching() -> None:
    # AFL's path-frequency schedule: f(i) counts every execution that reached the entry's rarest
    # engine edge or context, kept or not; energy is 2**picks / f(i), bounded.
    def run(c: Corpus, features: set[str], i: int) -> CorpusEntry | None:
        return c.consider(sc(i), frozenset(features), origin="x", iteration=i, flagged=False)

    energies = {}
    for power in ("rare", "fast"):
        c = Corpus(power=power)
        run(c, {"ctx:1", "edge:1"}, 0)
        missed = run(c, {"ctx:1", "edge:1", "ctx:2"}, 1)  # ctx:2: reached once, by it alone
        reached = run(c, {"ctx:1", "edge:1", "ctx:3"}, 2)  # ctx:3: its mutants reach it again
        assert missed is not None and reached is not None and c.energy(missed) == c.energy(reached)
        before = c.energy(missed)
        for i in range(3, 7):  # each picked four times; every mutant reaches ctx:3, none ctx:2
            c.picks[missed.id] += 1
            c.picks[reached.id] += 1
            run(c, {"ctx:1", "edge:1", "ctx:3", f"n:{i}"}, i)
        energies[power] = (before, c.energy(missed), c.energy(reached))
    # The default fades both by their picks; `fast` lets the one whose context stays rare climb
    # (2 -> 2 * 2**4 / 1) and the other fall behind it by its frequency (2 * 2**4 / 5).
    assert energies["rare"] == pytest.approx((4.0, 0.8, 0.48))
    assert energies["fast"] == pytest.approx((2.0, 32.0, 6.4))
    # Capped: no entry outweighs a fresh one by more than FAST_CAP, however long its context stays rare.
    c = Corpus(power="fast")
    e = run(c, {"ctx:7"}, 0)
    assert e is not None
    c.picks[e.id] = 40
    assert c.energy(e) == 2 * FAST_CAP
    # An entry without engine coverage (an engine that reports none) keeps the default schedule.
    plain = run(c, {"conc:1"}, 1)
    assert plain is not None and c.frequency(plain) is None and c.energy(plain) == Corpus().energy(plain) == 2
    # A resumed corpus starts each frequency at its holders (the executions not kept are not on disk).
    again = Corpus(c.entries, dict(c.picks), power="fast")
    assert again.frequency(e) == 1 and again.energy(e) == c.energy(e)


def test_the_fast_schedule_weighs_an_entry_by_its_speed_within_bounds_and_keeps_its_seconds() -> None:
    c = Corpus(power="fast")
    quick = c.consider(sc(1), frozenset({"ctx:1"}), origin="x", iteration=0, flagged=False, seconds=1.0)
    slow = c.consider(sc(2), frozenset({"ctx:2"}), origin="x", iteration=1, flagged=False, seconds=7.0)
    untimed = c.consider(sc(3), frozenset({"ctx:3"}), origin="x", iteration=2, flagged=False)
    assert quick is not None and slow is not None and untimed is not None
    # The mean of the timed entries is 4 s: 4x for the quick one, held at 3; 4/7 for the slow one.
    assert c.speed(quick) == 3.0 and c.speed(slow) == pytest.approx(4 / 7) and c.speed(untimed) == 1.0
    assert c.energy(quick) > c.energy(untimed) > c.energy(slow)
    assert Corpus().energy(quick) == Corpus().energy(slow), "the default schedule does not time entries"
    assert CorpusEntry.from_json(slow.to_json()) == slow and "seconds" not in untimed.to_json()


def _fresh_turns(s: Schedule, rounds: int, yields: dict[str, int]) -> Counter[str]:
    """`rounds` fresh turns of `s`, each rewarded as a campaign would reward it: the strategy's
    scenario reaching `yields[strategy]` new step contexts every time."""
    rng, c = random.Random(7), Corpus()
    made: Counter[str] = Counter()
    for i in range(rounds):
        kind, name = s.next(rng, i, c)
        assert kind == "generate" and isinstance(name, str)
        made[name] += 1
        s.reward(name, yields[name])
    return made


def test_the_context_bandit_gives_fresh_turns_to_the_strategy_whose_scenarios_reach_new_contexts() -> None:
    yields = {"pairwise": 4, "tenant-salt": 0, "random": 0}
    on = _fresh_turns(Schedule(tuple(yields), mutate_share=0.0, contexts=True), 600, yields)
    assert on["pairwise"] > 2 * (on["tenant-salt"] + on["random"]), on
    assert on["tenant-salt"] > 20 and on["random"] > 20, "the floor: none starves"
    # Control: off (the default), the same rewards change nothing: the turns stay even.
    off = Schedule(tuple(yields), mutate_share=0.0)
    even = _fresh_turns(off, 600, yields)
    assert all(150 < n < 250 for n in even.values()), even
    assert not off.scores and "scores" not in off.state_json()


def test_the_context_bandit_follows_recent_yield_and_survives_a_round_trip() -> None:
    s = Schedule(("a", "b"), contexts=True)
    s.reward("a", 8)
    s.reward("b", 1)
    assert s.weight("a") > 5 * s.weight("b")
    for _ in range(6):  # a's scenarios stop reaching anything new: its lead fades
        s.reward("a", 0)
    assert s.weight("a") < s.weight("b")
    again = Schedule(("a", "b"), contexts=True, **s.state_json())
    assert again.weight("a") == pytest.approx(s.weight("a")) and again.weight("b") == pytest.approx(s.weight("b"))
    # Not yet scored: the mean of those that are, neither favoured nor starved.
    fresh = Schedule(("a", "b", "c"), contexts=True, scores={"a": 4.0, "b": 0.0})
    assert fresh.weight("c") == pytest.approx((fresh.weight("a") + fresh.weight("b")) / 2)
    assert new_contexts({"ctx:1", "ctx:2", "edge:3", "cov:30001:1", "conc:1"}) == 2


def test_the_breadth_schedule_weighs_an_entry_by_the_step_contexts_it_reached() -> None:
    feats = {"narrow": frozenset({"ctx:1", "edge:1", "a"}),
             "wide": frozenset({f"ctx:{i}" for i in range(2, 10)} | {"edge:1", "b"})}
    for power, wider in (("breadth", True), ("rare", False)):
        c = Corpus(power=power)  # type: ignore[arg-type]
        narrow = c.consider(sc(1), feats["narrow"], origin="x", iteration=0, flagged=False)
        # Its new features weigh a little less than the narrow one's (its edge was seen before).
        wide = c.consider(sc(2), feats["wide"] - {f"ctx:{i}" for i in range(3, 10)}, origin="x", iteration=1,
                          flagged=False)
        assert narrow is not None and wide is not None
        wide = dataclasses.replace(wide, features=feats["wide"])
        assert (c.energy(wide) > 2 * c.energy(narrow)) is wider, power
    c = Corpus(power="breadth")
    e = c.consider(sc(1), feats["wide"], origin="x", iteration=0, flagged=False)
    assert e is not None and Corpus.breadth(e) == 8
    before = c.energy(e)
    c.picks[e.id] = 3
    assert c.energy(e) == before / 4, "picked, it fades as `rare` does"


def test_weighing_the_turns_too_moves_the_mutation_share_towards_where_new_contexts_came_from() -> None:
    c = Corpus()
    c.consider(sc(1), frozenset({"a"}), origin="x", iteration=0, flagged=False)
    s = Schedule(("pairwise", "random"), contexts=True, turns=True, first=())
    assert s.mutation_chance() == 0.5, "nothing known yet: the share asked"
    s.reward("pairwise", 6)
    s.reward("random", 2)
    s.reward_mutation(0)
    rng = random.Random(3)
    fresh = Counter(s.next(rng, i, c)[0] for i in range(400))
    assert s.mutation_chance() < 0.2 and 20 < fresh["mutate"] < 100, fresh
    for _ in range(4):  # mutants start reaching new contexts, fresh scenarios none
        s.reward_mutation(5)
        s.reward("pairwise", 0)
        s.reward("random", 0)
    assert s.mutation_chance() > 0.8
    again = Schedule(("pairwise", "random"), contexts=True, turns=True, **s.state_json())
    assert again.mutation_chance() == pytest.approx(s.mutation_chance(), abs=1e-3)
    # Control: the strategies' bandit alone, or none, leaves the share as asked.
    for alone in (Schedule(("pairwise",), contexts=True), Schedule(("pairwise",), turns=True)):
        alone.reward("pairwise", 6)
        alone.reward_mutation(0)
        assert alone.mutation_chance() == 0.5 and alone.mutating is None
