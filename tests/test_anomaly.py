"""The anomaly taxonomy as data: ranks, previews and the JSON round trip."""

from __future__ import annotations

import doctest
import json

from hypothesis import given
from hypothesis import strategies as st

from servefuzz import anomaly
from servefuzz.anomaly import Anomaly, Divergence, FlipSide, Oracle, Promise, Variant, Verdict, held_to, worst

ids = st.lists(st.integers(0, 50_000), max_size=6).map(tuple)
lp = st.none() | st.floats(-30, 0, allow_nan=False)
variants = st.builds(Variant, st.integers(0, 3), ids, st.text(max_size=20), st.integers(1, 9), ids, st.sampled_from(["", "load", "alone"]))
sides = st.builds(FlipSide, st.integers(0, 9), st.sampled_from(["load", "alone"]), st.integers(0, 3),
                  st.none() | st.integers(0, 99), lp, lp, st.booleans(), st.none() | st.sampled_from(["length", "stop"]))
divergences = st.builds(
    Divergence, st.text(min_size=1, max_size=8), st.integers(0, 99), sides, sides, st.sampled_from(list(Verdict)),
    st.text(max_size=40), lp, st.booleans(), lp, lp, st.integers(0, 999), st.integers(0, 99), lp, st.sampled_from(["token", "char"]),
)  # fmt: skip
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                           lambda kids: st.lists(kids, max_size=3), max_leaves=6)
anomalies = st.builds(
    Anomaly, st.sampled_from(list(Oracle)), st.sampled_from(list(Verdict)), st.text(min_size=1, max_size=8), st.text(max_size=40),
    st.lists(variants, max_size=3).map(tuple), st.lists(divergences, max_size=2).map(tuple),
    st.dictionaries(st.text(max_size=6), json_values, max_size=3),
)  # fmt: skip


@given(anomalies)
def test_anomaly_survives_json(a: Anomaly) -> None:
    assert Anomaly.from_json(json.loads(json.dumps(a.to_json()))) == a


def test_severity_order() -> None:
    assert worst([Verdict.NUMERIC_DRIFT, Verdict.HANG, Verdict.CORRUPTION]) is Verdict.CORRUPTION
    assert worst([Verdict.NUMERIC_DRIFT, Verdict.UNCLASSIFIED]) is Verdict.UNCLASSIFIED
    assert worst([Verdict.INDETERMINATE, Verdict.NUMERIC_DRIFT]) is Verdict.NUMERIC_DRIFT
    assert worst([]) is None
    assert {v for v in Verdict if v.is_divergence} == {
        Verdict.CORRUPTION, Verdict.SUSPECTED_CORRUPTION, Verdict.CONTRACT_VIOLATION, Verdict.UNCLASSIFIED,
        Verdict.NUMERIC_DRIFT}


def test_the_ladder_puts_an_unbacked_flip_below_the_loud_failures_and_a_shift_above_drift() -> None:
    ladder = [Verdict.CORRUPTION, Verdict.MALFORMED, Verdict.SUSPECTED_CORRUPTION, Verdict.UNCLASSIFIED,
              Verdict.ANOMALOUS_SHIFT, Verdict.NUMERIC_DRIFT]
    assert sorted(ladder, key=lambda v: v.rank) == ladder
    assert worst([Verdict.SUSPECTED_CORRUPTION, Verdict.HANG]) is Verdict.HANG
    assert worst([Verdict.SUSPECTED_CORRUPTION, Verdict.UNCLASSIFIED]) is Verdict.SUSPECTED_CORRUPTION
    # Backing is the only way between the two corruption verdicts, both ways.
    assert Verdict.SUSPECTED_CORRUPTION.backed is Verdict.CORRUPTION
    assert Verdict.CORRUPTION.unbacked is Verdict.SUSPECTED_CORRUPTION
    assert all(v.backed is v for v in Verdict if v is not Verdict.SUSPECTED_CORRUPTION)
    assert not Verdict.ANOMALOUS_SHIFT.is_divergence


def test_a_contract_violation_ranks_below_what_may_be_a_wrong_answer_and_above_what_is_unknown() -> None:
    ladder = [Verdict.CORRUPTION, Verdict.HANG, Verdict.SUSPECTED_CORRUPTION, Verdict.CONTRACT_VIOLATION,
              Verdict.UNCLASSIFIED, Verdict.ANOMALOUS_SHIFT, Verdict.NUMERIC_DRIFT]
    assert sorted(ladder, key=lambda v: v.rank) == ladder
    # Runs judged without the server's promise say drift: that is the contract violation coming back.
    assert Verdict.CONTRACT_VIOLATION.unbacked is Verdict.NUMERIC_DRIFT
    assert Verdict.CONTRACT_VIOLATION.backed is Verdict.CONTRACT_VIOLATION


def _flip(verdict: Verdict) -> Anomaly:
    side = FlipSide(0, "load", 0, 7, -0.69, -0.70)
    d = Divergence("r01", 3, side, FlipSide(1, "alone", 0, 9, -0.69, -0.70), verdict,
                   f"flip at token 3: margin 0.0100 <= threshold 0.0625 -> {verdict.value}", margin=0.01, threshold=0.0625)
    return Anomaly(Oracle.ISOLATION, verdict, "r01", f"r01: {verdict.value} under load", divergences=(d,))


def test_held_to_a_promise_a_near_tie_flip_is_a_contract_violation_that_cites_it_and_round_trips() -> None:
    promise = Promise("VLLM_BATCH_INVARIANT=1", '"output must not change with batch composition"', "vllm PR #48694")
    [held] = held_to([_flip(Verdict.NUMERIC_DRIFT)], promise)
    assert held.verdict is Verdict.CONTRACT_VIOLATION and held.promise == promise
    assert held.summary == "r01: contract-violation under load"
    [d] = held.divergences
    assert d.verdict is Verdict.CONTRACT_VIOLATION and d.margin == 0.01  # the numbers are kept as measured
    assert d.reason.endswith('which promises: "output must not change with batch composition" (vllm PR #48694)'
                             " -> contract-violation")
    assert Anomaly.from_json(held.to_json()) == held
    assert held_to([held], promise) == (held,)  # idempotent


def test_without_a_promise_or_for_a_confident_flip_nothing_changes() -> None:
    promise = Promise("--enable-deterministic-inference", "the same answer", "docs")
    drift, corrupt, unknown = _flip(Verdict.NUMERIC_DRIFT), _flip(Verdict.CORRUPTION), _flip(Verdict.UNCLASSIFIED)
    assert held_to([drift], None) == (drift,)
    assert "promise" not in drift.to_json()  # every other anomaly's JSON is what it was
    assert held_to([corrupt, unknown], promise) == (corrupt, unknown)


def test_variant_preview() -> None:
    text = " u7892_1146 u7892_1086 u7892_108 u78921 more"
    assert Variant(0, (1,), text, 1, (0,)).preview() == "' u7892_1146 u7892_1086 u7892_108 u78...'"
    assert Variant(0, (1,), "it's\nshort", 1, (0,)).preview() == "'it\\'s\\nshort'"
    assert Variant(0, tuple(range(10)), "", 1, (0,)).preview() == "[0, 1, 2, 3, 4, 5, 6, 7, ...]"


def test_flip_side_confidence_and_name() -> None:
    assert FlipSide(3, "load", 0, 7, -0.1, -2.1).confidence == 2.0
    assert FlipSide(3, "load", 0, 7, -0.1, None).confidence is None
    assert FlipSide(3, "load", 2, 7).name == "load#3/c2"
    assert FlipSide(3, "alone", 0, 7).name == "alone#3"


def test_docstring_examples() -> None:
    result = doctest.testmod(anomaly)
    assert result.attempted > 0 and result.failed == 0
