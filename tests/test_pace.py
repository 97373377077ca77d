"""`servefuzz.pace` as logic: what the measurements make of a run's timeout and of a scenario's
size. The real slow target is tests/engines/test_pace_real_model.py; the campaign that fits its
scenarios, tests/test_campaign.py."""

from __future__ import annotations

import doctest

import servefuzz.pace
from servefuzz.history import ChoiceRecord, RequestRecord, Status
from servefuzz.pace import MIN_FITTED_REQUESTS, MIN_FITTED_TOKENS, PACE_MULTIPLE, SCENARIO_S, Pace, PaceMeter, fit
from servefuzz.workload import RequestSpec, Scenario


def _record(ms: float, prompt: int, out: int, status: Status = Status.OK) -> RequestRecord:
    return RequestRecord("r", 0, "x", status, 0.0, sent_ms=0.0, end_ms=ms, prompt_tokens=prompt,
                         choices=(ChoiceRecord(0, tuple(range(out))),))


def _measured() -> PaceMeter:
    """Three requests alone: 10 ms a prompt token, 100 ms an output token."""
    m = PaceMeter()
    for prompt, out in ((100, 10), (200, 10), (100, 50)):
        assert m.pace is None  # not before three lone requests answered
        m.observe([_record(1000.0 * (0.01 * prompt + 0.1 * out), prompt, out)])
    return m


def test_the_timeout_is_a_multiple_of_the_serial_bound_above_the_floor() -> None:
    pace = _measured().pace
    assert pace is not None and (pace.prefill_s, pace.decode_s, pace.slowdown) == (0.01, 0.1, 1.0)
    big = [RequestSpec(f"r{i}", 0.0, tuple(range(100)), max_tokens=100) for i in range(10)]  # 10 x (1 + 10) s
    assert pace.timeout_s(big, floor_s=120.0) == PACE_MULTIPLE * 110.0
    assert pace.timeout_s(big[:1], floor_s=120.0) == 120.0  # 44 s: the floor


def test_a_slower_run_stretches_it_and_short_or_failed_ones_say_nothing() -> None:
    m = _measured()
    m.observe([_record(50.0, 1, 0), _record(50.0, 1, 0)])  # 20 ms predicted: a request's fixed cost
    assert m.pace is not None and m.pace.slowdown == 1.0
    m.observe([_record(30_000.0, 100, 100), _record(30_000.0, 100, 100)])  # predicted 22 s, took 30
    assert m.pace is not None and round(m.pace.slowdown, 3) == round(30 / 22, 3)
    m.observe([_record(90_000.0, 100, 100, Status.TIMEOUT), _record(9.0, 1, 1)])  # a failed run
    assert round(m.pace.slowdown, 3) == round(30 / 22, 3)


def test_the_module_docstring_runs() -> None:
    result = doctest.testmod(servefuzz.pace)
    assert result.attempted > 0 and result.failed == 0


def test_a_scenario_too_long_for_a_slow_target_is_cut_to_the_budget_and_a_fast_ones_is_not() -> None:
    # A blocker (384 prompt tokens), then eleven requests sharing a prefix: at 20 ms a prompt
    # token and 100 ms an output token its serial bound is 7.7 + 12.8 + 11 x (2 + 12.8) s, 183 s.
    burst = tuple(RequestSpec(f"r{i:02d}", 10.0 + i, tuple(range(100)), max_tokens=128, prefix_name="p0",
                              prefix_len=64) for i in range(1, 12))
    scenario = Scenario(seed=5, requests=(RequestSpec("r00", 0.0, tuple(range(384)), max_tokens=128), *burst),
                        meta={"strategy": "page-boundary"})
    slow = Pace(prefill_s=0.02, decode_s=0.1)
    cut = fit(scenario, slow)
    assert slow.expected_s(cut.requests) <= SCENARIO_S < slow.expected_s(scenario.requests)
    assert {r.max_tokens for r in cut.requests} == {MIN_FITTED_TOKENS}  # outputs first, to the floor
    # Then the costliest request (the blocker), then the last written of equals; prompts as written.
    assert [(r.id, r.prompt_ids) for r in cut.requests] == [(r.id, r.prompt_ids) for r in burst[:len(cut.requests)]]
    assert len(cut.requests) == 8 and cut.meta["fitted"]["dropped"] == 4 and cut.meta["strategy"] == "page-boundary"
    # Never below two requests, whatever the budget.
    assert len(fit(scenario, slow, budget_s=0.001).requests) == MIN_FITTED_REQUESTS
    # The control: the reference engine's pace, a busy machine's slowdown, or nothing measured yet.
    assert fit(scenario, Pace(prefill_s=0.0003, decode_s=0.0025, slowdown=2.5)) is scenario
    assert fit(scenario, None) is scenario


def test_noise_that_makes_a_term_negative_gives_the_better_one_kind_fit_not_each_kinds_worst() -> None:
    # The longer prompt answered faster (a busy moment passed): least squares wants a negative
    # prefill cost. The fit charges all to output tokens, at about what they cost (0.1 s), where
    # each kind's largest rate at once made it 0.1 s a prompt token and 1 s an output token.
    m = PaceMeter()
    for prompt, out, s in ((100, 10, 1.0), (200, 10, 0.5), (100, 50, 5.0), (10, 1, 1.0)):
        m.observe([_record(1000.0 * s, prompt, out)])
    pace = m.pace
    assert pace is not None and pace.prefill_s == 0.0 and 0.09 < pace.decode_s < 0.11, pace
