"""Every report follows the contract-violation tier: a stored SGLang 0.5.17 finding from the H200
(SmolLM2-135M, FA3, `--enable-deterministic-inference`, warm vs cold at token 1, 10/10 on fresh
servers: /work/shared/evidence/sglang-gpu-fa3-deterministic/smollm2, finding_00019), and the
same file with the mode off, the control: numeric drift, no promise anywhere."""

from __future__ import annotations

import dataclasses
import runpy
from pathlib import Path

from servefuzz.anomaly import Verdict
from servefuzz.finding import Finding, load_finding
from servefuzz.known_issues import match
from servefuzz.reports.html import report_html
from servefuzz.reports.issue_md import issue_markdown
from servefuzz.reports.repro import replay_plan, repro_script

STORED = Path(__file__).parent / "data" / "sglang-fa3-deterministic-warm.json"
DOCS = "https://docs.sglang.io/advanced_features/deterministic_inference.html"


def _mode_off(f: Finding) -> Finding:
    args = {**f.target.server_args, "enable_deterministic_inference": False}
    return dataclasses.replace(f, target=dataclasses.replace(f.target, server_args=args),
                               anomalies=tuple(dataclasses.replace(a, verdict=Verdict.NUMERIC_DRIFT, promise=None,
                                                                   divergences=tuple(dataclasses.replace(
                                                                       d, verdict=Verdict.NUMERIC_DRIFT)
                                                                       for d in a.divergences))
                                               for a in f.anomalies))


def test_the_stored_fa3_deterministic_finding_is_a_contract_violation_citing_sglangs_words() -> None:
    f = load_finding(STORED)
    assert f.verdict is Verdict.CONTRACT_VIOLATION  # stored as numeric-drift, before the tier
    p = f.headline.promise
    assert p is not None and p.mode == "--enable-deterministic-inference" and DOCS in p.source
    assert "Any nonzero KL is a KV/state reuse bug." in p.words
    off = _mode_off(f)
    assert off.verdict is Verdict.NUMERIC_DRIFT and off.headline.promise is None


def test_issue_md_title_and_body_name_the_mode_and_quote_the_promise() -> None:
    f = load_finding(STORED)
    text = issue_markdown(f, match(f))
    title = text.splitlines()[0]
    assert title.startswith("# ") and "under --enable-deterministic-inference" in title
    assert "**The promise:** the server ran with `--enable-deterministic-inference`" in text
    assert "docs.sglang.io" in text and "sglang/issues/34899" in text and "Verdict: contract-violation" in text
    off = issue_markdown(_mode_off(f), match(_mode_off(f)))
    assert "under --enable-deterministic-inference" not in off.splitlines()[0]
    assert "**The promise:**" not in off and "Verdict: numeric-drift" in off


def test_report_html_shows_the_tier_and_the_broken_promise() -> None:
    f = load_finding(STORED)
    page = report_html(f, match(f))
    assert "CONTRACT-VIOLATION" in page and "v-contract-violation" in page and "promise broken" in page
    off = report_html(_mode_off(f), [])
    assert "NUMERIC-DRIFT" in off and "promise broken" not in off


def test_repro_expects_a_divergence_that_breaks_the_promise(tmp_path: Path) -> None:
    f = load_finding(STORED)
    assert replay_plan(f)["promise"]["mode"] == "--enable-deterministic-inference"
    script = tmp_path / "repro_full.py"
    script.write_text(repro_script(f))
    ns = runpy.run_path(str(script))
    said = ns["expectation"](ns["FINDING"]["expected"], None)
    assert "to diverge, which breaks the promise of --enable-deterministic-inference" in said and DOCS in said
    assert replay_plan(_mode_off(f))["promise"] is None


def test_a_replay_on_a_server_under_the_mode_reports_its_flips_as_contract_violations() -> None:
    from servefuzz.oracles.judge import Judgement
    from servefuzz.replay_report import render_replay_report, replay_result

    f = load_finding(STORED)
    # What the oracles say of the replays: blind to the mode, numeric drift.
    blind = Judgement(anomalies=_mode_off(f).anomalies, stable=())
    assert f.confirmation is not None
    under = render_replay_report(replay_result(f, f.confirmation, blind, f.target.promise))
    assert "Bug      : contract-violation" in under and "verdict: contract-violation" in under
    default = render_replay_report(replay_result(f, f.confirmation, blind, None))  # a server without the mode
    assert "verdict: numeric-drift" in default and "verdict: contract-violation" not in default
