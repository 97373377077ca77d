"""A covering-array generator: scenarios built for the feature pairs not yet exercised.

Combinatorial testing tools (AETG, IPOG) build a small set of test rows that together cover
every pair of parameter values. `PairwiseCover` does the same over `servefuzz.coverage`'s
feature space, one scenario at a time and greedily: each request is a row; it takes one pair
the campaign has not covered yet, then fills every other dimension with the bucket that covers
the most still-missing pairs with the buckets already chosen (pairs this scenario already
covers count as covered; ties go to the cheapest bucket where buckets differ in cost). The
scenario's layout fixes the rows' burst positions first and one pool-pressure bucket for the
whole scenario; the `server` dimensions (batch at admission, cache hits) are what the target
made of it. `cache` is planned like a request's own field and aimed at through *primers*: a
row that should see a full hit gets a prefix of its own whose pages a short request sent first
caches, one that should see a partial hit a primer a page shorter (only once the target has
reported cached tokens at all), and where the target keys its cache on a salt or an adapter,
another tenant's primer goes first on the same tokens (`_foreign`), so that a key that leaves
one of them out shows (a share of those rows, `PROBE_SHARE`, get no primer of their own: the
other tenant's pages are the only ones there to reuse); `batch` is not aimed at.

It follows the strategies' conventions (`servefuzz.strategies`): a frozen class with a `name`
and `generate(rng, shape, seed=...)`, same seed and same coverage, same scenario. The campaign
hands it the coverage so far (`with_coverage`) before each use; without one it aims at
everything.

    >>> import random
    >>> from servefuzz.strategies import TargetShape
    >>> shape = TargetShape(page_size=16, chunked_prefill_size=128, max_total_tokens=2048, context_length=1024)
    >>> s = PairwiseCover().generate(random.Random(1), shape, seed=1)
    >>> s.meta["strategy"], len(s.requests) >= PairwiseCover.rows
    ('pairwise', True)
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from servefuzz.coverage import (
    CROSSABLE,
    EARLY_CANCEL_MS,
    HEAVY_SHARE,
    IMPOSSIBLE,
    LOAD_CAP_TOKENS,
    SURFACE,
    Coverage,
    FeatureSpace,
    Point,
    decode_bucket,
    points,
    prefix_bucket,
    prompt_bucket,
)
from servefuzz.strategies import CACHED_BY_MS, STRAGGLER_MS, Draft, TargetShape, draw_choices, seeded_draw, tenant_salt
from servefuzz.terms import BURST_GAP_MS
from servefuzz.workload import Scenario

__all__ = [
    "PROBE_SHARE",
    "PairwiseCover",
    "covered_by",
    "max_tokens_in",
    "plan_rows",
    "prefix_len_in",
    "prompt_len_in",
    "realize_lengths",
    "surface_fields",
]

# What a row plans: its own fields, and the cache hit it should see (aimed at through primers).
_PLANNED = (*CROSSABLE, "cache")
# The share of rows behind another tenant's primer (of those with one sequence, not cut: the rows
# whose hit the oracles can read) that get no primer of their own: *cross-tenant probes*, whose
# prefix only another tenant holds before them. A correct engine serves such a row
# a miss; one whose key leaves the salt or adapter out serves it the other's pages. With its own
# primer there, the row's hit is its own, and the primer's own hit on the other's pages is one
# the tenant oracle must allow (the row, of its salt, shares those tokens: timing never excuses
# a hit), so a salt the engine drops would never show from the arrays (issue 41: SGLang
# 0.5.10.post1's dropped salt, leave-one-out 1 of 3 seeds before).
PROBE_SHARE = 1 / 2
# Dimensions whose buckets are listed cheapest first (fewer choices, shorter prompts and
# decodes): a tie goes to the cheapest, so rows with nothing left to cover cost little.
_CHEAPEST_FIRST = ("n", "prompt", "decode")


@dataclass(frozen=True)
class PairwiseCover:
    """Scenarios of `rows` requests aimed at the pairs `coverage` lacks (greedy, AETG-like)."""

    name: str = "pairwise"
    needs: ClassVar[frozenset[str]] = frozenset()
    coverage: Coverage | None = None
    rows: int = 8

    def with_coverage(self, coverage: Coverage) -> PairwiseCover:
        return dataclasses.replace(self, coverage=coverage)

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        space = FeatureSpace.for_shape(shape)
        # Every missing pair but those of `batch` (what the scheduler made of the load: not aimed
        # at), and those of `cache` until the target has reported a cache hit or miss at all (one
        # that never reports cached_tokens would have every row spent on pairs it cannot show).
        cov = self.coverage or Coverage.empty(space)
        reports = any("cache=" in k for k in cov.pairs)
        missing = {k for k in cov.missing() if "batch=" not in k and (reports or "cache=" not in k)}
        layout = _layout(rng, self.rows)
        pressure = max(sorted(space.dimension("pressure").buckets, key=lambda _: rng.random()),
                       key=lambda b: sum(1 for k in missing if f"pressure={b}" in k))
        plans = plan_rows(rng, space, [{"burst": b, "pressure": pressure} for b, _ in layout], missing,
                          _PLANNED if reports else CROSSABLE)
        # Two tenants' salts per scenario, drawn only where the target takes salts (elsewhere a
        # seed keeps the scenario it always had).
        salts = (tenant_salt(rng, "a"), tenant_salt(rng, "b")) if "salt" in space.names else ()
        d = Draft(seed, shape)
        page = shape.unit
        pool = shape.max_total_tokens
        # The rows alone must not load the pool past the planned pressure: a row that would is
        # left out (the first is always sent).
        limit = {"light": HEAVY_SHARE * pool, "heavy": pool}.get(pressure) if pool is not None else None
        rows: list[tuple[Point, float, int, tuple[int, int, int], dict[str, Any]]] = []
        load = 0
        for plan, (_, at) in zip(plans, layout, strict=True):
            n = {"1": 1, "2": 2}.get(plan["n"], rng.randint(3, 4))
            lengths = realize_lengths(rng, shape, plan, n)
            for _ in range(8):  # a partial hit needs two shared pages: one primed, one not
                if plan.get("cache") != "partial" or lengths[1] >= 2 * page:
                    break
                lengths = realize_lengths(rng, shape, plan, n)
            if rows and limit is not None and load + lengths[0] + lengths[2] * n >= limit:
                continue
            load += lengths[0] + lengths[2] * n
            surface: dict[str, Any] = {}
            for dim in SURFACE:
                if dim in plan:
                    surface.update(surface_fields(rng, shape, dim, plan[dim], salts))
            rows.append((plan, at, n, lengths, surface))
        # Primers, sent first: a row that should see a full cache hit gets its own prefix, whose
        # whole pages a primer caches; one that should see a partial hit, a primer one page
        # shorter. The other rows share one prefix, `p0`, among themselves (and reuse it at once).
        # Another tenant's primer is done before the row's own primer arrives (`CACHED_BY_MS`,
        # a third of the time a loaded engine's `STRAGGLER_MS`): sent together, the two land in
        # different slots or batches, and an engine that keys reuse on tokens alone (a slot
        # reused under another adapter, a page under another salt) is never asked to reuse the
        # other's finished work (issue 41: llama.cpp's base-after-adapter slot went unseen so).
        # The rows follow their own primers by what they did before. Drawn only where a foreign
        # primer is sent, so that a target keyed on tokens alone keeps the scenarios it had.
        lead = 0.0
        names = []
        for i, (row, _, _, (_, prefix_len, _), surface) in enumerate(rows):
            primed = prefix_len // page * page - (page if row.get("cache") == "partial" else 0)
            if row.get("cache") in ("partial", "full") and primed >= page:
                # Another tenant's primer first, where the target keys its cache on more than
                # tokens: the same pages under another adapter (or the base model) or another
                # salt, which neither the row's own primer nor the row may reuse. A correct
                # engine serves the row from its own primer's pages all the same; one whose key
                # leaves the adapter or the salt out serves it another's KV (issue 41: salted
                # and adapter requests on one prefix, from the arrays).
                probe = False
                if (other := _foreign(rng, shape, surface, salts)) is not None:
                    lead = lead or rng.uniform(*(STRAGGLER_MS if rng.random() < 1 / 3 else CACHED_BY_MS))
                    d.add(0.5 * len(d.specs), primed + rng.randint(1, 8), 2, prefix=f"c{i}", prefix_len=primed,
                          **other)
                    # Only a row whose hit the oracles can read: one sequence (a request of n > 1
                    # computes its own prompt, and its siblings may reuse it) that is not cut.
                    probe = rng.random() < PROBE_SHARE and row.get("n") == "1" and row.get("cancel") == "none"
                if not probe:
                    # Under the row's own salt and adapter: another's pages are no hit to aim at.
                    d.add(lead + 0.5 * len(d.specs), primed + rng.randint(1, 8), 2, prefix=f"c{i}",
                          prefix_len=primed, cache_salt=surface.get("cache_salt"), adapter=surface.get("adapter"))
                names.append(f"c{i}")
            else:
                names.append("p0")
        for (row, at, n, (prompt_len, prefix_len, max_tokens), surface), name in zip(rows, names, strict=True):
            cancel = {"none": None, "early": rng.uniform(5, EARLY_CANCEL_MS - 5)}.get(
                row["cancel"], rng.uniform(EARLY_CANCEL_MS + 10, 300))
            spec = d.add(lead + at, prompt_len, max_tokens, prefix=name, prefix_len=prefix_len, n=n,
                         stream=row["stream"] == "on", cancel_after_ms=cancel, **surface)
            if row["sampling"] == "eos":
                d.specs[-1] = dataclasses.replace(spec, ignore_eos=False)
        _press(rng, d, shape, pressure, after_ms=lead + layout[-1][1] + 2 * BURST_GAP_MS, page=page)
        return d.scenario(self.name, page_size=page, aimed=len(missing))


def _foreign(rng: random.Random, shape: TargetShape, surface: Mapping[str, Any],
             salts: Sequence[str]) -> dict[str, Any] | None:
    """The cache key of another tenant than the row's (`surface`): its adapter or its salt
    changed (one of the two, where the target offers it), the other kept; None where the
    target offers neither (its cache is keyed on tokens alone: no other tenant to be)."""
    own = {"cache_salt": surface.get("cache_salt"), "adapter": surface.get("adapter")}
    offered = [k for k, values in (("adapter", shape.adapters), ("cache_salt", salts)) if values]
    if not offered:
        return None
    key = rng.choice(offered)
    values: tuple[str | None, ...] = (None, *(shape.adapters if key == "adapter" else salts))
    return {**own, key: rng.choice([v for v in values if v != own[key]])}


def _layout(rng: random.Random, rows: int) -> list[tuple[str, float]]:
    """Burst positions and offsets: groups of 1 to 4 requests 0.3-1 ms apart, groups well
    beyond `BURST_GAP_MS` apart, so that `coverage` reads back the positions planned here."""
    out: list[tuple[str, float]] = []
    t = rng.uniform(3 * BURST_GAP_MS, 6 * BURST_GAP_MS)  # after the primers' prefill
    while len(out) < rows:
        size = min(rng.choice([1, 2, 3, 4]), rows - len(out)) if rows - len(out) > 1 else 1
        for i in range(size):
            out.append(("alone" if size == 1 else "first" if i == 0 else "last" if i == size - 1 else "inside", t))
            t += rng.uniform(0.3, 1.0)
        t += rng.uniform(3 * BURST_GAP_MS, 12 * BURST_GAP_MS)
    return [(b, round(at, 1)) for b, at in out]


def _cells(key: str) -> list[tuple[str, str]]:
    return [(c.split("=", 1)[0], c.split("=", 1)[1]) for c in key.split(" & ")]


def _gain(space: FeatureSpace, dim: str, bucket: str, fixed: Mapping[str, str], missing: set[str]) -> int:
    return sum(1 for k in space.cells_of({**fixed, dim: bucket})[0] if k in missing and f"{dim}={bucket}" in k)


def _best_bucket(rng: random.Random, space: FeatureSpace, dim: str, fixed: Mapping[str, str],
                 missing: set[str]) -> str | None:
    # Never a bucket that makes an impossible pair with one already chosen: it cannot be sent.
    buckets = [b for b in space.dimension(dim).buckets
               if not any(frozenset({(dim, b), c}) in IMPOSSIBLE for c in fixed.items())]
    if dim not in _CHEAPEST_FIRST:
        rng.shuffle(buckets)  # ties go to a random bucket, so equal rows do not repeat one choice
    # None: every bucket is impossible beside the others (no cache hit on a cancelled request).
    return max(buckets, key=lambda b: _gain(space, dim, b, fixed, missing)) if buckets else None


def plan_rows(rng: random.Random, space: FeatureSpace, fixed_rows: Sequence[Mapping[str, str]],
              missing: set[str], planned: Sequence[str] = _PLANNED) -> list[dict[str, str]]:
    """One bucket per request dimension for each row (the rows' own fixed cells kept): a missing
    pair that fits the row first, then each other dimension greedily. `missing` shrinks as the
    rows cover pairs."""
    rows = []
    for fixed in fixed_rows:
        row = dict(fixed)
        fits = sorted(k for k in missing if all(d in planned or row.get(d) == b for d, b in _cells(k))
                      and all(row.get(d, b) == b for d, b in _cells(k))
                      and not any(frozenset({c, f}) in IMPOSSIBLE for c in _cells(k) for f in row.items()))
        if fits:
            row.update(dict(_cells(rng.choice(fits))))
        dims = [d for d in planned if d not in row and d in space.names]
        rng.shuffle(dims)
        for dim in dims:
            bucket = _best_bucket(rng, space, dim, row, missing)
            if bucket is not None:
                row[dim] = bucket
        missing -= space.cells_of(row)[0]
        rows.append(row)
    return rows


def surface_fields(rng: random.Random, shape: TargetShape, dim: str, bucket: str,
                   salts: Sequence[str]) -> dict[str, Any]:
    """The request fields (as `Draft.add` and `RequestSpec` name them) that put a request in
    `bucket` of the capability dimension `dim` (`coverage.SURFACE`): a salt of `salts` (the
    scenario's tenants), a temperature and seed, a choice constraint, an adapter the target
    serves; or the field cleared. A constraint needs its EOS (`ignore_eos` False: the caller's).

    >>> shape = TargetShape(adapters=("lora-a",))
    >>> surface_fields(random.Random(0), shape, "adapter", "adapter", ()), surface_fields(random.Random(0), shape, "salt", "none", ())
    ({'adapter': 'lora-a'}, {'cache_salt': None})
    """
    on = bucket not in ("none", "greedy", "base")
    if dim == "salt":
        return {"cache_salt": rng.choice(list(salts)) if on and salts else None}
    if dim == "sampler":
        return dict(seeded_draw(rng)) if on else {"temperature": 0.0, "seed": None}
    if dim == "constraint":
        return {"choices": draw_choices(rng, shape.vocab) if on else None}
    if dim == "adapter":
        return {"adapter": rng.choice(shape.adapters) if on and shape.adapters else None}
    raise ValueError(f"not a capability dimension: {dim}")


def realize_lengths(rng: random.Random, shape: TargetShape, plan: Point, n: int, tries: int = 64) -> tuple[int, int, int]:
    """Prompt, prefix and max_tokens whose buckets are the plan's, where the target allows them.

    Some plans cannot be sent although each of their pairs can (a page-edge prefix of a
    sub-page prompt fills its last page: no same-page decode after it); the prompt then moves
    to the cheapest bucket that keeps the prefix and decode buckets, else the closest try is
    taken (the campaign measures what was sent, not what was planned)."""
    got, lengths = _realize(rng, shape, plan, n, tries)
    if all(got):
        return lengths
    for bucket in FeatureSpace.for_shape(shape).dimension("prompt").buckets:
        again, other = _realize(rng, shape, {**plan, "prompt": bucket}, n, max(1, tries // 4))
        if again[1] and again[2]:
            return other
    return lengths


def _realize(rng: random.Random, shape: TargetShape, plan: Point, n: int,
             tries: int) -> tuple[tuple[bool, bool, bool], tuple[int, int, int]]:
    page = shape.unit
    chunk = shape.chunked_prefill_size
    best: tuple[tuple[bool, bool, bool], tuple[int, int, int]] | None = None
    for _ in range(tries):
        max_tokens = max_tokens_in(rng, plan["decode"], 0, page)  # a first guess for the room
        room = max(2, shape.pool_tokens - max(max_tokens, 2 * page) * n - 2)
        prompt_len = prompt_len_in(rng, plan["prompt"], page, chunk, room)
        prefix_len = prefix_len_in(rng, plan["prefix"], page, prompt_len)
        max_tokens = max_tokens_in(rng, plan["decode"], prompt_len, page)
        got = (prompt_bucket(prompt_len, page, chunk) == plan["prompt"],
               prefix_bucket(prefix_len, page) == plan["prefix"],
               decode_bucket(prompt_len, max_tokens, page) == plan["decode"])
        if best is None or sum(got) > sum(best[0]):
            best = (got, (prompt_len, prefix_len, max_tokens))
        if all(got):
            break
    assert best is not None  # tries >= 1
    return best


def prompt_len_in(rng: random.Random, bucket: str, page: int, chunk: int | None, room: int) -> int:
    """A prompt length in `bucket` of `coverage.prompt_bucket` (at most `room` tokens)."""
    if bucket == "sub-page":
        return rng.randint(max(1, page // 4), page - 1) if page > 1 else 1
    if chunk is not None and bucket == "chunk-edge":
        return min(room, chunk + rng.choice([-1, 0, 1]))
    if chunk is not None and bucket == "past-chunk":
        return min(room, rng.randint(chunk + 2, chunk + max(2, chunk // 4)))
    hi = min(room, (chunk - 2) if chunk else 8 * page, 6 * page)  # "pages": cheap ones mostly
    return rng.randint(min(page, hi), max(page, hi))


def prefix_len_in(rng: random.Random, bucket: str, page: int, prompt_len: int) -> int:
    """A shared prefix length in `bucket` of `coverage.prefix_bucket`, within the prompt."""
    pages = max(1, prompt_len // page)
    k = rng.randint(1, min(pages, 4))
    if bucket == "none":
        return 0
    if bucket == "page-aligned":
        return min(prompt_len, k * page)
    if bucket == "page-edge":
        return max(1, min(prompt_len, k * page + rng.choice([-1, 1])))
    for _ in range(16):
        v = rng.randint(1, max(1, prompt_len))
        if prefix_bucket(v, page) == "unaligned":
            return v
    return max(1, prompt_len // 2)


def max_tokens_in(rng: random.Random, bucket: str, prompt_len: int, page: int) -> int:
    """A `max_tokens` in `bucket` of `coverage.decode_bucket` after a prompt of `prompt_len`."""
    free = (page - prompt_len % page) % page  # slots left in the prompt's last page
    if bucket == "1":
        return 1
    if bucket == "same-page" and free >= 2:
        return rng.randint(2, free)
    if bucket in ("same-page", "one-crossing"):
        return rng.randint(free + 1, free + page) if free + 1 > 1 else rng.randint(2, page)
    return rng.randint(free + page + 1, free + 2 * page + 8)


def _press(rng: random.Random, d: Draft, shape: TargetShape, bucket: str, *, after_ms: float, page: int) -> None:
    """Plain prompts after the planned rows until the scenario's load reaches `bucket`."""
    pool = shape.max_total_tokens
    if bucket == "light" or pool is None:
        return
    want = min(LOAD_CAP_TOKENS, int(pool * (1.15 if bucket == "over" else HEAVY_SHARE * 1.2)))
    used = sum(r.prompt_len + r.max_tokens * r.n for r in d.specs)
    t = after_ms
    biggest = max(page, min(shape.pool_tokens - 64, pool // 3, 1024))
    while used < want:
        spec = d.add(t, rng.randint(biggest // 3, biggest), rng.randint(8, 48))
        used += spec.prompt_len + spec.max_tokens
        t += rng.uniform(0, 0.8 * BURST_GAP_MS)


def covered_by(scenarios: Sequence[Scenario], shape: TargetShape) -> Coverage:
    """The coverage a list of scenarios reaches by their own fields (no server dimensions)."""
    cov = Coverage.empty(FeatureSpace.for_shape(shape))
    for s in scenarios:
        cov = cov.observe(points(s, shape).values())
    return cov
