"""The campaign noise model and the anomalous-shift oracle: a flip is held against the largest
benign shift the campaign has seen at its position, a shift without a flip beyond it is an anomaly
of its own, and neither a shifted nor a corrupted request ever enters the estimate."""

from __future__ import annotations

import json

import pytest
from histbuild import ALT, flip, rec, run, scored

from servefuzz.anomaly import Oracle, Verdict
from servefuzz.history import ChoiceRecord
from servefuzz.oracles.judge import judge
from servefuzz.oracles.noise import MIN_SAMPLES, CampaignNoise, Shift, ShiftHistogram, benign_shifts, pair_shifts
from servefuzz.oracles.outputs import Output
from servefuzz.oracles.verdict import NoiseModel, classify

QUIET = NoiseModel(p99=0.0, tokens=100, outputs=4)


def benign(max_gap: float, position: int, count: int = 4222, cached: bool = False) -> CampaignNoise:
    """A campaign that saw `count` benign shifts at `position`, the largest `max_gap`."""
    shifts = [Shift(position, max_gap / 10, max_gap / 10)] * (count - 1) + [Shift(position, max_gap, max_gap)]
    return CampaignNoise.empty().with_shifts(shifts, cached=cached)


def test_pair_shifts_are_the_top_k_linf_and_the_gap_shift_up_to_the_first_flip() -> None:
    a = scored([5, 6, 7], gap=3.0)
    b = scored([5, 6, 9], gap=2.9, jitter=[0.0, 0.02, 0.0])
    s = pair_shifts(a, b)
    assert [x.position for x in s] == [0, 1]  # stops at the flip (token 2)
    assert s[0].linf == pytest.approx(0.1) and s[0].gap == pytest.approx(0.1)  # runner-up moved by 0.1
    assert s[1].linf == pytest.approx(0.12) and s[1].gap == pytest.approx(0.1)


def test_buckets_thresholds_and_where_a_margin_sits() -> None:
    m = benign(0.0135, 0)
    assert m.samples == 4222 and m.threshold(0, False) == pytest.approx(0.027)
    assert m.where(0.38, 0, False) == "margin 0.3800 = 28.1x the largest of 4,222 benign shifts at position 0"
    # A shift far below four decimals keeps its digits (a 2026-12-01 llama.cpp finding read
    # "shift 0.0000 = 4.25x the largest ...", which says nothing).
    tiny = benign(1e-6, 0)
    assert tiny.where(4.25e-6, 0, False, what="shift").startswith("shift 4.2e-06 = 4.25x the largest")
    # A bucket with too few samples borrows every bucket's largest; an empty campaign says nothing.
    m = m.with_shifts([Shift(40, 0.5, 0.5)] * (MIN_SAMPLES - 1), cached=False)
    assert m.threshold(40, False) == pytest.approx(1.0) and m.threshold(0, False) == pytest.approx(0.027)
    assert m.threshold(3, True) == pytest.approx(1.0)  # nothing cached yet: pooled, the worst seen
    assert CampaignNoise.empty().threshold(0, False) == 0.0


def test_histogram_quantiles_merge_and_round_trip() -> None:
    h = ShiftHistogram().with_values([0.0] * 50 + [1e-3] * 49 + [0.2])
    assert (h.count, h.max, h.quantile(0.5)) == (100, 0.2, 0.0)
    assert 1e-3 <= (h.quantile(0.99) or 0) <= 1.2e-3 and h.quantile(1.0) == 0.2
    m = CampaignNoise.empty().with_shifts([Shift(9, 0.01, 0.02)] * 40, cached=True)
    both = m.merged(benign(0.0135, 0))
    again = CampaignNoise.from_json(json.loads(json.dumps(both.to_json())))
    assert again == both and again.samples == 4262
    assert again.threshold(9, True) == pytest.approx(0.04)


def test_a_flip_within_the_campaigns_noise_is_drift_though_the_scenario_saw_none() -> None:
    # The llama.cpp CUDA case: the scenario's noise is tiny, the campaign saw 0.013 at token 9.
    base = scored([5] * 12)
    a = flip(base, 9, chosen=469, lp_chosen=-0.7, other=799, lp_other=-0.7005, tail=[5])
    b = flip(base, 9, chosen=799, lp_chosen=-0.7, other=469, lp_other=-0.7004, tail=[5])
    alone = classify("r08", Output(0, "alone", a), Output(1, "load", b), QUIET)
    assert alone.verdict is Verdict.NUMERIC_DRIFT  # 0.0005 <= the 0.001 floor
    b = flip(base, 9, chosen=799, lp_chosen=-0.7, other=469, lp_other=-0.705, tail=[5])
    alone = classify("r08", Output(0, "alone", a), Output(1, "load", b), QUIET)
    assert alone.verdict is Verdict.SUSPECTED_CORRUPTION  # 0.005 > the floor: the scenario alone would accuse
    wide = NoiseModel(p99=0.0, tokens=100, outputs=4, campaign=benign(0.013, 9))
    d = classify("r08", Output(0, "alone", a), Output(1, "load", b), wide)
    assert d.verdict is Verdict.NUMERIC_DRIFT and d.threshold == pytest.approx(0.026)
    assert "margin 0.0050 = 0.385x the largest of 4,222 benign shifts at position 8-31" in d.reason
    # A confident flip stays suspected, and says how far out it is.
    c = flip(base, 9, chosen=799, lp_chosen=-0.1, other=469, lp_other=-2.5, tail=[5])
    d = classify("r08", Output(0, "alone", a), Output(1, "load", c), wide)
    assert d.verdict is Verdict.SUSPECTED_CORRUPTION and "= 185x the largest" in d.reason


def _shifted(lp0: float) -> ChoiceRecord:
    """scored([5, 6, 7, 8]) with the first token's logprobs moved by `lp0` (tokens unchanged)."""
    c = scored([5, 6, 7, 8])
    top = ((5, -0.05 + lp0), (5 + ALT, -3.05)), *c.top_logprobs[1:]
    return ChoiceRecord(0, c.token_ids, (-0.05 + lp0, *c.logprobs[1:]), top, finish_reason="length")


def test_a_shift_without_a_flip_is_an_anomaly_and_never_lifts_the_threshold_of_a_real_flip() -> None:
    # r11 moves 0.2 at token 0 between the loaded runs, every token the same (iteration 152 on the
    # H200); r02 flips a near-tie in one run, each side 0.05 sure.
    base = scored([10, 11, 12, 13])
    good = flip(base, 1, chosen=11, lp_chosen=-0.55, other=99, lp_other=-0.6, tail=[12, 13])
    bad = flip(base, 1, chosen=99, lp_chosen=-0.55, other=11, lp_other=-0.6, tail=[7, 7])
    loaded = [run(0, rec("r11", 0, _shifted(0.0)), rec("r02", 0, good)),
              run(1, rec("r11", 1, _shifted(-0.2)), rec("r02", 1, bad))]
    alone = {"r02": [rec("r02", 0, good, label="alone")]}
    # Without the campaign's noise, r11's shift is "noise" and excuses r02's flip: drift. (r02
    # flipped, so it tells nothing of what is typical, and r11 has no other request to be typical
    # of: nothing calibrates the engine yet.)
    assert {a.verdict for a in judge(loaded, alone).anomalies} == {Verdict.NUMERIC_DRIFT}
    campaign = benign(0.01, 0).merged(benign(0.01, 1))
    found = {a.request_id: a for a in judge(loaded, alone, campaign=campaign).anomalies}
    assert found["r11"].verdict is Verdict.ANOMALOUS_SHIFT and found["r11"].oracle is Oracle.REPLAY
    assert found["r11"].evidence["position"] == 0 and found["r11"].evidence["shift"] == pytest.approx(0.2)
    assert "= 20x the largest of 4,222 benign logprob shifts at position 0" in found["r11"].summary
    assert found["r02"].verdict is Verdict.SUSPECTED_CORRUPTION, found["r02"].summary
    # Shifts within the campaign's noise are no anomaly; a campaign too young to tell says nothing.
    calm = [run(i, rec("r11", i, _shifted(-0.005 * i))) for i in range(2)]
    assert judge(calm, {}, campaign=campaign).anomalies == ()
    assert judge(loaded[:1] + [run(1, rec("r11", 1, _shifted(-0.2)))], {},
                 campaign=CampaignNoise.empty()).anomalies == ()


def test_flagged_requests_never_enter_the_estimate() -> None:
    loaded = [run(i, rec("r11", i, _shifted(-0.002 * i)), rec("r01", i, _shifted(-0.001 * i))) for i in range(2)]
    every = benign_shifts(loaded, {})
    assert every.hists["linf"]["0/uncached"].max == pytest.approx(0.002)
    quiet = benign_shifts(loaded, {}, exclude={"r11"})
    assert quiet.samples == 4 and quiet.hists["linf"]["0/uncached"].max == pytest.approx(0.001)
    # A request that moved 200 times as far as the other is implicated by the execution itself,
    # flagged by no oracle or not (issue 51: a fault's other victim must not become the noise).
    victim = [run(i, rec("r11", i, _shifted(-0.2 * i)), rec("r01", i, _shifted(-0.001 * i))) for i in range(2)]
    assert benign_shifts(victim, {}).hists["linf"]["0/uncached"].max == pytest.approx(0.001)
    cached = benign_shifts([run(i, rec("r01", i, _shifted(0.0), cached_tokens=64)) for i in range(2)], {})
    assert set(cached.hists["gap"]) == {"0/cached", "1-7/cached"}


def _victim(run_: int, moved: float, *, label: str = "load") -> ChoiceRecord:
    """A request whose four tokens agree while its second token's logprobs moved by `moved`
    (every top-k entry alike, so the top-1/top-2 gap stays): the other victim of issue 51."""
    c = scored([21, 22, 23, 24])
    lp = -7.25 + moved
    top = (c.top_logprobs[0], ((22, lp), (22 + ALT, lp - 0.4)), *c.top_logprobs[2:])
    return ChoiceRecord(0, c.token_ids, (c.logprobs[0], lp, *c.logprobs[2:]), top, finish_reason="length")


def _flipping(margin: float) -> tuple[ChoiceRecord, ChoiceRecord]:
    """A request's answer alone and under load, flipping at token 1 with the given margin."""
    base = scored([10, 11, 12, 13])
    good = flip(base, 1, chosen=11, lp_chosen=-0.3, other=99, lp_other=-0.3 - margin, tail=[12, 13])
    bad = flip(base, 1, chosen=99, lp_chosen=-0.3, other=11, lp_other=-0.3 - margin, tail=[7, 7])
    return good, bad


def _execution(moves: tuple[float, float], margin: float) -> tuple[list, dict]:  # type: ignore[type-arg]
    """Two loaded runs of r01 (a bystander), r02 (a victim that keeps its tokens) and r03 (one
    that flips), and each alone; `moves`: how far r01 and r02 move under load."""
    good, bad = _flipping(margin)
    loaded = [run(i, rec("r01", i, _victim(i, moves[0])), rec("r02", i, _victim(i, moves[1])),
                  rec("r03", i, bad)) for i in range(2)]
    alone = {"r01": [rec("r01", 0, _victim(0, 0.0), label="alone")],
             "r02": [rec("r02", 0, _victim(0, 0.0), label="alone")],
             "r03": [rec("r03", 0, good, label="alone")]}
    return loaded, alone


def test_a_faults_other_victim_does_not_raise_the_bar_for_its_flip() -> None:
    # Issue 51, as a new user met it on a planted fault of the exact reference engine: r02 kept its
    # tokens while its logprob moved from -7.25 to -10.48; counted as noise, that 3.23 lifted the
    # threshold to 12.9 and r03's 2.56-nat flip fell under it. The bystander r01 moved by nothing,
    # which is this engine's noise: r02 is set aside, and the flip is held against the floor.
    loaded, alone = _execution((0.0, -3.23), 2.56)
    [flipped] = {a for a in judge(loaded, alone).anomalies if a.oracle is Oracle.ISOLATION}
    assert flipped.request_id == "r03" and flipped.verdict is Verdict.SUSPECTED_CORRUPTION, flipped.summary
    d = flipped.divergences[0]
    assert d.threshold == pytest.approx(0.001) and d.margin == pytest.approx(2.56)
    assert "not counted as noise: r02 3.2300" in d.reason
    # Nor does the campaign learn it: r02's move never enters the noise a later flip is held against.
    learned = benign_shifts(loaded, alone)
    assert learned.largest("linf")[1] == 0.0 and learned.samples > 0


def test_benign_numerics_that_move_every_request_alike_set_nothing_aside() -> None:
    # The quiet control: batch numerics move the bystander and the other request alike (0.01 and
    # 0.012), so both are noise and a flip within four times their jitter is drift, as before.
    loaded, alone = _execution((-0.01, -0.012), 0.02)
    found = [a for a in judge(loaded, alone).anomalies if a.request_id == "r03"]
    assert found and all(a.verdict is Verdict.NUMERIC_DRIFT for a in found), [a.summary for a in found]
    assert all("not counted as noise" not in a.divergences[0].reason for a in found)
    assert benign_shifts(loaded, alone).largest("linf")[1] == pytest.approx(0.012)


def test_a_lone_victim_is_set_aside_only_by_the_campaigns_calibration() -> None:
    # Without a bystander (one loaded run: the flipping request has no agreeing twin either) there
    # is no typical request: a young campaign keeps the old rule (the move counts), one that has
    # measured this engine exact (every benign shift zero) does not.
    loaded, alone = _execution((0.0, -3.23), 2.56)
    loaded = [run(0, *(r for r in loaded[0].records if r.request_id != "r01"))]
    alone = {k: v for k, v in alone.items() if k != "r01"}
    young = [a for a in judge(loaded, alone).anomalies if a.request_id == "r03"]
    assert all(a.verdict is not Verdict.SUSPECTED_CORRUPTION for a in young)
    exact = CampaignNoise.empty().with_shifts([Shift(1, 0.0, 0.0)] * MIN_SAMPLES, cached=False)
    calibrated = [a for a in judge(loaded, alone, campaign=exact).anomalies if a.request_id == "r03"]
    assert calibrated and all(a.verdict is Verdict.SUSPECTED_CORRUPTION for a in calibrated)
