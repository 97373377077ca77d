"""Tenant isolation: a prefix-cache salt (`RequestSpec.cache_salt`) must keep tenants apart.

vLLM (PR #17045, after CVE-2025-46570) and SGLang (PR #30827) key their prefix caches on a
per-request salt: requests with different salts must never share a cached page, requests with
one salt (or none) share as before. The check is the paired assertion of vLLM PR #53347,
because its negative half alone also passes on a server whose cache is off:

- **same salt reuses**: a request whose prefix a request of its own salt finished before it was
  sent reports `cached_tokens > 0`. When no such request does, the cache is off (or never kept
  the pages) and nothing was tested: the check says "caching off, isolation untested", never
  "isolated";
- **another salt never does**: a request may report at most as many cached tokens as it shares
  with some request of its own salt in the same run (prompt and answer: an engine may cache
  both). More is a cross-tenant hit on the server's own count: `isolation-breach`;
- **timing**: where the scenario names a *cold twin* for a cross-salt probe
  (`Scenario.meta["twins"]`: a request of the same shape whose prefix nobody cached), the
  probe's time to first token is held against its twin's, in every loaded run. An advantage
  above the execution's own timing noise in every run, with no cached tokens reported, is at
  most `suspected-isolation-breach`: timing alone proves no read.

    >>> from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
    >>> from servefuzz.workload import RequestSpec, Scenario
    >>> p = tuple(range(3, 67))
    >>> sc = Scenario(1, (RequestSpec("a1", 0.0, p + (90,), 2, "t", 64, cache_salt="A"),
    ...                   RequestSpec("a2", 50.0, p + (91,), 2, "t", 64, cache_salt="A"),
    ...                   RequestSpec("b1", 60.0, p + (92,), 2, "t", 64, cache_salt="B")), meta={"page_size": 16})
    >>> def rec(rid, sent, cached):
    ...     return RequestRecord(rid, 0, "load", Status.OK, sent, sent, sent + 5, sent + 9,
    ...                          (ChoiceRecord(0, (7, 8)),), cached_tokens=cached)
    >>> clean = [RunHistory(0, "load", (rec("a1", 0, 0), rec("a2", 50, 64), rec("b1", 60, 0)))]
    >>> tenant_isolation(sc, clean).status
    'isolated: 1 same-salt reuse, 1 cross-salt probe with no hit'
    >>> breach = [RunHistory(0, "load", (rec("a1", 0, 0), rec("a2", 50, 64), rec("b1", 60, 64)))]
    >>> [(a.verdict.value, a.request_id) for a in tenant_isolation(sc, breach).anomalies]
    [('isolation-breach', 'b1')]
    >>> off = [RunHistory(0, "load", (rec("a1", 0, 0), rec("a2", 50, 0), rec("b1", 60, 0)))]
    >>> tenant_isolation(sc, off).status
    'untested: caching off (no same-salt request reused a cached prefix)'

A request of n > 1 is n sequences over one prompt, and each may find the prompt its siblings
computed (vLLM gets them as n requests at temperature 0): its own prompt is its salt's.

    >>> siblings = Scenario(2, (RequestSpec("b2", 0.0, p + (93,), 2, "t", 64, n=4, cache_salt="B"),), meta={"page_size": 16})
    >>> tenant_isolation(siblings, [RunHistory(0, "load", (rec("b2", 0, 64),))]).anomalies
    ()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.history import RequestRecord, RunHistory
from servefuzz.terms import common_prefix
from servefuzz.workload import RequestSpec, Scenario

__all__ = [
    "DEFAULT_PAGE",
    "TIMING_FACTOR",
    "TTFT_FLOOR_MS",
    "TenantCheck",
    "breached_in",
    "tenant_isolation",
    "timing_noise",
]

# The smallest cache page servefuzz meets (vLLM's default block): a shared prefix shorter than
# one page can be cached by nobody, so it is no opportunity for either half of the check.
DEFAULT_PAGE = 16
# The timing signal: the twin's first token must come later than the probe's by more than
# TIMING_FACTOR x the execution's own TTFT jitter (the largest spread of one request's time to
# first token over the loaded runs), and never less than the floor: twice the largest advantage
# a clean reference engine gave a cross-salt probe over its cold twin under the tenant-salt
# strategy's background load (57.5 ms of 46 pairs, bench/tenant_timing.py; docs/verdicts.md,
# *Tenant isolation*). Arrival order and load make the twin slower by tens of ms with no hit.
TIMING_FACTOR = 3.0
TTFT_FLOOR_MS = 115.0


@dataclass(frozen=True)
class TenantCheck:
    """What the tenant-isolation oracle saw in one execution.

    `status` is one line: "" when no request carries a salt, `breach: ...`, `isolated: ...`
    (both halves seen), or `untested: ...` (why nothing was shown either way). `reused` counts
    same-salt requests that reported a hit; `probes` cross-salt requests that had another
    tenant's prefix cached before them and reported no more than their own salt allows.
    """

    anomalies: tuple[Anomaly, ...]
    status: str
    reused: int = 0
    probes: int = 0
    noise_ms: float | None = None
    threshold_ms: float | None = None


def tenant_isolation(
    scenario: Scenario, loaded: Sequence[RunHistory], cache: Sequence[RequestRecord] = ()
) -> TenantCheck:
    """The paired assertion and the timing channel over one execution's loaded runs (and its
    warm and primed cache probes, `cache`, judged against what the last run left cached)."""
    specs = scenario.by_id()
    if all(s.cache_salt is None for s in scenario.requests):
        return TenantCheck((), "")
    page = _page(scenario)
    seen: dict[str, list[dict[str, object]]] = {}
    reported = reused = probes = 0
    opportunities = 0
    for h in loaded:
        ctx = {r.request_id: _context(specs[r.request_id], r) for r in h.records if r.request_id in specs}
        for r in h.records:
            spec = specs.get(r.request_id)
            if spec is None or r.cached_tokens is None or not r.ok:
                continue
            reported += 1
            own, allowed = _allowed(spec, specs, ctx, include_self=False)
            earlier_own = _earlier(spec, h, specs, same=True, page=page)
            earlier_other = _earlier(spec, h, specs, same=False, page=page)
            if r.cached_tokens > allowed:
                seen.setdefault(spec.id, []).append(_breach(spec, r, h, own, allowed, earlier_other, specs))
            elif earlier_own or (r.cached_tokens > 0 and own is not None):
                # A reuse counts whenever it happened; a miss only where the own salt's pages
                # were certainly cached before the request left.
                opportunities += 1
                reused += r.cached_tokens > 0
            elif earlier_other and allowed < page:
                probes += 1
    if cache and loaded:
        # Probes after the last run (warm) or after their own bare prefix (primed): their own
        # prompt may be cached too.
        last = {r.request_id: _context(specs[r.request_id], r) for r in loaded[-1].records if r.request_id in specs}
        for r in cache:
            spec = specs.get(r.request_id)
            if spec is None or r.cached_tokens is None or not r.ok:
                continue
            own, allowed = _allowed(spec, specs, last, include_self=True)
            if r.cached_tokens > allowed:
                seen.setdefault(spec.id, []).append(_breach(spec, r, None, own, allowed, [], specs))
    anomalies = [_anomaly(rid, specs[rid], hits, len(loaded)) for rid, hits in seen.items()]
    noise = timing_noise(loaded, skip={*seen, *_twins(scenario)})
    threshold = max(TTFT_FLOOR_MS, TIMING_FACTOR * noise) if noise is not None else None
    if threshold is not None and len(loaded) >= 2:
        anomalies += [a for probe, twin in _twins(scenario).items() if probe not in seen and probe in specs
                      if (a := _timing(specs[probe], twin, loaded, threshold, noise)) is not None]  # type: ignore[arg-type]
    if seen:
        status = f"breach: {', '.join(sorted(seen))} reported cached tokens no request of its salt left"
    elif not reported:
        status = "untested: the server reports no cached tokens"
    elif opportunities and not reused:
        status = "untested: caching off (no same-salt request reused a cached prefix)"
    elif not opportunities:
        status = "untested: no same-salt request had its prefix cached before it"
    elif not probes:
        status = "untested: no other tenant's prefix was cached before a request"
    else:
        status = (f"isolated: {reused} same-salt reuse{'s' if reused != 1 else ''}, "
                  f"{probes} cross-salt probe{'s' if probes != 1 else ''} with no hit")
    return TenantCheck(tuple(anomalies), status, reused, probes, noise, threshold)


def breached_in(anomaly: Anomaly, run: RunHistory) -> bool:
    """Whether `run` shows `anomaly` (a tenant-isolation one) again: the request reports more
    cached tokens than its salt allows, or (a suspected, timing-only one) its twin's first token
    comes later than its own by more than the threshold recorded when it was found. The
    reproduction rule (`oracles.judge.reproduction`) asks this of every replay."""
    ev = anomaly.evidence
    mine = next((r for r in run.records if r.request_id == anomaly.request_id and r.ok), None)
    if mine is None:
        return False
    if anomaly.verdict is Verdict.ISOLATION_BREACH:
        return mine.cached_tokens is not None and mine.cached_tokens > int(ev.get("allowed", 0))
    twin = next((r for r in run.records if r.request_id == ev.get("twin") and r.ok), None)
    advantage = _advantage(mine, twin)
    return advantage is not None and advantage > float(ev.get("threshold_ms", float("inf")))


def timing_noise(loaded: Sequence[RunHistory], skip: set[str] | frozenset[str] = frozenset()) -> float | None:
    """The execution's own TTFT jitter: the largest spread (max - min) of one request's time to
    first token over the loaded runs, requests in `skip` left out; None with fewer than two runs.

    >>> from servefuzz.history import RequestRecord, RunHistory, Status
    >>> runs = [RunHistory(i, "load", (RequestRecord("r", i, "load", Status.OK, 0, 0, t, t + 1),)) for i, t in enumerate((10.0, 14.0))]
    >>> timing_noise(runs)
    4.0
    """
    if len(loaded) < 2:
        return None
    times: dict[str, list[float]] = {}
    for h in loaded:
        for r in h.records:
            ttft = _ttft(r)
            if ttft is not None and r.request_id not in skip:
                times.setdefault(r.request_id, []).append(ttft)
    spreads = [max(t) - min(t) for t in times.values() if len(t) >= 2]
    return max(spreads, default=None)


def _page(scenario: Scenario) -> int:
    page = scenario.meta.get("page_size")
    return page if isinstance(page, int) and not isinstance(page, bool) and page > 0 else DEFAULT_PAGE


def _twins(scenario: Scenario) -> dict[str, str]:
    twins = scenario.meta.get("twins")
    if not isinstance(twins, Mapping):
        return {}
    return {str(k): str(v) for k, v in twins.items()}


def _context(spec: RequestSpec, record: RequestRecord) -> tuple[int, ...]:
    """What a request may have left cached: its prompt and (an engine may cache it) its answer."""
    answer = record.choices[0].token_ids if record.ok and record.choices else ()
    return spec.prompt_ids + tuple(answer)


def _allowed(
    spec: RequestSpec, specs: Mapping[str, RequestSpec], ctx: Mapping[str, tuple[int, ...]], *, include_self: bool
) -> tuple[str | None, int]:
    """The request of `spec`'s own salt it shares the longest prefix with, and that length: the
    most tokens it may find cached (whenever that request ran, so timing never excuses a hit).
    Its own prompt counts where its siblings (n > 1) computed it, or `include_self`."""
    best: tuple[str | None, int] = (None, 0)
    for rid, tokens in ctx.items():
        other = specs[rid]
        if other.cache_salt != spec.cache_salt or (rid == spec.id and not include_self and spec.n == 1):
            continue
        common = common_prefix(tokens, spec.prompt_ids)
        if common > best[1]:
            best = (rid, common)
    return best


def _earlier(spec: RequestSpec, run: RunHistory, specs: Mapping[str, RequestSpec], *, same: bool, page: int) -> list[str]:
    """Requests of this run (of `spec`'s salt, or of another) whose prompt was computed before
    `spec` was sent (their first token came, or they ended) and that share at least one page of
    its prompt: a cache that keeps pages had them by then."""
    mine = next((r for r in run.records if r.request_id == spec.id), None)
    if mine is None or mine.sent_ms is None:
        return []
    out = []
    for r in run.records:
        other = specs.get(r.request_id)
        done = r.first_token_ms if r.first_token_ms is not None else r.end_ms
        if other is None or other.id == spec.id or not r.ok or done is None or done >= mine.sent_ms:
            continue
        if (other.cache_salt == spec.cache_salt) == same and common_prefix(other.prompt_ids, spec.prompt_ids) >= page:
            out.append(other.id)
    return out


def _breach(
    spec: RequestSpec, r: RequestRecord, run: RunHistory | None, own: str | None, allowed: int,
    others: list[str], specs: Mapping[str, RequestSpec],
) -> dict[str, object]:
    source = next(iter(others), None)
    return {
        "run": r.run,
        "label": r.label,
        "cached_tokens": r.cached_tokens,
        "allowed": allowed,
        "own_source": own,
        "source": source,
        "source_salt": specs[source].cache_salt if source is not None else None,
        "ttft_ms": _ttft(r),
    }


def _anomaly(rid: str, spec: RequestSpec, hits: list[dict[str, object]], runs: int) -> Anomaly:
    first = hits[0]
    loaded = [h for h in hits if h["label"] == "load"]
    source = first["source"]
    whose = f"another tenant's prefix ({source}, salt {first['source_salt']!r})" if source else "another tenant's prefix"
    return Anomaly(
        Oracle.TENANT_ISOLATION,
        Verdict.ISOLATION_BREACH,
        rid,
        f"{rid} (salt {spec.cache_salt!r}) reported {first['cached_tokens']} cached tokens where its own salt "
        f"allows {first['allowed']}: a hit on {whose}, in {len(loaded)}/{runs} loaded runs",
        evidence={
            "salt": spec.cache_salt,
            "allowed": min(int(h["allowed"]) for h in hits),  # type: ignore[call-overload]
            "hits": hits,
            "runs": [h["run"] for h in loaded],
        },
    )


def _ttft(r: RequestRecord | None) -> float | None:
    if r is None or not r.ok or r.first_token_ms is None or r.sent_ms is None:
        return None
    return r.first_token_ms - r.sent_ms


def _advantage(probe: RequestRecord | None, twin: RequestRecord | None) -> float | None:
    """How much sooner the probe's first token came than its cold twin's (ms)."""
    a, b = _ttft(probe), _ttft(twin)
    return None if a is None or b is None else b - a


def _timing(spec: RequestSpec, twin: str, loaded: Sequence[RunHistory], threshold: float, noise: float) -> Anomaly | None:
    advantages = []
    for h in loaded:
        probe = next((r for r in h.records if r.request_id == spec.id), None)
        if probe is not None and probe.cached_tokens:
            return None  # a reported hit is judged on the count (above), never on the clock
        adv = _advantage(probe, next((r for r in h.records if r.request_id == twin), None))
        if adv is None:
            return None
        advantages.append(adv)
    if not advantages or min(advantages) <= threshold:
        return None
    return Anomaly(
        Oracle.TENANT_ISOLATION,
        Verdict.SUSPECTED_ISOLATION_BREACH,
        spec.id,
        f"{spec.id} (salt {spec.cache_salt!r}) got its first token {min(advantages):.1f}-{max(advantages):.1f} ms "
        f"sooner than its cold twin {twin} in {len(advantages)}/{len(loaded)} runs, above the threshold "
        f"{threshold:.1f} ms (max({TTFT_FLOOR_MS:g}, {TIMING_FACTOR:g} x TTFT jitter {noise:.1f} ms)), "
        "with no cached tokens reported: timing only",
        evidence={"salt": spec.cache_salt, "twin": twin, "advantages_ms": advantages,
                  "threshold_ms": threshold, "noise_ms": noise},
    )
