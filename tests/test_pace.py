"""`servefuzz.pace` as logic: what the measurements make of a run's timeout. The real slow target
is tests/engines/test_pace_real_model.py."""

from __future__ import annotations

from servefuzz.history import ChoiceRecord, RequestRecord, Status
from servefuzz.pace import PACE_MULTIPLE, PaceMeter
from servefuzz.workload import RequestSpec


def _record(ms: float, prompt: int, out: int, status: Status = Status.OK) -> RequestRecord:
    return RequestRecord("r", 0, "x", status, 0.0, sent_ms=0.0, end_ms=ms, prompt_tokens=prompt,
                         choices=(ChoiceRecord(0, tuple(range(out))),))


def _calibrated() -> PaceMeter:
    m = PaceMeter()
    assert m.calibrate(_record(3200.0, 8, 32), _record(2560.0, 256, 1))  # 0.1 s a token out, 0.01 in
    return m


def test_the_timeout_is_a_multiple_of_the_serial_bound_above_the_floor() -> None:
    pace = _calibrated().pace
    assert pace is not None
    big = [RequestSpec(f"r{i}", 0.0, tuple(range(100)), max_tokens=100) for i in range(10)]  # 10 x (1 + 10) s
    assert pace.timeout_s(big, floor_s=120.0) == PACE_MULTIPLE * 110.0
    assert pace.timeout_s(big[:1], floor_s=120.0) == 120.0  # 44 s: the floor


def test_a_slower_run_stretches_it_and_a_short_one_says_nothing() -> None:
    m = _calibrated()
    m.observe([_record(50.0, 1, 0)])  # 10 ms predicted: a request's fixed cost, no measure of speed
    assert m.pace is not None and m.pace.slowdown == 1.0
    m.observe([_record(30_000.0, 100, 100)])  # predicted 11 s, took 30
    assert m.pace is not None and round(m.pace.slowdown, 2) == round(30 / 11, 2)
    m.observe([_record(30_000.0, 100, 100, Status.TIMEOUT)])  # a failed run says nothing either
    assert round(m.pace.slowdown, 2) == round(30 / 11, 2)


def test_no_pace_without_a_full_calibration() -> None:
    m = PaceMeter()
    assert not m.calibrate(_record(3200.0, 8, 32, Status.TIMEOUT), _record(2560.0, 256, 1))
    assert m.pace is None
