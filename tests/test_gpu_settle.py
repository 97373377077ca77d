"""scripts/gpu_settle.py judges a run through servefuzz's oracles, never by a rule of its own."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from scriptload import load_script

from servefuzz.anomaly import Verdict
from servefuzz.oracles import isolation

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_settle.py"


@pytest.fixture(scope="module")
def settle() -> ModuleType:
    return load_script(SCRIPT)


def result(rid: str, tokens: list[int], tops: list[list[tuple[int, float]]], **extra: object) -> dict:
    """A `complete` result as the script records it."""
    return {"id": rid, "tokens": tokens, "top": tops, "error": None, **extra}


def test_a_flip_beyond_the_noise_is_bad_and_a_near_tie_is_not(settle: ModuleType) -> None:
    top = [[(5, -0.1), (7, -2.5)], [(9, -0.2), (4, -3.0)]]
    flipped = [[(7, -0.2), (5, -2.4)], [(9, -0.2), (4, -3.0)]]
    tie = [[(9, -0.6900), (8, -0.6905)]]  # a margin within the noise floor
    tie_flipped = [[(8, -0.6900), (9, -0.6903)]]
    solo = {"r1": result("r1", [5, 9], top), "r2": result("r2", [5, 9], top), "r3": result("r3", [9], tie)}
    run = {"r1": result("r1", [7, 9], flipped, id_slot=1), "r2": result("r2", [5, 9], top),
           "r3": result("r3", [8], tie_flipped)}
    v = settle.judge(run, solo)
    assert v["r1"]["bad"] and v["r1"]["verdict"] == Verdict.SUSPECTED_CORRUPTION.value and v["r1"]["div"] == 0
    assert not v["r2"]["bad"] and v["r2"]["verdict"] is None and v["r2"]["div"] is None
    assert v["r2"]["shift0"] == 0.0 and v["r2"]["shift_max"] == 0.0
    assert not v["r3"]["bad"] and v["r3"]["verdict"] == Verdict.NUMERIC_DRIFT.value
    # The same verdicts as the oracle itself gives the same records.
    loaded = settle.RunHistory(0, "load", tuple(settle.record(r, 0, "load") for r in run.values()))
    alone = {rid: [settle.record(r, 0, "alone")] for rid, r in solo.items()}
    assert {a.request_id: a.verdict.value for a in isolation([loaded], alone)} == {
        rid: x["verdict"] for rid, x in v.items() if x["verdict"] is not None}


def test_the_prefix_case_differs_where_the_shorter_stops(settle: ModuleType) -> None:
    top = [[(5, -0.1), (7, -2.5)], [(9, -0.2), (4, -3.0)]]
    v = settle.judge({"r1": result("r1", [5], top[:1])}, {"r1": result("r1", [5, 9], top)})
    assert v["r1"]["div"] == 1 and v["r1"]["shift0"] == 0.0


def test_an_error_is_not_judged(settle: ModuleType) -> None:
    v = settle.judge({"r1": {"id": "r1", "tokens": [], "top": [], "error": "HTTP 500"}}, {"r1": result("r1", [5], [])})
    assert v == {"r1": {"error": "HTTP 500"}}
