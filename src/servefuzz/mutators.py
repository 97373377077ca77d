"""Mutators: small edits of a scenario that keep its lineage in the request ids.

A request touched by a mutator gets that mutator's suffix appended to its id, so an id reads as
its history: `r02_b_s` is a copy of `r02` made by a burst, then shifted in time. The seed
report's `r02_b_s_b_s_s_s` reads the same way.

| suffix | mutator | what it does to the scenario                                                 |
|--------|---------|------------------------------------------------------------------------------|
| `_b`   | burst   | copies one request 1-3 times at (almost) the same offset: same prefix, fresh suffix |
| `_s`   | shift   | moves one request in time (a few ms to a few hundred, or onto another's offset) |
| `_w`   | split   | splits a wave: every request after a cut point moves later by one gap       |
| `_l`   | scale   | scales a prompt (its unique suffix) or `max_tokens` by 1/2 to 2             |
| `_k`   | snap    | snaps a prefix or prompt length to a page, tile or chunk boundary, +-1      |
| `_p`   | share   | makes a request share another request's prefix (rebuilding its prompt)     |
| `_c`   | cancel  | cancels a request after a few to a few hundred ms (or un-cancels it)        |
| `_d`   | drop    | removes one request; no request is left to carry `_d`, so only `meta` records it |
| `_x`   | cross   | moves one request into another bucket of one `coverage` dimension (n, prompt, prefix, cancel, ...) |

A second copy made by one burst is told apart by a digit: `r02_b`, `r02_b2`. Every mutated
scenario keeps the names of the mutators applied, oldest first, in `meta["lineage"]`.
`cross` is not in `MUTATORS` (the default havoc): campaigns that track pairwise coverage add
it (`mutate(..., extra=(CROSS,))`), so that a mutation can leave its strategy's own axis. Its
dimensions include the target's surface (`coverage.SURFACE`): where the target takes salts,
seeds, choice constraints or adapters, `cross` adds one to a request or removes it.

    >>> import random
    >>> from servefuzz.strategies import PageBoundaryBursts, TargetShape
    >>> shape = TargetShape(page_size=64)
    >>> s = PageBoundaryBursts().generate(random.Random(3), shape, seed=3)
    >>> m = MUTATORS["shift"].apply(s, random.Random(0), shape)
    >>> sorted(r.id for r in m.requests if r.id.endswith("_s"))
    ['r06_s']

Prompts stay bit-exact and shared prefixes stay shared *exactly*: a rebuilt prompt takes its
prefix from the scenario's own requests and a first suffix token that no request with the same
prefix length already uses (the property `PromptBuilder` guarantees for fresh scenarios).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from servefuzz.coverage import CROSSABLE, SURFACE, FeatureSpace, points
from servefuzz.covering import max_tokens_in, prefix_len_in, prompt_len_in, surface_fields
from servefuzz.strategies import TILE_SIZES, TargetShape, tenant_salt
from servefuzz.workload import RequestSpec, Scenario, TokenIds

__all__ = ["CROSS", "MUTATORS", "Mutator", "cross", "lineage_of", "mutate"]

# How many mutators one call of `mutate` stacks at most (AFL's "havoc" stacking, kept short so
# that a finding's lineage stays readable).
MAX_STACK = 3


@dataclass(frozen=True)
class Mutator:
    """One named edit. `apply` returns the edited scenario, or None when it does not apply."""

    name: str
    suffix: str
    apply: Callable[[Scenario, random.Random, TargetShape], Scenario | None]


def lineage_of(request_id: str) -> tuple[str, ...]:
    """The mutator suffixes in an id, oldest first.

    >>> lineage_of("r02_b_s_b2")
    ('b', 's', 'b')
    """
    return tuple(part.rstrip("0123456789") for part in request_id.split("_")[1:])


class _Prompts:
    """Rebuilds prompts inside one scenario so that shared prefixes stay shared exactly."""

    def __init__(self, scenario: Scenario, rng: random.Random, shape: TargetShape) -> None:
        self.rng, self.vocab = rng, shape.vocab
        self.prefixes: dict[str, list[int]] = {}
        self.first_suffix: dict[tuple[str, int], set[int]] = {}
        for r in scenario.requests:
            if r.prefix_name is None:
                continue
            known = self.prefixes.setdefault(r.prefix_name, [])
            if r.prefix_len > len(known):
                known[:] = r.prompt_ids[: r.prefix_len]
            if r.suffix_len:
                self.first_suffix.setdefault((r.prefix_name, r.prefix_len), set()).add(r.prompt_ids[r.prefix_len])

    def _token(self, banned: Collection[int] = ()) -> int:
        while True:
            t = self.vocab[self.rng.randrange(len(self.vocab))]
            if t not in banned:
                return t

    def _prefix(self, name: str, length: int) -> list[int]:
        known = self.prefixes.setdefault(name, [])
        while len(known) < length:
            # The prefix's next token must not be any request's first suffix token at this length.
            known.append(self._token(self.first_suffix.get((name, len(known)), set())))
        return known[:length]

    def build(self, name: str | None, prefix_len: int, prompt_len: int, tail: TokenIds = ()) -> TokenIds:
        """`prefix_len` tokens of prefix `name`, then a suffix starting with an unused token and
        continuing with `tail` (kept from the old prompt) and fresh tokens up to `prompt_len`."""
        head = self._prefix(name, prefix_len) if name and prefix_len else []
        if prompt_len <= len(head):
            return tuple(head[:prompt_len])
        key = (name or "", prefix_len)
        banned = set(self.first_suffix.get(key, set()))
        if name and prefix_len:
            known = self.prefixes[name]
            if len(known) > prefix_len:
                banned.add(known[prefix_len])
        n_suffix = prompt_len - len(head)
        kept = list(tail[:n_suffix])
        first = kept[0] if kept and kept[0] not in banned else self._token(banned)
        self.first_suffix.setdefault(key, set()).add(first)
        suffix = [first, *kept[1:]]
        while len(suffix) < n_suffix:
            suffix.append(self._token())
        return tuple(head + suffix)


def _retag(spec: RequestSpec, suffix: str, taken: set[str]) -> str:
    base = f"{spec.id}_{suffix}"
    rid, k = base, 1
    while rid in taken:
        k += 1
        rid = f"{base}{k}"
    taken.add(rid)
    return rid


def _replace(scenario: Scenario, old: RequestSpec, new: RequestSpec, name: str) -> Scenario:
    reqs = [new if r.id == old.id else r for r in scenario.requests]
    return _with(scenario, reqs, name)


def _with(scenario: Scenario, requests: list[RequestSpec], name: str) -> Scenario:
    meta = dict(scenario.meta)
    meta["lineage"] = [*meta.get("lineage", []), name]
    return dataclasses.replace(scenario, requests=tuple(requests), meta=meta)


def _room(shape: TargetShape, spec: RequestSpec) -> int:
    """The longest prompt this request may have on the target."""
    return max(1, shape.pool_tokens - spec.max_tokens * spec.n - 1)


def burst(scenario: Scenario, rng: random.Random, shape: TargetShape) -> Scenario | None:
    src = rng.choice(scenario.requests)
    prompts = _Prompts(scenario, rng, shape)
    taken = {r.id for r in scenario.requests}
    copies = []
    for _ in range(rng.randint(1, 3)):
        ids = prompts.build(src.prefix_name, src.prefix_len, src.prompt_len)
        copies.append(dataclasses.replace(
            src, id=_retag(src, "b", taken), offset_ms=round(src.offset_ms + rng.uniform(0, 2), 1), prompt_ids=ids))
    return _with(scenario, [*scenario.requests, *copies], "burst")


def shift(scenario: Scenario, rng: random.Random, shape: TargetShape) -> Scenario | None:
    spec = rng.choice(scenario.requests)
    if rng.random() < 0.3:
        to = rng.choice(scenario.requests).offset_ms  # onto another request's offset: same batch
    else:
        to = spec.offset_ms + rng.choice([-1, 1]) * math.exp(rng.uniform(0, math.log(300)))
    new = dataclasses.replace(spec, id=_retag(spec, "s", {r.id for r in scenario.requests}), offset_ms=round(max(0.0, to), 1))
    return _replace(scenario, spec, new, "shift")


def split(scenario: Scenario, rng: random.Random, shape: TargetShape) -> Scenario | None:
    offsets = sorted({r.offset_ms for r in scenario.requests})
    if len(offsets) < 2:
        return None
    cut = rng.choice(offsets[1:])
    gap = rng.uniform(50, 400)
    taken = {r.id for r in scenario.requests}
    reqs = [
        dataclasses.replace(r, id=_retag(r, "w", taken), offset_ms=round(r.offset_ms + gap, 1)) if r.offset_ms >= cut else r
        for r in scenario.requests
    ]
    return _with(scenario, reqs, "split")


def scale(scenario: Scenario, rng: random.Random, shape: TargetShape) -> Scenario | None:
    spec = rng.choice(scenario.requests)
    factor = math.exp(rng.uniform(-math.log(2), math.log(2)))
    rid = _retag(spec, "l", {r.id for r in scenario.requests})
    if rng.random() < 0.5:
        max_tokens = max(1, min(round(spec.max_tokens * factor), shape.pool_tokens // 2))
        room = max(1, shape.pool_tokens - max_tokens * spec.n - 1)
        if spec.prompt_len > room:
            return None
        return _replace(scenario, spec, dataclasses.replace(spec, id=rid, max_tokens=max_tokens), "scale")
    suffix = max(1, round(spec.suffix_len * factor)) if spec.suffix_len else 0
    length = min(spec.prefix_len + suffix, _room(shape, spec))
    if length < spec.prefix_len or length == spec.prompt_len:
        return None
    tail = spec.prompt_ids[spec.prefix_len:]
    ids = _Prompts(scenario, rng, shape).build(spec.prefix_name, spec.prefix_len, length, tail)
    return _replace(scenario, spec, dataclasses.replace(spec, id=rid, prompt_ids=ids), "scale")


def snap(scenario: Scenario, rng: random.Random, shape: TargetShape) -> Scenario | None:
    spec = rng.choice(scenario.requests)
    unit = rng.choice([*shape.pages, *TILE_SIZES, *([shape.chunked_prefill_size] if shape.chunked_prefill_size else [])])
    rid = _retag(spec, "k", {r.id for r in scenario.requests})
    if spec.prefix_name is not None and rng.random() < 0.6:
        prefix_len = max(1, round(spec.prefix_len / unit)) * unit + rng.choice([-1, 0, 0, 1])
        length = min(max(spec.prompt_len, prefix_len + 1), _room(shape, spec))
        if not 0 < prefix_len < length or prefix_len == spec.prefix_len:
            return None
        ids = _Prompts(scenario, rng, shape).build(spec.prefix_name, prefix_len, length)
        new = dataclasses.replace(spec, id=rid, prompt_ids=ids, prefix_len=prefix_len)
        return _replace(scenario, spec, new, "snap")
    length = min(max(1, round(spec.prompt_len / unit)) * unit + rng.choice([-1, 0, 1]), _room(shape, spec))
    if length <= spec.prefix_len or length == spec.prompt_len:
        return None
    tail = spec.prompt_ids[spec.prefix_len:]
    ids = _Prompts(scenario, rng, shape).build(spec.prefix_name, spec.prefix_len, length, tail)
    return _replace(scenario, spec, dataclasses.replace(spec, id=rid, prompt_ids=ids), "snap")


def share(scenario: Scenario, rng: random.Random, shape: TargetShape) -> Scenario | None:
    donors = [r for r in scenario.requests if r.prefix_name is not None]
    if not donors:
        return None
    donor = rng.choice(donors)
    spec = rng.choice([r for r in scenario.requests if r.id != donor.id] or [donor])
    if spec.id == donor.id or (spec.prefix_name == donor.prefix_name and spec.prefix_len == donor.prefix_len):
        return None
    length = min(max(spec.prompt_len, donor.prefix_len + 1), _room(shape, spec))
    if length <= donor.prefix_len:
        return None
    ids = _Prompts(scenario, rng, shape).build(donor.prefix_name, donor.prefix_len, length)
    new = dataclasses.replace(spec, id=_retag(spec, "p", {r.id for r in scenario.requests}), prompt_ids=ids,
                              prefix_name=donor.prefix_name, prefix_len=donor.prefix_len)
    return _replace(scenario, spec, new, "share")


def cancel(scenario: Scenario, rng: random.Random, shape: TargetShape) -> Scenario | None:
    spec = rng.choice(scenario.requests)
    after = None if spec.cancelled else round(math.exp(rng.uniform(math.log(5), math.log(400))), 1)
    # A request cut on purpose must outlive its cut to exercise the abort path: give it length.
    max_tokens = max(spec.max_tokens, 128) if after is not None else spec.max_tokens
    if spec.prompt_len > max(1, shape.pool_tokens - max_tokens * spec.n - 1):
        max_tokens = spec.max_tokens
    new = dataclasses.replace(spec, id=_retag(spec, "c", {r.id for r in scenario.requests}),
                              cancel_after_ms=after, max_tokens=max_tokens)
    return _replace(scenario, spec, new, "cancel")


def drop(scenario: Scenario, rng: random.Random, shape: TargetShape) -> Scenario | None:
    if len(scenario.requests) <= 2:
        return None
    gone = rng.choice(scenario.requests)
    return _with(scenario, [r for r in scenario.requests if r.id != gone.id], "drop")


def cross(scenario: Scenario, rng: random.Random, shape: TargetShape, *, tries: int = 24,
          dims: Collection[str] = CROSSABLE) -> Scenario | None:
    """Move one request into another bucket of one dimension of `dims` (`coverage.CROSSABLE`,
    those the target's space has), every other dimension of every request (the scenario's pool
    pressure included) kept; None when no try found such a move, or the space has none of `dims`."""
    space = FeatureSpace.for_shape(shape)
    movable = [d for d in CROSSABLE if d in dims and d in space.names and len(space.dimension(d).buckets) > 1]
    if not movable:
        return None
    before = points(scenario, shape)
    spec = rng.choice(scenario.requests)
    dim = rng.choice(movable)
    to = rng.choice([b for b in space.dimension(dim).buckets if b != before[spec.id][dim]])
    rid = _retag(spec, "x", {r.id for r in scenario.requests})
    for _ in range(tries):
        new = _crossed(scenario, spec, dim, to, rng, shape)
        if new is None:
            continue
        out = _replace(scenario, spec, dataclasses.replace(new, id=rid), "cross")
        after = points(out, shape)
        moved = {d for d in before[spec.id] if before[spec.id][d] != after[rid][d]}
        others = all(before[r.id] == after[r.id] for r in scenario.requests if r.id != spec.id)
        if moved - _DRAGS.get((dim, to), set()) == {dim} and others:
            return out
    return None


# A move that cannot happen alone: a constraint needs its EOS, so a request that ignored it
# moves to `sampling=eos` as it takes one.
_DRAGS: dict[tuple[str, str], set[str]] = {("constraint", "choices"): {"sampling"}}


def _crossed(scenario: Scenario, spec: RequestSpec, dim: str, to: str, rng: random.Random,
             shape: TargetShape) -> RequestSpec | None:
    """One try at `spec` with dimension `dim` in bucket `to` (the caller checks the rest). A
    capability (`coverage.SURFACE`) is added or removed: a salt of the scenario's tenants (two
    drawn where it has none), a seeded draw, a constraint (with its EOS), an adapter."""
    if dim in SURFACE:
        salts = sorted({r.cache_salt for r in scenario.requests if r.cache_salt is not None})
        fields = surface_fields(rng, shape, dim, to, salts or [tenant_salt(rng, t) for t in "ab"])
        if fields.get("choices") is not None:
            fields["ignore_eos"] = False
        return dataclasses.replace(spec, **fields)
    page = shape.unit if shape.page_size else int(scenario.meta.get("page_size") or 64)
    if dim == "n":
        return dataclasses.replace(spec, n={"1": 1, "2": 2}.get(to, rng.randint(3, 4)))
    if dim == "stream":
        return dataclasses.replace(spec, stream=to == "on")
    if dim == "sampling":
        if spec.choices is not None:
            return None  # a constrained request ends at its EOS (RequestSpec): no other bucket
        return dataclasses.replace(spec, ignore_eos=to == "ignore-eos")
    if dim == "cancel":
        after = {"none": None, "early": rng.uniform(5, 45)}.get(to, rng.uniform(60, 300))
        return dataclasses.replace(spec, cancel_after_ms=None if after is None else round(after, 1))
    if dim == "decode":
        return dataclasses.replace(spec, max_tokens=max_tokens_in(rng, to, spec.prompt_len, page))
    prompts = _Prompts(scenario, rng, shape)
    tail = spec.prompt_ids[spec.prefix_len:]
    if dim == "prompt":
        length = prompt_len_in(rng, to, page, shape.chunked_prefill_size, _room(shape, spec))
        if length < spec.prefix_len:
            return None
        ids = prompts.build(spec.prefix_name, spec.prefix_len, length, tail)
        return dataclasses.replace(spec, prompt_ids=ids)
    # dim == "prefix": share the scenario's first named prefix (or start one) at the new alignment.
    prefix_len = 0 if to == "none" else prefix_len_in(rng, to, page, spec.prompt_len)
    name = None if to == "none" else next((r.prefix_name for r in scenario.requests if r.prefix_name), "p0")
    ids = prompts.build(name, prefix_len, spec.prompt_len, tail)
    return dataclasses.replace(spec, prompt_ids=ids, prefix_name=name, prefix_len=prefix_len)


CROSS = Mutator("cross", "x", cross)

MUTATORS: dict[str, Mutator] = {
    m.name: m
    for m in (
        Mutator("burst", "b", burst),
        Mutator("shift", "s", shift),
        Mutator("split", "w", split),
        Mutator("scale", "l", scale),
        Mutator("snap", "k", snap),
        Mutator("share", "p", share),
        Mutator("cancel", "c", cancel),
        Mutator("drop", "d", drop),
    )
}


def mutate(scenario: Scenario, rng: random.Random, shape: TargetShape, *, seed: int,
           extra: Sequence[Mutator] = ()) -> Scenario:
    """Stack 1 to `MAX_STACK` random mutators on `scenario`; the result carries `seed`.

    Mutators that do not apply are skipped; if none applies the result is a shifted copy, so a
    mutation never returns its parent unchanged. `extra` joins the table (the `cross` mutator).
    """
    table = {**MUTATORS, **{m.name: m for m in extra}}
    out = scenario
    for _ in range(rng.randint(1, MAX_STACK)):
        m = table[rng.choice(sorted(table))]
        out = m.apply(out, rng, shape) or out
    if out is scenario:
        out = shift(scenario, rng, shape) or scenario
    return dataclasses.replace(out, seed=seed)
