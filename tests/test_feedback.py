"""Greybox feedback: the features an execution reached, from histories and what the engine did
(its own /metrics counters, read by its spec's meters)."""

from __future__ import annotations

import asyncio
import dataclasses
import doctest
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.campaign import CampaignConfig, run_campaign
from servefuzz.corpus import Corpus
from servefuzz.engines.spec import ServerFacts
from servefuzz.exercise import observe
from servefuzz.feedback import COV, DID, boundary_class, coverage_delta, features, hit_bucket, metric_deltas
from servefuzz.history import RequestRecord, RunHistory, Status
from servefuzz.reference.tracer import CONTEXT_BITS, step_context
from servefuzz.runner import Runner
from servefuzz.store import load_entries
from servefuzz.strategies import EvictionPressure, RandomLoad, TargetShape
from servefuzz.targets import make_target
from servefuzz.targets.base import MAX_COVERAGE_POINTS, parse_coverage
from servefuzz.trial import execute
from servefuzz.workload import RequestSpec, Scenario

SHAPE = TargetShape(page_size=64, chunked_prefill_size=512)


def spec(rid: str, prompt_len: int, prefix_len: int = 0, **kw: object) -> RequestSpec:
    return RequestSpec(rid, 0.0, tuple(range(3, 3 + prompt_len)), 8, "p0" if prefix_len else None, prefix_len, **kw)  # type: ignore[arg-type]


def record(rid: str, sent: float, end: float, *, cached: int | None = None, status: Status = Status.OK,
           label: str = "load") -> RequestRecord:
    return RequestRecord(rid, 0, label, status, 0.0, sent_ms=sent, end_ms=end, cached_tokens=cached)


def test_cached_tokens_are_read_against_the_shared_prefix_pages() -> None:
    sc = Scenario(1, (spec("a", 100, 64), spec("b", 100, 65), spec("c", 200, 130), spec("d", 100, 64)))
    run = RunHistory(0, "load", (record("a", 0, 5, cached=64), record("b", 0, 5, cached=0),
                                 record("c", 0, 5, cached=64), record("d", 0, 5, cached=99)))
    got = features(sc, [run], {}, (), SHAPE)
    assert {"cache:1p+0:prefix", "cache:1p+1:none", "cache:mid:partial", "cache:1p+0:beyond"} <= got
    assert {"prefix:1p+0", "prefix:1p+1", "prefix:mid"} <= got


def test_a_batch_shrinking_across_padded_sizes_is_seen_on_the_client_timeline() -> None:
    sc = Scenario(1, tuple(spec(f"r{i}", 10) for i in range(5)))
    # five in flight, then they end one by one: 5 -> 4 crosses the padded sizes 8 -> 4, 3 -> 2 crosses 4 -> 2
    run = RunHistory(0, "load", tuple(record(f"r{i}", 0, 10 + i) for i in range(5)))
    got = features(sc, [run], {}, (), SHAPE)
    assert {"conc:8", "shrink:8>4", "shrink:4>2", "shrink:2>1"} <= got
    together = RunHistory(0, "load", tuple(record(f"r{i}", 0, 10) for i in range(2)))
    assert not any(f.startswith("shrink:") for f in features(sc, [together], {}, (), SHAPE) - {"shrink:2>1"})


@dataclass(frozen=True)
class _Server:
    """What `exercise.observe` reads of a server's description."""

    engine: str = "reference"
    server_args: Mapping[str, Any] = field(default_factory=dict)
    profile: str | None = None
    adapters: tuple[str, ...] = ()
    device: str = ""
    facts: ServerFacts = field(default_factory=ServerFacts)


def test_what_the_engine_did_becomes_features_by_its_own_meters_only() -> None:
    before = {"sglang:evicted_tokens_total": 10.0, "vllm:num_preemptions_total": 0.0, "sglang:token_usage": 0.5,
              "sglang:num_retracted_requests_total": 1.0, "sglang:cache_hit_tokens_total": 0.0}
    after = {"sglang:evicted_tokens_total": 74.0, "vllm:num_preemptions_total": 3.0, "sglang:token_usage": 0.9,
             "sglang:num_retracted_requests_total": 4.0, "sglang:cache_hit_tokens_total": 0.0}
    deltas = metric_deltas(before, after)
    assert deltas == {"sglang:evicted_tokens_total": 64.0, "vllm:num_preemptions_total": 3.0,
                      "sglang:num_retracted_requests_total": 3.0}
    sc = Scenario(1, (spec("a", 10),))
    run = RunHistory(0, "load", (record("a", 0, 5),), meta={"metrics": deltas})
    got = features(sc, [run], {}, (), SHAPE, observe(_Server(), sc, [run]))
    assert {"did:eviction:evicted-tokens:64", "did:preemption:retracted-requests:2"} <= got
    # The reference engine's spec reads no vLLM counter, and a counter that did not move is nothing.
    assert {f for f in got if f.startswith(DID)} == {"did:eviction:evicted-tokens:64",
                                                      "did:preemption:retracted-requests:2"}
    # Control: the same execution with no counter moved, or no exercise read at all, says nothing was done.
    still = RunHistory(0, "load", (record("a", 0, 5),), meta={"metrics": {"sglang:token_usage": 0.1}})
    assert not {f for f in features(sc, [still], {}, (), SHAPE, observe(_Server(), sc, [still])) if f.startswith(DID)}
    assert not {f for f in features(sc, [run], {}, (), SHAPE) if f.startswith(DID)}


def test_the_module_docstrings_run() -> None:
    import servefuzz.corpus
    import servefuzz.feedback

    for m in (servefuzz.feedback, servefuzz.corpus):
        result = doctest.testmod(m)
        assert result.failed == 0 and result.attempted > 0, m.__name__


@pytest.mark.timeout(300)
def test_a_scenario_that_made_the_engine_evict_earns_a_feature_and_energy_and_on_a_roomy_pool_it_does_not(
    tmp_path: Path, reference_server: Callable[..., str]
) -> None:
    """One eviction-pressure scenario, run as the campaign's first (a trace seed) on a 4,096-token
    pool and, the control, on the default 131,072-token one: the same requests, so the corpus
    entries differ only by what each engine did under them."""
    small = TargetShape(page_size=64, max_total_tokens=4096, context_length=4096, chunked_prefill_size=2048)
    scenario = EvictionPressure().generate(random.Random(5), small, seed=5)
    entries = {}
    for name, flags in (("small", ("--max-total-tokens", "4096")), ("roomy", ())):
        url = reference_server(*flags)

        async def go(url: str = url, name: str = name) -> None:
            async with Runner(make_target("reference", url)) as runner:
                config = CampaignConfig(tmp_path / name, seed=1, request_budget=1, isolation=False, cache_probes=0)
                await run_campaign(runner, [RandomLoad()], config, seeds=[scenario])

        asyncio.run(go())
        [entries[name]] = [e for e in load_entries(tmp_path / name / "corpus") if e.origin == "trace"]
    pressed = {f for f in entries["small"].features if f.startswith(("did:eviction", "did:preemption"))}
    assert pressed, sorted(entries["small"].features)
    assert not {f for f in entries["roomy"].features if f.startswith(("did:eviction", "did:preemption"))}
    # Side by side in one corpus, the entry that made the engine evict or retract is the rare one.
    # (Compared with the same entry without them, not with the roomy one: the roomy pool's entry
    # has rare features of its own, more prefix-cache hits, which timing on a loaded box moves.)
    corpus = Corpus([entries["small"], dataclasses.replace(entries["roomy"], id=1)])
    assert all(corpus.holders[f] == 1 for f in pressed)
    unpressed = dataclasses.replace(entries["small"], features=frozenset(entries["small"].features - pressed))
    assert corpus.rarity(entries["small"]) >= corpus.rarity(unpressed) + len(pressed)
    assert corpus.energy(entries["small"]) > corpus.energy(unpressed)


def test_statuses_slowdowns_shapes_chunks_and_verdicts_are_features() -> None:
    sc = Scenario(1, (spec("a", 513, n=2), spec("b", 1200, stream=True), spec("c", 10, cancel_after_ms=5.0)))
    run = RunHistory(0, "load", (record("a", 0, 400), record("b", 0, 30), record("c", 0, 5, status=Status.CANCELLED)))
    alone = {"a": [record("a", 0, 40, label="alone")], "b": [record("b", 0, 30, label="alone")]}
    flagged = [Anomaly(Oracle.ISOLATION, Verdict.CORRUPTION, "a", "a differs")]
    got = features(sc, [run], alone, flagged, SHAPE)
    assert {"status:cancelled", "slow:8x", "n:2", "stream", "chunk:1p+1", "chunk:over",
            "anomaly:isolation:corruption"} <= got


def test_boundary_classes() -> None:
    assert [boundary_class(n, 64) for n in (63, 64, 65, 96, 256, 257, 1)] == [
        "1p-1", "1p+0", "1p+1", "mid", "4+p+0", "4+p+1", "mid"]


# -- engine coverage (the reference engine's --coverage) ----------------------------------------


def test_coverage_features_are_the_points_a_run_moved_each_with_its_hit_bucket() -> None:
    before = {0x10: 5, 0x20: 1}
    after = {0x10: 5, 0x20: 4, 0x30: 200}
    gained = coverage_delta(before, after)
    assert gained == {0x20: 3, 0x30: 200}  # 0x10 was reached before, not by this run: no feature
    reached = {(p, hit_bucket(n)) for p, n in gained.items()}
    sc = Scenario(1, (spec("a", 10),))
    got = features(sc, [], {}, (), SHAPE, engine=reached)
    assert {f for f in got if f.startswith(COV)} == {"cov:20:3", "cov:30:128"}
    assert not {f for f in features(sc, [], {}, (), SHAPE) if f.startswith(COV)}  # control: no coverage given
    assert coverage_delta(after, before) == {}  # a restarted engine's map went down: nothing


@pytest.mark.parametrize("answer", [
    None, [], {"points": []}, {"points": {"1": "2"}}, {"points": {"1": 2.5}}, {"points": {"1": True}},
    {"points": {"-3": 1}}, {"points": {"1_0": 1}}, {"points": {"9" * 13: 1}}, {"points": {"1": -1}},
    {"points": {"1": 2 ** 70}}, {"points": {"٣": 1}},
])
def test_a_malformed_coverage_answer_is_no_coverage(answer: Any) -> None:
    assert parse_coverage(answer) == {}
    assert parse_coverage({"points": {"7": 2, "8": 0}}) == {7: 2, 8: 0}  # control: a good one reads


def test_an_oversized_coverage_answer_is_no_coverage() -> None:
    assert parse_coverage({"points": {str(p): 1 for p in range(MAX_COVERAGE_POINTS + 1)}}) == {}


@pytest.mark.timeout(300)
def test_execute_reads_the_engines_coverage_per_loaded_run_and_n_over_1_reaches_its_own_context(
    reference_server: Callable[..., str]
) -> None:
    """Through servefuzz's own runner: the n > 1 scenario reaches points in the `n` context that
    the same scenario with n = 1 does not; a server without --coverage gives none."""
    one = Scenario(3, (RequestSpec("r01", 0.0, tuple(range(40, 140)), 6),))
    two = Scenario(3, (dataclasses.replace(one.requests[0], n=2),))

    async def reached(url: str, sc: Scenario) -> frozenset[tuple[int, int]]:
        async with Runner(make_target("reference", url)) as runner:
            done = await execute(runner, sc, runs=2, with_alone=False)
        assert done.lost is None
        return done.engine_coverage

    traced = reference_server("--coverage")
    got = {name: asyncio.run(reached(traced, sc)) for name, sc in (("one", one), ("two", two))}
    # One request alone, so its step context is its own features (`tracer.step_context`).
    alone, forked = step_context((), [()]), step_context((), [("n",)])
    mask = (1 << CONTEXT_BITS) - 1
    assert got["one"] and {p & mask for p, _ in got["one"]} == {alone}
    assert forked in {p & mask for p, _ in got["two"]}
    assert asyncio.run(reached(reference_server(), two)) == frozenset()


def test_a_points_context_bits_are_laid_out_alike_for_every_engine() -> None:
    # The corpus splits a point into its edge and its context (`feedback.coverage_features`) by
    # one width, whether the reference engine's tracer or servefuzz's own (in vLLM, SGLang) made it.
    # A run context (one bit per `RUN_CONTEXTS` name) fits in the same width.
    from servefuzz.feedback import COV_CONTEXT_BITS, RUN_CONTEXTS

    assert COV_CONTEXT_BITS == CONTEXT_BITS >= len(RUN_CONTEXTS)
