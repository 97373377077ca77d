"""The engine's meters as the search's goals (`servefuzz.goals`): a mechanism the server has on
and that never happened is pursued, and a campaign that ends with one at zero says so first,
with why; the summary's lines fit the terminal."""

from __future__ import annotations

import asyncio
import doctest
import io
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

import servefuzz.goals
from servefuzz.campaign import CampaignConfig, CampaignResult, Stop, StopReason, run_campaign
from servefuzz.corpus import Corpus, Schedule
from servefuzz.engines.reference import SPEC as REFERENCE
from servefuzz.engines.spec import Feature
from servefuzz.exercise import Count, Exercise, Setting
from servefuzz.goals import GOAL_SHARE, Pursuit, goal_parts, standing_goals
from servefuzz.progress import print_summary
from servefuzz.runner import Runner
from servefuzz.strategies import ChunkBoundary, RandomLoad, RetractionPressure, TargetShape
from servefuzz.targets import make_target


def test_the_goals_examples_run() -> None:
    result = doctest.testmod(servefuzz.goals)
    assert result.attempted > 0 and result.failed == 0


def test_a_pursued_goal_gets_its_share_of_the_turns_and_none_without_one() -> None:
    def picks(focus: tuple[str, ...]) -> Counter[str]:
        schedule = Schedule(("random", "page-boundary", "chunk-boundary"), mutate_share=0.0, first=())
        schedule.aim(focus, GOAL_SHARE)
        rng = random.Random(0)
        return Counter(str(schedule.next(rng, i, Corpus())[1]) for i in range(600))

    plain, aimed = picks(()), picks(("chunk-boundary",))
    assert 150 < plain["chunk-boundary"] < 250  # a third of the turns, as weights are equal
    assert aimed["chunk-boundary"] > 350  # half the turns go to the goal, and a third of the rest


def test_a_goal_reached_is_no_longer_pursued_and_one_without_a_strategy_is_never_pursued() -> None:
    on = (Setting(Feature.CHUNKED_PREFILL, True, "server arg"), Setting(Feature.SPECULATIVE, True, "profile", aimed=True))
    p = Pursuit(offered=("random", "chunk-boundary"))
    p.update(Exercise(settings=on), iteration=20, spent=0.5)
    assert p.focus == ("chunk-boundary",)  # speculative decoding: no strategy of this target aims at it
    split = Count(Feature.CHUNKED_PREFILL, "prompts split", 1, "split", 30)
    p.update(Exercise(counts=(split,), settings=on), iteration=25, spent=0.6)
    assert p.focus == () and p.goals[Feature.CHUNKED_PREFILL].reached_at == 25
    assert [g.feature for g in p.missed()] == [Feature.SPECULATIVE]


def test_a_goal_with_parts_stays_pursued_until_each_part_the_target_can_move_has_moved() -> None:
    # The reference engine's retraction meters: on a target that sends seeded requests and no
    # adapters, the preemption goal's parts are the seeded and the n > 1 counters.
    parts = goal_parts(REFERENCE.meters, TargetShape(seeded_sampling=True).capabilities)
    by = "sglang:num_retracted_requests_by_feature_total{feature=%s}"
    assert parts[Feature.PREEMPTION] == (by % "seeded", by % "n")
    on = (Setting(Feature.PREEMPTION, True, "server arg"),)

    def retracted(total: int, **of: int) -> Exercise:
        counts = [Count(Feature.PREEMPTION, "retracted requests", total, "sglang:num_retracted_requests_total", 9)]
        counts += [Count(Feature.PREEMPTION, f"retracted {k}", v, by % k, 9) for k, v in of.items()]
        return Exercise(counts=tuple(counts), settings=on)

    p = Pursuit(offered=("random", "retraction"), parts=parts)
    p.update(retracted(8, n=8, seeded=0), iteration=20, spent=0.5)  # forks retracted, no seeded one
    goal = p.goals[Feature.PREEMPTION]
    assert goal.reached_at is None and goal.missing == (by % "seeded",) and p.focus == ("retraction",)
    line = p.said(TargetShape())[0]
    assert line.startswith("preemption/retraction: not every kind reached") and "feature=seeded" in line
    p.update(retracted(9, n=8, seeded=1), iteration=26, spent=0.6)
    assert p.goals[Feature.PREEMPTION].reached_at == 26 and p.focus == () and p.missed() == ()
    # The control: without parts, the first retraction of any request reaches the goal.
    plain = Pursuit(offered=("random", "retraction"))
    plain.update(retracted(8, n=8, seeded=0), iteration=20, spent=0.5)
    assert plain.goals[Feature.PREEMPTION].reached_at == 20 and plain.focus == ()
    # A pool one scenario fills past makes preemption a goal whatever the switches say; a large one does not.
    small = Pursuit(offered=("random", "retraction"), parts=parts, standing=standing_goals(TargetShape(max_total_tokens=4096)))
    small.update(Exercise(), iteration=20, spent=0.5)
    assert small.focus == ("retraction",)
    large = Pursuit(offered=("random",), parts=parts, standing=standing_goals(TargetShape(max_total_tokens=1 << 20)))
    large.update(Exercise(), iteration=20, spent=0.5)
    assert large.goals == {}
    # Adapters served add that part; a grammar's retraction is never one (it cannot hold pages).
    served = goal_parts(REFERENCE.meters, TargetShape(seeded_sampling=True, choices=True, adapters=("a",)).capabilities)
    assert served[Feature.PREEMPTION] == (by % "seeded", by % "adapter", by % "n")


def _campaign(url: str, out: Path) -> CampaignResult:
    config = CampaignConfig(out, seed=1, request_budget=40, isolation=True)

    async def go() -> CampaignResult:
        async with Runner(make_target("reference", url)) as runner:
            return await run_campaign(runner, [RandomLoad(), ChunkBoundary()], config)

    return asyncio.run(go())


def _summary(result: CampaignResult) -> list[str]:
    out = io.StringIO()
    print_summary(Console(file=out, width=200), result)  # a wide console: the lines still fit 80
    return out.getvalue().splitlines()


@pytest.mark.timeout(240)
def test_a_budget_above_every_prompt_is_said_first_and_a_reachable_one_is_reached(
    tmp_path: Path, reference_server: Callable[..., str]
) -> None:
    # Out of reach: a step budget above the context and every batch these scenarios make, so no
    # prefill is cut (the engine counts its cuts). The campaign pursues it, gives up or runs out,
    # and its summary says so before anything else, with why.
    far = _campaign(reference_server("--chunked-prefill-size", "100000"), tmp_path / "far")
    goal = next(g for g in far.goals if g.feature is Feature.CHUNKED_PREFILL)
    assert goal.reached_at is None and goal.pursued_at is not None, far.goals
    # Two goals at zero, each with its reason: neither strategy shares a prefix (none aims at the
    # prefix cache), and no prompt can outgrow the step budget.
    assert far.unreached == (
        "prefix cache: still at zero: no strategy offered to this target aims at it",
        "chunked prefill: still at zero: the step budget (100,000 tokens) is above the longest prompt the server "
        "takes (4,032): only prompts batched together past it can be cut",
    )
    lines = _summary(far)
    assert lines[0] == "Goals the engine's meters never showed reached:"
    assert lines[1].startswith("  prefix cache: still at zero") and lines[2].startswith("  chunked prefill: still at zero")
    assert all(len(x) <= 80 for x in lines if x.startswith("  "))  # the goals' and the exercise's lines, wrapped
    # The quiet control: a small budget splits ordinary prompts; that goal is reached, not said.
    near = _campaign(reference_server("--chunked-prefill-size", "128"), tmp_path / "near")
    goal = next(g for g in near.goals if g.feature is Feature.CHUNKED_PREFILL)
    assert goal.reached_at is not None and not any("chunked prefill" in x for x in near.unreached), near.goals
    assert not any("chunked prefill: still at zero" in x for x in _summary(near))


def test_the_summary_wraps_a_long_line_of_counts_inside_80_columns() -> None:
    # The line issue 53 quotes was 187 columns wide.
    counts = (Count(Feature.PREFIX_CACHE, "hits", 4, "cached_tokens", 14),
              Count(Feature.PREFIX_CACHE, "hit tokens", 320, "cached_tokens", 14),
              Count(Feature.PREFIX_CACHE, "hit tokens", 128, "sglang:cache_hit_tokens_total", 2))
    setting = Setting(Feature.PREFIX_CACHE, True, "server arg disable_radix_cache = False")
    result = CampaignResult(1, 14, 1.0, (), Stop(StopReason.TIME_BUDGET, "time budget spent"),
                            exercise=Exercise(14, 2, 2, counts, (setting,)))
    lines = _summary(result)
    start = lines.index("What the engine did:")
    body = lines[start + 1:lines.index("No findings.")]
    assert len(body) >= 3 and all(len(x) <= 80 for x in body), body
    assert body[0].startswith("  prefix cache: 4 hits, 320 hit tokens") and all(x.startswith("    ") for x in body[1:])
    assert "sglang:cache_hit_tokens_total" in " ".join(body)  # wrapped, never cut


@pytest.mark.timeout(300)
def test_retraction_makes_a_small_pool_retract_stateful_requests_and_a_clean_engine_answers_as_alone(
    tmp_path: Path, reference_server: Callable[..., str]
) -> None:
    url = reference_server("--max-total-tokens", "4096")
    config = CampaignConfig(tmp_path / "c", seed=2, request_budget=10)

    async def go() -> CampaignResult:
        async with Runner(make_target("reference", url)) as runner:
            return await run_campaign(runner, [RetractionPressure()], config)

    result = asyncio.run(go())
    assert result.exercise.exercised(Feature.PREEMPTION), result.exercise.lines()
    assert result.findings == ()  # the clean engine restores every retracted request exactly
