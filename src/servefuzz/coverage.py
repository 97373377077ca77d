"""Pairwise feature coverage: which combinations of two mechanisms the campaign has exercised.

Bugs increasingly sit where two mechanisms meet (prefix cache x cancellation, chunked prefill x
n > 1, ...). A campaign finds one only if some scenario puts both in play at once, so servefuzz
measures that: every request is a *point* in a feature space (one bucket per dimension), and
the campaign's `Coverage` counts, for every pair of buckets of two dimensions (and every triple
of the cheap dimensions), how many requests exercised it.

| dimension  | buckets                                   | read from                                   |
|------------|-------------------------------------------|---------------------------------------------|
| `n`        | 1, 2, 3+                                  | the request (cheap)                         |
| `prompt`   | sub-page, pages, chunk-edge, past-chunk   | prompt length against page and chunk budget |
| `prefix`   | none, page-aligned, page-edge, unaligned  | shared prefix length against the page       |
| `burst`    | alone, first, inside, last                | position in its burst (`terms.bursts`)      |
| `cancel`   | none, early, late                         | `cancel_after_ms` below / above 50 ms (cheap)|
| `pressure` | light, heavy, over                        | KV load against the pool; evictions reported |
| `stream`   | off, on                                   | the request (cheap)                         |
| `decode`   | 1, same-page, one-crossing, crossings     | page boundaries its `max_tokens` cross      |
| `sampling` | ignore-eos, eos                           | the request (cheap; decoding is greedy)     |
| `batch`    | 1, 2-4, 5-8, 9+                           | rows in flight when it was sent (the server's timeline, first loaded run) |
| `cache`    | miss, partial, full                       | `cached_tokens` the server reported against the shared pages |
| `salt`     | none, salted                              | the request's `cache_salt` (cheap; targets that take salts)   |
| `sampler`  | greedy, seeded                            | temperature > 0 with a seed (cheap; engines that promise seeds) |
| `constraint` | none, choices                           | a choice constraint (cheap; dialects that send one)           |
| `adapter`  | base, adapter                             | a LoRA adapter named (cheap; servers that list some)          |
| `window`   | inside, edge, crossing, past              | prompt (and decode) against the sliding window (windowed models) |
| `state`    | sub-chunk, aligned, edge, unaligned       | prompt length against the recurrent state's chunk (recurrent models) |
| `reuse`    | none, exact, whole-but-last, within, beyond-window, other | the shared prefix against the earlier prompts it hits (either) |

The last four are the target's *surface*: the per-request capabilities its engine spec declares
(`TargetShape.capabilities`, the names `strategies.offered` reads). Each exists only where the
target offers it, so the covering generator and the `cross` mutator send salts, seeds,
constraints and adapters there whatever strategies are enabled, and never where it does not.

The last three are the served model's *state* (issue 42): each exists only where the model has
the trait it measures (`Dimension.trait`, `model_facts.ModelFacts.traits`: a sliding window, a
recurrent state, either), so a dense model's space is what it was.

The space depends on the target (`FeatureSpace.for_shape`): a bucket the target cannot reach
at a bearable cost is left out, and so are its pairs (`pressure` beyond `LOAD_CAP_TOKENS`;
chunk buckets when the server states no chunked-prefill budget). A few pairs cannot happen at
all (`IMPOSSIBLE`, each with its reason) and are not counted either. What remains is the total
that a percentage is of:

    >>> from servefuzz.strategies import TargetShape
    >>> space = FeatureSpace.for_shape(TargetShape(page_size=16, chunked_prefill_size=128, max_total_tokens=2048))
    >>> len(space.pairs), len(space.triples)
    (573, 60)
    >>> from servefuzz.workload import RequestSpec, Scenario
    >>> sc = Scenario(1, (RequestSpec("r01", 0.0, tuple(range(3, 23)), 4, "p0", 16, n=2),))
    >>> p = points(sc, TargetShape(page_size=16, chunked_prefill_size=128, max_total_tokens=2048))["r01"]
    >>> p["n"], p["prompt"], p["prefix"], p["decode"], p["burst"]
    ('2', 'pages', 'page-aligned', 'same-page', 'alone')
    >>> cov = Coverage.empty(space).observe([p])
    >>> cov.covered, cov.total == 573, "n=2 & prompt=pages" in cov.pairs
    (36, True, True)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from servefuzz.history import RunHistory
from servefuzz.strategies import TargetShape
from servefuzz.terms import burst_positions, common_prefix, page_class, page_edge, page_unit
from servefuzz.workload import RequestSpec, Scenario

__all__ = [
    "CROSSABLE",
    "DIMENSIONS",
    "IMPOSSIBLE",
    "LOAD_CAP_TOKENS",
    "SURFACE",
    "Cell",
    "Coverage",
    "Dimension",
    "FeatureSpace",
    "Point",
    "batch_bucket",
    "reuse_buckets",
    "state_bucket",
    "window_bucket",
    "cancel_bucket",
    "decode_bucket",
    "load_tokens",
    "n_bucket",
    "points",
    "prefix_bucket",
    "pressure_bucket",
    "prompt_bucket",
    "surface_point",
]

# A cancel earlier than this cuts a request in its prefill or first decode steps on a CPU engine.
EARLY_CANCEL_MS = 50.0
# The most KV load (prompt + output tokens of a scenario) worth sending to press a pool: the
# eviction strategy's cap. A pool too big to press within it has no `heavy` or `over` bucket.
LOAD_CAP_TOKENS = 12288
# Part of the pool a scenario must fill to count as `heavy`.
HEAVY_SHARE = 0.25

Source = Literal["request", "scenario", "server"]
Cell = tuple[str, str]  # (dimension, bucket)
Point = Mapping[str, str]  # dimension -> bucket, for one request


@dataclass(frozen=True)
class Dimension:
    """One axis of the space. `source`: what decides its bucket (a request's own fields, the
    whole scenario, or only what the server reported, which no generator can set directly).
    `cheap` dimensions cost nothing to vary; their triples are tracked too. `needs`: the
    capability a target must offer for the dimension to be in its space."""

    name: str
    buckets: tuple[str, ...]
    source: Source
    cheap: bool = False
    # The capability (`TargetShape.capabilities`) the dimension exists for; "": every target.
    needs: str = ""
    # The trait of the served model (`ModelFacts.traits`) the dimension exists for; "": every model.
    trait: str = ""


DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("n", ("1", "2", "3+"), "request", cheap=True),
    Dimension("prompt", ("sub-page", "pages", "chunk-edge", "past-chunk"), "request"),
    Dimension("prefix", ("none", "page-aligned", "page-edge", "unaligned"), "request"),
    Dimension("burst", ("alone", "first", "inside", "last"), "scenario"),
    Dimension("cancel", ("none", "early", "late"), "request", cheap=True),
    Dimension("pressure", ("light", "heavy", "over"), "scenario"),
    Dimension("stream", ("off", "on"), "request", cheap=True),
    Dimension("decode", ("1", "same-page", "one-crossing", "crossings"), "request"),
    Dimension("sampling", ("ignore-eos", "eos"), "request", cheap=True),
    Dimension("batch", ("1", "2-4", "5-8", "9+"), "server"),
    Dimension("cache", ("miss", "partial", "full"), "server"),
    Dimension("salt", ("none", "salted"), "request", cheap=True, needs="salts"),
    Dimension("sampler", ("greedy", "seeded"), "request", cheap=True, needs="seeds"),
    Dimension("constraint", ("none", "choices"), "request", cheap=True, needs="choices"),
    Dimension("adapter", ("base", "adapter"), "request", cheap=True, needs="adapters"),
    Dimension("window", ("inside", "edge", "crossing", "past"), "request", trait="window"),
    Dimension("state", ("sub-chunk", "aligned", "edge", "unaligned"), "request", trait="state"),
    Dimension("reuse", ("none", "exact", "whole-but-last", "within", "beyond-window", "other"), "scenario",
              trait="stateful"),
)

# The dimensions one request's own fields decide: what the `cross` mutator moves (those of a
# capability only where the target's space has them).
CROSSABLE: tuple[str, ...] = ("n", "prompt", "prefix", "cancel", "stream", "decode", "sampling",
                              "salt", "sampler", "constraint", "adapter")

# The capability dimensions (the target's surface): each holds one per-request capability.
SURFACE: tuple[str, ...] = tuple(d.name for d in DIMENSIONS if d.needs)

# Pairs that cannot happen, whatever the target: never counted in the total.
IMPOSSIBLE: frozenset[frozenset[Cell]] = frozenset(
    frozenset(p) for p in (
        # A prefix of whole pages is at least a page long, so its prompt is too.
        (("prompt", "sub-page"), ("prefix", "page-aligned")),
        # With no shared prefix the cache (flushed before each run) holds nothing of the prompt.
        (("prefix", "none"), ("cache", "partial")),
        (("prefix", "none"), ("cache", "full")),
        # A prompt shorter than a page holds no full page, and caches keep whole pages.
        (("prompt", "sub-page"), ("cache", "partial")),
        (("prompt", "sub-page"), ("cache", "full")),
        # `batch` counts rows (choices): a request with n > 1 is never alone in its batch.
        (("n", "2"), ("batch", "1")),
        (("n", "3+"), ("batch", "1")),
        # A request cut on purpose is indeterminate: its cached_tokens are never read.
        *((("cancel", c), ("cache", b)) for c in ("early", "late") for b in ("miss", "partial", "full")),
        # A constrained request stops at its EOS (`RequestSpec`): it never ignores it.
        (("constraint", "choices"), ("sampling", "ignore-eos")),
        # With nothing in common with an earlier prompt (the cache flushed before each run), a
        # request has no hit to see.
        (("reuse", "none"), ("cache", "partial")),
        (("reuse", "none"), ("cache", "full")),
    )
)


def _key(cells: Sequence[Cell]) -> str:
    return " & ".join(f"{d}={b}" for d, b in cells)


@dataclass(frozen=True)
class FeatureSpace:
    """The dimensions as this target can reach them, and the pairs and triples that count."""

    dimensions: tuple[Dimension, ...]
    pairs: frozenset[str] = field(init=False)
    triples: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        cells = [[(d.name, b) for b in d.buckets] for d in self.dimensions]
        pairs = {
            _key((x, y)) for a, b in itertools.combinations(cells, 2) for x in a for y in b
            if frozenset((x, y)) not in IMPOSSIBLE
        }
        cheap = [[(d.name, b) for b in d.buckets] for d in self.dimensions if d.cheap]
        triples = {_key(t) for dims in itertools.combinations(cheap, 3) for t in itertools.product(*dims)}
        object.__setattr__(self, "pairs", frozenset(pairs))
        object.__setattr__(self, "triples", frozenset(triples))

    @classmethod
    def for_shape(cls, shape: TargetShape) -> FeatureSpace:
        """The space on a target of this shape: buckets it cannot reach are left out, and so
        are the dimensions of capabilities it does not offer."""
        dims = []
        for d in DIMENSIONS:
            if d.needs and d.needs not in shape.capabilities:
                continue
            if d.trait and d.trait not in shape.model.traits:
                continue
            keep = d.buckets
            if d.name == "reuse" and shape.model.window is None:
                keep = tuple(b for b in keep if b != "beyond-window")
            if d.name == "prompt" and not _chunk_reachable(shape):
                keep = ("sub-page", "pages")
            if d.name == "pressure":
                pool = shape.max_total_tokens
                if pool is None:
                    keep = ("light",)  # an unknown pool cannot be aimed at
                elif pool >= LOAD_CAP_TOKENS:
                    keep = ("light",) if pool * HEAVY_SHARE >= LOAD_CAP_TOKENS else ("light", "heavy")
            dims.append(dataclasses.replace(d, buckets=keep))
        return cls(tuple(dims))

    def dimension(self, name: str) -> Dimension:
        return next(d for d in self.dimensions if d.name == name)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(d.name for d in self.dimensions)

    def cells_of(self, point: Point) -> tuple[set[str], set[str]]:
        """The counted pairs and triples one point exercises."""
        order = [(d.name, point[d.name]) for d in self.dimensions if point.get(d.name) in d.buckets]
        pairs = {_key(c) for c in itertools.combinations(order, 2)} & self.pairs
        cheap = [c for c in order if self.dimension(c[0]).cheap]
        triples = {_key(c) for c in itertools.combinations(cheap, 3)} & self.triples
        return pairs, triples

    def to_json(self) -> list[dict[str, Any]]:
        # A list: the order of the dimensions is the order of the names in every pair's key.
        return [{"name": d.name, "buckets": list(d.buckets), "source": d.source, "cheap": d.cheap}
                for d in self.dimensions]

    @classmethod
    def from_json(cls, d: Sequence[Mapping[str, Any]]) -> FeatureSpace:
        known = {x.name: x for x in DIMENSIONS}
        return cls(tuple(
            dataclasses.replace(known[v["name"]], buckets=tuple(str(b) for b in v["buckets"]),
                                cheap=bool(v.get("cheap", False)))
            for v in d if v.get("name") in known
        ))


@dataclass(frozen=True)
class Coverage:
    """Which pairs (and cheap triples) of the space were exercised, by how many requests.

    Immutable: `observe` returns the grown record. `pairs` and `triples` map a key such as
    `"n=2 & prompt=past-chunk"` to its request count; only keys of the space are kept.
    """

    space: FeatureSpace
    pairs: Mapping[str, int]
    triples: Mapping[str, int]
    requests: int = 0

    @classmethod
    def empty(cls, space: FeatureSpace) -> Coverage:
        return cls(space, {}, {}, 0)

    @property
    def covered(self) -> int:
        return len(self.pairs)

    @property
    def total(self) -> int:
        return len(self.space.pairs)

    @property
    def fraction(self) -> float:
        return self.covered / self.total if self.total else 1.0

    def missing(self, sources: Iterable[Source] = ("request", "scenario", "server")) -> frozenset[str]:
        """Pairs not yet exercised whose both dimensions come from `sources`."""
        allowed = {d.name for d in self.space.dimensions if d.source in set(sources)}
        return frozenset(
            k for k in self.space.pairs - set(self.pairs)
            if all(c.split("=", 1)[0] in allowed for c in k.split(" & "))
        )

    def new_pairs(self, pts: Iterable[Point]) -> frozenset[str]:
        """Pairs these points exercise that no earlier request did."""
        out: set[str] = set()
        for p in pts:
            out |= self.space.cells_of(p)[0]
        return frozenset(out - set(self.pairs))

    def observe(self, pts: Iterable[Point]) -> Coverage:
        pairs, triples, n = dict(self.pairs), dict(self.triples), self.requests
        for p in pts:
            two, three = self.space.cells_of(p)
            for k in two:
                pairs[k] = pairs.get(k, 0) + 1
            for k in three:
                triples[k] = triples.get(k, 0) + 1
            n += 1
        return Coverage(self.space, pairs, triples, n)

    def summary(self) -> str:
        """One line for a person: `pairs 412/573 (71%), triples 40/60`."""
        return (f"pairs {self.covered}/{self.total} ({math.floor(100 * self.fraction)}%), "
                f"triples {len(self.triples)}/{len(self.space.triples)}")

    def to_json(self) -> dict[str, Any]:
        return {
            "space": self.space.to_json(),
            "total_pairs": self.total,
            "covered_pairs": self.covered,
            "total_triples": len(self.space.triples),
            "requests": self.requests,
            "pairs": dict(sorted(self.pairs.items())),
            "triples": dict(sorted(self.triples.items())),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any], space: FeatureSpace | None = None) -> Coverage:
        """Read a record back; with `space` (the target's, on resume), counts of keys outside
        it are dropped rather than inflating the percentage."""
        sp = space or FeatureSpace.from_json(d["space"])
        return cls(
            sp,
            {str(k): int(v) for k, v in d.get("pairs", {}).items() if k in sp.pairs},
            {str(k): int(v) for k, v in d.get("triples", {}).items() if k in sp.triples},
            int(d.get("requests", 0)),
        )


# --- buckets -----------------------------------------------------------------------------------


def _page(shape: TargetShape, scenario: Scenario | None = None) -> int:
    """The unit lengths are measured against (`terms.page_unit`): the server's page, else the one
    the scenario recorded, else the strategies' unit, the same page `covering` plans rows with."""
    meta = scenario.meta.get("page_size") if scenario is not None else None
    return page_unit(shape.page_size, meta if isinstance(meta, int) else None)


def _chunk_reachable(shape: TargetShape) -> bool:
    c = shape.chunked_prefill_size
    return c is not None and c + 2 < shape.pool_tokens - 1


def n_bucket(n: int) -> str:
    return "1" if n == 1 else "2" if n == 2 else "3+"


def prompt_bucket(prompt_len: int, page: int, chunk: int | None) -> str:
    """Against the page, then the chunked-prefill budget (+-1 is its edge).

    >>> [prompt_bucket(n, 16, 128) for n in (15, 16, 127, 129, 130)]
    ['sub-page', 'pages', 'chunk-edge', 'chunk-edge', 'past-chunk']
    """
    if chunk is not None:
        if abs(prompt_len - chunk) <= 1:
            return "chunk-edge"
        if prompt_len > chunk:
            return "past-chunk"
    return "sub-page" if prompt_len < page else "pages"


def prefix_bucket(prefix_len: int, page: int) -> str:
    """Against the page (`terms.page_class`, `terms.page_edge`): whole pages, a page +-1, or
    anything else (also where no page is known: no length is on a boundary then).

    >>> [prefix_bucket(n, 16) for n in (0, 32, 15, 33, 20, 5)]
    ['none', 'page-aligned', 'page-edge', 'page-edge', 'unaligned', 'unaligned']
    """
    if prefix_len == 0:
        return "none"
    if page_class(prefix_len, page) == "aligned":
        return "page-aligned"
    return "page-edge" if page_edge(prefix_len, page) else "unaligned"


def decode_bucket(prompt_len: int, max_tokens: int, page: int) -> str:
    """How many page boundaries the generated tokens cross (the prompt's last page first fills).

    >>> [decode_bucket(20, m, 16) for m in (1, 12, 13, 28, 29)]
    ['1', 'same-page', 'one-crossing', 'one-crossing', 'crossings']
    """
    if max_tokens == 1:
        return "1"
    crossed = (prompt_len + max_tokens - 1) // page - (prompt_len - 1) // page
    return "same-page" if crossed == 0 else "one-crossing" if crossed == 1 else "crossings"


def cancel_bucket(cancel_after_ms: float | None) -> str:
    if cancel_after_ms is None:
        return "none"
    return "early" if cancel_after_ms < EARLY_CANCEL_MS else "late"


def surface_point(r: RequestSpec) -> dict[str, str]:
    """The request's buckets in the capability dimensions. A sampled request without a seed is
    in no `sampler` bucket (none generates it; judged for liveness only).

    >>> surface_point(RequestSpec("r", 0.0, (5,), 2, cache_salt="t", temperature=0.5, seed=3))
    {'salt': 'salted', 'sampler': 'seeded', 'constraint': 'none', 'adapter': 'base'}
    """
    return {
        "salt": "none" if r.cache_salt is None else "salted",
        "sampler": "seeded" if r.seeded else "greedy" if not r.sampled else "unseeded",
        "constraint": "none" if r.choices is None else "choices",
        "adapter": "base" if r.adapter is None else "adapter",
    }


def window_bucket(prompt_len: int, max_tokens: int, window: int) -> str:
    """Against the sliding window: a prompt on a multiple of it +-1 (`edge`), one whose decode
    crosses a multiple of it (`crossing`: the window moves on in the middle of decoding), one
    that never leaves the first window (`inside`), or past it.

    >>> [window_bucket(n, m, 64) for n, m in ((20, 8), (63, 8), (129, 4), (60, 10), (100, 4))]
    ['inside', 'edge', 'edge', 'crossing', 'past']
    """
    if page_edge(prompt_len, window) or prompt_len % window == 0:
        return "edge"
    if (prompt_len + max_tokens - 1) // window > prompt_len // window:
        return "crossing"
    return "inside" if prompt_len + max_tokens <= window else "past"


def state_bucket(prompt_len: int, chunk: int) -> str:
    """The prompt's length against the chunk a recurrent state is scanned in.

    >>> [state_bucket(n, 32) for n in (20, 64, 31, 65, 40)]
    ['sub-chunk', 'aligned', 'edge', 'edge', 'unaligned']
    """
    if prompt_len < chunk - 1:
        return "sub-chunk"
    if prompt_len % chunk == 0:
        return "aligned"
    return "edge" if page_edge(prompt_len, chunk) else "unaligned"


def reuse_buckets(scenario: Scenario, window: int | None) -> dict[str, str]:
    """What each request's prompt shares with the prompts sent before it (`terms.common_prefix`,
    in order of sending): `exact` where an earlier whole prompt is a prefix of it (a hit must
    restore the state at exactly the cached length), `whole-but-last` where it shares all of one
    but that one's last token, `within` where the whole prompt is the beginning of a longer earlier
    one (every token cached: the N-1 hit, whose last token must be computed again from a state
    before it), `beyond-window` where it shares more than the sliding window, `other` where it
    shares less, `none` where it shares nothing.

    >>> from servefuzz.workload import RequestSpec
    >>> a, b = tuple(range(3, 43)), tuple(range(100, 190))
    >>> rs = [RequestSpec("r01", 0.0, a, 2), RequestSpec("r02", 9.0, a + (7,), 2), RequestSpec("r03", 9.0, a[:-1] + (9,), 2),
    ...       RequestSpec("r04", 9.5, b, 2), RequestSpec("r05", 20.0, b[:80] + (1,), 2), RequestSpec("r06", 21.0, a[:20] + (1,), 2),
    ...       RequestSpec("r07", 22.0, b[:64], 2)]
    >>> reuse_buckets(Scenario(1, tuple(rs)), 64)
    {'r01': 'none', 'r02': 'exact', 'r03': 'whole-but-last', 'r04': 'none', 'r05': 'beyond-window', 'r06': 'other', 'r07': 'within'}
    """
    out: dict[str, str] = {}
    earlier: list[tuple[int, ...]] = []
    for r in sorted(scenario.requests, key=lambda r: r.offset_ms):
        prompt = tuple(r.prompt_ids)
        shared = [(common_prefix(e, prompt), len(e)) for e in earlier]
        longest = max((n for n, _ in shared), default=0)
        if any(n == whole for n, whole in shared):
            out[r.id] = "exact"
        elif any(n == whole - 1 > 0 for n, whole in shared):
            out[r.id] = "whole-but-last"
        elif longest == len(prompt):
            out[r.id] = "within"
        elif longest == 0:
            out[r.id] = "none"
        else:
            out[r.id] = "beyond-window" if window is not None and longest > window else "other"
        earlier.append(prompt)
    return out


def load_tokens(scenario: Scenario) -> int:
    """KV tokens the scenario asks for at most: every prompt and every choice's output."""
    return sum(r.prompt_len + r.max_tokens * r.n for r in scenario.requests)


def pressure_bucket(load: int, pool: int | None, *, reported: bool = False) -> str:
    """The load against the pool; evictions or preemptions the server reported mean `over`."""
    if reported or (pool is not None and load > pool):
        return "over"
    return "heavy" if pool is not None and load >= HEAVY_SHARE * pool else "light"


def batch_bucket(rows: int) -> str:
    return "1" if rows <= 1 else "2-4" if rows <= 4 else "5-8" if rows <= 8 else "9+"


def _reported_pressure(loaded: Sequence[RunHistory]) -> bool:
    for h in loaded:
        deltas = h.meta.get("metrics", {})
        if isinstance(deltas, Mapping) and any(
                v > 0 for k, v in deltas.items() if any(w in k.lower() for w in ("evict", "preempt", "retract"))):
            return True
    return False


def points(scenario: Scenario, shape: TargetShape, loaded: Sequence[RunHistory] = ()) -> dict[str, Point]:
    """Each request's bucket in every dimension. Pure. The `server` dimensions (`batch`,
    `cache`) come from the first loaded run and are left out where it did not report them."""
    page = _page(shape, scenario)
    chunk = shape.chunked_prefill_size if _chunk_reachable(shape) else None
    pressure = pressure_bucket(load_tokens(scenario), shape.max_total_tokens, reported=_reported_pressure(loaded))
    burst = dict(zip((r.id for r in scenario.requests), burst_positions([r.offset_ms for r in scenario.requests])))
    records = {r.request_id: r for r in loaded[0].records} if loaded else {}
    rows = _rows_at_send(loaded[0], scenario) if loaded else {}
    model = shape.model
    reuse = reuse_buckets(scenario, model.window) if "stateful" in model.traits else {}
    out: dict[str, Point] = {}
    for r in scenario.requests:
        p = {
            "n": n_bucket(r.n),
            "prompt": prompt_bucket(r.prompt_len, page, chunk),
            "prefix": prefix_bucket(r.prefix_len, page),
            "burst": burst[r.id],
            "cancel": cancel_bucket(r.cancel_after_ms),
            "pressure": pressure,
            "stream": "on" if r.stream else "off",
            "decode": decode_bucket(r.prompt_len, r.max_tokens, page),
            "sampling": "ignore-eos" if r.ignore_eos else "eos",
            **surface_point(r),
        }
        if model.window is not None:
            p["window"] = window_bucket(r.prompt_len, r.max_tokens, model.window)
        if model.recurrent:
            p["state"] = state_bucket(r.prompt_len, model.state_chunk or page)
        if r.id in reuse:
            p["reuse"] = reuse[r.id]
        rec = records.get(r.id)
        if r.id in rows:
            p["batch"] = batch_bucket(rows[r.id])
        if rec is not None and rec.ok and rec.cached_tokens is not None and not r.cancelled:
            shared = r.prefix_len // page * page
            c = rec.cached_tokens
            p["cache"] = "miss" if c == 0 else "partial" if c < shared else "full"
        out[r.id] = p
    return out


def _rows_at_send(run: RunHistory, scenario: Scenario) -> dict[str, int]:
    """Rows (choices) in flight when each request was sent, itself included, by the client's
    clock: what the scheduler had to batch it with."""
    n = {r.id: r.n for r in scenario.requests}
    spans = [(r.request_id, r.sent_ms, r.end_ms) for r in run.records
             if r.sent_ms is not None and r.end_ms is not None and r.request_id in n]
    return {
        rid: sum(n[o] for o, s, e in spans if o == rid or s <= sent < e)
        for rid, sent, _ in spans
    }
