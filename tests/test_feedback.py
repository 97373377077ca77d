"""Greybox feedback: the features an execution reached, from histories and /metrics deltas."""

from __future__ import annotations

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.feedback import boundary_class, features, metric_deltas
from servefuzz.history import RequestRecord, RunHistory, Status
from servefuzz.strategies import TargetShape
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


def test_metrics_deltas_become_coarse_features_by_family() -> None:
    before = {"sglang:evicted_tokens_total": 10.0, "vllm:num_preemptions_total": 0.0, "sglang:token_usage": 0.5,
              "sglang:cache_hit_tokens_total": 0.0}
    after = {"sglang:evicted_tokens_total": 74.0, "vllm:num_preemptions_total": 3.0, "sglang:token_usage": 0.9,
             "sglang:cache_hit_tokens_total": 0.0}
    deltas = metric_deltas(before, after)
    assert deltas == {"sglang:evicted_tokens_total": 64.0, "vllm:num_preemptions_total": 3.0}
    sc = Scenario(1, (spec("a", 10),))
    run = RunHistory(0, "load", (record("a", 0, 5),), meta={"metrics": deltas})
    got = features(sc, [run], {}, (), SHAPE)
    assert {"metric:evict:64", "metric:preempt:2"} <= got and not any("cache-hit" in f for f in got)


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
