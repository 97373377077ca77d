"""Isolation: loaded outputs against the same request alone on a flushed cache."""

from __future__ import annotations

import pytest
from histbuild import flip, rec, run, scored

from servefuzz.anomaly import Oracle, Verdict
from servefuzz.history import Status
from servefuzz.oracles import NoiseModel, isolation

GOOD = scored([5, 6, 7, 8])
BAD = flip(GOOD, 2, chosen=60, lp_chosen=-0.03, other=7, lp_other=-2.5, tail=(61,))


def loaded(*r02_outputs):  # type: ignore[no-untyped-def]
    return [run(i, rec("r01", i, GOOD), rec("r02", i, c)) for i, c in enumerate(r02_outputs)]


def test_loaded_equal_to_alone_is_no_anomaly() -> None:
    alone = {"r01": [rec("r01", 0, GOOD, label="alone")], "r02": [rec("r02", 0, GOOD, label="alone")]}
    assert isolation(loaded(GOOD, GOOD), alone) == []


def test_loaded_flip_against_alone_is_corruption() -> None:
    alone = {"r02": [rec("r02", 0, GOOD, label="alone")]}
    (a,) = isolation(loaded(GOOD, BAD, GOOD, BAD), alone)
    assert (a.oracle, a.verdict, a.request_id) == (Oracle.ISOLATION, Verdict.SUSPECTED_CORRUPTION, "r02")
    assert [(v.label, v.token_ids, v.count) for v in a.variants] == [
        ("alone", GOOD.token_ids, 1),
        ("load", BAD.token_ids, 2),
    ]
    (d,) = a.divergences
    assert (d.a.label, d.b.label, d.position) == ("alone", "load", 2)
    # 60 is below the alone run's top-2, so its side is a bound: at least 3.0 nats.
    assert d.margin == pytest.approx(3.0) and d.margin_is_bound
    assert a.evidence["differing_runs"] == [1, 3]
    assert a.summary.startswith("r02: 2/4 loaded runs differ from the output alone; suspected-corruption")


def test_indeterminate_alone_run_is_not_judged() -> None:
    alone = {"r02": [rec("r02", 0, GOOD, label="alone", status=Status.TIMEOUT)]}
    assert isolation(loaded(BAD, BAD), alone) == []


def test_alone_choice_zero_is_the_reference_for_every_loaded_choice() -> None:
    c1_bad = flip(scored([5, 6, 7, 8], index=1), 1, chosen=50, lp_chosen=-0.02, other=6, lp_other=-3.0)
    histories = [run(0, rec("r02", 0, GOOD, c1_bad))]
    (a,) = isolation(histories, {"r02": [rec("r02", 0, GOOD, label="alone")]})
    assert a.divergences[0].b.choice == 1 and a.divergences[0].position == 1


def test_majority_of_several_alone_runs_is_the_reference() -> None:
    alone = {"r02": [rec("r02", i, c, label="alone") for i, c in enumerate([GOOD, BAD, GOOD])]}
    (a,) = isolation(loaded(BAD), alone)
    assert (a.divergences[0].a.token, a.divergences[0].b.token) == (7, 60)
    assert a.evidence["alone_variants"] == 2


def test_noise_from_replay_decides_a_near_tie() -> None:
    tie = flip(GOOD, 3, chosen=80, lp_chosen=-0.7001, other=8, lp_other=-0.7003)
    alone_tie = flip(GOOD, 3, chosen=8, lp_chosen=-0.7000, other=80, lp_other=-0.7002)
    alone = {"r02": [rec("r02", 0, alone_tie, label="alone")]}
    (a,) = isolation(loaded(tie), alone, noise=NoiseModel(p99=0.0004, tokens=300, outputs=9))
    assert a.verdict is Verdict.NUMERIC_DRIFT
    assert a.divergences[0].threshold == pytest.approx(0.0016)
