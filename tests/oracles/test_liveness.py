"""Liveness: crash, hang, 5xx, malformed and cut connections are anomalies, never corruption."""

from __future__ import annotations

from histbuild import rec, run, scored
from hypothesis import given
from hypothesis import strategies as st

from servefuzz.anomaly import Oracle, Verdict
from servefuzz.history import RequestRecord, Status
from servefuzz.oracles import liveness

OK = scored([1, 2])


def at(rid: str, status: Status, end: float, run_no: int = 0, **kw: object) -> RequestRecord:
    choice = (OK,) if status is Status.OK else ()
    return rec(rid, run_no, *choice, status=status, end_ms=end, sent_ms=end - 5, **kw)


def test_healthy_run_is_quiet() -> None:
    assert liveness([run(0, at("a", Status.OK, 10), at("b", Status.OK, 20))]) == []


def test_5xx_is_server_error_grouped_over_runs_and_4xx_is_not() -> None:
    histories = [
        run(i, at("a", Status.HTTP_ERROR, 10, i, http_status=500, error="Internal Server Error\n<html>"),
            at("b", Status.HTTP_ERROR, 12, i, http_status=400, error="n must be 1"), at("c", Status.OK, 20, i))
        for i in range(3)
    ]  # fmt: skip
    (a,) = liveness(histories)
    assert (a.oracle, a.verdict, a.request_id) == (Oracle.LIVENESS, Verdict.SERVER_ERROR, "a")
    assert a.evidence["runs"] == [0, 1, 2]
    assert a.summary == "a: HTTP 500 in 3/3 runs: Internal Server Error"


def test_malformed_and_timeout() -> None:
    h = run(0, at("a", Status.MALFORMED, 10, error="no choices"), at("b", Status.TIMEOUT, 99), at("c", Status.OK, 100))
    assert [(a.verdict, a.request_id) for a in liveness([h])] == [(Verdict.HANG, "b"), (Verdict.MALFORMED, "a")]


def test_trailing_connection_errors_are_a_crash() -> None:
    # "a" was sent first but was in flight when the server died at ~30 ms.
    h = run(0, at("a", Status.CONNECTION_ERROR, 31), at("b", Status.OK, 20), at("c", Status.CONNECTION_ERROR, 40),
            at("d", Status.CONNECTION_ERROR, 41), at("x", Status.CANCELLED, 50))  # fmt: skip
    (a,) = liveness([h])
    assert (a.verdict, a.request_id) == (Verdict.CRASH, "a")
    assert a.evidence["events"][0]["failed"] == ["a", "c", "d"]
    assert "server went away in 1/1 runs" in a.summary


def test_single_cut_connection_is_indeterminate_not_crash() -> None:
    h = run(0, at("a", Status.OK, 10), at("b", Status.CONNECTION_ERROR, 20), at("c", Status.OK, 30))
    assert [(a.verdict, a.request_id) for a in liveness([h])] == [(Verdict.INDETERMINATE, "b")]
    lone_tail = run(1, at("a", Status.OK, 10, 1), at("b", Status.CONNECTION_ERROR, 20, 1))
    assert [a.verdict for a in liveness([lone_tail])] == [Verdict.INDETERMINATE]


def test_a_run_of_one_failed_request_is_a_crash() -> None:
    assert [a.verdict for a in liveness([run(0, at("a", Status.CONNECTION_ERROR, 5))])] == [Verdict.CRASH]


@given(st.lists(st.tuples(st.sampled_from(list(Status)), st.floats(0, 1000)), max_size=12))
def test_liveness_never_calls_anything_a_divergence(events: list[tuple[Status, float]]) -> None:
    h = run(0, *(at(f"r{i}", s, end, http_status=503) for i, (s, end) in enumerate(events)))
    assert not any(a.verdict.is_divergence for a in liveness([h]))
