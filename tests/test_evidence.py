"""The typed evidence of an anomaly (`servefuzz.evidence`): what the controls and the confirmation
attach are fields, never keys of a dict, and every finding file written before they were typed
loads into them, writes back the same JSON and re-judges as it did."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.evidence import ControlResult, LeakMatch, OwnContinuation, Picture, Vote
from servefuzz.finding import load_finding
from servefuzz.oracles.controls import LEAK, back, read_control
from servefuzz.oracles.judge import rejudged_leaks

ROOT = Path(__file__).resolve().parents[1]
STORED = sorted(p for where in ("docs/findings", "tests/data", "tests/oracles/data", "../shared/evidence")
                for p in (ROOT / where).rglob("*.json")
                if p.is_file() and '"anomalies"' in p.read_text(errors="replace")[:200_000])


def _suspect(rid: str) -> Anomaly:
    return Anomaly(Oracle.ISOLATION, Verdict.SUSPECTED_CORRUPTION, rid, f"{rid}: suspected-corruption")


def test_stored_findings_exist_to_check() -> None:
    assert len(STORED) >= 20, STORED  # docs/findings and tests/data alone hold more


@pytest.mark.parametrize("path", STORED, ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_an_old_finding_loads_into_the_typed_fields_and_writes_back_the_same_evidence(path: Path) -> None:
    raw = json.loads(path.read_text())
    if not isinstance(raw, dict) or "scenario" not in raw:
        pytest.skip("not a finding file")
    finding = load_finding(path)
    for stored, a in zip(raw["anomalies"], finding.anomalies, strict=True):
        e = stored.get("evidence", {})
        # Nothing typed is left among the oracle's measurements; everything typed is in its field.
        assert not {"vote", "controls", "backed_by", "picture"} & set(a.evidence), a.evidence.keys()
        assert [c.name for c in a.controls] == [c["name"] for c in e.get("controls", ())]
        assert list(a.backed_by) == e.get("backed_by", [])
        assert (a.vote is None) == ("vote" not in e) and (a.picture is None) == ("picture" not in e)
        for c, d in zip(a.controls, e.get("controls", ()), strict=True):
            assert (c.leak is not None) == ("match" in d["evidence"]), d
        # The file's evidence, written again, is what the file holds: reports read the same JSON.
        assert json.loads(json.dumps(a.to_json()))["evidence"] == e
        assert Anomaly.from_json(a.to_json()) == a


def test_a_leak_from_before_the_output_was_kept_re_judges_from_the_variants() -> None:
    """The vLLM bf16 attractor finding was written before a leak kept its deviant output: the
    typed match has none, the re-judging finds it in the variants, and the rule gives what it gave
    on the dict form (numeric drift: an unchecked leak backs only a flip above the noise)."""
    stored = load_finding(ROOT / "tests/oracles/data/vllm-h200-bf16-attractor.json")
    head = next(a for a in stored.anomalies if LEAK in a.backed_by)
    [leak, *_] = [c for c in head.controls if c.name == LEAK and c.backs]
    assert leak.leak is not None and leak.leak.output is None and leak.own_check is None
    assert stored.verdict is Verdict.CORRUPTION
    again = rejudged_leaks(stored)
    assert again.verdict is Verdict.NUMERIC_DRIFT
    assert all(LEAK not in a.backed_by for a in again.anomalies)
    # The leak stays in the evidence, with the whole deviant output the variants held.
    kept = [c.leak for a in again.anomalies for c in a.controls if c.name == LEAK]
    assert kept and all(m is not None and m.output is not None for m in kept)
    # A finding no leak backed is left exactly as it was.
    plain = load_finding(ROOT / "docs/findings/llamacpp-cuda-ub512/finding.json")
    assert rejudged_leaks(plain) == plain


def test_a_typed_key_among_the_measurements_is_refused() -> None:
    with pytest.raises(ValueError, match="backed_by"):
        Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r01", "r01", evidence={"backed_by": ["content-swap"]})
    assert Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r01", "r01", evidence={"runs": [0, 1]}).evidence == {"runs": [0, 1]}


def test_controls_add_up_as_typed_results_and_round_trip() -> None:
    swap = read_control("content-swap", "r02", original=(5, 5), control=(0, 5))
    quiet = read_control("deterministic", "r02", original=(5, 5), control=(0, 5))
    [a] = back([_suspect("r02")], [swap])
    [b] = back([a], [quiet])
    assert a.backed_by == ("content-swap",) and [c.name for c in b.controls] == ["content-swap", "deterministic"]
    assert b.evidence == {} and Anomaly.from_json(b.to_json()) == b
    assert b.to_json()["evidence"]["backed_by"] == ["content-swap"]  # the file's form, unchanged


def test_a_leak_with_its_forced_check_and_a_vote_and_a_picture_round_trip() -> None:
    m = LeakMatch("load#1", "r01 continuation", "r01", 0, 12, 3, 3, tuple(range(20, 32)), min_tokens=8,
                  output=(1, 2, 3, *range(20, 32)))
    check = OwnContinuation("truth", 12, 3, 0.25, first_other=9, gap=4.1)
    r = ControlResult(LEAK, "r02", (1, 1), (0, 0), 0.0, True, "leak: ...", leak=m, own_check=check)
    assert ControlResult.from_json(json.loads(json.dumps(r.to_json()))) == r
    v = Vote("r02", (5, 6), "3/3", (), (), 2, 2, 5, (5, 7))
    p = Picture((0, 1), (0.0, 1e-3), (0.01, 0.01), 2, 1.5, 0.02, "2-7/uncached", {"count": 4, "zeros": 1}, (1e-7, 12))
    a = Anomaly(Oracle.ISOLATION, Verdict.CORRUPTION, "r02", "r02", controls=(r,), backed_by=(LEAK,), vote=v, picture=p)
    again = Anomaly.from_json(json.loads(json.dumps(a.to_json())))
    assert again == a and again.picture is not None and again.picture.count == 4


_DRAWN = ROOT / "tests/oracles/data/reference-stale-slot.json"  # a finding whose headline carries a picture


@pytest.mark.parametrize(("why", "change"), [
    ("no bins per decade", lambda p: p.update(edges=[1e-7, 0])),
    ("a lowest edge of zero", lambda p: p.update(edges=[0, 12])),
    ("a bin past any float", lambda p: p["noise"].update(bins={"99999": 3})),
    ("a negative bin count", lambda p: p["noise"].update(bins={"60": -1})),
    ("bins that are no mapping", lambda p: p["noise"].update(bins=[1])),
    ("a count that is no number", lambda p: p["noise"].update(count="x")),
    ("negative zeros", lambda p: p["noise"].update(zeros=-2)),
])
def test_a_crafted_picture_is_refused_when_the_file_loads_never_when_the_report_draws_it(
        tmp_path: Path, why: str, change: Any) -> None:
    """A finding file is untrusted: a picture the report could not draw (it divided by the bins per
    decade, raised 10 to a bin's power, took the log of each count) was a crash of `servefuzz
    report`, exit 4, where a bad finding file is one line and exit 2."""
    from servefuzz.errors import FindingError
    from servefuzz.reports.html import report_html

    raw = json.loads(_DRAWN.read_text())
    drawn = next(a["evidence"]["picture"] for a in raw["anomalies"] if "picture" in a["evidence"])
    change(drawn)
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(FindingError, match="inconsistent finding"):
        load_finding(path)
    # The control: the file as stored loads and its picture is drawn.
    stored = load_finding(_DRAWN)
    assert stored.headline.picture is not None and "Where the margin sits" in report_html(stored, [])


def test_the_module_examples_run() -> None:
    import doctest

    from servefuzz import evidence

    result = doctest.testmod(evidence)
    assert result.attempted > 0 and result.failed == 0
