"""Pairwise feature coverage: the space, the record, the covering generator, the cross mutator."""

from __future__ import annotations

import asyncio
import dataclasses
import doctest
import importlib.util
import io
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from rich.console import Console

import servefuzz.coverage
import servefuzz.covering
from servefuzz.campaign import COVERAGE_FILE, CampaignConfig, CampaignResult, CampaignState, Stop, StopReason, run_campaign
from servefuzz.coverage import CROSSABLE, SURFACE, Coverage, FeatureSpace, points
from servefuzz.covering import PairwiseCover, covered_by
from servefuzz.history import RequestRecord, RunHistory, Status
from servefuzz.mutators import CROSS, MUTATORS, cross, mutate
from servefuzz.progress import LiveProgress, print_summary
from servefuzz.reference.faults import FAULTS
from servefuzz.runner import Runner
from servefuzz.strategies import STRATEGIES, BatchSweep, TargetShape
from servefuzz.targets import make_target
from servefuzz.workload import RequestSpec, Scenario

SMALL = TargetShape(page_size=16, chunked_prefill_size=128, max_total_tokens=2048, context_length=1024)
# The reference engine's defaults: a pool far too big to press within the load cap.
DEFAULT = TargetShape(page_size=64, chunked_prefill_size=2048, max_total_tokens=131072, context_length=4096)
# A target that offers every capability (the reference engine with adapters served).
SURFACE_SHAPE = dataclasses.replace(SMALL, salts=True, seeded_sampling=True, choices=True, adapters=("lora-a", "lora-b"))


def test_the_module_docstrings_run() -> None:
    for m in (servefuzz.coverage, servefuzz.covering):
        result = doctest.testmod(m)
        assert result.attempted > 0 and result.failed == 0, m.__name__


def test_the_space_leaves_out_what_the_target_cannot_reach_and_states_its_total() -> None:
    small, default = FeatureSpace.for_shape(SMALL), FeatureSpace.for_shape(DEFAULT)
    assert small.dimension("pressure").buckets == ("light", "heavy", "over")
    assert default.dimension("pressure").buckets == ("light",)  # 131072 tokens: no pressing within the cap
    no_chunk = FeatureSpace.for_shape(TargetShape(page_size=16))
    assert no_chunk.dimension("prompt").buckets == ("sub-page", "pages")
    assert (len(small.pairs), len(default.pairs), len(no_chunk.pairs)) == (573, 507, 447)
    assert "prompt=sub-page & prefix=page-aligned" not in small.pairs  # impossible: never counted
    assert all(k.count(" & ") == 2 for k in small.triples) and len(small.triples) == 60


def test_server_dimensions_come_from_what_the_server_reported() -> None:
    ids = tuple(range(3, 43))
    sc = Scenario(1, (
        RequestSpec("r01", 0.0, ids, 4, "p0", 32),
        RequestSpec("r02", 1.0, ids[:32] + (7, 8), 4, "p0", 32),
        RequestSpec("r03", 2.0, ids[:32] + (9,), 64, "p0", 32, cancel_after_ms=20.0),
    ))
    recs = (
        RequestRecord("r01", 0, "load", Status.OK, 0.0, sent_ms=0.0, end_ms=9.0, cached_tokens=0),
        RequestRecord("r02", 0, "load", Status.OK, 1.0, sent_ms=1.0, end_ms=9.0, cached_tokens=32),
        RequestRecord("r03", 0, "load", Status.CANCELLED, 2.0, sent_ms=2.0, end_ms=20.0, cached_tokens=16),
    )
    run = RunHistory(0, "load", recs, meta={"metrics": {"evicted_tokens_total": 64.0}})
    p = points(sc, SMALL, [run])
    assert [p[r]["burst"] for r in ("r01", "r02", "r03")] == ["first", "inside", "last"]
    assert (p["r01"]["cache"], p["r02"]["cache"]) == ("miss", "full")
    assert "cache" not in p["r03"], "a request cut on purpose is indeterminate"
    assert [p[r]["batch"] for r in ("r01", "r02", "r03")] == ["1", "2-4", "2-4"]
    assert {q["pressure"] for q in p.values()} == {"over"}, "evictions reported: the pool was pressed"
    quiet = points(sc, SMALL)  # without a history: no server dimension, the load alone decides
    assert {q["pressure"] for q in quiet.values()} == {"light"} and all("cache" not in q for q in quiet.values())


def test_the_record_counts_requests_per_pair_and_round_trips() -> None:
    space = FeatureSpace.for_shape(SMALL)
    s = STRATEGIES["n-mix"].generate(random.Random(2), SMALL, seed=2)
    pts = list(points(s, SMALL).values())
    cov = Coverage.empty(space).observe(pts)
    assert cov.requests == len(pts) and cov.new_pairs(pts) == frozenset()
    assert sum(cov.pairs.values()) == sum(len(space.cells_of(p)[0]) for p in pts)
    again = cov.observe(pts)
    assert again.covered == cov.covered and all(again.pairs[k] == 2 * v for k, v in cov.pairs.items())
    back = Coverage.from_json(json.loads(json.dumps(again.to_json(), sort_keys=True)))  # as store.write_json
    assert back == again and back.to_json()["total_pairs"] == 573
    # On a target that cannot reach a bucket, its counts are dropped rather than counted.
    narrow = FeatureSpace.for_shape(TargetShape(page_size=16))
    kept = Coverage.from_json(again.to_json(), narrow)
    assert set(kept.pairs) <= narrow.pairs and kept.covered <= again.covered


@pytest.mark.parametrize("shape", [SMALL, DEFAULT], ids=["small-pool", "reference-default"])
def test_the_generator_covers_every_pair_it_can_aim_at_in_a_few_scenarios(shape: TargetShape) -> None:
    space = FeatureSpace.for_shape(shape)
    cov, made = Coverage.empty(space), []
    for i in range(8):
        s = PairwiseCover().with_coverage(cov).generate(random.Random(i), shape, seed=i)
        made.append(s)
        cov = cov.observe(points(s, shape).values())
        if not cov.missing(("request", "scenario")):
            break
    assert not cov.missing(("request", "scenario")), sorted(cov.missing(("request", "scenario")))[:5]
    assert covered_by(made, shape).covered == cov.covered
    # The control: the default mix, in the same number of scenarios, leaves many pairs out.
    mix = [list(STRATEGIES.values())[i % len(STRATEGIES)].generate(random.Random(i), shape, seed=i)
           for i in range(len(made))]
    assert len(covered_by(mix, shape).missing(("request", "scenario"))) > 100


def test_cache_hits_are_aimed_at_through_primers_once_the_target_reports_them() -> None:
    space = FeatureSpace.for_shape(SMALL)
    silent = PairwiseCover().generate(random.Random(4), SMALL, seed=4)
    assert {r.prefix_name for r in silent.requests} <= {"p0", None}, "no cache report yet: no primer"
    reported = Coverage.empty(space).observe([{"n": "1", "prefix": "none", "cache": "miss"}])
    primed = 0
    for seed in range(12):
        s = PairwiseCover(coverage=reported).generate(random.Random(seed), SMALL, seed=seed)
        for name in {r.prefix_name for r in s.requests if r.prefix_name and r.prefix_name.startswith("c")}:
            primer, row = sorted((r for r in s.requests if r.prefix_name == name), key=lambda r: r.offset_ms)
            shared = row.prefix_len // 16 * 16
            assert primer.offset_ms < row.offset_ms and primer.max_tokens == 2 and primer.prefix_len % 16 == 0
            assert primer.prefix_len in (shared, shared - 16) and primer.prefix_len >= 16
            primed += 1
    assert primed >= 6


def test_the_generator_is_a_function_of_its_seed_and_the_coverage() -> None:
    cov = covered_by([STRATEGIES["random"].generate(random.Random(0), SMALL, seed=0)], SMALL)
    a = PairwiseCover(coverage=cov).generate(random.Random(5), SMALL, seed=5)
    b = PairwiseCover(coverage=cov).generate(random.Random(5), SMALL, seed=5)
    fresh = PairwiseCover().generate(random.Random(5), SMALL, seed=5)
    assert a.to_json() == b.to_json() and a.to_json() != fresh.to_json()


@pytest.mark.parametrize("shape", [SMALL, DEFAULT, SURFACE_SHAPE], ids=["small-pool", "reference-default", "surface"])
def test_cross_moves_one_request_along_exactly_one_dimension(shape: TargetShape) -> None:
    applied, dims = 0, set()
    for i in range(120):
        s = list(STRATEGIES.values())[i % len(STRATEGIES)].generate(random.Random(i), shape, seed=i)
        m = cross(s, random.Random(i), shape)
        if m is None:
            continue
        applied += 1
        before, after = points(s, shape), points(m, shape)
        moved = [r.id for r in m.requests if r.id.endswith("_x")]
        assert len(moved) == 1 and m.meta["lineage"] == ["cross"] and len(m.requests) == len(s.requests)
        old = moved[0].removesuffix("_x")
        changed = {d for d in before[old] if before[old][d] != after[moved[0]][d]}
        # A constraint taken on needs its EOS: the one move that drags a second dimension.
        assert len(changed - ({"sampling"} if "constraint" in changed else set())) == 1, changed
        assert changed <= set(CROSSABLE), changed
        dims |= changed
        assert all(before[r.id] == after[r.id] for r in s.requests if r.id != old)
    space = FeatureSpace.for_shape(shape)
    assert applied >= 100 and dims == set(CROSSABLE) & space.names


# --- the target's surface: one dimension per capability it offers ---------------------------

# Each capability dimension, the shape that offers it alone, and what a request using it looks like.
OFFERS: dict[str, tuple[TargetShape, Callable[[RequestSpec], bool]]] = {
    "salt": (dataclasses.replace(SMALL, salts=True), lambda r: r.cache_salt is not None),
    "sampler": (dataclasses.replace(SMALL, seeded_sampling=True), lambda r: r.seeded),
    "constraint": (dataclasses.replace(SMALL, choices=True), lambda r: r.choices is not None),
    "adapter": (dataclasses.replace(SMALL, adapters=("lora-a",)), lambda r: r.adapter is not None),
}


def test_each_capability_is_a_dimension_only_where_the_target_offers_it() -> None:
    assert set(OFFERS) == set(SURFACE) and set(SURFACE) <= set(CROSSABLE)
    bare = FeatureSpace.for_shape(SMALL)
    assert not bare.names & set(SURFACE) and len(bare.pairs) == 573  # unchanged where nothing is offered
    for dim, (shape, _) in OFFERS.items():
        space = FeatureSpace.for_shape(shape)
        assert space.names - bare.names == {dim}, dim
        assert len(space.dimension(dim).buckets) == 2 and space.dimension(dim).cheap
        assert len(space.pairs) > len(bare.pairs)
    full = FeatureSpace.for_shape(SURFACE_SHAPE)
    assert "constraint=choices & sampling=ignore-eos" not in full.pairs  # a constraint ends at its EOS
    assert "sampling=eos & constraint=choices" in full.pairs or "constraint=choices & sampling=eos" in full.pairs
    # A saved record of a surface space reads back with its dimensions' capabilities.
    assert FeatureSpace.from_json(full.to_json()) == full


def test_request_fields_decide_the_capability_buckets() -> None:
    ids = tuple(range(3, 23))
    sc = Scenario(1, (
        RequestSpec("r01", 0.0, ids, 4, cache_salt="tenant-a-1", temperature=0.6, seed=7),
        RequestSpec("r02", 0.0, ids, 4, choices=(" w5",), ignore_eos=False, adapter="lora-a"),
        RequestSpec("r03", 0.0, ids, 4, temperature=0.6),  # unseeded: in no sampler bucket
    ))
    p = points(sc, SURFACE_SHAPE)
    assert [p["r01"][d] for d in SURFACE] == ["salted", "seeded", "none", "base"]
    assert [p["r02"][d] for d in SURFACE] == ["none", "greedy", "choices", "adapter"]
    space = FeatureSpace.for_shape(SURFACE_SHAPE)
    assert not any("sampler=" in k for k in space.cells_of(p["r03"])[0])
    assert "salt=salted & sampler=seeded" in space.cells_of(p["r01"])[0]


@pytest.mark.parametrize("dim", sorted(OFFERS))
def test_the_covering_arrays_send_a_capability_where_offered_and_never_elsewhere(dim: str) -> None:
    shape, uses = OFFERS[dim]
    sent = [r for i in range(12) for r in PairwiseCover().generate(random.Random(i), shape, seed=i).requests]
    assert sum(map(uses, sent)) >= 6, dim
    others = [u for d, (_, u) in OFFERS.items() if d != dim]
    assert not any(u(r) for r in sent for u in others)  # control: what this target does not offer, never
    bare = [r for i in range(12) for r in PairwiseCover().generate(random.Random(i), SMALL, seed=i).requests]
    assert not any(u(r) for r in bare for _, u in OFFERS.values())


def test_capabilities_meet_on_one_prefix_in_the_arrays() -> None:
    """Cross-request interactions from the arrays, not hand-written: on one shared prefix, a
    salted request beside an unsalted one or another tenant, an adapter's beside the base's, a
    seeded request in a batch whose prompts are chunked, a cancelled n > 1 request."""
    seen: set[str] = set()
    for i in range(30):
        s = PairwiseCover().generate(random.Random(i), SURFACE_SHAPE, seed=i)
        on_p0 = [r for r in s.requests if r.prefix_name == "p0"]
        if len({r.cache_salt for r in on_p0}) >= 2:
            seen.add("salts on one prefix")
        if len({r.adapter for r in on_p0}) >= 2:
            seen.add("adapters on one prefix")
        if any(r.seeded for r in s.requests) and any(r.prompt_len > 128 for r in s.requests):
            seen.add("seeded beside a chunked prompt")
        if any(r.n > 1 and r.cancelled and r.prefix_name == "p0" for r in s.requests) and len(on_p0) >= 2:
            seen.add("cancelled n > 1 on a shared prefix")
    assert seen == {"salts on one prefix", "adapters on one prefix", "seeded beside a chunked prompt",
                    "cancelled n > 1 on a shared prefix"}


@pytest.mark.parametrize("dim", sorted(OFFERS))
def test_cross_adds_and_removes_a_capability_only_where_offered(dim: str) -> None:
    shape, uses = OFFERS[dim]
    added = removed = 0
    for i in range(60):
        s = list(STRATEGIES.values())[i % len(STRATEGIES)].generate(random.Random(i), shape, seed=i)
        for j in range(4):
            m = cross(s, random.Random(100 * i + j), shape, dims=SURFACE)
            assert m is not None
            x = next(r for r in m.requests if r.id not in s.by_id())
            was = s.by_id()[x.id.rsplit("_", 1)[0]]
            added += uses(x) and not uses(was)
            removed += uses(was) and not uses(x)
            s = m
    assert added >= 10 and removed >= 5, (added, removed)
    # Control: on a target that offers none, a capability move does not exist, and the havoc
    # with cross never sends one.
    s = STRATEGIES["n-mix"].generate(random.Random(1), SMALL, seed=1)
    assert cross(s, random.Random(1), SMALL, dims=SURFACE) is None
    for i in range(80):
        s = mutate(s, random.Random(i), SMALL, seed=i, extra=(CROSS,))
    assert not any(u(r) for r in s.requests for _, u in OFFERS.values())


def test_cross_joins_the_havoc_only_when_asked() -> None:
    assert "cross" not in MUTATORS
    s = STRATEGIES["page-boundary"].generate(random.Random(1), SMALL, seed=1)
    plain = [mutate(s, random.Random(i), SMALL, seed=i).meta["lineage"] for i in range(60)]
    crossed = [mutate(s, random.Random(i), SMALL, seed=i, extra=(CROSS,)).meta["lineage"] for i in range(60)]
    assert not any("cross" in x for x in plain) and any("cross" in x for x in crossed)


# --- a campaign that tracks coverage, against the reference engine -----------------------------

# A small pool and chunk budget: every bucket of the space is reachable in a few cheap scenarios.
BENCH = Path(__file__).resolve().parent.parent / "bench"
FLAGS = ("--page-size", "16", "--chunked-prefill-size", "128", "--max-total-tokens", "2048", "--context-length", "1024")


def _growth() -> ModuleType:
    spec = importlib.util.spec_from_file_location("coverage_growth", BENCH / "coverage_growth.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _campaign(url: str, config: CampaignConfig) -> CampaignResult:
    async def go() -> CampaignResult:
        async with Runner(make_target("reference", url)) as runner:
            return await run_campaign(runner, [BatchSweep()], config)  # cheap: short prompts

    return asyncio.run(go())


@pytest.mark.timeout(180)
def test_a_campaign_keeps_its_coverage_on_disk_grows_it_and_resumes_it(
    tmp_path: Path, reference_server: Callable[..., str]
) -> None:
    url = reference_server(*FLAGS)
    out = tmp_path / "c"
    first = _campaign(url, CampaignConfig(out, seed=1, request_budget=30, coverage=True))
    saved = json.loads((out / COVERAGE_FILE).read_text())
    assert first.coverage is not None and saved["covered_pairs"] == first.coverage.covered > 0
    assert first.to_json()["coverage"]["covered_pairs"] == first.coverage.covered  # `fuzz --json`
    # The reference engine takes salts, seeds and choices: SMALL's 573 pairs and their three dimensions'.
    assert saved["total_pairs"] == first.coverage.total == 800
    sent = [json.loads(line) for line in (out / "scenarios.jsonl").read_text().splitlines()]
    assert saved["requests"] == sum(len(s["scenario"]["requests"]) for s in sent)
    assert any("cache=" in k for k in saved["pairs"]), "what the server reported counts too"
    assert "pairwise" in json.loads((out / "config.json").read_text())["strategies"]
    kept = [json.loads(p.read_text()) for p in (out / "corpus").glob("entry_*.json")]
    assert any(f.startswith("pair:") for e in kept for f in e["new"]), "new pairs are feedback"
    # bench/coverage_growth.py measures any campaign from its logs: the same numbers.
    [(_, measured)] = _growth().coverage_over_time(out, [1e9])
    assert measured == first.coverage
    assert _growth().main(["--logs", str(out), "--html", str(tmp_path / "c.html")]) == 0
    assert f"{first.coverage.covered}/{first.coverage.total} pairs" in (tmp_path / "c.html").read_text()

    more = _campaign(url, CampaignConfig(out, seed=1, request_budget=first.requests + 15, coverage=True, resume=True))
    assert more.coverage is not None and more.coverage.requests > first.coverage.requests
    assert all(more.coverage.pairs[k] >= v for k, v in first.coverage.pairs.items()), "reloaded, not restarted"
    assert sum(more.coverage.pairs.values()) > sum(first.coverage.pairs.values())
    assert json.loads((out / COVERAGE_FILE).read_text())["covered_pairs"] == more.coverage.covered

    # The control: a campaign without the option tracks nothing of it.
    plain = _campaign(url, CampaignConfig(tmp_path / "p", seed=1, request_budget=10))
    assert plain.coverage is None and not (tmp_path / "p" / COVERAGE_FILE).exists() and "coverage" not in plain.to_json()
    assert "pairwise" not in json.loads((tmp_path / "p" / "config.json").read_text())["strategies"]


def test_primed_rows_see_the_cache_hits_they_were_planned_for(reference_server: Callable[..., str]) -> None:
    url = reference_server(*FLAGS)
    reported = Coverage.empty(FeatureSpace.for_shape(SMALL)).observe([{"n": "1", "prefix": "none", "cache": "miss"}])

    async def go() -> list[tuple[str, str | None]]:
        seen = []
        async with Runner(make_target("reference", url)) as runner:
            for seed in range(8):
                s = PairwiseCover(coverage=reported).generate(random.Random(seed), SMALL, seed=seed)
                await runner.flush()
                got = points(s, SMALL, [await runner.run(s, run=0)])
                for r in s.requests:
                    primers = [p for p in s.requests if p.prefix_name == r.prefix_name and p.offset_ms < r.offset_ms]
                    if r.prefix_name and r.prefix_name.startswith("c") and primers and not r.cancelled:
                        want = "full" if primers[0].prefix_len == r.prefix_len // 16 * 16 else "partial"
                        seen.append((want, got[r.id].get("cache")))
        return seen

    seen = asyncio.run(go())
    assert {w for w, _ in seen} == {"full", "partial"} and len(seen) >= 4
    assert sum(w == g for w, g in seen) >= 0.8 * len(seen), seen


def test_the_live_panel_and_the_summary_show_coverage_only_when_tracked() -> None:
    cov = Coverage.empty(FeatureSpace.for_shape(SMALL)).observe([{"n": "2", "stream": "on", "cancel": "none"}])
    shown = []
    for tracked in (cov, None):
        console = Console(file=io.StringIO(), force_terminal=True, color_system=None, width=200)
        state = CampaignState(coverage=tracked)
        with LiveProgress(console, "fuzzing") as live:
            live.update(state)
        print_summary(console, CampaignResult(1, 2, 3.0, (), Stop(StopReason.TIME_BUDGET, "done"), coverage=tracked))
        shown.append(console.file.getvalue())  # type: ignore[attr-defined]
    assert "coverage pairs 3/573 (0%), triples 1/60" in shown[0], "the live panel"
    assert "coverage: pairs 3/573 (0%), triples 1/60" in shown[0], "the summary"
    assert "coverage" not in shown[1]


def test_the_leave_one_out_arms_leave_out_exactly_the_faults_own_strategies() -> None:
    spec = importlib.util.spec_from_file_location("zoo", BENCH / "zoo.py")
    assert spec is not None and spec.loader is not None
    zoo = importlib.util.module_from_spec(spec)
    sys.modules["zoo"] = zoo  # its dataclasses look their module up
    try:
        spec.loader.exec_module(zoo)
    finally:
        del sys.modules["zoo"]
    assert set(zoo.OWN_STRATEGIES) == set(FAULTS)
    assert all(name in STRATEGIES for names in zoo.OWN_STRATEGIES.values() for name in names)
    assert {"leave-one-out", "leave-one-out+coverage"} <= set(zoo.ARMS)
    assert [s.name for s in zoo.ARMS["leave-one-out"][0]] == list(STRATEGIES)  # the default mix, cut per fault


@pytest.mark.timeout(180)
def test_fuzz_draws_the_coverage_page_by_default_and_no_coverage_draws_none(tmp_path: Path) -> None:
    import subprocess

    def fuzz(out: Path, *extra: str) -> dict[str, object]:
        p = subprocess.run([sys.executable, "-m", "servefuzz", "fuzz", "--fault", "none", "--requests", "60",
                            "--keep-going", "--json", "--out", str(out), *extra],
                           capture_output=True, text=True, timeout=150, check=False)
        assert p.returncode == 0, p.stderr[-2000:]
        summary: dict[str, object] = json.loads(p.stdout)
        return summary

    on = fuzz(tmp_path / "on")  # on by default
    cov = on["coverage"]
    assert isinstance(cov, dict) and 0 < cov["covered_pairs"] <= cov["total_pairs"], cov
    page = (tmp_path / "on" / "coverage.html").read_text(encoding="utf-8")
    stored = Coverage.from_json(json.loads((tmp_path / "on" / COVERAGE_FILE).read_text(encoding="utf-8")))
    assert stored.covered == cov["covered_pairs"] and "<table" in page
    off = fuzz(tmp_path / "off", "--no-coverage")
    assert "coverage" not in off and not (tmp_path / "off" / "coverage.html").exists()
    assert not (tmp_path / "off" / COVERAGE_FILE).exists()


def test_coverage_is_on_for_the_default_mix_off_for_a_named_strategy_and_kept_on_resume(tmp_path: Path) -> None:
    from servefuzz.api import FuzzOptions

    assert FuzzOptions(out=tmp_path).uses_coverage()
    assert FuzzOptions(out=tmp_path, strategy="mix").uses_coverage()
    assert not FuzzOptions(out=tmp_path, strategy="page-boundary").uses_coverage()
    assert not FuzzOptions(out=tmp_path, coverage=False).uses_coverage()
    # On resume the campaign goes on as it was started, and the generator the campaign added
    # itself is not a strategy to ask for.
    (tmp_path / "config.json").write_text(json.dumps({"seed": 3, "strategies": ["page-boundary", "pairwise"]}))
    resumed = FuzzOptions(out=tmp_path, resume=True)
    assert resumed.uses_coverage() and resumed.identity() == (3, "page-boundary")
    (tmp_path / "config.json").write_text(json.dumps({"seed": 3, "strategies": ["page-boundary"]}))
    assert not FuzzOptions(out=tmp_path, resume=True).uses_coverage()


@pytest.mark.parametrize("config", ['{"seed": 0, "strategies": 5}', '{"seed": 0, "strategies": [3]}', "[1]"])
def test_a_damaged_config_json_is_refused_on_resume_with_one_line(tmp_path: Path, config: str) -> None:
    from servefuzz.api import FuzzOptions
    from servefuzz.errors import UsageError

    (tmp_path / "config.json").write_text(config)
    with pytest.raises(UsageError, match="damaged"):
        FuzzOptions(out=tmp_path, resume=True).validate()
