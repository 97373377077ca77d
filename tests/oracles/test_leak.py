"""The leak oracle in the one judging function: a deviant output that is another request's
context is a candidate leak, which backs a flip above the noise, or any flip once the forced
check shows a token the victim's own context would not write; unrelated deviations and
numerics-like flips are left as the other oracles judged them. Pure: constructed histories."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

from servefuzz.anomaly import Verdict
from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
from servefuzz.oracles.controls import LEAK, LEAK_MIN_TOKENS, OwnContinuation, back, leak_forensics, with_own_check
from servefuzz.oracles.judge import judge
from servefuzz.workload import RequestSpec, Scenario

_rng = random.Random(14)


def toks(n: int) -> tuple[int, ...]:
    return tuple(_rng.randrange(3, 1024) for _ in range(n))


PROMPTS = {rid: toks(40) for rid in ("r01", "r02", "r03")}
SOLO = {rid: toks(16) for rid in PROMPTS}
SCENARIO = Scenario(1, tuple(RequestSpec(rid, float(i), p, 16) for i, (rid, p) in enumerate(PROMPTS.items())))


def rec(rid: str, run: int, label: str, ids: Sequence[int]) -> RequestRecord:
    return RequestRecord(rid, run, label, Status.OK, 0.0, choices=(ChoiceRecord(0, tuple(ids)),))


def alone() -> dict[str, list[RequestRecord]]:
    return {rid: [rec(rid, 0, "alone", ids)] for rid, ids in SOLO.items()}


def loaded(**outputs: Sequence[int]) -> list[RunHistory]:
    """Two loaded runs: run 0 with the given outputs, run 1 with every request's solo answer."""
    first = tuple(rec(rid, 0, "load", outputs.get(rid, SOLO[rid])) for rid in PROMPTS)
    return [RunHistory(0, "load", first), RunHistory(1, "load", tuple(rec(rid, 1, "load", SOLO[rid]) for rid in PROMPTS))]


def by_request(runs: list[RunHistory], scenario: Scenario | None = SCENARIO) -> dict[str, list[Verdict]]:
    out: dict[str, list[Verdict]] = {}
    for a in judge(runs, alone(), scenario=scenario).anomalies:
        out.setdefault(a.request_id, []).append(a.verdict)
    return out


def test_an_output_that_is_another_requests_continuation_is_a_candidate_the_forced_check_decides() -> None:
    judgement = judge(loaded(r02=SOLO["r01"]), alone(), scenario=SCENARIO)
    flagged = [a for a in judgement.anomalies if a.request_id == "r02"]
    # Without logprobs the flip is unclassified, and an unchecked candidate backs only a flip
    # above the noise: the judgement records it and leaves the verdict alone.
    assert flagged and all(a.verdict is Verdict.UNCLASSIFIED for a in flagged), flagged
    for a in flagged:
        assert a.backed_by == ()
        [leak] = [c for c in a.controls if c.name == LEAK]
        assert leak.leak is not None and leak.leak.source == "r01 continuation" and leak.leak.at == 0
        assert leak.leak.tokens == 16 and leak.leak.match == tuple(SOLO["r01"])
        assert leak.summary.startswith("leak: r02 load#0 output = request r01 continuation from its token 0")
    assert not any(a.request_id != "r02" for a in judgement.anomalies)
    assert judgement.unleaked is not None and all(not a.controls for a in judgement.unleaked)
    candidate = leak_forensics("r02", SCENARIO, loaded(r02=SOLO["r01"]), alone())
    # The forced check finds a token the victim's own context would not write: a leak, whatever the flip.
    proven = with_own_check(candidate, OwnContinuation("engine", 15, 2, 0.01, first_other=3, gap=2.5))
    backed = back(judgement.unleaked, [proven])
    assert all(a.verdict is Verdict.CORRUPTION and a.backed_by == (LEAK,) for a in backed if a.request_id == "r02")
    # Its own context writes every matched token: no leak, even above the noise.
    struck = with_own_check(candidate, OwnContinuation("engine", 15, 15, 0.01))
    assert not struck.backs and struck.summary.startswith("no leak: ")
    suspected = [dataclasses.replace(a, verdict=Verdict.SUSPECTED_CORRUPTION) for a in judgement.unleaked]
    assert all(a.verdict is Verdict.SUSPECTED_CORRUPTION for a in back(suspected, [struck]))
    # Unchecked, a candidate backs a flip that is already above the noise.
    assert all(a.verdict is Verdict.CORRUPTION for a in back(suspected, [candidate]))


def test_an_output_that_continues_another_requests_prompt_tail_is_a_candidate_with_or_without_the_scenario() -> None:
    def sources(runs: list[RunHistory], scenario: Scenario | None = SCENARIO) -> set[str]:
        return {c.leak.source for a in judge(runs, alone(), scenario=scenario).anomalies
                for c in a.controls if c.name == LEAK and c.backs and c.leak is not None}

    tail = (*PROMPTS["r03"][-6:], *SOLO["r03"][:6])  # a run from r03's prompt into its answer
    assert sources(loaded(r01=(*SOLO["r01"][:4], *tail))) == {"r03 prompt"}
    # Without the scenario only solo continuations are sources: 6 tokens of r03's answer are too few.
    assert sources(loaded(r01=(*SOLO["r01"][:4], *tail)), scenario=None) == set()
    assert sources(loaded(r01=SOLO["r03"]), scenario=None) == {"r03 continuation"}


def test_unrelated_deviations_short_matches_and_numerics_like_flips_are_no_leak() -> None:
    unrelated = (*SOLO["r01"][:3], *toks(13))
    short = (*SOLO["r01"][:3], *SOLO["r02"][: LEAK_MIN_TOKENS - 1], *toks(6))
    # Batch numerics flip one token and then often run on with the request's own text.
    numerics = (*SOLO["r03"][:5], 7, *SOLO["r03"][5:15])
    verdicts = by_request(loaded(r01=unrelated, r02=short, r03=numerics))
    assert set(verdicts) == {"r01", "r02", "r03"}, verdicts
    assert Verdict.CORRUPTION not in {v for vs in verdicts.values() for v in vs}, verdicts
    # One token repeated is everyone's degenerate loop, not someone's text.
    loop = {**SOLO, "r02": (5,) * 16}
    runs = [RunHistory(0, "load", tuple(rec(rid, 0, "load", (5,) * 16 if rid == "r01" else loop[rid]) for rid in loop))]
    alone_loop = {rid: [rec(rid, 0, "alone", ids)] for rid, ids in loop.items()}
    assert all(a.verdict is not Verdict.CORRUPTION for a in judge(runs, alone_loop, scenario=SCENARIO).anomalies)


def test_agreeing_runs_give_no_anomaly_for_the_leak_oracle_to_read() -> None:
    assert judge(loaded(), alone(), scenario=SCENARIO).anomalies == ()
