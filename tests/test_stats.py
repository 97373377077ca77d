"""The rules about rates: known values, properties, and error rates measured by simulation."""

from __future__ import annotations

import ast
import doctest
import inspect
import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servefuzz import stats
from servefuzz.stats import (
    ACCEPT,
    CURED,
    NOT_REPRODUCED,
    REDUCED,
    REJECT,
    REPRODUCED,
    STILL_THERE,
    UNDECIDED,
    CureTest,
    Rate,
    SequentialTest,
    ShrinkGate,
    Trail,
    fisher_less,
    wilson,
    z_score,
)

counts = st.integers(min_value=0, max_value=400).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))


def test_doctests() -> None:
    assert doctest.testmod(stats).failed == 0


# -- Wilson ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        # Newcombe, "Two-sided confidence intervals for the single proportion: comparison of
        # seven methods", Statistics in Medicine 17 (1998), Table I, method 3 (score, no
        # continuity correction).
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_matches_published_values(k: int, n: int, low: float, high: float) -> None:
    got = wilson(k, n)
    assert round(got[0], 4) == low and round(got[1], 4) == high


def test_z_scores() -> None:
    assert z_score(0.95) == pytest.approx(1.959963984540054, abs=1e-12)
    assert z_score(0.99) == pytest.approx(2.5758293035489004, abs=1e-12)
    with pytest.raises(ValueError):
        z_score(1.0)


def test_rate_prints_its_interval() -> None:
    assert str(Rate(8, 10)) == "8/10 (80%, 95% CI 49-94%)"
    assert str(Rate(1, 5)) == "1/5 (20%, 95% CI 4-62%)"
    assert str(Rate(0, 20)) == "0/20 (0%, 95% CI 0-16%)"
    assert Rate(1, 1000).describe() == "1/1000 (0.1%, 95% CI 0.02-1%)"  # never "0%" for 1/1000
    assert Rate(3, 0 + 3).describe(0.99) == "3/3 (100%, 99% CI 31-100%)"
    assert str(Rate(0, 0)) == "0/0 (no runs)" and math.isnan(Rate(0, 0).fraction)


def test_rate_round_trips_and_refuses_nonsense() -> None:
    r = Rate(8, 10)
    assert Rate.parse("8/10") == r and Rate.from_json(r.to_json()) == r and hash(r) == hash(Rate(8, 10))
    assert r.to_json() == {"k": 8, "n": 10, "low": 0.4902, "high": 0.9433, "confidence": 0.95}
    for bad in ((3, 2), (-1, 2)):
        with pytest.raises(ValueError):
            Rate(*bad)
    with pytest.raises(TypeError):
        Rate(1.0, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Rate.parse("8 of 10")


@given(counts)
def test_wilson_contains_the_estimate(kn: tuple[int, int]) -> None:
    k, n = kn
    low, high = wilson(k, n)
    assert 0.0 <= low <= high <= 1.0
    if n:
        assert low <= k / n <= high
        assert (low == 0.0) == (k == 0) and (high == 1.0) == (k == n)


@given(counts)
def test_wilson_is_monotone_in_k_and_confidence(kn: tuple[int, int]) -> None:
    k, n = kn
    if k < n:
        assert wilson(k, n)[0] < wilson(k + 1, n)[0] and wilson(k, n)[1] < wilson(k + 1, n)[1]
    lo90, hi90 = wilson(k, n, 0.90)
    lo99, hi99 = wilson(k, n, 0.99)
    assert lo99 <= lo90 and hi90 <= hi99


@given(st.integers(1, 100).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_more_runs_at_the_same_rate_narrow_the_interval(kn: tuple[int, int]) -> None:
    k, n = kn
    low, high = wilson(k, n)
    low4, high4 = wilson(4 * k, 4 * n)
    assert high4 - low4 < high - low


# -- Fisher ---------------------------------------------------------------------------------

# scipy.stats.fisher_exact([[k, n - k], [k_ref, n_ref - k_ref]], alternative="less"), scipy
# 1.17.1, computed offline.
SCIPY = [
    ((0, 5, 10, 10), 0.000333000333000333),
    ((0, 20, 1, 5), 0.19999999999999998),
    ((1, 20, 1, 5), 0.36666666666666675),
    ((3, 10, 7, 10), 0.0894477039987876),
    ((2, 8, 9, 12), 0.03989045010716837),
    ((0, 3, 10, 10), 0.0034965034965034965),
    ((5, 40, 20, 40), 0.0002858834757572484),
    ((12, 50, 30, 50), 0.0002501964035154576),
    ((40, 200, 60, 200), 0.013973447036746519),
    ((10, 10, 0, 10), 1.0),
    ((7, 10, 7, 10), 0.6857585139318885),
    ((1, 29, 81, 263), 0.0005501872385558253),
]


@pytest.mark.parametrize(("table", "p"), SCIPY)
def test_fisher_matches_scipy(table: tuple[int, int, int, int], p: float) -> None:
    assert fisher_less(*table) == pytest.approx(p, rel=1e-12)


@given(counts, counts)
def test_fisher_is_a_probability_and_monotone(a: tuple[int, int], b: tuple[int, int]) -> None:
    (k, n), (k_ref, n_ref) = a, b
    p = fisher_less(k, n, k_ref, n_ref)
    assert 0.0 <= p <= 1.0
    if k < n:
        assert fisher_less(k + 1, n, k_ref, n_ref) >= p  # more reproductions: less evidence of a drop
    if k_ref < n_ref:
        assert fisher_less(k, n, k_ref + 1, n_ref) <= p  # a stronger baseline: more evidence
    assert fisher_less(n, n, k_ref, n_ref) == 1.0


# -- the sequential test ---------------------------------------------------------------------


def test_sequential_boundaries() -> None:
    t = SequentialTest()
    assert [t.decide(k, k) for k in (1, 2)] == [UNDECIDED, REPRODUCED]
    assert t.decide(3, 6) == REPRODUCED and t.decide(3, 7) == UNDECIDED
    assert t.decide(0, 7) == UNDECIDED and t.decide(0, 8) == NOT_REPRODUCED and t.decide(1, 12) == NOT_REPRODUCED
    # A finding at 1/5 (the old default finding's confirmation) is evidence of nothing yet.
    assert t.decide(1, 5) == UNDECIDED and t.more_runs(1, 5) > 0
    assert t.describe(2, 2) == "reproduced: 2/2 (100%, 95% CI 34-100%)"
    assert "rate >= 0.5" in t.statement() and "0.01" in t.statement()


def test_more_runs_stops_at_the_cap_or_when_nothing_can_decide() -> None:
    t = SequentialTest(cap=10)
    assert t.more_runs(0, 10) == 0 and t.decide(0, 10) == NOT_REPRODUCED
    # 2 of 9 reproduced: one more run cannot decide either way, so the row is undecided now.
    assert t.decide(2, 9) == UNDECIDED and t.more_runs(2, 9) == 0


@given(st.integers(0, 29).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_decisions_are_monotone_and_batches_never_overshoot(kn: tuple[int, int]) -> None:
    k, n = kn
    t = SequentialTest()
    verdicts = [t.decide(j, n) for j in range(n + 1)]
    order = {NOT_REPRODUCED: 0, UNDECIDED: 1, REPRODUCED: 2}
    assert [order[v] for v in verdicts] == sorted(order[v] for v in verdicts)
    m = t.more_runs(k, n)
    if m:
        # Every path of fewer than m further runs is still undecided: a batch of m is safe.
        assert all(t.decide(k + i, n + j) == UNDECIDED for j in range(m) for i in range(j + 1))
        # ... and m runs can decide.
        assert t.decide(k + m, n + m) != UNDECIDED or t.decide(k, n + m) != UNDECIDED


def _simulate(test: SequentialTest, p: float, trials: int, rng: random.Random) -> tuple[float, float, float]:
    """Replay like a caller: one run at a time while the test asks for more."""
    tally = {REPRODUCED: 0, NOT_REPRODUCED: 0, UNDECIDED: 0}
    for _ in range(trials):
        k = n = 0
        while test.more_runs(k, n):
            k += rng.random() < p
            n += 1
        tally[test.decide(k, n)] += 1
    return tally[REPRODUCED] / trials, tally[NOT_REPRODUCED] / trials, tally[UNDECIDED] / trials


@pytest.mark.parametrize("cap", [10, 30])
def test_error_rates_by_simulation_stay_at_or_below_the_stated_ones(cap: int) -> None:
    t = SequentialTest(cap=cap)
    rng = random.Random(20260517)
    for p in (0.02, t.p0):  # it does not reproduce: "reproduced" is the error
        said_reproduced, _, _ = _simulate(t, p, 8000, rng)
        assert said_reproduced <= t.alpha, (p, said_reproduced)
        assert t.operating_characteristic(p)[0] <= t.alpha
    for p in (t.p1, 0.8):  # it reproduces: "not reproduced" is the error
        _, said_not, _ = _simulate(t, p, 8000, rng)
        assert said_not <= t.beta, (p, said_not)
        assert t.operating_characteristic(p)[1] <= t.beta


def test_operating_characteristic_agrees_with_simulation() -> None:
    t = SequentialTest()
    rng = random.Random(7)
    for p in (0.2, 0.35):  # the indifference zone, where all three outcomes happen
        exact = t.operating_characteristic(p)
        measured = _simulate(t, p, 8000, rng)
        assert sum(exact[:3]) == pytest.approx(1.0)
        for e, m in zip(exact[:3], measured, strict=True):
            assert m == pytest.approx(e, abs=0.02)
    # A finding that always reproduces costs two runs; one that never does, eight.
    assert t.operating_characteristic(1.0)[3] == pytest.approx(2.0)
    assert t.operating_characteristic(0.0)[3] == pytest.approx(8.0)


# -- triage: cures ---------------------------------------------------------------------------


def test_cure_needs_significance() -> None:
    t = CureTest()
    # The triage: 0/20 under a flag against a 1/5 baseline is no evidence of a cure.
    assert t.decide(Rate(0, 20), Rate(1, 5)) == UNDECIDED and t.more_runs(Rate(0, 20), Rate(1, 5)) == 20
    assert t.decide(Rate(0, 40), Rate(1, 5)) == UNDECIDED and t.more_runs(Rate(0, 40), Rate(1, 5)) == 0
    # Against 10/10, three runs without it are a cure (p = 1/286).
    assert t.decide(Rate(0, 2), Rate(10, 10)) == UNDECIDED and t.more_runs(Rate(0, 2), Rate(10, 10)) == 1
    assert t.decide(Rate(0, 3), Rate(10, 10)) == CURED
    assert t.describe(Rate(0, 3), Rate(10, 10)).startswith("cured: 0/3") and "p = 0.0035" in t.describe(
        Rate(0, 3), Rate(10, 10)
    )
    # It came back: never a cure, whatever the p-value.
    assert t.decide(Rate(1, 2), Rate(10, 10)) == STILL_THERE
    assert t.decide(Rate(1, 12), Rate(10, 10)) == REDUCED
    assert t.more_runs(Rate(1, 2), Rate(10, 10)) == 0


def _false_cure_rate(t: CureTest, theta: float, baseline_runs: int) -> float:
    """Exactly: the chance that a variant exactly as bad as the baseline is called cured."""
    total = 0.0
    for k0 in range(baseline_runs + 1):
        needed = t.runs_to_cure(Rate(k0, baseline_runs))
        if needed is not None:
            total += math.comb(baseline_runs, k0) * theta**k0 * (1 - theta) ** (baseline_runs - k0) * (1 - theta) ** needed
    return total


@pytest.mark.parametrize("baseline_runs", [5, 10, 20])
def test_false_cures_stay_below_alpha(baseline_runs: int) -> None:
    t = CureTest()
    worst = max(_false_cure_rate(t, i / 100, baseline_runs) for i in range(1, 100))
    assert worst <= t.alpha
    # The same by simulation, checked the way triage checks: after every run.
    rng = random.Random(baseline_runs)
    cures = trials = 0
    for theta in (0.3, 0.5, 0.8):
        for _ in range(3000):
            base = Rate(sum(rng.random() < theta for _ in range(baseline_runs)), baseline_runs)
            k = n = 0
            while t.more_runs(Rate(k, n), base):
                k, n = k + (rng.random() < theta), n + 1
            cures += t.decide(Rate(k, n), base) == CURED
            trials += 1
    assert cures / trials <= t.alpha


def test_a_real_cure_is_found_and_a_non_cure_is_not() -> None:
    t = CureTest()
    rng = random.Random(3)
    base = Rate(10, 10)
    outcomes = {CURED: 0, STILL_THERE: 0, REDUCED: 0, UNDECIDED: 0}
    for rate in (0.0, 0.9):
        for _ in range(200):
            k = n = 0
            while t.more_runs(Rate(k, n), base):
                k, n = k + (rng.random() < rate), n + 1
            outcomes[t.decide(Rate(k, n), base)] += 1
    # Every real cure is found; a variant that still shows it at 90% is called cured only when
    # it missed three times in a row (0.1% of rows).
    assert outcomes[CURED] <= 200 + 2 and outcomes[STILL_THERE] + outcomes[REDUCED] >= 198
    assert outcomes[UNDECIDED] == 0


# -- shrink ----------------------------------------------------------------------------------


def test_shrink_gate_keeps_what_reproduces_as_often_and_drops_the_rest() -> None:
    rng = random.Random(11)
    gate = ShrinkGate(Rate(10, 10))
    verdicts: dict[float, dict[str, int]] = {}
    for rate in (0.0, 0.75, 1.0):
        got = verdicts.setdefault(rate, {ACCEPT: 0, REJECT: 0, UNDECIDED: 0})
        for _ in range(1000):
            k = n = 0
            while gate.more_runs(k, n):
                k, n = k + (rng.random() < rate), n + 1
            got[gate.decide(k, n)] += 1
    assert verdicts[0.0][ACCEPT] == 0  # a candidate that lost the bug is never kept
    assert verdicts[0.75][ACCEPT] <= 0.05 * 1000  # one that lost 0.2 of its rate, at most 5%
    assert verdicts[1.0][ACCEPT] == 1000  # one that keeps it always is
    # The same, exactly.
    assert gate.test.operating_characteristic(0.75)[0] <= 0.05
    assert gate.test.operating_characteristic(0.95)[1] <= 0.05
    assert gate.decide(1, 5) == REJECT and gate.p_value(1, 5) < 0.01  # 1/5 against 10/10
    assert gate.describe(13, 13).startswith("accept: 13/13") and gate.decide(12, 12) == UNDECIDED
    # A finding that reproduces half the time needs long replays to tell; at worst it says so.
    half = ShrinkGate(Rate(5, 10))
    assert half.test.p1 == 0.5 and half.decide(0, 3) == UNDECIDED and half.decide(0, 9) == REJECT
    with pytest.raises(ValueError, match="not reproduced"):
        ShrinkGate(Rate(0, 8))
    # A cap too small to ever keep a candidate is raised to the fewest runs that can.
    assert ShrinkGate(Rate(2, 2), cap=10).test.cap == 13 and ShrinkGate(Rate(2, 2), cap=10).decide(13, 13) == ACCEPT


def test_the_fresh_server_recheck_rejects_what_needed_the_old_server_and_passes_the_rest_quickly() -> None:
    rng = random.Random(12)
    for reference in (Rate(10, 10), Rate(8, 10), Rate(5, 10), Rate(2, 2)):
        gate = ShrinkGate(reference)
        planned = gate.recheck_runs
        # Its plan can reject a candidate that never comes back on the fresh server.
        assert gate.p_value(0, planned) < gate.alpha and planned <= gate.test.cap
        for rate, expected in ((0.0, REJECT), (1.0, ACCEPT)):
            runs_used = []
            for _ in range(200):
                k = n = 0
                while n < planned and gate.recheck(k, n) == UNDECIDED:
                    k, n = k + (rng.random() < rate), n + 1
                assert gate.recheck(k, n) == expected, (reference, rate, k, n)
                runs_used.append(n)
            if rate == 1.0:  # as good as the finding: decided in at most two runs
                assert max(runs_used) <= 2, (reference, runs_used)
    # Against 10/10: a candidate that came back 1 time in 5 on the fresh server owed its rate
    # to the old one (p = 0.0037); 2 in 5 is not significantly low (p = 0.022).
    gate = ShrinkGate(Rate(10, 10))
    assert gate.recheck(1, 5) == REJECT and gate.recheck(2, 5) == ACCEPT and gate.recheck(1, 2) == UNDECIDED


# -- flaky -----------------------------------------------------------------------------------


def test_flaky_when_it_reproduced_and_then_stopped() -> None:
    assert Trail().add("confirmation", Rate(1, 5)).add("re-check", Rate(0, 8)).flaky
    quiet = [
        Trail().add("confirmation", Rate(0, 5)).add("re-check", Rate(0, 8)),  # never came back
        Trail().add("confirmation", Rate(5, 5)).add("re-check", Rate(3, 5)),  # still comes back
        Trail().add("confirmation", Rate(1, 5)).add("re-check", Rate(0, 3)),  # too early to say
        Trail(),
    ]
    assert not any(t.flaky for t in quiet)
    t = Trail().add("confirmation", Rate(2, 5)).add("shrink re-check", Rate(0, 9))
    assert str(t).splitlines()[0] == "flaky: it reproduced, then stopped"
    assert t.to_json()[1] == {"label": "shrink re-check", **Rate(0, 9).to_json()}


# -- the standalone copy ----------------------------------------------------------------------


def test_the_source_stands_alone() -> None:
    """repro_full.py embeds the module's source: it may import only the standard library's math,
    must not use a __future__ import (it must not come first in repro_full.py) or `$` (the
    template's placeholder), and the copy must decide exactly as the module."""
    source = inspect.getsource(stats)
    tree = ast.parse(source)
    imported = {a.name for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom) for a in node.names}
    assert imported == {"math"} and "$" not in source
    copy: dict[str, object] = {}
    exec(compile("import json\n" + source, "repro_full.py", "exec"), copy)  # noqa: S102 - our own source
    for k, n in [(0, 0), (2, 2), (1, 5), (0, 8), (8, 10), (3, 7)]:
        assert copy["decide"](k, n) == stats.decide(k, n)  # type: ignore[operator]
        assert str(copy["Rate"](k, n)) == str(Rate(k, n))  # type: ignore[operator]
    assert copy["fisher_less"](0, 5, 10, 10) == fisher_less(0, 5, 10, 10)  # type: ignore[operator]
