"""Whether the server's flush empties every tier of its cache: what every cold reference rests on.

A cold reference is a request's answer alone on a flushed server, and every verdict that holds an
answer under load against it assumes the flush emptied the cache. A flush can answer success and
leave a tier full: vLLM's `/reset_prefix_cache` leaves the CPU offloading tier (vllm#57727;
`reset_external=true` reaches it from 0.22.0 only), llama-server's slot erase leaves its RAM prompt
cache, the reference engine's `--flush-device-only` leaves its host tier. A reference taken there
is the request's own earlier answer, loaded back: warm, not cold (issue 53, item 6).

So the flush is proven, not assumed, two ways:

- at a campaign's start, a probe (`probe_scenario`): a prompt of a few pages, repeated in the same
  run once it is cached, run twice, each run after a flush. The repeat must hit (the prefix was
  cached: the probe tests something); the first request of each run must report no cached token,
  and the engine's host-tier meters must not move (a load-back, a host hit): `probed`;
- every cold reference the campaign takes after: a request sent alone after a flush must report
  no cached token either (`FlushCheck.seen`), from whichever tier.

Where either shows a hit after a flush the campaign says so first and its cold references are
untrusted (`FlushCheck.trusted`): a finding made there carries the line.

    >>> from servefuzz.history import RequestRecord, RunHistory, Status
    >>> class Srv:
    ...     engine = "reference"
    >>> sc = probe_scenario(64, range(3, 1024))
    >>> def run(i, first, again, host):
    ...     recs = (RequestRecord(PROBE_ID, i, "load", Status.OK, 0.0, cached_tokens=first),
    ...             RequestRecord(PROBE_ID + "+", i, "load", Status.OK, 0.0, cached_tokens=again))
    ...     return RunHistory(i, "load", recs, meta={"metrics": {"sglang:load_back_tokens_total": host}})
    >>> probed(Srv(), sc, [run(0, 0, 256, 0), run(1, 0, 256, 0)]).state
    'proven'
    >>> bad = probed(Srv(), sc, [run(0, 0, 256, 0), run(1, 256, 256, 256)])
    >>> bad.state, bad.trusted
    ('failed', False)
    >>> for part in bad.said().split("; "): print(part)
    FLUSH NOT PROVEN: after a flush, the probe ~flush reported 256 cached tokens (run 1)
    the engine's meters: 256 tokens loaded back from the host tier (sglang:load_back_tokens_total)
    cold references in this campaign are untrusted
    >>> probed(Srv(), sc, [run(0, 0, 0, 0), run(1, 0, 0, 0)]).state   # the repeat never hit: caching off
    'untested'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from servefuzz.engines.registry import spec_of
from servefuzz.engines.spec import Feature
from servefuzz.history import RequestRecord, RunHistory
from servefuzz.strategies.shape import CACHED_BY_MS, STRAGGLER_MS
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

__all__ = ["PROBE_ID", "FlushCheck", "probe_scenario", "probed"]

# The probe's request id (its repeats add "+"): no scenario's request is named so.
PROBE_ID = "~flush"
# Ids of the warm references kept as evidence (the count is kept whole).
_KEPT = 5


class Server(Protocol):
    @property
    def engine(self) -> str: ...


@dataclass(frozen=True)
class FlushCheck:
    """What the campaign knows of its flush: `state` "proven" (the probe saw every tier empty),
    "failed" (it saw a hit after a flush) or "untested" (nothing could show it: no cache hit at
    all, or no probe ran), `why` in words; and the cold references read since (`references`), of
    which `warm` reported cached tokens (the first few ids in `examples`)."""

    state: str
    why: str
    references: int = 0
    warm: int = 0
    examples: tuple[str, ...] = ()

    @property
    def trusted(self) -> bool:
        """Whether the campaign's cold references may be taken as cold."""
        return self.state != "failed" and self.warm == 0

    def said(self) -> str:
        if self.trusted:
            return f"flush {self.state}: {self.why}" + (
                f"; {self.references:,} cold references read none cached" if self.references else "")
        parts = [self.why] if self.state == "failed" else []
        if self.warm:
            parts.append(f"{self.warm:,} of {self.references:,} cold references reported cached tokens after a flush "
                         f"({', '.join(self.examples)})")
        return f"FLUSH NOT PROVEN: {'; '.join(parts)}; cold references in this campaign are untrusted"

    def seen(self, scenario: Scenario, alone: Mapping[str, Sequence[RequestRecord]], reused: Sequence[str]) -> FlushCheck:
        """This check, having read one execution's cold references: each request of one choice
        sent alone after a flush (not one reused from an earlier answer) whose engine reports
        cached tokens must report none."""
        specs, skip = scenario.by_id(), set(reused)
        read = [r for rid, recs in alone.items() if rid not in skip and rid in specs and specs[rid].n == 1
                for r in recs if r.ok and r.cached_tokens is not None]
        warm = [r.request_id for r in read if (r.cached_tokens or 0) > 0]
        return FlushCheck(self.state, self.why, self.references + len(read), self.warm + len(warm),
                          (*self.examples, *warm)[:_KEPT])

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "why": self.why, "trusted": self.trusted, "references": self.references,
                "warm": self.warm, "examples": list(self.examples), "said": self.said()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> FlushCheck | None:
        if not d:
            return None
        try:
            return cls(str(d["state"]), str(d["why"]), int(d.get("references", 0)), int(d.get("warm", 0)),
                       tuple(str(x) for x in d.get("examples", ()))[:_KEPT])
        except (KeyError, TypeError, ValueError):
            return None


def probe_scenario(unit: int, vocab: range) -> Scenario:
    """The probe: a prompt of four units and three tokens (whole pages of any page size up to
    the unit, cached by any tier), one token out; the same prompt again once it is cached, and
    once more later for an engine too busy to have cached it by then."""
    prompt = PromptBuilder(0x5F1, vocab).prompt(None, 0, 4 * unit + 3)
    return Scenario(0, (
        RequestSpec(PROBE_ID, 0.0, prompt, 1),
        RequestSpec(PROBE_ID + "+", CACHED_BY_MS[1], prompt, 1),
        RequestSpec(PROBE_ID + "++", STRAGGLER_MS[1], prompt, 1),
    ), meta={"strategy": "flush-probe"})


def probed(server: Server, scenario: Scenario, loaded: Sequence[RunHistory]) -> FlushCheck:
    """The flush as the probe's loaded runs (each after a flush, `trial.execute`) show it."""
    runs = [h for h in loaded if h.label == "load"]
    if len(runs) < 2:
        return FlushCheck("untested", "the flush probe did not run to its end")
    first = [_cached(h, PROBE_ID) for h in runs]
    repeats = [c for h in runs for rid in (PROBE_ID + "+", PROBE_ID + "++") if (c := _cached(h, rid)) is not None]
    meters = spec_of(server.engine).meters
    host = [m for m in meters if m.feature is Feature.HOST_CACHE and m.shows]
    prefix = [m for m in meters if m.feature is Feature.PREFIX_CACHE]
    scraped = [h.meta.get("metrics") for h in runs]
    moved = [f"{round(v):,} {m.what} ({m.metric})" for m in host for d in scraped if isinstance(d, Mapping)
             if (v := float(d.get(m.metric, 0.0))) > 0]
    # The repeats' hits (answers or meters) show the prefix was cached: the probe tested something.
    counted = [round(float(d.get(m.metric, 0.0))) for m in prefix for d in scraped if isinstance(d, Mapping)]
    hit = [(i, c) for i, c in enumerate(first) if c]
    if hit or moved:
        said = [f"after a flush, the probe {PROBE_ID} reported {c:,} cached tokens (run {i})" for i, c in hit]
        if moved:
            said.append(f"the engine's meters: {'; '.join(moved)}")
        return FlushCheck("failed", "; ".join(said))
    if not any(repeats) and not any(counted):
        return FlushCheck("untested", "the probe's repeat was never served from the cache (caching off?), so no flush "
                          "could be seen failing")
    shown = [*(["cached_tokens of its answers"] if any(c is not None for c in first) else []),
             *(f"{m.metric}" for m in host if any(isinstance(d, Mapping) and d for d in scraped))]
    return FlushCheck("proven", f"after a flush the probe's cached prefix came back from no tier ({', '.join(shown) or 'the meters'})")


def _cached(h: RunHistory, rid: str) -> int | None:
    return next((r.cached_tokens for r in h.records if r.request_id == rid and r.ok), None)
