"""Greybox feedback: what one scenario's execution reached, as a set of feature strings.

A program fuzzer steers by branch coverage; a serving engine shows no branches, so servefuzz
steers by what the client saw and what the server reported about itself. Each feature is a
short string; the corpus (`servefuzz.corpus`) keeps a scenario that reached one never seen
before.

| feature                     | from                                       | why it matters                           |
|-----------------------------|--------------------------------------------|------------------------------------------|
| `prefix:1p+0`, `prefix:mid` | prefix length against the page (k*page+d)  | page-boundary reuse bugs                 |
| `cache:1p+0:prefix`         | `cached_tokens` against the shared prefix  | a hit shorter, equal or longer than the shared pages |
| `conc:8`                    | peak requests in flight, as a padded size  | batch buckets reached                    |
| `shrink:8>4`                | a request ending moves the batch down a padded size | stale padding on shrinking batches |
| `chunk:1+0`, `chunk:over`   | prompts at a chunked-prefill multiple +-1, or past it | chunk-boundary bugs          |
| `did:eviction:evicted-tokens:64` | what the engine did under the load (log2) | memory pressure, abort, adapter paths |
|                             | (`exercise`: the spec's meters, the answers) | the rarer, the more energy (corpus)  |
| `status:cancelled`          | records that did not end OK                | abort, timeout and error paths           |
| `slow:8x`                   | worst loaded/solo latency ratio (log2)     | latency outliers                         |
| `n:2`, `stream`             | request shapes                             | forking and streaming paths              |
| `anomaly:isolation:corruption` | the oracles' verdicts                   | scenarios near a bug are worth mutating  |
| `cov:1a2b3:4`               | an engine edge in its step's context, and its hit bucket | code no strategy aimed at (`--coverage`) |

    >>> from servefuzz.history import RequestRecord, RunHistory, Status
    >>> from servefuzz.strategies import TargetShape
    >>> from servefuzz.workload import RequestSpec, Scenario
    >>> sc = Scenario(1, (RequestSpec("r01", 0.0, tuple(range(3, 103)), 8, "p0", 64),))
    >>> rec = RequestRecord("r01", 0, "load", Status.OK, 0.0, sent_ms=0.0, end_ms=5.0, cached_tokens=64)
    >>> sorted(features(sc, [RunHistory(0, "load", (rec,))], {}, (), TargetShape(page_size=64)))
    ['cache:1p+0:prefix', 'conc:1', 'prefix:1p+0']
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from servefuzz.anomaly import Anomaly
from servefuzz.exercise import Exercise
from servefuzz.history import RequestRecord, RunHistory
from servefuzz.oracles import latency_ms
from servefuzz.strategies import TargetShape
from servefuzz.terms import page_boundary, page_unit
from servefuzz.workload import RequestSpec, Scenario

__all__ = ["COV", "COV_CONTEXT_BITS", "CTX", "DID", "EDGE", "RUN_CONTEXTS", "boundary_class", "coverage_delta",
           "coverage_features", "did_features", "features", "hit_bucket", "in_context", "metric_deltas", "run_context"]

# The prefix of the features that say what the engine did (`did_features`): the corpus gives
# an entry holding one few others hold more energy (`corpus.Corpus.rarity`).
DID = "did:"
# The prefixes of the engine-coverage features (`coverage_features`): a point of the engine's own
# code in its context, reached so many times (`cov:`); and, derived from the points, each edge
# whatever its context (`edge:`) and each context whatever its edges (`ctx:`). A new edge is new
# code and a new context a new mix of request features in flight: each counts in full as
# something new, while new points, which a new context brings by the hundred, count by their
# log2 (`corpus.novelty`); an entry's rarest edge or context gives it energy (`corpus.Corpus.rarity`).
COV = "cov:"
EDGE = "edge:"
CTX = "ctx:"

# AFL's hit-count buckets: a point reached once, twice, three times, 4-7, 8-15, 16-31, 32-127 or
# 128+ times in a run. Running a loop more turns is new; a few more turns of the same is not.
_HIT_BUCKETS = (1, 2, 3, 4, 8, 16, 32, 128)


def boundary_class(length: int, unit: int, *, cap: int = 4) -> str:
    """`length` against multiples of `unit` (`terms.page_boundary`): `2p-1` for 2*unit-1, `mid`
    when not within 1 of a positive multiple.

    >>> [boundary_class(n, 64) for n in (64, 127, 129, 100, 1000)]
    ['1p+0', '2p-1', '2p+1', 'mid', 'mid']
    """
    m, d = page_boundary(length, unit)
    if m < 1 or abs(d) > 1:
        return "mid"
    return f"{min(m, cap)}{'+' if m >= cap else ''}p{d:+d}"


def metric_deltas(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Counter increases between two `/metrics` readings (gauges and resets are left out); a
    counter's labelled part (`name{label=value}`, `targets.base.parse_prometheus`) is one too.

    >>> metric_deltas({"a_total": 1, "c_total{src=host}": 0, "g": 1}, {"a_total": 3, "c_total{src=host}": 2, "g": 5})
    {'a_total': 2, 'c_total{src=host}': 2}
    """
    return {
        k: after[k] - before[k]
        for k in after
        if k.partition("{")[0].endswith("_total") and k in before and after[k] > before[k]
    }


def hit_bucket(hits: int) -> int:
    """AFL's bucket of a hit count: its lower bound (`_HIT_BUCKETS`); 0 for none.

    >>> [hit_bucket(n) for n in (0, 1, 3, 5, 8, 31, 100, 5000)]
    [0, 1, 3, 4, 8, 16, 32, 128]
    """
    return next((b for b in reversed(_HIT_BUCKETS) if hits >= b), 0)


def coverage_delta(before: Mapping[int, int], after: Mapping[int, int]) -> dict[int, int]:
    """What one run added to an engine's cumulative coverage map: each point's hits between two
    readings (a point that went down, a restarted engine, is left out).

    >>> coverage_delta({1: 5, 2: 1}, {1: 5, 2: 4, 3: 1})
    {2: 3, 3: 1}
    """
    return {p: n - before.get(p, 0) for p, n in after.items() if n > before.get(p, 0)}


# The features of a loaded run's requests that make the context of an engine's edges where the
# engine's tracer knows no step context of its own (vLLM, SGLang: `targets.coverage_files`), a bit
# each: more than one request; n > 1; sampled; under a LoRA adapter; constrained to choices; a
# tenant's cache salt; cut on purpose; streamed; a shared prefix. Client-side and per run, not per
# step as the reference engine's (`reference.tracer.step_context`: each request's features in
# flight at the step): an edge counts under every feature the run held, whether or not the step
# that reached it held it.
RUN_CONTEXTS = ("multi", "n", "sampled", "adapter", "choice", "salt", "cancel", "stream", "prefix")
# How a point holds its context: the low bits, the edge above them, for every engine alike: the
# reference engine's step context's key (`reference.tracer.CONTEXT_BITS`, held equal by
# tests/test_feedback.py), or a run context's bits (`run_context`, one per `RUN_CONTEXTS` name).
COV_CONTEXT_BITS = 16


def run_context(scenario: Scenario) -> int:
    """The context bits (`RUN_CONTEXTS`) of one loaded run of `scenario`.

    >>> from servefuzz.workload import RequestSpec, Scenario
    >>> run_context(Scenario(0, (RequestSpec("a", 0.0, (1, 2), 4, n=2), RequestSpec("b", 1.0, (3,), 4, stream=True))))
    131
    """
    reqs = scenario.requests
    held = (len(reqs) > 1, any(r.n > 1 for r in reqs), any(r.sampled for r in reqs),
            any(r.adapter is not None for r in reqs), any(r.choices is not None for r in reqs),
            any(r.cache_salt is not None for r in reqs), any(r.cancelled for r in reqs),
            any(r.stream for r in reqs), any(r.prefix_len > 0 for r in reqs))
    return sum(1 << i for i, on in enumerate(held) if on)


def in_context(reached: Mapping[int, int], context: int) -> dict[int, int]:
    """Context-free edges (`coverage_delta` of a `CoverageSource.context_free` engine) as points
    in `context` (`run_context`), laid out as the reference engine's: the edge above the bits.

    >>> in_context({5: 2}, 3)
    {327683: 2}
    """
    return {(edge << COV_CONTEXT_BITS) | context: hits for edge, hits in reached.items()}


def coverage_features(reached: Iterable[tuple[int, int]]) -> frozenset[str]:
    """Engine-coverage features: one per (point, hit bucket) reached, as `cov:<point hex>:<bucket>`,
    and one per edge and per context among them (`edge:<hex>`, `ctx:<hex>`; a point is the edge
    above `COV_CONTEXT_BITS` bits of context). Only points a run reached (`coverage_delta`) come
    here: a point the engine reached before, and not in this execution, is no feature of it.

    >>> sorted(coverage_features([(0x51234, 1), (0x51234, 4), (7, 128)]))
    ['cov:51234:1', 'cov:51234:4', 'cov:7:128', 'ctx:1234', 'ctx:7', 'edge:0', 'edge:5']
    """
    pairs = [(point, bucket) for point, bucket in reached if bucket >= 1]
    mask = (1 << COV_CONTEXT_BITS) - 1
    return frozenset({f"{COV}{point:x}:{bucket}" for point, bucket in pairs}
                     | {f"{EDGE}{point >> COV_CONTEXT_BITS:x}" for point, _ in pairs}
                     | {f"{CTX}{point & mask:x}" for point, _ in pairs})


def features(
    scenario: Scenario,
    loaded: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    anomalies: Iterable[Anomaly],
    shape: TargetShape,
    did: Exercise | None = None,
    engine: Iterable[tuple[int, int]] = (),
) -> frozenset[str]:
    """The features one execution reached, with what the engine did under its load (`did`:
    `exercise.observe` over the loaded runs, whose `/metrics` deltas it reads by the engine's
    own meters; `did_features`) and the engine's own code its loaded runs reached (`engine`:
    (point, hit bucket) pairs, `coverage_features`). Pure."""
    meta = scenario.meta.get("page_size")
    page = page_unit(shape.page_size, meta if isinstance(meta, int) else None)  # as coverage measures
    specs = scenario.by_id()
    out: set[str] = set()
    for spec in scenario.requests:
        out |= _request_features(spec, page, shape.chunked_prefill_size)
    for h in loaded:
        for rec in h.records:
            sent = specs.get(rec.request_id)
            if sent is not None and rec.ok and rec.cached_tokens is not None:
                out.add(f"cache:{_prefix_place(sent, page)}:{_cache_relation(sent, rec.cached_tokens, page)}")
            if not rec.ok:
                out.add(f"status:{rec.status.value}")
        out |= _batch_features(h.records, shape.capture_sizes)
    if did is not None:
        out |= did_features(did)
    out |= coverage_features(engine)
    slow = _worst_slowdown(loaded, alone)
    if slow >= 2:
        out.add(f"slow:{2 ** min(int(math.log2(slow)), 5)}x")
    out |= {f"anomaly:{a.oracle.value}:{a.verdict.value}" for a in anomalies}
    return frozenset(out)


def _prefix_place(spec: RequestSpec, page: int) -> str:
    return boundary_class(spec.prefix_len, page) if spec.prefix_len else "none"


def _request_features(spec: RequestSpec, page: int, chunk: int | None) -> set[str]:
    out = {f"prefix:{_prefix_place(spec, page)}"} if spec.prefix_len else set()
    if chunk:
        where = boundary_class(spec.prompt_len, chunk, cap=2)
        if where != "mid":
            out.add(f"chunk:{where}")
        elif spec.prompt_len > chunk:
            out.add("chunk:over")
    if spec.n > 1:
        out.add(f"n:{min(spec.n, 4)}")
    if spec.stream:
        out.add("stream")
    return out


def _cache_relation(spec: RequestSpec, cached: int, page: int) -> str:
    """What the server said it reused against what the scenario shares: a hit longer than the
    shared pages means the engine found more in its cache than any other request sent."""
    shared = spec.prefix_len // page * page
    if cached == 0:
        return "none"
    if cached < shared:
        return "partial"
    return "prefix" if cached == shared else "beyond"


def _bucket(n: int, sizes: Sequence[int]) -> int:
    return next((b for b in sizes if b >= n), n)


def _batch_features(records: Sequence[RequestRecord], sizes: Sequence[int]) -> set[str]:
    """Peak concurrency and downward crossings of padded sizes, from the client's timeline."""
    events = sorted(
        [(r.sent_ms, 1) for r in records if r.sent_ms is not None and r.end_ms is not None]
        + [(r.end_ms, -1) for r in records if r.sent_ms is not None and r.end_ms is not None]
    )
    out: set[str] = set()
    level = peak = 0
    for _, step in events:
        before = level
        level += step
        peak = max(peak, level)
        if step < 0 and level >= 1 and _bucket(before, sizes) != _bucket(level, sizes):
            out.add(f"shrink:{_bucket(before, sizes)}>{_bucket(level, sizes)}")
    if peak:
        out.add(f"conc:{_bucket(peak, sizes)}")
    return out


def did_features(did: Exercise) -> frozenset[str]:
    """What the engine did, as features: one per count that shows its mechanism at work
    (`exercise.Count.shows`, above 0), its size in a log2 bucket, so that doing it more (64
    evicted tokens, then 1,024) is new too. Which counter means what is the engine spec's
    (`EngineSpec.meters`), never guessed from a counter's name.

    >>> from servefuzz.engines.spec import Feature
    >>> from servefuzz.exercise import Count
    >>> sorted(did_features(Exercise(counts=(Count(Feature.EVICTION, "evicted tokens", 100, "m", 1),
    ...                                      Count(Feature.PREEMPTION, "retracted requests", 0, "n", 1)))))
    ['did:eviction:evicted-tokens:64']
    """
    return frozenset(f"{DID}{c.feature.value}:{c.what.replace(' ', '-')}:{2 ** int(math.log2(c.value))}"
                     for c in did.counts if c.shows and c.value >= 1)


def _worst_slowdown(loaded: Sequence[RunHistory], alone: Mapping[str, Sequence[RequestRecord]]) -> float:
    worst = 0.0
    for h in loaded:
        for rec in h.records:
            base = next((r for r in alone.get(rec.request_id, ()) if r.ok), None)
            if base is None or not rec.ok:
                continue
            got, ref = latency_ms(rec, first_token=False), latency_ms(base, first_token=False)
            if got is not None and ref:
                worst = max(worst, got / ref)
    return worst
