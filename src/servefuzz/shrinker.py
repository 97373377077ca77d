"""Shrink: the smallest scenario that still shows a finding.

    $ servefuzz shrink findings/finding_00003_123.json --launch reference
    -> findings/finding_00003_123_min.json   (the minimal scenario, confirmed 10 times)

Shaped after Hypothesis. Every candidate goes through one gate, `Shrinker.consider`, which
accepts it only if it is strictly smaller than the best scenario so far by `sort_key` *and* the
test says it still shows the finding. The real test (`reproduction_test`) replays a candidate
through the one reproduction path (`trial.reproduce`) until `stats.ShrinkGate` decides that it
reproduces about as often as the finding itself does on this server (a candidate that lost part
of the bug, 6/10 where the finding showed 10/10, is turned down), and the oracles must give it
the finding's verdict, so that a corruption never shrinks into numeric drift or the other way
round. A finding that no longer reproduces is not shrunk: it is reported with its history of
rates, flaky when it reproduced before (Hypothesis's rule). On a server servefuzz
launched, a candidate that passes must pass again on a freshly started one (`--no-restart`
skips that), so that no minimal finding owes its reproduction to damage earlier candidates
left behind; the minimal finding is confirmed on a fresh server too. Passes only propose
candidates; they run in order, again and again, until a whole round accepts nothing (a fixed
point) or the replay budget is spent:

| pass              | proposes                                                                 |
|-------------------|--------------------------------------------------------------------------|
| drop_requests     | subsets of the requests (Zeller's ddmin)                                 |
| scale_offsets     | every offset divided by 16, else 4, else 2, again while accepted (to a   |
|                   | span of 50 ms at least)                                                  |
| zero_offsets      | all offsets 0 (one burst); the earliest moved to 0; each offset to 0     |
| merge_offsets     | each group of requests sent together merged into the group before it     |
| shrink_max_tokens | every request's max_tokens 1 at once, else every one but the flagged     |
|                   | requests', then each request's: 1 first, then from below (not for a      |
|                   | request cut on purpose: it must still be running when it is cut)         |
| drop_requests     | again, now that the outputs are short                                    |
| shrink_prompt     | shorter suffixes, first keeping the prompt length modulo the page size   |
| shrink_prefix     | each shared prefix cut for all its sharers: no prefix, or fewer pages    |
|                   | with the same remainder (128 -> 64; 65 -> 1), so page relations hold     |
| shrink_n          | every request's n 1 at once, then each request's: 1 first, then from     |
|                   | below                                                                    |

Requests are dropped first, on the scenario as found (the timing a hand case or a campaign gave
it has its margins; a scaled-down span under a loaded machine may not), then the time passes: a
replay lasts about as long as its scenario's span, so a shorter span makes every later candidate
cheaper to test. The length passes search from below (`Shrinker.minimize_int`) because on a
real server an accepted candidate costs several times a rejected one.

`sort_key` is a total order: (requests, prompt tokens, sum of max_tokens, sum of n, distinct
offsets, sum of offsets, streamed requests, then the scenario's JSON as the last tie-break).

Requests keep their ids during the search. At the end each changed request's id gains its
lineage, one tag per kind of change, in this order: `_st` max_tokens, `_sp` prompt, `_sx`
prefix, `_sn` n, `_so` offset (`r03` whose prefix and max_tokens shrank becomes
`r03_st_sx`). A shared prefix is always cut to the first tokens of the same named prefix, so
requests that share it still share exactly `prefix_len` tokens.

`servefuzz shrink` (in `servefuzz.cli`) writes the minimal finding beside the original.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from servefuzz import stats
from servefuzz.finding import Finding, derived_name
from servefuzz.oracles.controls import MIN_CONTROL_RUNS, back
from servefuzz.oracles.judge import Expectation
from servefuzz.servers import Replayer
from servefuzz.trial import DEFAULT_RUNS, suspects
from servefuzz.workload import RequestSpec, Scenario

__all__ = [
    "SortKey",
    "Trial",
    "Test",
    "PassStats",
    "ShrinkResult",
    "Shrinker",
    "PASSES",
    "sort_key",
    "ddmin",
    "with_lineage",
    "minimal_name",
    "reproduction_test",
    "Shrunk",
    "shrink_finding",
    "render_stats",
]

_T = TypeVar("_T")

SortKey = tuple[int, int, int, int, int, float, int, str]


def sort_key(scenario: Scenario) -> SortKey:
    """How complex a scenario is; smaller is simpler, and any two scenarios compare.

    >>> one = Scenario(1, (RequestSpec("r01", 0.0, (5, 6, 7), 4),))
    >>> two = Scenario(1, (RequestSpec("r01", 0.0, (5, 6), 4), RequestSpec("r02", 3.0, (8,), 1)))
    >>> sort_key(one) < sort_key(two)   # fewer requests first, whatever their sizes
    True
    """
    rs = scenario.requests
    return (
        len(rs),
        sum(r.prompt_len for r in rs),
        sum(r.max_tokens for r in rs),
        sum(r.n for r in rs),
        len({r.offset_ms for r in rs}),
        round(sum(r.offset_ms for r in rs), 3),
        sum(r.stream for r in rs),
        json.dumps(scenario.to_json()["requests"], sort_keys=True),
    )


@dataclass(frozen=True)
class Trial:
    """What the test said about one candidate, and how many replays it cost."""

    reproduced: bool
    replays: int


Test = Callable[[Scenario], Trial]


@dataclass(frozen=True)
class PassStats:
    """One pass over the whole search: candidates considered, accepted, replays spent."""

    name: str
    calls: int = 0
    accepted: int = 0
    replays: int = 0


@dataclass(frozen=True)
class ShrinkResult:
    """Where a search started and ended, what each pass did, and why it stopped."""

    original: Scenario
    best: Scenario
    passes: tuple[PassStats, ...]
    replays: int
    rounds: int
    stopped_because: str


class Shrinker:
    """Shrinks `scenario` with the passes in `PASSES`, every candidate through `consider`.

    `test` is assumed to hold for `scenario` itself. `page_size` guides the length passes
    (None: no page relations to keep). `budget` caps the replays the tests may spend.

    >>> sc = Scenario(1, tuple(RequestSpec(f"r{i}", float(i), (5,) * 8, 4) for i in range(6)))
    >>> s = Shrinker(sc, lambda c: Trial("r3" in {r.id for r in c.requests}, 1), page_size=4)
    >>> [(r.id, r.prompt_len, r.max_tokens, r.offset_ms) for r in s.run().best.requests]
    [('r3', 1, 1, 0.0)]
    """

    def __init__(self, scenario: Scenario, test: Test, *, page_size: int | None = None, budget: int | None = None,
                 flagged: frozenset[str] = frozenset()) -> None:
        self.best = scenario
        self.original = scenario
        self.test = test
        # The requests the finding flagged: they show the divergence, so they are the ones likely
        # to need their length; the passes may try everything else smaller first.
        self.flagged = flagged
        self.page_size = page_size if page_size and page_size > 1 else None
        self.budget = budget
        self.replays = 0
        self._rejected: set[Scenario] = set()
        self._stats: dict[str, dict[str, int]] = {}
        self._pass = ""

    @property
    def budget_spent(self) -> bool:
        return self.budget is not None and self.replays >= self.budget

    def consider(self, candidate: Scenario) -> bool:
        """The one gate: accept `candidate` (making it the best) iff it is strictly smaller and
        the test says it still shows the finding."""
        stats = self._stats.setdefault(self._pass, {"calls": 0, "accepted": 0, "replays": 0})
        stats["calls"] += 1
        if not candidate.requests or sort_key(candidate) >= sort_key(self.best):
            return False
        if candidate in self._rejected or self.budget_spent:
            return False
        trial = self.test(candidate)
        self.replays += trial.replays
        stats["replays"] += trial.replays
        if not trial.reproduced:
            self._rejected.add(candidate)
            return False
        stats["accepted"] += 1
        self.best = candidate
        return True

    def run(self) -> ShrinkResult:
        """Run every pass, round after round, until a round accepts nothing or the budget is spent."""
        rounds = 0
        while not self.budget_spent:
            rounds += 1
            before = self.best
            for name, shrink_pass in PASSES:
                self._pass = name
                shrink_pass(self)
            if self.best == before:
                break
        names = dict.fromkeys(name for name, _ in PASSES)  # a pass that runs twice a round is one row
        passes = tuple(PassStats(name, **self._stats.get(name, {})) for name in names)
        why = f"replay budget of {self.budget} spent" if self.budget_spent else "fixed point"
        return ShrinkResult(self.original, self.best, passes, self.replays, rounds, why)

    # -- helpers the passes share ------------------------------------------------------------

    def minimize_int(self, value: int, lo: int, make: Callable[[int], Scenario | None]) -> None:
        """Consider `make(v)` for the smallest v in [lo, value) that is accepted, assuming that
        what works at some size works at any larger one. `make` may decline a value (None).

        From below, as Hypothesis's `find_integer` searches: `lo`, then lo + 1, lo + 2, lo + 4,
        ... until one is accepted (or value is reached), then bisection between the last value
        turned down and the first accepted. Against a real server an accepted candidate costs
        about seven times a rejected one (the gate's 13 runs and a fresh-server re-check against
        2 runs for a candidate that never reproduces: `stats.ShrinkGate`), and bisecting from
        the top accepts at every halving on its way down to a small value (16 -> 8 -> 4 -> 2:
        three acceptances), where probing from below turns down a few cheap candidates and
        accepts once.
        """
        def accept(v: int) -> bool:
            candidate = make(v)
            return candidate is not None and self.consider(candidate)

        if value <= lo or accept(lo):
            return
        bad, step = lo, 1
        while lo + step < value and not self.budget_spent:
            if accept(lo + step):
                break
            bad, step = lo + step, step * 2
        good = min(lo + step, value)
        while good - bad > 1 and not self.budget_spent:
            mid = (bad + good) // 2
            if accept(mid):
                good = mid
            else:
                bad = mid

    def consider_all(self, change: Callable[[RequestSpec], RequestSpec]) -> bool:
        """One candidate with `change` made to every request at once, considered only when it
        changes more than one (with one, it is the per-request candidate that follows anyway):
        when the whole scenario tolerates the change, one acceptance instead of one per request."""
        changed = [change(r) for r in self.best.requests]
        if sum(c != r for c, r in zip(changed, self.best.requests)) < 2:
            return False
        return self.consider(self.best.with_requests(changed))


# -- the passes ------------------------------------------------------------------------------


def drop_requests(s: Shrinker) -> None:
    ddmin(list(s.best.requests), lambda subset: s.consider(s.best.with_requests(subset)))


def shrink_max_tokens(s: Shrinker) -> None:
    # A flagged request diverges at some token, so it often needs more than one: when all at 1
    # is turned down, one candidate with every other request at 1 saves an acceptance (about 15
    # replays) per bystander over the per-request search that follows.
    if not s.consider_all(lambda r: r if r.cancelled else dataclasses.replace(r, max_tokens=1)) and s.flagged:
        s.consider_all(lambda r: r if r.cancelled or r.id in s.flagged else dataclasses.replace(r, max_tokens=1))
    for rid in _ids(s):
        spec = s.best.by_id().get(rid)
        # A request cut on purpose keeps its length: it must still be running when it is cut.
        if spec is not None and not spec.cancelled:
            s.minimize_int(spec.max_tokens, 1, partial(_field, s, rid, "max_tokens"))


def shrink_n(s: Shrinker) -> None:
    s.consider_all(lambda r: dataclasses.replace(r, n=1))
    for rid in _ids(s):
        spec = s.best.by_id().get(rid)
        if spec is not None:
            s.minimize_int(spec.n, 1, partial(_field, s, rid, "n"))


def shrink_prompt(s: Shrinker) -> None:
    """Shorter suffixes (the part after the shared prefix), keeping the suffix's first tokens.

    First in whole pages, so the prompt length keeps its remainder modulo the page size; then
    token by token.
    """
    page = s.page_size
    for rid in _ids(s):
        spec = s.best.by_id().get(rid)
        if spec is None:
            continue
        least = 0 if spec.prefix_len else 1  # a prompt needs a token; a shared one may be all prefix
        if page is not None and spec.suffix_len - page >= least:
            rem = spec.suffix_len % page
            base = rem if rem >= least else rem + page
            s.minimize_int((spec.suffix_len - base) // page, 0, partial(_suffix_pages, s, rid, base, page))
        s.minimize_int(s.best.by_id()[rid].suffix_len, least, partial(_suffix, s, rid))


def shrink_prefix(s: Shrinker) -> None:
    """Cut each shared prefix for all the requests sharing it: to nothing, else to fewer pages
    with the same remainder modulo the page size (without a page size: bisection)."""
    page = s.page_size
    groups: dict[tuple[str | None, int], list[str]] = {}
    for r in s.best.requests:
        if r.prefix_len:
            groups.setdefault((r.prefix_name, r.prefix_len), []).append(r.id)
    for (_, length), ids in groups.items():
        to_nothing = _prefix_candidate(s.best, ids, 0)
        if to_nothing is not None and s.consider(to_nothing):
            continue
        if page is None:
            s.minimize_int(length, 1, partial(_prefix_pages, s, ids, 0, 1))
        elif length >= page:
            s.minimize_int(length // page, 0, partial(_prefix_pages, s, ids, length % page, page))


def zero_offsets(s: Shrinker) -> None:
    s.consider(_offsets(s.best, lambda r: 0.0))
    start = min(r.offset_ms for r in s.best.requests)
    if start > 0:
        s.consider(_offsets(s.best, lambda r: r.offset_ms - start))
    for rid in _ids(s):
        s.consider(_offsets(s.best, partial(_moved, frozenset([rid]), 0.0)))


# The factors `scale_offsets` tries, boldest first, and the least span it proposes (ms). Below
# about 50 ms a shorter span buys little (a replay of a scenario at span 0 still took about
# 0.3 s on a busy 2-core box: the flush, the references, the requests themselves), while the
# finding's margin shrinks toward the engine's own step times, which vary several-fold with the
# machine's load: a zoo case scaled to 25 ms came back 4/5 where its finding had 5/5
# (docs/benchmarks.md, "Shrink cost"). zero_offsets proposes 0, a burst, on its own.
SCALES = (16, 4, 2)
SCALE_FLOOR_MS = 50.0


def scale_offsets(s: Shrinker) -> None:
    """Every offset divided by 16, else 4, else 2 (their order, and which requests are sent
    together, kept), again while one is accepted and the span stays at SCALE_FLOOR_MS or more:
    a scenario's span is most of what one of its replays costs (a replay waits for its last
    request), so every later replay gets cheaper.

    Boldest first because a rejection is cheap and an acceptance is not: the candidate that is
    turned down costs 2 replays of a short scenario, and one bold acceptance replaces the two
    to four halvings that would each cost a full gate (a sliding-window case went 610 -> 38 ms
    in four halvings, 58 replays)."""
    while True:
        span = max(r.offset_ms for r in s.best.requests)
        if not any(span / k >= SCALE_FLOOR_MS and s.consider(_offsets(s.best, partial(_divided, k))) for k in SCALES):
            return


def merge_offsets(s: Shrinker) -> None:
    """Merge each group of requests sent at one offset into the group just before it."""
    i = 1
    while True:
        times = sorted({r.offset_ms for r in s.best.requests})
        if i >= len(times):
            return
        late = frozenset(r.id for r in s.best.requests if r.offset_ms == times[i])
        if not s.consider(_offsets(s.best, partial(_moved, late, times[i - 1]))):
            i += 1


# The order. Requests are dropped first, on the scenario as it was found: the largest cut, and
# the one a maintainer reads first. Then the time passes (a replay lasts about as long as its
# scenario's span, so a shorter span makes every later candidate cheaper), then the token passes.
# Scaling the span down first made each shrink faster on a quiet box (docs/benchmarks.md), but it
# made a timing-dependent scenario marginal under load, and then every later candidate costs the
# gate its most (one that reproduces sometimes is sampled up to the cap): in the fresh-clone CI of
# 2026-12-08, stale-slot-continuation's offsets went to a quarter and all 168 replays of the
# budget went to dropping none of its six requests. Requests are dropped again once the output
# lengths are cut, inside the round: a bystander that was needed while the others decoded forty
# tokens may not be at five, and a timing-dependent finding's budget often ends before a second
# round (CI, 2026-12-07: a window fault kept four requests with three enough). Over a scenario no
# pass changed, the second drop costs nothing: the gate remembers every candidate it turned down.
PASSES: tuple[tuple[str, Callable[[Shrinker], None]], ...] = (
    ("drop_requests", drop_requests),
    ("scale_offsets", scale_offsets),
    ("zero_offsets", zero_offsets),
    ("merge_offsets", merge_offsets),
    ("shrink_max_tokens", shrink_max_tokens),
    ("drop_requests", drop_requests),
    ("shrink_prompt", shrink_prompt),
    ("shrink_prefix", shrink_prefix),
    ("shrink_n", shrink_n),
)


def ddmin(items: Sequence[_T], test: Callable[[list[_T]], bool]) -> list[_T]:
    """Zeller's ddmin: a 1-minimal sublist of `items` (order kept) for which `test` holds,
    assuming it holds for `items`. Empty lists are never tested.

    >>> ddmin(list(range(10)), lambda xs: 3 in xs and 7 in xs)
    [3, 7]
    """
    items = list(items)
    n = 2
    while len(items) >= 2:
        chunks = [items[len(items) * i // n : len(items) * (i + 1) // n] for i in range(n)]
        subset = next((c for c in chunks if test(c)), None)
        if subset is not None:
            items, n = subset, 2
            continue
        complement = None
        for i in range(n if n > 2 else 0):  # with two chunks, each complement was just tested
            rest = [x for j, c in enumerate(chunks) if j != i for x in c]
            if test(rest):
                complement = rest
                break
        if complement is not None:
            items, n = complement, max(n - 1, 2)
        elif n >= len(items):
            break
        else:
            n = min(len(items), 2 * n)
    return items


def _ids(s: Shrinker) -> list[str]:
    return [r.id for r in s.best.requests]


def _with(scenario: Scenario, rid: str, **changes: Any) -> Scenario:
    return scenario.with_requests([dataclasses.replace(r, **changes) if r.id == rid else r for r in scenario.requests])


def _field(s: Shrinker, rid: str, name: str, value: int) -> Scenario:
    return _with(s.best, rid, **{name: value})


def _suffix(s: Shrinker, rid: str, length: int) -> Scenario:
    r = s.best.by_id()[rid]
    return _with(s.best, rid, prompt_ids=r.prompt_ids[: r.prefix_len + length])


def _suffix_pages(s: Shrinker, rid: str, base: int, page: int, pages: int) -> Scenario:
    return _suffix(s, rid, base + pages * page)


def _prefix_pages(s: Shrinker, ids: Sequence[str], base: int, page: int, pages: int) -> Scenario | None:
    return _prefix_candidate(s.best, ids, base + pages * page)


def _offsets(scenario: Scenario, offset: Callable[[RequestSpec], float]) -> Scenario:
    return scenario.with_requests([dataclasses.replace(r, offset_ms=round(offset(r), 3)) for r in scenario.requests])


def _divided(k: int, r: RequestSpec) -> float:
    return r.offset_ms / k


def _moved(ids: frozenset[str], to: float, r: RequestSpec) -> float:
    """The offset of `r` once the requests `ids` are moved to `to`."""
    return to if r.id in ids else r.offset_ms


def _prefix_candidate(scenario: Scenario, ids: Sequence[str], new: int) -> Scenario | None:
    """The requests `ids` (sharing one prefix at one length) cut to share only `new` tokens:
    each keeps the first `new` tokens of its own prompt (the same named prefix) and its whole
    suffix.

    None when there is nothing to cut, when a prompt would be left empty, or when the sharing
    would become inexact: a request's suffix starting with the token that follows the first
    `new` tokens in another request that shares more of the prefix.
    """
    members = [r for r in scenario.requests if r.id in ids]
    if not members or any(r.prefix_len <= new or new + r.suffix_len < 1 for r in members):
        return None
    name = members[0].prefix_name
    others = [r for r in scenario.requests if r.prefix_name == name and r.prefix_len > new and r.id not in ids]
    taken = {r.prompt_ids[new] for r in others}
    if any(r.suffix_len and r.prompt_ids[r.prefix_len] in taken for r in members):
        return None
    changed = {
        r.id: dataclasses.replace(
            r, prompt_ids=r.prompt_ids[:new] + r.prompt_ids[r.prefix_len :], prefix_len=new,
            prefix_name=name if new else None,
        )
        for r in members
    }
    return scenario.with_requests([changed.get(r.id, r) for r in scenario.requests])


# -- lineage ---------------------------------------------------------------------------------


def with_lineage(original: Scenario, best: Scenario) -> tuple[Scenario, dict[str, str]]:
    """`best` with each changed request's id extended by its shrink tags; and old id -> new id.

    >>> a = Scenario(1, (RequestSpec("r03", 5.0, (1, 2, 3), 8),))
    >>> b = Scenario(1, (RequestSpec("r03", 0.0, (1, 2, 3), 2),))
    >>> with_lineage(a, b)[1]
    {'r03': 'r03_st_so'}
    """
    before = original.by_id()
    taken = {r.id for r in best.requests}
    renames: dict[str, str] = {}
    for r in best.requests:
        o = before.get(r.id)
        if o is None:
            continue
        tags = [
            tag
            for tag, changed in (
                ("st", r.max_tokens != o.max_tokens),
                ("sp", r.suffix_len != o.suffix_len),
                ("sx", r.prefix_len != o.prefix_len),
                ("sn", r.n != o.n),
                ("so", r.offset_ms != o.offset_ms),
            )
            if changed
        ]
        new = "_".join([r.id, *tags])
        if tags and new not in taken:
            renames[r.id] = new
            taken.add(new)
    renamed = best.with_requests([dataclasses.replace(r, id=renames.get(r.id, r.id)) for r in best.requests])
    return dataclasses.replace(renamed, meta={**best.meta, "shrunk_from": len(original.requests)}), renames


# -- against a server --------------------------------------------------------------------------


def reproduction_test(bench: Replayer, expect: Expectation, gate: stats.ShrinkGate, *, restart: bool = True) -> Test:
    """The gate's test on a real server: the candidate is replayed one run at a time until
    `gate` (`stats.ShrinkGate`, against the finding's own rate) decides, and passes when it
    accepts and the oracles give the flagged requests the finding's verdict (a corruption never
    shrinks into drift). Undecided at the gate's cap is not a pass.

    With `restart`, on a server `bench` launched, a candidate that passes is tested again on a
    fresh server and accepted only if it passes there too: a bug may leave damage that a cache
    flush does not clear (a broken allocator, stale KV in free pages; the reference engine's
    flush leaves its CUDA-graph buffers, which stale-padding reads), and a minimal finding must
    not owe its reproduction to what earlier candidates did to the server. That re-check is the
    gate's reject rule alone (`ShrinkGate.recheck`: two runs against a finding at 10/10, where
    the full gate took 13 again): the candidate's rate was measured already, and the minimal
    finding is confirmed on a fresh server at the end anyway.
    """

    def passes(candidate: Scenario, decide: Callable[[int, int], str], runs: int) -> tuple[bool, int]:
        rep = bench.reproduce(candidate, expect, runs, stop=lambda k, n: decide(k, n) != stats.UNDECIDED)
        accepted = decide(rep.reproduced, rep.attempts) == stats.ACCEPT
        # Compared unbacked: the replays' own judgement may back a flip by what it holds (a broken
        # constraint, a leak: `oracles.judge`), and that is the finding's class coming back.
        got = rep.verdict_of(expect.within(candidate))
        return accepted and got is not None and got.unbacked is expect.verdict.unbacked, rep.attempts

    def test(candidate: Scenario) -> Trial:
        if not expect.within(candidate).anomalies:
            return Trial(False, 0)  # no flagged request left: it cannot show this finding
        ok, spent = passes(candidate, gate.decide, gate.test.cap)
        if ok and restart and bench.can_restart:
            bench.restart()
            ok, again = passes(candidate, gate.recheck, gate.recheck_runs)
            spent += again
        return Trial(ok, spent)

    return test


@dataclass(frozen=True)
class Shrunk:
    """What shrinking a finding made: the minimal finding and the search's statistics, or, when
    the finding no longer reproduces here, neither, with its history of rates (`trail`): a
    finding that reproduced and then stopped is *flaky*, reported so, never shrunk into nothing."""

    finding: Finding | None
    search: ShrinkResult | None
    trail: stats.Trail


def shrink_finding(
    finding: Finding,
    bench: Replayer,
    *,
    runs: int = stats.REPRODUCTION.cap,
    budget: int | None = 300,
    confirm_runs: int = DEFAULT_RUNS,
    restart: bool = True,
) -> Shrunk:
    """Shrink `finding` on `bench`'s server and confirm the minimal scenario `confirm_runs` times.

    First the finding itself is replayed until the sequential test decides (at most `runs`
    times): its rate here is what every candidate is held to (`stats.ShrinkGate`). When it is
    decided "not reproduced", or stays undecided, there is nothing to shrink: `Shrunk.finding`
    is None and the trail says why (flaky when it had reproduced before).
    """
    expect = Expectation.of(finding)
    trail = stats.Trail()
    if finding.confirmation is not None:
        trail.add("when found", finding.confirmation.interval)
    first = bench.reproduce(finding.scenario, expect, runs,
                            stop=lambda seen, done: stats.decide(seen, done) != stats.UNDECIDED)
    here = stats.Rate(first.reproduced, first.attempts)
    trail.add("re-checked before shrinking", here)
    if stats.decide(here.k, here.n) != stats.REPRODUCED:
        return Shrunk(None, None, trail)
    gate = stats.ShrinkGate(here, cap=max(runs, 10))
    test = reproduction_test(bench, expect, gate, restart=restart)
    page = finding.target.page_size or finding.scenario.meta.get("page_size")
    shrinker = Shrinker(finding.scenario, test, page_size=page if isinstance(page, int) else None, budget=budget,
                        flagged=frozenset(a.request_id for a in finding.anomalies))
    result = shrinker.run()
    scenario, renames = with_lineage(finding.scenario, result.best)
    if restart and bench.can_restart:
        bench.restart()  # the minimal finding's rate is measured on a fresh server
    final = bench.reproduce(scenario, expect.renamed(renames), confirm_runs)
    trail.add("minimal scenario, confirmed", final.confirmation.interval)
    anomalies = final.judgement.anomalies or expect.renamed(renames).within(scenario).anomalies
    # The control that backed the finding backed its scenario, not this one: a confident flip
    # of the minimal scenario is suspected again until the content swap backs it anew.
    minimal_expect = Expectation(expect.verdict, anomalies)
    if final.reproduced and suspects(minimal_expect):
        control = bench.content_swap(scenario, minimal_expect, max(confirm_runs, MIN_CONTROL_RUNS), original=final.loaded)
        if control.lost is None:
            anomalies = back(anomalies, control.results)
    note = (
        f"shrunk from {finding.filename}: {len(finding.scenario.requests)} -> {len(scenario.requests)} requests, "
        f"{result.replays} replays over {result.rounds} rounds ({result.stopped_because}); each candidate held to "
        f"{here} by the shrink gate"
    )
    flaky = ["flaky: the minimal scenario did not come back when confirmed"] if final.flaky else []
    minimal = dataclasses.replace(
        finding,
        scenario=scenario,
        target=bench.info,
        anomalies=anomalies,
        confirmation=final.confirmation,
        notes=(note, *flaky),
        triage=None,
        triggered=(),  # the original's execution's evidence (exercise.triggered), not the minimal one's
    )
    return Shrunk(minimal, result, trail)


def minimal_name(path: Path) -> str:
    """The minimal finding's file name, beside the original: `finding_00003_123_min.json`
    (a minimal finding shrunk again: `..._min2.json`, so that the one it came from stays)."""
    return derived_name(path, "min")


def render_stats(result: ShrinkResult) -> list[str]:
    """Per-pass statistics, then the before/after sizes."""
    lines = [f"{'pass':<18} {'calls':>6} {'accepted':>9} {'replays':>8}"]
    lines += [f"{p.name:<18} {p.calls:>6} {p.accepted:>9} {p.replays:>8}" for p in result.passes]
    a, b = sort_key(result.original), sort_key(result.best)
    lines.append(
        f"requests {a[0]} -> {b[0]}, prompt tokens {a[1]} -> {b[1]}, max_tokens {a[2]} -> {b[2]}; "
        f"{result.replays} replays, {result.rounds} rounds, {result.stopped_because}"
    )
    return lines
