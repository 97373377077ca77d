"""Confirmation chases a confident flip that its replays do not show (`confirm.RARE_FACTOR`): a
bug that comes back one time in four is missed by five replays a third of the time. The candidate
here is real: seen on the reference engine with a planted fault (page-boundary-prefix). Confirmed
on the same engine it comes back at once, and the replays stop where they always did; confirmed on
the engine without the fault (as a rare bug that did not come back) it gets `RARE_FACTOR` times
the replays; a candidate with no confident flip in it never does."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import pytest
from zoo_cases import CASES

from servefuzz.anomaly import Verdict
from servefuzz.confirm import RARE_FACTOR, ConfirmConfig, confirm_finding
from servefuzz.oracles.judge import Judgement, judge
from servefuzz.runner import Runner
from servefuzz.targets import make_target
from servefuzz.trial import Executed, execute
from servefuzz.workload import PromptBuilder

RUNS = 2


_, SCENARIO = CASES["page-boundary-prefix"](PromptBuilder(7, range(3, 1024)))


async def _seen(url: str) -> tuple[Executed, Judgement]:
    async with Runner(make_target("reference", url)) as runner:
        done = await execute(runner, SCENARIO, runs=2, with_alone=True)
    return done, judge(done.loaded, done.alone, scenario=SCENARIO)


async def _attempts(url: str, done: Executed, verdict: Judgement) -> tuple[int, int]:
    """(replays, of which showed it) when `verdict` is confirmed on the server at `url`."""
    async with Runner(make_target("reference", url)) as runner:
        got = await confirm_finding(runner, SCENARIO, 0, done, verdict, ConfirmConfig(runs=RUNS))
    assert got.finding.confirmation is not None and got.lost is None
    return got.finding.confirmation.attempts, got.finding.confirmation.reproduced


@pytest.mark.timeout(300)
def test_a_confident_flip_no_replay_shows_gets_more_replays_one_that_comes_back_or_a_near_tie_does_not(
    reference_server: Callable[..., str]
) -> None:
    flags, _ = CASES["page-boundary-prefix"](PromptBuilder(7, range(3, 1024)))
    faulty = reference_server(*flags, "--fault", "page-boundary-prefix")
    clean = reference_server(*flags)
    done, verdict = asyncio.run(_seen(faulty))
    assert any(a.verdict is Verdict.SUSPECTED_CORRUPTION for a in verdict.before_leaks), verdict.anomalies

    # It comes back on the faulty engine: the replays stop at RUNS, as before.
    assert asyncio.run(_attempts(faulty, done, verdict)) == (RUNS, RUNS)
    # It does not on the clean one: chased, RARE_FACTOR x RUNS replays, none showing it.
    assert asyncio.run(_attempts(clean, done, verdict)) == (RARE_FACTOR * RUNS, 0)
    # The control: the same candidate made a near-tie (numeric drift) is not chased.
    tie = dataclasses.replace(verdict, unleaked=None, anomalies=tuple(
        dataclasses.replace(a, verdict=Verdict.NUMERIC_DRIFT) for a in verdict.before_leaks))
    assert asyncio.run(_attempts(clean, done, tie)) == (RUNS, 0)
