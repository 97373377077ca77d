"""`servefuzz bisect`: the search (servefuzz.bisection), the finding's `bisect` field, and the real
loop over real servers: "versions" of the reference engine, the older ones clean and the newer
ones with a planted fault, so a bisection must name the first one with it."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servefuzz.bisection import BAD, GOOD, UNDECIDED, Search, bisected_name, render_bisect, span, step
from servefuzz.bisector import bisect
from servefuzz.campaign import CampaignConfig, run_campaign
from servefuzz.cli import main
from servefuzz.errors import UsageError
from servefuzz.finding import Bisect, BisectStep, Finding, load_finding, write_finding
from servefuzz.launcher import Launch, ServerProcess, reference_argv
from servefuzz.runner import RunConfig, Runner
from servefuzz.strategies import Draft, RandomLoad, TargetShape
from servefuzz.targets import make_target

# -- the search ------------------------------------------------------------------------------------


def run_search(versions: tuple[str, ...], outcome: dict[str, str]) -> Search:
    search = Search(versions)
    while (v := search.next()) is not None:
        search = search.with_step(step(v, outcome[v]))
    return search


@given(n=st.integers(2, 300), data=st.data())
def test_a_monotone_ladder_is_bisected_to_its_first_bad_version_in_log_steps(n: int, data: st.DataObject) -> None:
    versions = tuple(f"b{i}" for i in range(n))
    first = data.draw(st.integers(1, n - 1))  # the oldest is good, the newest bad
    found = run_search(versions, {v: BAD if i >= first else GOOD for i, v in enumerate(versions)})
    assert (found.last_good, found.first_bad) == (versions[first - 1], versions[first])
    assert len(found.steps) <= 2 + math.ceil(math.log2(n))
    assert len({s.version for s in found.steps}) == len(found.steps)  # no version tried twice


@given(n=st.integers(3, 60), data=st.data())
def test_undecided_versions_are_stepped_around_never_counted(n: int, data: st.DataObject) -> None:
    versions = tuple(f"b{i}" for i in range(n))
    first = data.draw(st.integers(1, n - 1))
    undecided = data.draw(st.sets(st.integers(1, n - 2)))
    truth = {v: UNDECIDED if i in undecided else BAD if i >= first else GOOD for i, v in enumerate(versions)}
    found = run_search(versions, truth)
    # The answer brackets the true change, with only undecided versions strictly between.
    assert found.first_bad is not None and found.last_good is not None
    lo, hi = versions.index(found.last_good), versions.index(found.first_bad)
    assert lo < first <= hi
    assert all(truth[v] == UNDECIDED for v in versions[lo + 1:hi])
    assert found.undecided_between() == tuple(versions[lo + 1:hi])
    if found.undecided_between():
        assert "undecided between them" in found.conclusion()


def test_the_ends_decide_whether_there_is_anything_to_bisect() -> None:
    v = ("b1", "b2", "b3")
    assert run_search(v, {"b3": GOOD}).conclusion() == "not reproduced at the newest version, b3: nothing to bisect in b1..b3"
    assert run_search(v, {"b3": UNDECIDED}).conclusion().startswith("undecided at the newest version, b3")
    oldest_bad = run_search(v, {"b3": BAD, "b1": BAD})
    assert (oldest_bad.last_good, oldest_bad.first_bad, len(oldest_bad.steps)) == (None, "b1", 2)
    assert "no good version in b1..b3" in oldest_bad.conclusion()
    assert run_search(v, {"b3": BAD, "b1": UNDECIDED}).conclusion().startswith("undecided at the oldest version, b1")


def test_a_range_is_two_versions_of_the_ladder_older_first() -> None:
    ladder = ("b1", "b2", "b3")
    assert span(ladder, "b1..b3") == ladder
    for bad, said in (("b3..b1", "newer than"), ("b1-b3", "OLDER..NEWER"), ("b0..b3", "not on the ladder"),
                      ("b2..b2", "two versions")):
        with pytest.raises(UsageError, match=said):
            span(ladder, bad)


# -- the finding's field ---------------------------------------------------------------------------


def bisected(finding: Finding) -> Finding:
    import dataclasses

    record = Bisect("llama-server", "b9093..b11434", (
        BisectStep("b11434", BAD, 2, 2, reported="b11434-unknown"),
        BisectStep("b9093", BAD, 2, 2, reported="b9093-unknown"),
        BisectStep("b9500", UNDECIDED, error="build failed; see install.log"),
    ), None, "b9093", "present at the oldest version tried, b9093: no good version in b9093..b11434")
    return dataclasses.replace(finding, bisect=record)


def test_a_bisected_finding_round_trips_and_an_older_file_still_loads(tmp_path: Path, small_finding: Finding) -> None:
    assert "bisect" not in small_finding.to_json()  # a file from before bisection is written as it was
    path = write_finding(tmp_path, bisected(small_finding), name=bisected_name(Path("finding_1_2.json")))
    assert path.name == "finding_1_2_bisected.json"
    again = load_finding(path)  # validated against the packaged schema on the way in
    assert again.bisect == bisected(small_finding).bisect
    assert json.loads(path.read_text())["bisect"]["steps"][0]["rate_ci"].startswith("2/2 (100%")
    old = write_finding(tmp_path, small_finding)
    assert load_finding(old).bisect is None
    text = "\n".join(render_bisect(again.bisect))  # type: ignore[arg-type]
    assert "b9500" in text and "build failed" in text and "last good: none" in text and "first bad: b9093, 2/2" in text


@pytest.fixture
def small_finding() -> Finding:
    from servefuzz.anomaly import Anomaly, Oracle, Verdict
    from servefuzz.server_facts import TargetInfo
    from servefuzz.workload import RequestSpec, Scenario

    sc = Scenario(1, (RequestSpec("r01", 0.0, (3, 4), 2),))
    return Finding(1, 2, sc, TargetInfo("llamacpp", "http://127.0.0.1:1"),
                   (Anomaly(Oracle.ISOLATION, Verdict.CORRUPTION, "r01", "r01 differs from alone"),))


# -- for real: versions of the reference engine ---------------------------------------------------

SHAPE = TargetShape(page_size=64, context_length=4096, vocab=range(3, 1024), max_total_tokens=131072,
                    chunked_prefill_size=2048, capture_sizes=(1, 2, 4, 8), max_running_requests=128)
FAULT = "page-boundary-prefix"


def page_boundary_finding(out: Path) -> Finding:
    """SGLang #22819's shape on the reference engine with the fault planted: a blocker, then three
    requests sharing exactly one page; the campaign confirms it (deterministic, not timing)."""
    d = Draft(7, SHAPE)
    d.blocker(0)
    for k in range(3):
        d.add(4.0 + k * 0.2, 64 + 20 + k, 16, prefix="p0", prefix_len=64)
    config = CampaignConfig(out_dir=out, request_budget=1, stop_at_first=True, confirm_runs=3)

    async def go() -> Finding:
        with ServerProcess.reference(["--fault", FAULT]) as server:
            async with Runner(make_target("reference", server.base_url), RunConfig()) as runner:
                result = await run_campaign(runner, [RandomLoad()], config, seeds=[d.scenario("hand")])
        assert result.findings, "the campaign found nothing in the hand-made scenario"
        return result.findings[0][1]

    return asyncio.run(go())


def test_bisect_names_the_first_version_with_the_fault_over_real_servers(tmp_path: Path) -> None:
    finding = page_boundary_finding(tmp_path / "c")
    # Five "releases" of the reference engine: v3 is the first that ships the bug.
    versions = ("v1", "v2", "v3", "v4", "v5")

    def launch_of(version: str) -> Launch:
        flags = ["--fault", FAULT] if version >= "v3" else []
        return Launch("reference", tuple(reference_argv(["--page-size", "64", *flags])))

    seen: list[BisectStep] = []
    found = bisect(finding, versions, launch_of, on_step=seen.append)
    assert [s.version for s in found.steps] == ["v5", "v1", "v3", "v2"]  # newest, oldest, then halves
    assert (found.last_good, found.first_bad) == ("v2", "v3")
    assert {s.version: s.outcome for s in found.steps} == {"v5": BAD, "v1": GOOD, "v3": BAD, "v2": GOOD}
    # Each decided by the sequential test: a bad version in a few replays, a good one in 8 clean ones.
    assert all(s.reproduced == s.attempts >= 2 for s in found.steps if s.outcome == BAD)
    assert all(s.reproduced == 0 and s.attempts >= 8 for s in found.steps if s.outcome == GOOD)
    assert all(s.reported is not None for s in found.steps)  # what the server said it was
    assert seen == list(found.steps)


def test_a_version_whose_server_does_not_start_is_undecided_and_stepped_around(tmp_path: Path) -> None:
    finding = page_boundary_finding(tmp_path / "c")

    def launch_of(version: str) -> Launch:
        if version == "v2":
            return Launch("reference", tuple(reference_argv(["--page-size", "0"])))  # refuses to start
        flags = ["--fault", FAULT] if version >= "v2" else []
        return Launch("reference", tuple(reference_argv(["--page-size", "64", *flags])))

    found = bisect(finding, ("v1", "v2", "v3"), launch_of)
    v2 = next(s for s in found.steps if s.version == "v2")
    assert v2.outcome == UNDECIDED and v2.error is not None and "page-size" in v2.error
    assert (found.last_good, found.first_bad, found.undecided_between()) == ("v1", "v3", ("v2",))


def test_bisect_on_a_preset_without_versions_is_one_line_and_exit_2(
    tmp_path: Path, small_finding: Finding, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_finding(tmp_path, small_finding)
    for launch, versions, said in (("reference", "a..b", "name a preset that takes versions"),
                                   ("llama-server@b11434", "b9093..b11434", "give the preset alone"),
                                   ("llama-server", "b11434..b9093", "newer than")):
        assert main(["bisect", str(path), "--launch", launch, "--versions", versions]) == 2
        assert said in capsys.readouterr().err


def test_report_html_and_issue_md_show_the_bisection(tmp_path: Path, small_finding: Finding) -> None:
    from servefuzz.reports import write_report

    paths = write_report(bisected(small_finding), tmp_path / "r")
    issue, page = paths.issue.read_text(), paths.html.read_text()
    assert "- First bad: b9093 (2/2" in issue and "- Last good: none" in issue
    assert "| b9500 | undecided (build failed; see install.log) | 0/0 |" in issue
    assert "Versions (bisect)" in page and "no good version in b9093..b11434" in page and "b11434-unknown" in page
    plain = write_report(small_finding, tmp_path / "p")  # no bisection, no section
    assert "Versions (bisect)" not in plain.issue.read_text() and "Versions (bisect)" not in plain.html.read_text()


def test_max_versions_cuts_the_search_short_and_says_where_it_stands(tmp_path: Path) -> None:
    finding = page_boundary_finding(tmp_path / "c")

    def launch_of(version: str) -> Launch:
        flags = ["--fault", FAULT] if version >= "v3" else []
        return Launch("reference", tuple(reference_argv(["--page-size", "64", *flags])))

    found = bisect(finding, ("v1", "v2", "v3", "v4", "v5"), launch_of, max_versions=3)
    assert [s.version for s in found.steps] == ["v5", "v1", "v3"] and not found.finished
    record = found.record("reference", "v1..v5")
    assert not record.finished and record.conclusion == "between v1 (good) and v3 (bad), not finished"
    assert Bisect.from_json(record.to_json()) == record
