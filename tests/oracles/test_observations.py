"""The oracles as checkers over one observations record (`oracles.observations`): each fires on
a planted divergence and stays quiet on a clean execution, the views they share are built once,
and the judge is the list of checkers over the record."""

from __future__ import annotations

import dataclasses

import pytest
from histbuild import flip, rec, run, scored

from servefuzz.anomaly import Oracle, Verdict
from servefuzz.history import Status
from servefuzz.oracles import isolation, outputs, replay
from servefuzz.oracles import noise as noise_module
from servefuzz.oracles import observations as observations_module
from servefuzz.oracles.judge import judge, judged
from servefuzz.oracles.observations import CHECKERS, Observations
from servefuzz.oracles.outputs import determinate_outputs
from servefuzz.trial import Executed

GOOD = scored([5, 6, 7, 8])
BAD = flip(GOOD, 2, chosen=60, lp_chosen=-0.03, other=7, lp_other=-2.5, tail=(61,))


def seen(*r02: object, **kw: object) -> Observations:
    loaded = [run(i, rec("r01", i, GOOD), rec("r02", i, c)) for i, c in enumerate(r02)]  # type: ignore[arg-type]
    alone = {rid: [rec(rid, 0, GOOD, label="alone")] for rid in ("r01", "r02")}
    return Observations.of(loaded, alone, **kw)  # type: ignore[arg-type]


def test_every_checker_stays_quiet_on_a_clean_execution() -> None:
    clean = seen(GOOD, GOOD, GOOD)
    assert {check.__name__: tuple(check(clean)) for check in CHECKERS} == {check.__name__: () for check in CHECKERS}
    assert judged(clean).anomalies == () and set(judged(clean).stable) == {"r01", "r02"}


def test_a_planted_flip_fires_the_replay_and_isolation_checkers_and_no_other() -> None:
    planted = seen(GOOD, BAD, GOOD)
    fired = {check.__name__: [(a.oracle, a.verdict, a.request_id) for a in check(planted)] for check in CHECKERS}
    assert fired.pop("replay_checker") == [(Oracle.REPLAY, Verdict.SUSPECTED_CORRUPTION, "r02")]
    assert fired.pop("isolation_checker") == [(Oracle.ISOLATION, Verdict.SUSPECTED_CORRUPTION, "r02")]
    assert all(not found for found in fired.values()), fired


def test_a_lost_request_fires_only_liveness() -> None:
    lost = Observations.of([run(0, rec("r01", 0, GOOD), rec("r02", 0, status=Status.HTTP_ERROR, http_status=500, error="boom"))], {})
    fired = {check.__name__: [a.verdict for a in check(lost)] for check in CHECKERS}
    assert fired.pop("liveness_checker") == [Verdict.SERVER_ERROR]
    assert all(not found for found in fired.values()), fired


def test_the_judge_is_the_checkers_over_the_record() -> None:
    planted = seen(GOOD, BAD, GOOD, BAD)
    j = judged(planted)
    assert j == judge(planted.loaded, planted.alone)
    assert [a for check in CHECKERS for a in check(planted)] == list(j.anomalies)  # nothing backed them here
    # A checker list without isolation judges without it.
    only = judged(planted, [c for c in CHECKERS if c.__name__ != "isolation_checker"])
    assert {a.oracle for a in only.anomalies} == {Oracle.REPLAY}


def test_the_outputs_are_built_once_for_every_oracle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each oracle rebuilt the determinate outputs from the raw histories (six times in a judgement
    with the campaign's noise): the record builds them once, and every oracle reads that."""
    calls = []

    def counted(histories):  # type: ignore[no-untyped-def]
        calls.append(len(histories))
        return determinate_outputs(histories)

    for module in (outputs, replay, isolation, noise_module, observations_module):
        monkeypatch.setattr(module, "determinate_outputs", counted, raising=False)
    from servefuzz.oracles.noise import CampaignNoise

    planted = seen(GOOD, BAD, GOOD, campaign=CampaignNoise.empty())
    assert judged(planted).anomalies
    assert calls == [3], calls


def test_an_execution_is_frozen_and_hands_the_judge_its_observations() -> None:
    loaded = [run(i, rec("r02", i, c)) for i, c in enumerate((GOOD, BAD, GOOD))]
    done = Executed(loaded=loaded, alone={"r02": [rec("r02", 0, GOOD, label="alone")]}, lost="gone")  # type: ignore[arg-type]
    assert isinstance(done.loaded, tuple) and isinstance(done.alone["r02"], tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        done.lost = None  # type: ignore[misc]
    seen_ = done.observations()
    assert seen_.loaded == done.loaded and done.judge() == judged(seen_)
    assert {a.request_id for a in done.judge().anomalies} == {"r02"}
