"""Seeded sampling in the one judging function: a seeded draw is judged by how far the odds of
the two drawn tokens moved between the runs (docs/verdicts.md, *Seeded sampling*); an unseeded
sampled request is never compared (liveness only); the n choices of a sampled request need not
agree. Constructed histories first, then the real reference engine with the zoo fault, clean,
and cured."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest

from servefuzz.anomaly import Oracle, Verdict
from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
from servefuzz.oracles.judge import judge
from servefuzz.oracles.outputs import Output
from servefuzz.oracles.verdict import NoiseModel, classify
from servefuzz.runner import RunConfig, Runner
from servefuzz.targets import make_target
from servefuzz.trial import execute
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

NOISE = NoiseModel(p99=0.0, tokens=100, outputs=4)  # threshold: the 0.001 floor


def out(run: int, tok: int, lp_a: float, lp_b: float) -> Output:
    """An output that drew `tok` (7 or 9) at token 1, with its logprobs of 7 and 9 there."""
    top = ((7, lp_a), (9, lp_b)) if lp_a >= lp_b else ((9, lp_b), (7, lp_a))
    own = lp_a if tok == 7 else lp_b
    return Output(run, "load", ChoiceRecord(0, (5, tok), (-0.1, own), (((5, -0.1),), top)))


@pytest.mark.parametrize(
    ("b_lps", "verdict"),
    [
        ((-1.2, -0.9), Verdict.SUSPECTED_CORRUPTION),  # the same distribution: the noise itself differed
        ((-1.2004, -0.8996), Verdict.NUMERIC_DRIFT),  # odds moved 0.0008 toward 9: within the noise
        ((-1.3, -0.8), Verdict.SUSPECTED_CORRUPTION),  # odds moved 0.2: beyond the noise
        ((-1.1996, -0.9004), Verdict.SUSPECTED_CORRUPTION),  # moved toward 7, yet 9 was drawn
    ],
)
def test_a_seeded_flip_is_judged_by_the_shift_of_the_odds(b_lps: tuple[float, float], verdict: Verdict) -> None:
    # Run A drew 7 though 9 was likelier (sampling draws below the top); run B drew 9.
    a, b = out(0, 7, -1.2, -0.9), out(1, 9, *b_lps)
    sampled = NoiseModel(p99=0.0, tokens=100, outputs=4, sampled=frozenset({"r01"}))
    d = classify("r01", a, b, sampled)
    assert d.verdict is verdict, d.reason
    assert classify("r01", b, a, sampled).verdict is verdict  # symmetric
    assert d.margin == pytest.approx((-1.2 - -0.9) - (b_lps[0] - b_lps[1]))
    if verdict is Verdict.NUMERIC_DRIFT:
        assert "odds shift" in d.reason and "seeded draw" in d.reason


def test_a_draw_below_top_k_is_decided_only_in_the_clear_cases() -> None:
    # Run A drew 11, which neither run's top-2 holds: the odds shift is unknown.
    def drew(run: int, tok: int, lp7: float, lp9: float) -> Output:
        return Output(run, "load", ChoiceRecord(0, (5, tok), (-0.1, -4.0), (((5, -0.1),), ((9, lp9), (7, lp7)))))

    sampled = NoiseModel(p99=0.0, tokens=100, outputs=4, sampled=frozenset({"r01"}))
    same = classify("r01", drew(0, 11, -1.2, -0.9), drew(1, 9, -1.2, -0.9), sampled)
    assert same.verdict is Verdict.SUSPECTED_CORRUPTION and "bit for bit" in same.reason
    moved = classify("r01", drew(0, 11, -1.2, -0.9), drew(1, 9, -1.5, -0.6), sampled)
    assert moved.verdict is Verdict.SUSPECTED_CORRUPTION and "moved by up to 0.3000" in moved.reason
    near = classify("r01", drew(0, 11, -1.2, -0.9), drew(1, 9, -1.2003, -0.8998), sampled)
    assert near.verdict is Verdict.UNCLASSIFIED and near.margin is None


def test_the_greedy_rule_is_untouched_for_a_request_that_is_not_sampled() -> None:
    # The same flip at temperature 0: A chose 7 below 9 with a margin of 0.3: a confident flip.
    d = classify("r01", out(0, 7, -1.2, -0.9), out(1, 9, -1.2, -0.9), NOISE)
    assert d.verdict is Verdict.SUSPECTED_CORRUPTION and d.margin == pytest.approx(0.3)


def rec(rid: str, run: int, label: str, *choices: Sequence[int]) -> RequestRecord:
    return RequestRecord(rid, run, label, Status.OK, 0.0,
                         choices=tuple(ChoiceRecord(i, tuple(ids)) for i, ids in enumerate(choices)))


def test_unseeded_draws_are_never_compared_and_n_draws_need_not_agree() -> None:
    sc = Scenario(0, (RequestSpec("free", 0.0, (5, 6), 2, temperature=1.0),
                      RequestSpec("seeded", 0.0, (5, 7), 2, n=2, temperature=1.0, seed=3)))
    loaded = [RunHistory(r, "load", (rec("free", r, "load", (r, r)), rec("seeded", r, "load", (1, 2), (3, 4))))
              for r in range(2)]
    alone = {"free": [rec("free", 0, "alone", (8, 8))], "seeded": [rec("seeded", 0, "alone", (1, 2), (3, 4))]}
    assert judge(loaded, alone, scenario=sc).anomalies == ()
    # Without the scenario nothing says they are sampled: every oracle compares, as before.
    assert {a.request_id for a in judge(loaded, alone).anomalies} == {"free", "seeded"}
    # An unseeded request still has its liveness judged.
    broken = [RunHistory(0, "load", (RequestRecord("free", 0, "load", Status.HTTP_ERROR, 0.0, http_status=500),))]
    assert [a.oracle for a in judge(broken, {}, scenario=sc).anomalies] == [Oracle.LIVENESS]
    # A seeded draw that differs from its alone draw is a divergence.
    moved = [RunHistory(r, "load", (rec("seeded", r, "load", (1, 2), (3, 5)),)) for r in range(2)]
    assert {a.oracle for a in judge(moved, alone, scenario=sc).anomalies} == {Oracle.ISOLATION}


def seeded_scenario() -> Scenario:
    b = PromptBuilder(seed=5, vocab=range(3, 1000))
    reqs = [RequestSpec(f"r{i:02d}", 0.0, b.prompt("p", 20, 40 + 8 * i), 16, "p", 20, n=1 + (i == 2),
                        temperature=1.0, seed=1000 + i) for i in range(4)]
    return Scenario(7, tuple(reqs))


def run_and_judge(url: str, scenario: Scenario) -> list[tuple[str, Verdict]]:
    async def main() -> list[tuple[str, Verdict]]:
        async with Runner(make_target("reference", url), RunConfig(top_k=5)) as runner:
            done = await execute(runner, scenario, runs=2, with_alone=True)
        j = judge(done.loaded, done.alone, scenario=scenario)
        return [(a.request_id, a.verdict) for a in j.anomalies]

    return asyncio.run(main())


def test_the_oracle_finds_the_shared_generator_and_is_quiet_on_the_clean_and_the_cured_engine(
    reference_server: Callable[..., str],
) -> None:
    sc = seeded_scenario()
    faulty = run_and_judge(reference_server("--fault", "shared-sampler-rng"), sc)
    assert faulty and {v for _, v in faulty} == {Verdict.SUSPECTED_CORRUPTION}, faulty
    assert run_and_judge(reference_server(), sc) == []
    assert run_and_judge(reference_server("--fault", "shared-sampler-rng", "--max-running-requests", "1"),
                         Scenario(7, tuple(r for r in sc.requests if r.n == 1))) == []


def test_cache_probes_hold_each_draw_to_the_same_choice_of_the_cold_run() -> None:
    # A seeded n = 2 request: its choices differ, and a warm probe that drew each alike is fine.
    sc = Scenario(0, (RequestSpec("s", 0.0, (5, 6), 2, n=2, temperature=1.0, seed=3),))
    alone = {"s": [rec("s", 0, "alone", (1, 2), (3, 4))]}
    loaded = [RunHistory(r, "load", (rec("s", r, "load", (1, 2), (3, 4)),)) for r in range(2)]
    warm = [rec("s", 0, "warm", (1, 2), (3, 4))]
    assert judge(loaded, alone, cache=warm, scenario=sc).anomalies == ()
    moved = [rec("s", 0, "warm", (1, 2), (3, 5))]
    assert [a.oracle for a in judge(loaded, alone, cache=moved, scenario=sc).anomalies] == [Oracle.CACHE_STATE]
