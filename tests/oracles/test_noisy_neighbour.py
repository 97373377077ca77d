"""Noisy neighbour: a victim's latency against its solo baseline, over the measured spread."""

from __future__ import annotations

from servefuzz.anomaly import Oracle, Verdict
from servefuzz.history import RequestRecord, RunHistory, Status
from servefuzz.oracles import noisy_neighbour


def r(rid: str, label: str, total: float, *, first: float | None = None, status: Status = Status.OK) -> RequestRecord:
    return RequestRecord(rid, 0, label, status, 0.0, sent_ms=10.0, first_token_ms=None if first is None else 10.0 + first,
                         end_ms=10.0 + total)


def scenario(victim_ms: float, *, others: int = 6, other_ms: float = 90.0) -> tuple[list[RunHistory], dict[str, list[RequestRecord]]]:
    ids = [f"r{i:02d}" for i in range(others)] + ["victim"]
    loaded = [RunHistory(0, "load", tuple(r(i, "load", other_ms + 3 * n) for n, i in enumerate(ids[:-1]))
                         + (r("victim", "load", victim_ms),))]
    return loaded, {i: [r(i, "alone", 40.0)] for i in ids}


def test_a_victim_far_beyond_the_common_slowdown_is_flagged_with_its_numbers() -> None:
    loaded, solo = scenario(2000.0)
    [a] = noisy_neighbour(loaded, solo)
    assert a.oracle is Oracle.NOISY_NEIGHBOUR and a.verdict is Verdict.SLOWDOWN and a.request_id == "victim"
    assert a.evidence["ratio"] == 50.0 and a.evidence["solo_ms"] == 40.0 and a.evidence["threshold"] >= 8.0


def test_everyone_slowed_alike_is_load_not_a_victim() -> None:
    loaded, solo = scenario(2000.0, other_ms=1900.0)
    assert noisy_neighbour(loaded, solo) == []


def test_tiny_baselines_need_a_real_excess_and_small_scenarios_are_not_judged() -> None:
    loaded, solo = scenario(200.0, other_ms=42.0)  # 5x its baseline, 160 ms: jitter on a tiny baseline
    assert noisy_neighbour(loaded, solo) == []
    loaded, solo = scenario(5000.0, others=2)
    assert noisy_neighbour(loaded, solo) == []


def test_time_to_first_token_is_used_when_both_sides_streamed_and_failures_are_skipped() -> None:
    ids = [f"r{i}" for i in range(6)]
    loaded = [RunHistory(0, "load", tuple(r(i, "load", 3000.0, first=50.0) for i in ids)
                         + (r("v", "load", 3000.0, first=1500.0), r("x", "load", 9000.0, status=Status.TIMEOUT)))]
    solo = {i: [r(i, "alone", 2900.0, first=40.0)] for i in [*ids, "v", "x"]}
    assert [a.request_id for a in noisy_neighbour(loaded, solo)] == ["v"]
