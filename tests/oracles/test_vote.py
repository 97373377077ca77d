"""Which run is wrong: fresh alone references vote, the odd run is named, and only recurrences of
the same deviant variant, re-judged above the threshold, count."""

from __future__ import annotations

from histbuild import flip, rec, run, scored

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.history import ChoiceRecord, RequestRecord
from servefuzz.oracles.judge import Expectation, reproduction
from servefuzz.oracles.vote import vote

GOOD = scored([5, 6, 7, 8])
B = flip(GOOD, 1, chosen=60, lp_chosen=-0.03, other=6, lp_other=-2.5, tail=(61, 62))  # confident
C = flip(GOOD, 2, chosen=70, lp_chosen=-0.03, other=7, lp_other=-2.5, tail=(71,))
B_TIED = flip(GOOD, 1, chosen=60, lp_chosen=-0.6931, other=6, lp_other=-0.6932, tail=(61, 62))  # B's tokens, a tie


def alone(*choices: ChoiceRecord) -> list[RequestRecord]:
    return [rec("r11", k, c, label="alone") for k, c in enumerate(choices)]


def test_the_single_odd_alone_run_is_named_and_the_loaded_runs_no_longer_count_against_it() -> None:
    # docs/gpu finding_00026: all loaded outputs agree; the one stored alone run is the odd one.
    first_alone = alone(B)
    loaded = [run(i, rec("r11", i, GOOD)) for i in range(2)]
    replays = [run(2 + i, rec("r11", 2 + i, GOOD)) for i in range(5)]
    fresh = alone(GOOD, GOOD, GOOD)
    v = vote("r11", first_alone, fresh, replays, first_loaded=loaded)
    assert (v.reference, v.agree, v.odd, v.deviant) == (GOOD.token_ids, "3/3", ("first alone#0",), B.token_ids)
    assert v.recurrences == 0 and "0/5 recurrences of the deviant variant" in v.summary
    expect = Expectation(Verdict.SUSPECTED_CORRUPTION, (Anomaly(Oracle.ISOLATION, Verdict.SUSPECTED_CORRUPTION,
                                                                "r11", "r11 differs from alone"),))
    # Against the one stored alone run every replay "reproduces"; against the fresh majority none does.
    assert reproduction(expect, replays, {"r11": first_alone}).rate == "5/5"
    assert reproduction(expect, replays, {"r11": fresh}).rate == "0/5"
    assert reproduction(expect, replays, {"r11": alone(GOOD, B, GOOD)}).rate == "0/5"


def test_an_odd_fresh_reference_is_outvoted_and_named() -> None:
    v = vote("r11", alone(GOOD), alone(GOOD, C, GOOD), [run(2, rec("r11", 2, GOOD))])
    assert (v.reference, v.agree, v.odd) == (GOOD.token_ids, "2/3", ("fresh alone#1",))
    assert v.odd_context[0].run == "alone#1"


def test_without_a_strict_majority_no_reference_is_named() -> None:
    v = vote("r11", alone(GOOD), alone(GOOD, B, C), [])
    assert v.reference is None and v.odd == () and "no strict majority" in v.summary


def test_only_recurrences_of_the_same_variant_that_are_still_confident_count() -> None:
    # The reference itself sits at a near-tie at token 1: B_TIED's flip there is drift, B's is not.
    tie = flip(GOOD, 1, chosen=6, lp_chosen=-0.6931, other=60, lp_other=-0.6932, tail=(7, 8))
    loaded = [run(0, rec("r11", 0, B)), run(1, rec("r11", 1, GOOD))]
    replays = [run(2 + i, rec("r11", 2 + i, c)) for i, c in enumerate([B, B, C, GOOD, B_TIED])]
    v = vote("r11", alone(tie), alone(tie, tie, tie), replays, first_loaded=loaded, before={"r11": "r10"})
    assert v.deviant == B.token_ids
    # B three times (one of them at a tie: drift, not counted as re-judged), C once (another variant).
    assert (v.recurrences, v.rejudged, v.replays) == (3, 2, 5)
    assert "3/5 recurrences of the deviant variant, 2 re-judged above the threshold" in v.summary
    assert v.odd == ("first load#0", "replay load#2", "replay load#3", "replay load#4", "replay load#6")
    assert v.to_json()["odd_context"][0]["ran_before"] is None  # a loaded run: its neighbours ran with it
    first_alone_odd = vote("r11", alone(B), alone(GOOD, GOOD, GOOD), [], before={"r11": "r10"})
    assert first_alone_odd.odd_context[0].ran_before == "r10"
