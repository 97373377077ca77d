"""The constraint oracle in the one judging function: a constrained answer outside its own
choices under load, inside them alone, is `corruption` backed by the violation whatever the
flip's margin; a valid but different choice stays on the ordinary ladder; a constraint broken
alone too backs nothing and is named in the judgement's constraint lines. Pure: constructed
histories (the fault on a real engine: tests/quality/test_zoo_detection.py)."""

from __future__ import annotations

from servefuzz.anomaly import Verdict
from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
from servefuzz.oracles.controls import CONSTRAINT
from servefuzz.oracles.judge import judge
from servefuzz.workload import RequestSpec, Scenario, choice_text

CHOICES = (choice_text([5, 7]), choice_text([9]), choice_text([11, 12]))
SCENARIO = Scenario(1, (
    RequestSpec("r01", 0.0, (40, 41, 42), 8, ignore_eos=False, choices=CHOICES),
    RequestSpec("r02", 0.5, (50, 51, 52), 8),
))


def answer(ids: tuple[int, ...], *, lp_other: float = -0.06, finish: str = "stop") -> ChoiceRecord:
    """An answer whose first token beat its runner-up (token + 1000) by `-0.05 - lp_other` nats."""
    top = tuple(((t, -0.05), (t + 1000, lp_other)) for t in ids)
    return ChoiceRecord(0, ids, tuple(-0.05 for _ in ids), top, text=choice_text(ids), finish_reason=finish)


def rec(rid: str, run: int, label: str, choice: ChoiceRecord) -> RequestRecord:
    return RequestRecord(rid, run, label, Status.OK, 0.0, choices=(choice,))


def judged(loaded_r01: ChoiceRecord, alone_r01: ChoiceRecord, *, with_scenario: bool = True):  # type: ignore[no-untyped-def]
    free = answer((60, 61, 62), finish="length")
    runs = [RunHistory(i, "load", (rec("r01", i, "load", loaded_r01 if i == 0 else alone_r01), rec("r02", i, "load", free)))
            for i in range(2)]
    alone = {"r01": [rec("r01", 0, "alone", alone_r01)], "r02": [rec("r02", 0, "alone", free)]}
    return judge(runs, alone, scenario=SCENARIO if with_scenario else None)


def test_an_answer_outside_its_choices_under_load_is_a_corruption_backed_by_the_violation() -> None:
    # A near-tie flip (drift on the ladder) that spells no choice: no rounding unmasks a token.
    j = judged(answer((9, 3), lp_other=-0.051), answer((5, 7)))
    mine = [a for a in j.anomalies if a.request_id == "r01"]
    assert mine and all(a.verdict is Verdict.CORRUPTION for a in mine if a.verdict.is_divergence)
    control = next(c for a in mine for c in a.controls if c.name == CONSTRAINT)
    assert control.backs and control.broken is not None and control.broken.choices == tuple(CHOICES)
    assert control.broken.violations[0][1] == " w9 w3" and control.broken.alone == (" w5 w7",)
    assert "r02" not in {a.request_id for a in j.anomalies} and j.constraint == ()


def test_a_valid_but_different_choice_stays_on_the_ordinary_ladder() -> None:
    # " w9" is one of the choices: judged exactly as it would be with no constraint at all.
    valid = judged(answer((9,), lp_other=-0.051), answer((5, 7)))
    plain = judged(answer((9,), lp_other=-0.051), answer((5, 7)), with_scenario=False)
    assert valid.anomalies and [a.verdict for a in valid.anomalies] == [a.verdict for a in plain.anomalies]
    assert Verdict.CORRUPTION not in {a.verdict for a in valid.anomalies}
    assert all(c.name != CONSTRAINT for a in valid.anomalies for c in a.controls)


def test_an_answer_cut_at_max_tokens_is_held_to_a_prefix_of_a_choice() -> None:
    # " w11" cut by length begins a choice: nothing it produced broke the constraint.
    cut = judged(answer((11,), lp_other=-0.051, finish="length"), answer((5, 7)))
    assert all(a.verdict is not Verdict.CORRUPTION for a in cut.anomalies)
    # The same text finished by a stop is no whole choice: a violation.
    stopped = judged(answer((11,), lp_other=-0.051), answer((5, 7)))
    assert any(a.verdict is Verdict.CORRUPTION for a in stopped.anomalies if a.request_id == "r01")


def test_a_constraint_broken_alone_too_backs_nothing_and_is_named() -> None:
    j = judged(answer((9, 3), lp_other=-0.051), answer((8,)))
    assert all(a.verdict is not Verdict.CORRUPTION for a in j.anomalies)
    assert len(j.constraint) == 1 and j.constraint[0].startswith("r01 breaks its constraint alone")


def test_without_the_scenario_no_constraint_is_known_and_nothing_is_backed() -> None:
    j = judged(answer((9, 3), lp_other=-0.051), answer((5, 7)), with_scenario=False)
    assert all(a.verdict is not Verdict.CORRUPTION for a in j.anomalies) and j.constraint == ()
