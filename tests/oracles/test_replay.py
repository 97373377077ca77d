"""Replay consistency over R runs of one scenario."""

from __future__ import annotations

import random

import pytest
from histbuild import flip, rec, run, scored

from servefuzz.anomaly import Oracle, Verdict
from servefuzz.history import ChoiceRecord, RunHistory, Status
from servefuzz.oracles import NoiseModel, replay_consistency

STABLE_IDS = [f"s{i:02d}" for i in range(8)]
R02 = scored([40, 41, 42, 43, 44, 45])


def stable_records(i: int, jitter: float = 0.0) -> list:
    """Eight requests whose tokens agree in every run; logprobs jitter by up to `jitter`."""
    rng = random.Random(i)
    return [
        rec(rid, i, scored([k, k + 1, k + 2, k + 3], jitter=[rng.uniform(-jitter, jitter) for _ in range(4)]))
        for k, rid in enumerate(STABLE_IDS)
    ]


def runs_with(r02_outputs: list[ChoiceRecord], jitter: float = 0.0) -> list[RunHistory]:
    return [run(i, *stable_records(i, jitter), rec("r02", i, c)) for i, c in enumerate(r02_outputs)]


def test_exact_replay_has_no_anomaly() -> None:
    out = replay_consistency(runs_with([R02] * 5))
    assert out.anomalies == ()
    assert out.stable == tuple(sorted([*STABLE_IDS, "r02"]))
    assert out.noise.p99 == 0.0 and out.noise.outputs == 9


def test_confident_flip_is_corruption_with_variants_counted() -> None:
    v2 = flip(R02, 1, chosen=90, lp_chosen=-0.01, other=41, lp_other=-4.2, tail=(91, 92))
    v3 = flip(R02, 1, chosen=95, lp_chosen=-0.02, other=41, lp_other=-3.7, tail=(96,))
    outs = [R02, v2, R02, v3, R02, v2, R02, R02, v3, v2]  # 5 x R02, 3 x v2, 2 x v3
    result = replay_consistency(runs_with(outs, jitter=0.0002))
    assert result.diverged == ("r02",)
    (a,) = result.anomalies
    assert (a.oracle, a.verdict, a.request_id) == (Oracle.REPLAY, Verdict.SUSPECTED_CORRUPTION, "r02")
    assert [(v.token_ids[:2], v.count, v.runs) for v in a.variants] == [
        ((40, 41), 5, (0, 2, 4, 6, 7)),
        ((40, 90), 3, (1, 5, 9)),
        ((40, 95), 2, (3, 8)),
    ]
    assert [d.position for d in a.divergences] == [1, 1]
    assert [round(d.margin, 4) for d in a.divergences] == [4.19, 3.68]
    assert a.summary.startswith("r02: choice 0: 3 variants (5/3/2) over 10 runs; suspected-corruption: flip at token 1")
    assert result.stable == tuple(STABLE_IDS)


def test_near_tie_flip_with_measured_noise_is_numeric_drift() -> None:
    drift = flip(R02, 4, chosen=88, lp_chosen=-0.69305, other=44, lp_other=-0.69325, tail=(1,))
    tie = flip(R02, 4, chosen=44, lp_chosen=-0.69310, other=88, lp_other=-0.69330)
    tie = ChoiceRecord(0, (*tie.token_ids, 45), (*tie.logprobs, -0.05), (*tie.top_logprobs, R02.top_logprobs[5]))
    result = replay_consistency(runs_with([tie, tie, drift, tie], jitter=0.0003))
    (a,) = result.anomalies
    (d,) = a.divergences
    assert a.verdict is Verdict.NUMERIC_DRIFT
    assert d.position == 4 and d.margin == pytest.approx(0.0002)
    assert result.noise.outputs == 8 and result.noise.tokens == 8 * 4 * 3
    assert 0.0003 < d.threshold <= 4 * 0.0006  # 4 x p99 of jitter differences, above the floor
    assert "stable outputs" in d.reason and d.reason.endswith("-> numeric-drift")


def test_noise_is_not_measured_on_the_diverging_request() -> None:
    # r02's agreeing prefix is already off by 0.5 nats, then it flips at margin 0.3. Counted as
    # noise, that prefix would lift the threshold above 0.3 and excuse the flip as drift.
    off = scored(R02.token_ids, jitter=[0.5, 0.5, 0.5])
    bad = flip(off, 3, chosen=70, lp_chosen=-0.4, other=43, lp_other=-0.7)
    result = replay_consistency(runs_with([R02, bad, R02], jitter=0.0001))
    (a,) = result.anomalies
    assert a.verdict is Verdict.SUSPECTED_CORRUPTION
    assert a.divergences[0].threshold < 0.01


def test_indeterminate_records_never_make_a_divergence() -> None:
    cut = ChoiceRecord(0, (40, 99))  # a different partial output, but the op was cut
    histories = runs_with([R02, R02, R02])
    histories.append(run(3, *stable_records(3), rec("r02", 3, cut, status=Status.TIMEOUT)))
    histories.append(run(4, *stable_records(4), rec("r02", 4, cut, status=Status.CANCELLED)))
    histories.append(run(5, *stable_records(5), rec("r02", 5, cut, status=Status.CONNECTION_ERROR)))
    result = replay_consistency(histories)
    assert result.anomalies == ()
    assert "r02" in result.stable


def test_request_with_fewer_than_two_determinate_runs_is_undetermined() -> None:
    histories = [
        run(0, rec("a", 0, R02), rec("b", 0, R02)),
        run(1, rec("a", 1, R02), rec("b", 1, status=Status.TIMEOUT)),
        run(2, rec("a", 2, R02), rec("b", 2, status=Status.HTTP_ERROR, http_status=500)),
    ]
    result = replay_consistency(histories)
    assert (result.stable, result.undetermined) == (("a",), ("b",))


def test_variants_are_per_choice() -> None:
    c0, c1 = scored([1, 2, 3], index=0), scored([1, 2, 3], index=1)
    c1_bad = flip(c1, 2, chosen=9, lp_chosen=-0.01, other=3, lp_other=-5.0)
    histories = [run(i, rec("r01", i, c0, c1_bad if i == 2 else c1)) for i in range(4)]
    (a,) = replay_consistency(histories).anomalies
    assert {v.choice for v in a.variants} == {1}
    assert [v.count for v in a.variants] == [3, 1]
    assert a.divergences[0].b.choice == 1 and a.divergences[0].b.name == "load#2/c1"


def test_given_noise_model_is_used() -> None:
    v2 = flip(R02, 1, chosen=90, lp_chosen=-0.6, other=41, lp_other=-0.9)
    noisy = NoiseModel(p99=0.1, tokens=10, outputs=2)
    (a,) = replay_consistency(runs_with([R02, v2, R02]), noise=noisy).anomalies
    assert a.divergences[0].threshold == pytest.approx(0.4)
    assert a.verdict is Verdict.SUSPECTED_CORRUPTION  # A was sure of 41 by 2.95 nats
