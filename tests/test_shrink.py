"""Shrink: the sort key, ddmin, the passes and the gate, on fake tests; the CLI's edges for real."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.cli import main as cli
from servefuzz.finding import Confirmation, Finding, load_finding, write_finding
from servefuzz.server_facts import TargetInfo
from servefuzz.shrinker import Shrinker, Trial, ddmin, sort_key, with_lineage
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

VOCAB = range(3, 1000)


def shared(a: RequestSpec, b: RequestSpec) -> int:
    """How many leading tokens two prompts really share."""
    n = 0
    for x, y in zip(a.prompt_ids, b.prompt_ids):
        if x != y:
            break
        n += 1
    return n


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    b = PromptBuilder(draw(st.integers(0, 5)), VOCAB)
    specs = []
    for i in range(draw(st.integers(1, 6))):
        prefix_len = draw(st.sampled_from([0, 0, 1, 63, 64, 65, 128]))
        prompt_len = prefix_len + draw(st.integers(0 if prefix_len else 1, 70))
        name = draw(st.sampled_from(["p0", "p1"])) if prefix_len else None
        specs.append(RequestSpec(
            f"r{i:02d}", draw(st.sampled_from([0.0, 0.5, 3.0, 40.0])), b.prompt(name, prefix_len, prompt_len),
            draw(st.integers(1, 40)), name, prefix_len, n=draw(st.integers(1, 3)), stream=draw(st.booleans()),
        ))
    return Scenario(1, tuple(specs))


# -- the sort key ------------------------------------------------------------------------------


@given(scenarios(), scenarios())
def test_sort_key_is_a_total_order_that_tells_scenarios_apart(a: Scenario, b: Scenario) -> None:
    ka, kb = sort_key(a), sort_key(b)
    assert (ka < kb) + (ka == kb) + (ka > kb) == 1
    assert (ka == kb) == (a.to_json()["requests"] == b.to_json()["requests"])


def test_sort_key_ranks_requests_then_prompt_tokens_then_outputs_then_timing() -> None:
    r = RequestSpec("r01", 5.0, (7,) * 10, 8)
    base = Scenario(1, (r,))
    fewer_requests_but_longer = Scenario(1, (dataclasses.replace(r, prompt_ids=(7,) * 500, max_tokens=99),))
    two = Scenario(1, (r, dataclasses.replace(r, id="r02")))
    assert sort_key(fewer_requests_but_longer) < sort_key(two)
    assert sort_key(Scenario(1, (dataclasses.replace(r, prompt_ids=(7,) * 9, max_tokens=99),))) < sort_key(base)
    assert sort_key(Scenario(1, (dataclasses.replace(r, max_tokens=7, n=3),))) < sort_key(base)
    assert sort_key(Scenario(1, (dataclasses.replace(r, offset_ms=0.0),))) < sort_key(base)


# -- ddmin -------------------------------------------------------------------------------------


@given(st.integers(1, 24), st.data())
def test_ddmin_finds_exactly_the_needed_items_and_never_tests_nothing(size: int, data: st.DataObject) -> None:
    items = list(range(size))
    needed = set(data.draw(st.sets(st.sampled_from(items), min_size=1)))
    tested: list[list[int]] = []

    def test(xs: list[int]) -> bool:
        tested.append(xs)
        return needed <= set(xs)

    assert ddmin(items, test) == sorted(needed)
    assert all(tested)


def test_ddmin_result_is_one_minimal_for_an_arbitrary_monotone_test() -> None:
    rng = random.Random(3)
    for _ in range(50):
        groups = [set(rng.sample(range(12), 2)) for _ in range(3)]  # holds if any group is present

        def holds(xs: list[int], groups: list[set[int]] = groups) -> bool:
            return any(g <= set(xs) for g in groups)

        found = ddmin(list(range(12)), holds)
        assert any(x <= set(found) for x in groups)
        for i in range(len(found)):  # removing any one item breaks it
            assert not any(x <= set(found[:i] + found[i + 1:]) for x in groups)


# -- the gate and the passes ---------------------------------------------------------------------


def page_scenario(prefix: int, page: int = 64) -> Scenario:
    b = PromptBuilder(9, VOCAB)
    return Scenario(1, (
        RequestSpec("r01", 0.0, b.prompt("p0", prefix, prefix + 20), 16, "p0", prefix),
        RequestSpec("r02", 0.0, b.prompt("p0", prefix, prefix + 30), 16, "p0", prefix),
        RequestSpec("r03", 10.0, b.prompt(None, 0, 40), 16),
        RequestSpec("r04", 25.0, b.prompt("p1", 10, 50), 4, "p1", 10),
    ))


def test_prefix_shrinks_by_whole_pages_and_stays_shared_exactly() -> None:
    # The fake bug: two requests whose prompts really share a whole, non-zero number of pages.
    def test(c: Scenario) -> Trial:
        ids = c.by_id()
        ok = "r01" in ids and "r02" in ids and (n := shared(ids["r01"], ids["r02"])) > 0 and n % 64 == 0
        return Trial(ok, 1)

    best = Shrinker(page_scenario(192), test, page_size=64).run().best
    a, b = best.by_id()["r01"], best.by_id()["r02"]
    assert [r.id for r in best.requests] == ["r01", "r02"]
    assert a.prefix_len == b.prefix_len == shared(a, b) == 64
    assert a.prompt_ids[:64] == page_scenario(192).by_id()["r01"].prompt_ids[:64]  # the same named prefix


def test_a_prefix_one_past_a_page_keeps_its_remainder() -> None:
    def test(c: Scenario) -> Trial:
        ids = c.by_id()
        return Trial("r01" in ids and "r02" in ids and shared(ids["r01"], ids["r02"]) % 64 == 1, 1)

    best = Shrinker(page_scenario(129), test, page_size=64).run().best
    assert [r.prefix_len for r in best.requests] == [1, 1]


@settings(max_examples=40, deadline=None)
@given(scenarios(), st.integers(0, 2**16))
def test_every_candidate_keeps_declared_prefixes_exact(scenario: Scenario, seed: int) -> None:
    rng = random.Random(seed)

    def exact(c: Scenario) -> None:
        for a in c.requests:
            for b in c.requests:
                if a.id < b.id and a.prefix_name and a.prefix_name == b.prefix_name and a.suffix_len and b.suffix_len:
                    assert shared(a, b) == min(a.prefix_len, b.prefix_len), (a, b)

    def test(c: Scenario) -> Trial:
        exact(c)
        return Trial(rng.random() < 0.5, 1)

    exact(scenario)
    result = Shrinker(scenario, test, page_size=64, budget=60).run()
    assert sort_key(result.best) <= sort_key(scenario)


def test_the_gate_never_tests_what_is_not_smaller_nor_a_rejected_candidate_twice() -> None:
    sc = page_scenario(64)
    calls: list[Scenario] = []

    def test(c: Scenario) -> Trial:
        calls.append(c)
        return Trial(False, 2)

    s = Shrinker(sc, test)
    assert not s.consider(sc) and not s.consider(sc.with_requests([*sc.requests, RequestSpec("x", 0.0, (5,), 1)]))
    smaller = sc.subset(["r01"])
    assert not s.consider(smaller) and not s.consider(smaller)
    assert calls == [smaller] and s.replays == 2


def test_budget_stops_the_search_and_stats_add_up() -> None:
    sc = page_scenario(128)
    result = Shrinker(sc, lambda c: Trial(len(c.requests) >= 3, 3), page_size=64, budget=30).run()
    assert result.stopped_because == "replay budget of 30 spent"
    assert 30 <= result.replays < 33
    assert sum(p.replays for p in result.passes) == result.replays
    assert all(p.accepted <= p.calls for p in result.passes)
    assert [p.name for p in result.passes][:3] == ["drop_requests", "scale_offsets", "zero_offsets"]


def test_offsets_merge_into_one_burst_and_a_cut_request_keeps_its_length() -> None:
    b = PromptBuilder(2, VOCAB)
    sc = Scenario(1, (
        RequestSpec("r01", 40.0, b.prompt(None, 0, 9), 30, cancel_after_ms=20.0),
        RequestSpec("r02", 55.0, b.prompt(None, 0, 9), 30),
    ))
    best = Shrinker(sc, lambda c: Trial(len(c.requests) == 2, 1)).run().best
    assert [r.offset_ms for r in best.requests] == [0.0, 0.0]
    assert [r.max_tokens for r in best.requests] == [30, 1]


@given(st.integers(1, 40), st.integers(1, 40))
def test_a_length_search_from_below_finds_the_least_working_value_and_accepts_at_most_log_times(
    value: int, least: int
) -> None:
    # Monotone: any max_tokens >= `least` shows the fake bug. The search ends at the least value
    # below `value` that works, and accepts few candidates on its way: an accepted candidate is
    # the expensive one on a real server (13 runs and a re-check against 2).
    sc = Scenario(1, (RequestSpec("r01", 0.0, (5,) * 4, value),))
    tried: list[int] = []

    def test(c: Scenario) -> Trial:
        tried.append(c.requests[0].max_tokens)
        return Trial(c.requests[0].max_tokens >= least, 1)

    s = Shrinker(sc, test)
    s.minimize_int(value, 1, lambda v: sc.with_requests([dataclasses.replace(sc.requests[0], max_tokens=v)]))
    assert s.best.requests[0].max_tokens == min(value, least)
    accepted = [v for v in tried if v >= least]
    assert len(accepted) <= max(1, (least - 1).bit_length())
    assert len(tried) == len(set(tried))


def test_max_tokens_go_to_one_together_in_one_acceptance_when_the_whole_scenario_allows_it() -> None:
    sc = page_scenario(64)
    result = Shrinker(sc, lambda c: Trial(len(c.requests) == 4, 1), page_size=64).run()
    assert [r.max_tokens for r in result.best.requests] == [1, 1, 1, 1]
    assert next(p for p in result.passes if p.name == "shrink_max_tokens").accepted == 1


def test_offsets_are_scaled_down_boldest_first_while_the_finding_holds_keeping_their_order() -> None:
    # The fake bug needs r02 at least 300 ms after r01 and r03 after r02: from 0/2000/4000, /16
    # is turned down and /4 accepted (0/500/1000, in one acceptance); from there /16 is below the
    # 50 ms floor, /4 and /2 are turned down (r02 125 and 250 ms after r01).
    b = PromptBuilder(2, VOCAB)
    sc = Scenario(1, tuple(RequestSpec(f"r0{i + 1}", 2000.0 * i, b.prompt(None, 0, 4), 1) for i in range(3)))

    def test(c: Scenario) -> Trial:
        t = {r.id: r.offset_ms for r in c.requests}
        return Trial(len(t) == 3 and t["r02"] - t["r01"] >= 300 and t["r03"] > t["r02"], 1)

    result = Shrinker(sc, test).run()
    assert [r.offset_ms for r in result.best.requests] == [0.0, 500.0, 1000.0]
    assert next(p for p in result.passes if p.name == "scale_offsets").accepted == 1


def test_offsets_are_not_scaled_below_the_floor() -> None:
    # Any span shows this fake bug; from 0/100 one halving (50 ms) is all that is proposed.
    b = PromptBuilder(2, VOCAB)
    sc = Scenario(1, tuple(RequestSpec(f"r0{i + 1}", 100.0 * i, b.prompt(None, 0, 4), 1) for i in range(2)))
    tried: list[float] = []

    def test(c: Scenario) -> Trial:
        offsets = [r.offset_ms for r in c.requests]
        tried.append(max(offsets))
        return Trial(len(offsets) == 2 and offsets[1] > offsets[0], 1)

    assert [r.offset_ms for r in Shrinker(sc, test).run().best.requests] == [0.0, 50.0]
    assert min(t for t in tried if t > 0) == 50.0


def test_lineage_tags_each_kind_of_change_once() -> None:
    b = PromptBuilder(4, VOCAB)
    before = Scenario(1, (
        RequestSpec("r01", 9.0, b.prompt("p0", 64, 80), 8, "p0", 64),
        RequestSpec("r02", 0.0, b.prompt(None, 0, 5), 8, n=3),
    ))
    r01, r02 = before.requests[1], before.requests[0]
    assert (r01.id, r02.id) == ("r01", "r02")
    after = before.with_requests([
        dataclasses.replace(r01, prompt_ids=r01.prompt_ids[:70], offset_ms=0.0),
        dataclasses.replace(r02, n=1, max_tokens=2),
    ])
    renamed, ids = with_lineage(before, after)
    assert ids == {"r01": "r01_sp_so", "r02": "r02_st_sn"}
    assert {r.id for r in renamed.requests} == {"r01_sp_so", "r02_st_sn"}
    assert renamed.meta["shrunk_from"] == 2


# -- the command line ----------------------------------------------------------------------------


def finding_file(tmp_path: Path, url: str) -> Path:
    b = PromptBuilder(1, VOCAB)
    sc = Scenario(1, (RequestSpec("r01", 0.0, b.prompt(None, 0, 12), 4), RequestSpec("r02", 1.0, b.prompt(None, 0, 9), 4)))
    anomaly = Anomaly(Oracle.ISOLATION, Verdict.CORRUPTION, "r02", "r02 differs from alone")
    target = TargetInfo("reference", url, server_args={"page_size": 64})
    return write_finding(tmp_path, Finding(3, 1, sc, target, (anomaly,)))


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.json", "--launch", "reference"], "no such finding file"),
        (["{f}"], "one of the arguments --base-url --launch is required"),
        (["{f}", "--launch", "reference", "--k", "3"], "unrecognized arguments: --k 3"),
        (["{f}", "--launch", "my-server --port 8000"], "neither a preset"),
        (["{f}", "--launch", "vllm-cpu", "--model", "no/such/model"], "--model no/such/model: no such file or folder"),
        (["{f}", "--base-url", "localhost:1"], "--base-url must start with http://"),
        (["{f}", "--launch", "reference", "--budget", "0"], "expected at least 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    f = finding_file(tmp_path, "http://127.0.0.1:1")
    assert cli(["shrink", *[a.replace("{f}", str(f)) for a in args]]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_finding_that_does_not_reproduce_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reference_server: Callable[..., str]
) -> None:
    url = reference_server()  # a clean engine: nothing reproduces
    f = finding_file(tmp_path, url)
    assert cli(["shrink", str(f), "--base-url", url]) == 1
    out = capsys.readouterr().out
    # Replayed until the sequential test decided (8 clean runs), and said so with the numbers.
    assert "not reproduced on this server" in out and "0/8 (0%, 95% CI 0-32%): not reproduced" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [f.name]


def test_a_finding_that_stops_reproducing_is_reported_flaky_with_its_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reference_server: Callable[..., str]
) -> None:
    url = reference_server()
    f = load_finding(finding_file(tmp_path, url))
    seen = dataclasses.replace(f, confirmation=Confirmation(4, 5, {}, ("r02",), ("r01",)))
    path = write_finding(tmp_path / "seen", seen)
    assert cli(["shrink", str(path), "--base-url", url]) == 1
    out = capsys.readouterr().out
    assert "flaky: it reproduced, then stopped" in out and "when found: 4/5" in out


def test_when_the_flagged_request_needs_its_tokens_the_bystanders_go_to_one_in_one_acceptance() -> None:
    # r02 diverges at its fifth token, so it needs five; the three bystanders need none. Without
    # knowing r02 is flagged, the search accepts once per bystander (three acceptances, each about
    # 15 replays on a real server) before it reaches r02; knowing it, once for all three.
    sc = page_scenario(64)
    assert len(sc.requests) == 4 and sc.by_id()["r02"].max_tokens > 5

    def test(c: Scenario) -> Trial:
        return Trial(len(c.requests) == 4 and c.by_id()["r02"].max_tokens >= 5, 1)

    def accepted(flagged: frozenset[str]) -> tuple[list[int], int]:
        result = Shrinker(sc, test, page_size=64, flagged=flagged).run()
        return [r.max_tokens for r in result.best.requests], next(p for p in result.passes if p.name == "shrink_max_tokens").accepted

    blind, informed = accepted(frozenset()), accepted(frozenset({"r02"}))
    assert blind[0] == informed[0] == [1, 5, 1, 1]
    assert informed[1] < blind[1]
