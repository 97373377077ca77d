"""Trigger features: one definition behind both the dedup signature and the known-issue matcher."""

from __future__ import annotations

import dataclasses
import doctest

from hypothesis import given, settings
from hypothesis import strategies as st

from servefuzz import triggers
from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.finding import Finding
from servefuzz.known_issues import trigger_features
from servefuzz.server_facts import TargetInfo
from servefuzz.workload import RequestSpec, Scenario


@st.composite
def findings(draw: st.DrawFn) -> Finding:
    count = draw(st.integers(1, 5))
    specs = []
    for k in range(count):
        prompt_len = draw(st.integers(1, 300))
        prefix_len = draw(st.sampled_from([0, 0, 1, 63, 64, 65, 128])) if prompt_len > 1 else 0
        prefix_len = min(prefix_len, prompt_len)
        specs.append(RequestSpec(
            f"r{k:02d}", float(draw(st.integers(0, 50))), tuple(range(3, 3 + prompt_len)), draw(st.integers(1, 8)),
            "p" if prefix_len else None, prefix_len, n=draw(st.sampled_from([1, 1, 2])), stream=draw(st.booleans()),
            cancel_after_ms=draw(st.sampled_from([None, None, 20.0])),
        ))
    page = draw(st.sampled_from([None, 1, 16, 64]))
    verdict = draw(st.sampled_from([Verdict.CORRUPTION, Verdict.NUMERIC_DRIFT, Verdict.HANG]))
    rid = draw(st.sampled_from([s.id for s in specs]))
    target = TargetInfo("reference", "http://127.0.0.1:1", server_args={"page_size": page} if page else {})
    return Finding(1, 1, Scenario(1, tuple(specs)), target, (Anomaly(Oracle.ISOLATION, verdict, rid, "x"),))


@settings(max_examples=200, deadline=None)
@given(findings())
def test_the_signature_is_made_of_the_features_the_matcher_sees(finding: Finding) -> None:
    seen = trigger_features(finding)
    in_signature = finding.signature.split(":")[3]
    named = [] if in_signature == "-" else in_signature.split(",")
    assert set(named) <= set(seen), (named, sorted(seen))
    assert named == triggers.signature_features(seen)
    # ... and every feature the signature can hold is one the catalogue may name.
    assert set(triggers.SIGNATURE) <= set(triggers.FEATURES)


def test_a_shared_prefix_is_named_by_its_place_in_the_page_when_the_page_is_known() -> None:
    sc = Scenario(1, (RequestSpec("r01", 0.0, tuple(range(3, 80)), 4, "p", 64),
                      RequestSpec("r02", 40.0, tuple(range(3, 90)), 4, "p", 64)))
    known = Finding(1, 1, sc, TargetInfo("reference", "http://127.0.0.1:1", server_args={"page_size": 64}),
                    (Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r02", "x"),))
    unknown = Finding(1, 1, sc, TargetInfo("openai", "http://127.0.0.1:1"),
                      (Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r02", "x"),))
    assert known.signature.endswith(":prefix=page-aligned")
    assert unknown.signature.endswith(":prefix=shared")
    # A page of one token (SGLang's default) aligns every prefix: it names none.
    token = dataclasses.replace(known, target=TargetInfo("reference", "http://127.0.0.1:1", server_args={"page_size": 1}))
    assert token.signature.endswith(":prefix=shared")
    assert not {"prefix=page-aligned", "prefix=mid-page"} & set(trigger_features(token))


def test_docstring_examples() -> None:
    result = doctest.testmod(triggers)
    assert result.attempted > 0 and result.failed == 0
