"""n-consistency: the choices of one temperature-0 request must agree."""

from __future__ import annotations

from histbuild import flip, rec, run, scored

from servefuzz.anomaly import Oracle, Verdict
from servefuzz.history import Status
from servefuzz.oracles import n_consistency


def choices(n: int, bad: int | None = None) -> list:
    out = [scored([3, 4, 5, 6], index=i) for i in range(n)]
    if bad is not None:
        out[bad] = flip(out[bad], 2, chosen=44, lp_chosen=-0.02, other=5, lp_other=-4.0)
    return out


def test_agreeing_choices_are_no_anomaly() -> None:
    assert n_consistency([run(0, rec("r01", 0, *choices(4)), rec("r02", 0, *choices(1)))]) == []


def test_one_choice_off_is_an_anomaly_with_variants_and_runs() -> None:
    histories = [run(i, rec("r01", i, *choices(4, bad=2 if i == 1 else None))) for i in range(3)]
    (a,) = n_consistency(histories)
    assert (a.oracle, a.verdict, a.request_id) == (Oracle.N_CONSISTENCY, Verdict.SUSPECTED_CORRUPTION, "r01")
    assert [(v.choice, v.count, v.runs) for v in a.variants] == [(0, 3, (1,)), (2, 1, (1,))]
    (d,) = a.divergences
    assert (d.a.choice, d.b.choice, d.position, d.b.token) == (0, 2, 2, 44)
    assert a.evidence == {"runs_checked": 3, "runs_disagreeing": [1]}
    assert "disagree in 1/3 runs" in a.summary


def test_indeterminate_record_is_ignored() -> None:
    histories = [run(0, rec("r01", 0, *choices(4, bad=1), status=Status.CANCELLED))]
    assert n_consistency(histories) == []
