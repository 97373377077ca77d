"""Why a campaign stops: each stop condition fires when it should and stays quiet otherwise,
`StopReason` is what a result and its summary carry, and `progress.json` round-trips through
`store.Progress`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from servefuzz.campaign import CampaignConfig, CampaignResult, CampaignState, Stop, StopReason
from servefuzz.campaign.stops import (
    EveryStrategyFailed,
    FirstConfirmed,
    Moment,
    RequestBudget,
    TimeBudget,
    budgets,
    first_stop,
    stop_conditions,
)
from servefuzz.corpus import Schedule
from servefuzz.finding import Finding, load_finding
from servefuzz.store import Progress, open_campaign_dir, stored_config, write_progress

FINDINGS = Path(__file__).parents[1] / "docs/findings"


def _found(name: str = "vllm-cpu-lora-base-rows") -> Finding:  # a corruption, confirmed 5/5
    return load_finding(FINDINGS / name / "finding.json")


def _between(*, elapsed: float = 0.0, requests: int = 0, benched: tuple[str, ...] = ()) -> Moment:
    # elapsed_before_s carries the clock: what a resumed campaign spent, no waiting in a test.
    state = CampaignState(elapsed_before_s=elapsed, requests=requests)
    schedule = Schedule(("a", "b"))
    for name in benched:
        schedule.bench(name, f"ValueError: {name} broke")
    return Moment(state, schedule)


def test_the_time_budget_fires_once_spent_and_only_between_iterations() -> None:
    budget = TimeBudget(30.0)
    assert budget(_between(elapsed=29.0)) is None
    assert budget(_between(elapsed=31.0)) == Stop(StopReason.TIME_BUDGET, "time budget of 30 s spent")
    assert budget.spent.detail == "time budget of 30 s spent"  # the runner's deadline says it the same way
    spent = _between(elapsed=31.0)
    assert budget(dataclasses.replace(spent, kept=_found())) is None  # a finding kept is not its moment


def test_the_request_budget_fires_once_spent() -> None:
    budget = RequestBudget(1200)
    assert budget(_between(requests=1199)) is None
    assert budget(_between(requests=1200)) == Stop(StopReason.REQUEST_BUDGET, "request budget of 1,200 spent")


def test_the_first_confirmed_finding_stops_only_a_confirmed_one_of_the_verdicts_asked() -> None:
    found = _found()
    assert found.confirmation is not None and found.confirmation.reproduced > 0
    kept = dataclasses.replace(_between(), kept=found)
    assert FirstConfirmed()(kept) == Stop(StopReason.FIRST_CONFIRMED, "first confirmed finding")
    assert FirstConfirmed(("crash", "corruption"))(kept) is not None
    assert FirstConfirmed(("crash",))(kept) is None  # another verdict than the one asked
    unconfirmed = dataclasses.replace(_between(), kept=dataclasses.replace(found, confirmation=None))
    assert FirstConfirmed()(unconfirmed) is None
    assert FirstConfirmed()(_between()) is None  # between iterations there is no finding to ask about


def test_every_strategy_failed_fires_only_when_the_last_one_is_benched() -> None:
    assert EveryStrategyFailed()(_between(benched=("a",))) is None
    stop = EveryStrategyFailed()(_between(benched=("a", "b")))
    assert stop is not None and stop.reason is StopReason.STRATEGIES_FAILED
    assert stop.detail == "every strategy failed: a: ValueError: a broke; b: ValueError: b broke"


def test_the_conditions_a_config_sets_and_the_order_they_answer_in(tmp_path: Path) -> None:
    none = stop_conditions(CampaignConfig(tmp_path))
    assert [type(c) for c in none] == [EveryStrategyFailed] and budgets(none) == ()
    both = stop_conditions(CampaignConfig(tmp_path, time_budget_s=10, request_budget=5, stop_at_first=True))
    assert [type(c) for c in both] == [EveryStrategyFailed, TimeBudget, RequestBudget, FirstConfirmed]
    assert [type(c) for c in budgets(both)] == [TimeBudget, RequestBudget]
    # Both budgets spent: the time budget is the reason given, as the campaign always said it.
    stop = first_stop(both, _between(elapsed=11, requests=6))
    assert stop is not None and stop.reason is StopReason.TIME_BUDGET
    assert first_stop(both, _between(elapsed=1, requests=1)) is None


def test_a_result_carries_its_stop_reason_beside_the_words(tmp_path: Path) -> None:
    result = CampaignResult(3, 40, 2.0, (), Stop(StopReason.REQUEST_BUDGET, "request budget of 40 spent"))
    assert result.stopped_because == "request budget of 40 spent"
    summary = json.loads(json.dumps(result.to_json()))
    assert summary["stopped_because"] == "request budget of 40 spent" and summary["stop_reason"] == "request-budget"
    assert {r.value for r in StopReason} == {"time-budget", "request-budget", "first-confirmed", "strategies-failed",
                                             "target-lost"}


def test_progress_round_trips_and_reads_what_earlier_versions_wrote(tmp_path: Path) -> None:
    progress = Progress(next_iteration=12, requests=340, elapsed_s=61.2345, picks={0: 3, 2: 1},
                        schedule={"uses": {"a": 4}, "gains": {"a": 2}, "seconds": {"a": 1.5}}, seen={"sig": 2},
                        first_confirmed={"crash": (120, 30.5)}, restarts=1, benched={"b": "ValueError: x"})
    write_progress(tmp_path, progress)
    on_disk = json.loads((tmp_path / "progress.json").read_text(encoding="utf-8"))
    # The file is what progress.json has always held (string ids, lists for pairs, rounded seconds).
    assert on_disk["picks"] == {"0": 3, "2": 1} and on_disk["first_confirmed"] == {"crash": [120, 30.5]}
    assert on_disk["elapsed_s"] == 61.234
    assert Progress.from_json(on_disk) == dataclasses.replace(progress, elapsed_s=61.234)
    assert Progress.from_json({}) == Progress()  # a new campaign, or a file of an older one without the keys
    # Reopening the directory reads it back as the record.
    (tmp_path / "config.json").write_text(json.dumps({"seed": 0, "strategies": ["a"]}), encoding="utf-8")
    again = open_campaign_dir(tmp_path, resume=True, identity={"seed": 0, "strategies": ["a"]}, settings={})
    assert again == Progress.from_json(on_disk)


def test_the_stored_config_is_read_for_a_resume_and_a_damaged_one_refused(tmp_path: Path) -> None:
    from servefuzz.errors import UsageError

    assert stored_config(tmp_path) == {}  # none yet
    (tmp_path / "config.json").write_text(json.dumps({"seed": 7, "strategies": ["a", "b"]}), encoding="utf-8")
    assert stored_config(tmp_path) == {"seed": 7, "strategies": ["a", "b"]}
    (tmp_path / "config.json").write_text(json.dumps({"seed": 7, "strategies": "a"}), encoding="utf-8")
    with pytest.raises(UsageError, match="is damaged"):
        stored_config(tmp_path)
