"""The verdict rule: margin at the first flip against measured noise."""

from __future__ import annotations

import pytest
from histbuild import flip, scored
from hypothesis import given
from hypothesis import strategies as st

from servefuzz.anomaly import Verdict
from servefuzz.history import ChoiceRecord
from servefuzz.oracles import NOISE_FLOOR, NoiseModel, Output, classify, measure_noise

QUIET = NoiseModel(p99=0.0001, tokens=500, outputs=10)  # threshold: the floor, 0.001


def out(choice: ChoiceRecord, run: int = 0, label: str = "load") -> Output:
    return Output(run, label, choice)


BASE = scored([11, 12, 13, 14, 15])


def test_noise_is_measured_on_agreeing_tokens_only() -> None:
    a = ChoiceRecord(0, (1, 2, 3), (-1.0, -2.0, -3.0))
    b = ChoiceRecord(0, (1, 2, 3), (-1.0, -2.004, None))  # a missing logprob is no sample
    c = ChoiceRecord(0, (1, 2, 3), (-1.002, -2.0, -3.0))
    m = measure_noise([[a, b, c]])
    assert m.tokens == 5  # 2 positions vs b, 3 vs c
    assert m.outputs == 1
    assert m.p99 == pytest.approx(0.00392)  # p99 of [0, 0, 0, .002, .004], interpolated
    assert m.threshold == pytest.approx(4 * 0.00392)


def test_threshold_never_below_grief_floor() -> None:
    assert measure_noise([]).p99 is None
    assert measure_noise([]).threshold == NOISE_FLOOR
    assert NoiseModel(p99=0.0, tokens=10, outputs=1).threshold == NOISE_FLOOR
    assert "no agreeing tokens" in measure_noise([]).describe()
    assert NoiseModel(p99=0.0, tokens=10, outputs=1).describe().startswith("floor 0.0010")


def test_confident_flip_is_corruption_with_position_and_margin() -> None:
    a = flip(BASE, 2, chosen=13, lp_chosen=-0.05, other=99, lp_other=-3.0, tail=(14, 15))
    b = flip(BASE, 2, chosen=99, lp_chosen=-0.02, other=13, lp_other=-4.0, tail=(7, 8))
    d = classify("r02", out(a, 0), out(b, 1), QUIET)
    assert d.verdict is Verdict.SUSPECTED_CORRUPTION
    assert d.position == 2
    assert (d.a.token, d.b.token) == (13, 99)
    assert (d.a.lp_own, d.a.lp_other, d.b.lp_own, d.b.lp_other) == (-0.05, -3.0, -0.02, -4.0)
    assert d.margin == pytest.approx(3.98)
    assert d.threshold == NOISE_FLOOR
    assert d.prefix_delta == 0.0
    assert "flip at token 2: load#0 chose 13 (-0.0500) over 99 (-3.0000)" in d.reason
    assert "margin 3.9800 > threshold 0.0010" in d.reason


def test_near_tie_flip_within_noise_is_numeric_drift() -> None:
    a = flip(BASE, 3, chosen=14, lp_chosen=-0.6931, other=77, lp_other=-0.6934, tail=(1,))
    b = flip(BASE, 3, chosen=77, lp_chosen=-0.6930, other=14, lp_other=-0.6933, tail=(2,))
    noise = NoiseModel(p99=0.0005, tokens=1204, outputs=27)
    d = classify("r05", out(a, 0), out(b, 4), noise)
    assert d.verdict is Verdict.NUMERIC_DRIFT
    assert d.margin == pytest.approx(0.0003)
    assert d.threshold == pytest.approx(0.002)
    assert "margin 0.0003 <= threshold 0.0020 (4 x p99 noise 0.0005 over 1,204 agreeing tokens of 27 stable outputs)" in d.reason
    assert "the 3 agreeing tokens before it agree within 0.0000" in d.reason


def test_one_confident_run_rules_numerics_out() -> None:
    # A was at a near-tie, B was sure of its own token: B saw different numbers, not jitter.
    a = flip(BASE, 1, chosen=12, lp_chosen=-0.6931, other=77, lp_other=-0.6934)
    b = flip(BASE, 1, chosen=77, lp_chosen=-0.01, other=12, lp_other=-5.0)
    assert classify("r", out(a), out(b, 1), QUIET).verdict is Verdict.SUSPECTED_CORRUPTION


def test_near_tie_after_an_already_deviating_prefix_is_corruption() -> None:
    shifted = scored([11, 12, 13, 14, 15], jitter=[0.0, 0.4, 0.0])
    a = flip(BASE, 3, chosen=14, lp_chosen=-0.6931, other=77, lp_other=-0.6934)
    b = flip(shifted, 3, chosen=77, lp_chosen=-0.6930, other=14, lp_other=-0.6933)
    d = classify("r", out(a), out(b, 1), QUIET)
    assert d.verdict is Verdict.SUSPECTED_CORRUPTION
    assert d.prefix_delta == pytest.approx(0.4)
    assert "already differ in logprob by up to 0.4000" in d.reason


def test_other_token_below_top_k_gives_a_bound() -> None:
    # B's token is not in A's top-2: lpA(b) <= A's smallest top-k logprob (-3.05).
    a = scored([11, 12, 13])
    b = flip(a, 1, chosen=55, lp_chosen=-0.02, other=12, lp_other=-6.0)
    d = classify("r", out(a), out(b, 1), QUIET)
    assert d.a.other_is_bound and d.a.lp_other == pytest.approx(-3.05)
    assert d.verdict is Verdict.SUSPECTED_CORRUPTION
    assert d.margin_is_bound and "at least" in d.reason


def test_small_margin_from_a_bound_is_unclassified_not_drift() -> None:
    top1 = ChoiceRecord(0, (5, 6), (-0.1, -0.7), (((5, -0.1),), ((6, -0.7),)))  # top-1 only
    other = ChoiceRecord(0, (5, 9), (-0.1, -0.69), (((5, -0.1),), ((9, -0.69), (6, -0.6905))))
    d = classify("r", out(top1), out(other, 1), QUIET)
    assert d.verdict is Verdict.UNCLASSIFIED
    assert d.margin_is_bound


def test_no_logprobs_is_unclassified() -> None:
    a = ChoiceRecord(0, (1, 2, 3))
    b = ChoiceRecord(0, (1, 2, 4))
    d = classify("r", out(a), out(b, 1), QUIET)
    assert d.verdict is Verdict.UNCLASSIFIED
    assert d.margin is None
    assert "no top-k logprobs" in d.reason


def test_text_only_and_early_end_are_unclassified() -> None:
    t = classify("r", out(ChoiceRecord(0, (), text="hello")), out(ChoiceRecord(0, (), text="help"), 1), QUIET)
    assert (t.verdict, t.unit, t.position) == (Verdict.UNCLASSIFIED, "char", 3)
    short = ChoiceRecord(0, (1, 2), (-0.1, -0.1), finish_reason="stop")
    e = classify("r", out(short), out(scored([1, 2, 3]), 1), QUIET)
    assert (e.verdict, e.position, e.a.token, e.b.token) == (Verdict.UNCLASSIFIED, 2, None, 3)
    assert "ended at token 2" in e.reason


def test_equal_outputs_are_not_classified() -> None:
    with pytest.raises(ValueError):
        classify("r", out(BASE), out(BASE, 1), QUIET)


# Random pairs of outputs that differ somewhere, with random top-k logprobs.
@st.composite
def differing_pair(draw: st.DrawFn) -> tuple[ChoiceRecord, ChoiceRecord]:
    n = draw(st.integers(1, 6))
    tokens = st.integers(0, 5)
    a = draw(st.lists(tokens, min_size=n, max_size=n))
    b = draw(st.lists(tokens, min_size=n, max_size=n).filter(lambda b: b != a))
    lp = st.floats(-8, 0, allow_nan=False)

    def record(toks: list[int]) -> ChoiceRecord:
        tops = []
        for t in toks:
            alts = draw(st.dictionaries(tokens, lp, max_size=3))
            alts[t] = draw(lp)
            tops.append(tuple(sorted(alts.items(), key=lambda kv: -kv[1])))
        lps = tuple(dict(top)[t] for t, top in zip(toks, tops))
        return ChoiceRecord(0, tuple(toks), lps, tuple(tops))

    return record(a), record(b)


@given(differing_pair(), st.floats(0, 0.01))
def test_verdict_is_symmetric_and_consistent(pair: tuple[ChoiceRecord, ChoiceRecord], p99: float) -> None:
    noise = NoiseModel(p99=p99, tokens=100, outputs=5)
    ab = classify("r", out(pair[0], 0), out(pair[1], 1), noise)
    ba = classify("r", out(pair[1], 1), out(pair[0], 0), noise)
    assert (ab.verdict, ab.margin, ab.margin_is_bound, ab.threshold, ab.position) == (
        ba.verdict, ba.margin, ba.margin_is_bound, ba.threshold, ba.position
    )
    if ab.verdict is Verdict.NUMERIC_DRIFT:
        assert ab.margin is not None and ab.margin <= ab.threshold and not ab.margin_is_bound
    if ab.margin is not None and ab.margin > noise.threshold:
        assert ab.verdict is Verdict.SUSPECTED_CORRUPTION



def _top(*pairs: tuple[int, float]) -> tuple[tuple[int, float], ...]:
    return tuple(pairs)


def test_a_flip_within_two_steps_of_a_coarse_logit_grid_is_drift() -> None:
    # Recorded from vLLM CPU serving a bfloat16 model (docs/engines.md): one run ties two tokens,
    # the other puts them a whole bf16 step (0.0625 at these logits) apart; every top-k gap is a
    # multiple of that step.
    prefix = (1815, 914, 1873)
    lps = (-1.3453, -2.474, -2.3781)
    tops = tuple(_top((t, lp), (5, lp - 0.25)) for t, lp in zip(prefix, lps))
    loaded = ChoiceRecord(0, (*prefix, 1282), (*lps, -2.6498), (*tops, _top(
        (1282, -2.649848), (1022, -2.712348), (987, -2.712348), (215, -2.712348), (1198, -2.712348))))
    alone = ChoiceRecord(0, (*prefix, 215), (*lps, -2.6520), (*tops, _top(
        (215, -2.652012), (1282, -2.652012), (1022, -2.714512), (987, -2.714512), (1198, -2.714512))))
    d = classify("r01", out(loaded, 0), out(alone, 0, "alone"), QUIET)
    assert d.verdict is Verdict.NUMERIC_DRIFT, d.reason
    assert d.margin == pytest.approx(0.0625) and d.threshold == pytest.approx(0.125)
    assert "2 x the logits' step 0.0625 at this token" in d.reason
    # The same flip with float32-like gaps (no grid) is held to the measured noise alone.
    off = ChoiceRecord(0, alone.token_ids, alone.logprobs, (*tops, _top(
        (215, -2.652012), (1282, -2.652012), (1022, -2.71447), (987, -2.7301), (1198, -2.9))))
    loose = ChoiceRecord(0, loaded.token_ids, loaded.logprobs, (*tops, _top(
        (1282, -2.649848), (1022, -2.71227), (987, -2.7311), (215, -2.7401), (1198, -2.81))))
    assert classify("r01", out(loose, 0), out(off, 0, "alone"), QUIET).verdict is Verdict.SUSPECTED_CORRUPTION


def test_the_grid_never_excuses_a_confident_flip() -> None:
    # On a coarse grid a flip by whole nats is still corruption: two steps is the most excused.
    grid = _top((1, -0.5), (2, -1.5), (3, -2.0), (4, -2.25))
    a = ChoiceRecord(0, (1,), (-0.5,), (grid,))
    b = ChoiceRecord(0, (2,), (-0.25,), (_top((2, -0.25), (1, -1.25), (3, -2.0), (4, -2.5)),))
    d = classify("r01", out(a, 0), out(b, 1), QUIET)
    assert d.verdict is Verdict.SUSPECTED_CORRUPTION and d.threshold == pytest.approx(0.5)  # step 0.25
