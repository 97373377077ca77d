"""`servefuzz.pace` as logic: what the measurements make of a run's timeout. The real slow target
is tests/engines/test_pace_real_model.py."""

from __future__ import annotations

from servefuzz.history import ChoiceRecord, RequestRecord, Status
from servefuzz.pace import PACE_MULTIPLE, PaceMeter
from servefuzz.workload import RequestSpec


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
