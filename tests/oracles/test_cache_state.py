"""Cache state: cold, warm (self-hit) and primed (by the bare prefix) must answer alike."""

from __future__ import annotations

from histbuild import flip, rec, scored

from servefuzz.anomaly import Oracle, Verdict
from servefuzz.oracles import cache_state

GOOD = scored([10, 11, 12, 13])
BAD = flip(GOOD, 2, chosen=77, lp_chosen=-0.02, other=12, lp_other=-5.0, tail=[7])
TIE_COLD = flip(GOOD, 2, chosen=12, lp_chosen=-0.6931, other=77, lp_other=-0.6934, tail=[13])
TIE_WARM = flip(GOOD, 2, chosen=77, lp_chosen=-0.6930, other=12, lp_other=-0.6935, tail=[7])


def test_agreeing_states_are_no_anomaly() -> None:
    recs = [rec("r01", 0, GOOD, label=s) for s in ("cold", "warm", "primed")]
    assert cache_state(recs) == []


def test_a_primed_hit_that_reads_wrong_kv_is_corruption_with_both_sides_as_evidence() -> None:
    recs = [rec("r02", 0, GOOD, label="cold"), rec("r02", 0, GOOD, label="warm"), rec("r02", 0, BAD, label="primed")]
    [a] = cache_state(recs)
    assert a.oracle is Oracle.CACHE_STATE and a.verdict is Verdict.SUSPECTED_CORRUPTION and a.request_id == "r02"
    assert a.evidence["states"] == ["primed"] and "primed by its bare prefix" in a.summary
    d = a.divergences[0]
    assert d.position == 2 and {d.a.label, d.b.label} == {"cold", "primed"}
    assert sorted(v.token_ids for v in a.variants) == sorted([GOOD.token_ids, BAD.token_ids])


def test_a_warm_flip_at_a_near_tie_is_numeric_drift_when_noise_says_so() -> None:
    jitter = scored([10, 11, 12, 13], jitter=[0.0, 0.002, -0.002, 0.0])
    recs = [
        rec("r01", 0, GOOD, label="cold"), rec("r01", 0, jitter, label="warm"),
        rec("r02", 0, TIE_COLD, label="cold"), rec("r02", 0, TIE_WARM, label="warm"),
    ]
    [a] = cache_state(recs)
    assert a.request_id == "r02" and a.verdict is Verdict.NUMERIC_DRIFT, a.summary


def test_requests_without_a_cold_reference_and_other_labels_are_not_judged() -> None:
    recs = [rec("r01", 0, GOOD, label="warm"), rec("r01", 0, BAD, label="primed"),
            rec("r02", 0, GOOD, label="cold"), rec("r02", 0, BAD, label="load")]
    assert cache_state(recs) == []
