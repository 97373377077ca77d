"""What a campaign made the engine do: exercise evidence, per mechanism the server has on.

A campaign that ends with no findings proves nothing about a mechanism that never ran: a prefix
cache that never hit, a pool that never preempted, a speculative decoder that never accepted a
token (issue 40; LMCache#4247's "0% external hit rate and looked clean"). This module reads what
servefuzz already records, the answers (`cached_tokens`, statuses, finish reasons, the
requests' adapters and cancellations) and each loaded run's `/metrics` counter deltas
(`meta["metrics"]`, `trial.execute`), and says, per `engines.spec.Feature`, what happened and
where each number came from. Which counter means what, and which server arg turns a mechanism
on or off, is each engine's own knowledge (`EngineSpec.meters`, `switches`, `chunk_flag`, `facts`;
a profile's `features`): nothing here names an engine.

    >>> from servefuzz.history import RequestRecord, RunHistory, Status
    >>> from servefuzz.workload import RequestSpec, Scenario
    >>> from servefuzz.engines.spec import ServerFacts
    >>> class Srv:
    ...     engine, server_args, env, profile, adapters, device = "reference", {"disable_radix_cache": False}, {}, None, (), ""
    ...     facts = ServerFacts()
    >>> sc = Scenario(1, (RequestSpec("r01", 0.0, tuple(range(3, 103)), 8, "p0", 64),))
    >>> rec = RequestRecord("r01", 0, "load", Status.OK, 0.0, cached_tokens=0)
    >>> ex = observe(Srv(), sc, [RunHistory(0, "load", (rec,), meta={"metrics": {"sglang:prompt_tokens_total": 100}})])
    >>> ex.lines()[0]
    'prefix cache: 0 hits in 1 request: nothing about it was tested (on: server arg disable_radix_cache = False)'
    >>> Exercise.from_json(ex.to_json()) == ex
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from servefuzz.anomaly import Anomaly, Oracle
from servefuzz.engines.registry import spec_of
from servefuzz.engines.spec import EngineSpec, Feature, Profile, ServerFacts
from servefuzz.history import RequestRecord, RunHistory, Status
from servefuzz.workload import Scenario

__all__ = ["ANSWERS", "Count", "Exercise", "Server", "Setting", "Trigger", "observe", "triggered"]

# Where the counts read from the answers come from (`Count.source`); a metric's source is its name.
ANSWERS = {
    "cached_tokens": "cached_tokens",
    "split": "prompt length less cached_tokens against the step budget",
    "adapters": "the adapters of the requests, in the order they were sent",
    "status": "the status and finish reason",
}
# A value a server sent, as a report line shows it: short, whatever it was.
_SHOWN = 40


class Server(Protocol):
    """What is read of a server's description (`server_facts.TargetInfo` is one): its `facts` as
    `engines.registry.facts_of` reads them, a profile's step budget included."""

    @property
    def engine(self) -> str: ...
    @property
    def server_args(self) -> Mapping[str, Any]: ...
    @property
    def profile(self) -> str | None: ...
    @property
    def adapters(self) -> tuple[str, ...]: ...
    @property
    def device(self) -> str: ...
    @property
    def facts(self) -> ServerFacts: ...


@dataclass(frozen=True)
class Count:
    """`value` `what` of `feature` ("192 hit tokens of the prefix cache"), read from `source` (a
    `/metrics` counter's name, or one of `ANSWERS`) over `basis` of them (answers, or loaded runs
    with a `/metrics` reading). `shows`: a value above 0 shows the feature was exercised. `per`,
    `rate`, `share`: its meter's rate against another counter (`engines.spec.Meter`)."""

    feature: Feature
    what: str
    value: int
    source: str
    basis: int
    shows: bool = True
    per: str | None = None
    rate: str = ""
    share: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return self.feature.value, self.what, self.source

    @property
    def metric(self) -> bool:
        return self.source not in ANSWERS.values()

    def said(self) -> str:
        """Where it came from, in words: 'cached_tokens of 1,200 answers'."""
        if self.metric:
            return f"{self.source} over {_n(self.basis, 'run')} with /metrics"
        return f"{self.source} of {_n(self.basis, 'answer')}"

    def rated(self, base: Count) -> str:
        """Its rate against `base` (the count of its `per`), in its words; "" where none is due.

        >>> drafted = Count(Feature.SPECULATIVE, "drafted tokens", 493, "d", 12, shows=False)
        >>> Count(Feature.SPECULATIVE, "accepted tokens", 280, "a", 12, per="d", rate="of the drafted tokens accepted",
        ...       share=True).rated(drafted)
        '57% of the drafted tokens accepted'
        """
        if not self.rate or base.source != self.per or base.value <= 0:
            return ""
        ratio = self.value / base.value
        return f"{ratio:.0%} {self.rate}" if self.share else f"{ratio:.2f} {self.rate}"

    def to_json(self) -> dict[str, Any]:
        rated = {"per": self.per, "rate": self.rate, **({"share": True} if self.share else {})} if self.per else {}
        return {"feature": self.feature.value, "what": self.what, "value": self.value, "source": self.source,
                "basis": self.basis, **({} if self.shows else {"shows": False}), **rated}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Count:
        per = d.get("per")
        return cls(Feature(d["feature"]), str(d["what"]), int(d["value"]), str(d["source"]), int(d["basis"]),
                   d.get("shows", True) is True, str(per) if per is not None else None, str(d.get("rate", "")),
                   d.get("share", False) is True)


@dataclass(frozen=True)
class Setting:
    """Whether the server has `feature` on, and what says so (`why`: a server arg, the profile,
    the adapters it serves); `aimed`: the campaign's profile aims at it."""

    feature: Feature
    on: bool
    why: str
    aimed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"feature": self.feature.value, "on": self.on, "why": self.why, **({"aimed": True} if self.aimed else {})}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Setting:
        return cls(Feature(d["feature"]), d["on"] is True, str(d["why"]), d.get("aimed", False) is True)


@dataclass(frozen=True)
class Exercise:
    """What the engine did over some executions: `requests` answers read, `runs` loaded runs of
    which `scraped` had a `/metrics` reading, the `counts`, and the `settings` of the server
    (the last execution's). `metrics_flag`: what makes the engine serve `/metrics`, for the line
    that says none was read. Accumulated with `merged`."""

    requests: int = 0
    runs: int = 0
    scraped: int = 0
    counts: tuple[Count, ...] = ()
    settings: tuple[Setting, ...] = ()
    metrics_flag: str = ""

    def merged(self, other: Exercise) -> Exercise:
        """Both together: counts of one source summed, the later settings kept."""
        sums: dict[tuple[str, str, str], Count] = {}
        for c in (*self.counts, *other.counts):
            was = sums.get(c.key)
            sums[c.key] = c if was is None else replace(c, value=was.value + c.value, basis=was.basis + c.basis)
        order = list(Feature)
        return Exercise(self.requests + other.requests, self.runs + other.runs, self.scraped + other.scraped,
                        tuple(sorted(sums.values(), key=lambda c: (order.index(c.feature), c.metric))),
                        other.settings or self.settings, other.metrics_flag or self.metrics_flag)

    def of(self, feature: Feature) -> tuple[Count, ...]:
        return tuple(c for c in self.counts if c.feature is feature)

    def setting(self, feature: Feature) -> Setting | None:
        return next((s for s in self.settings if s.feature is feature), None)

    def exercised(self, feature: Feature) -> bool:
        return any(c.shows and c.value > 0 for c in self.of(feature))

    def measured(self, feature: Feature) -> bool:
        """Whether anything read could have shown it (a count over at least one answer or run)."""
        return any(c.shows and c.basis > 0 for c in self.of(feature))

    @property
    def unexercised(self) -> tuple[Feature, ...]:
        """The features on (or aimed at) that nothing read shows happening."""
        return tuple(s.feature for s in self.settings if (s.on or s.aimed) and not self.exercised(s.feature))

    @property
    def missed_aims(self) -> tuple[Feature, ...]:
        """The features the profile aims at that never happened: the loud part of the summary."""
        return tuple(s.feature for s in self.settings if s.aimed and not self.exercised(s.feature))

    def lines(self) -> list[str]:
        """One line per feature that is on, aimed at or was seen: what happened and where the
        numbers came from; a feature on that never happened is named as untested."""
        return [line for _, line, _ in self.marked()]

    def marked(self) -> list[tuple[Feature, str, bool]]:
        """`lines`, each with its feature and whether it is a gap (on or aimed at, never exercised:
        `unexercised`), for a display that marks those."""
        gaps = set(self.unexercised)
        return [(f, line, f in gaps) for f in Feature if (line := self._line(f))]

    def _line(self, feature: Feature) -> str:
        counts, setting, words = self.of(feature), self.setting(feature), feature.words
        said = f" ({'on' if setting.on else 'off'}: {setting.why})" if setting is not None else ""
        if self.exercised(feature):
            # A rate first (acceptance of drafted tokens): what the counts below add up to.
            rates = [r for c in counts for b in counts if (r := c.rated(b))]
            seen = "; ".join([*rates, *(f"{_counted(cs)} ({cs[0].said()})" for cs in _by_source(counts))])
            return f"{words}: {seen}{said}"
        if setting is None:
            return ""  # neither said on nor seen: nothing to claim either way
        shown = next((c for c in counts if c.shows and c.basis > 0), None)
        if not (setting.on or setting.aimed):
            zero = f"0 {shown.what} in {_n(self.requests, 'request')}: " if shown is not None else ""
            return f"{words}: {zero}never exercised{said}"
        if shown is None:
            why = "no answer or counter of this server measures it"
            if self.runs and not self.scraped:
                why = "no /metrics reading" + (f" (start the server with {self.metrics_flag})" if self.metrics_flag else "")
            gap = f"{words}: not measured ({why}): nothing shows it was tested{said}"
        else:
            gap = f"{words}: 0 {shown.what} in {_n(self.requests, 'request')}: nothing about it was tested{said}"
        return f"NOT EXERCISED, though the profile aims at it: {gap}" if setting.aimed else gap

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests, "runs": self.runs, "scraped": self.scraped,
            "counts": [c.to_json() for c in self.counts], "settings": [s.to_json() for s in self.settings],
            **({"metrics_flag": self.metrics_flag} if self.metrics_flag else {}),
            # Derived, for readers of progress.json and the summary: recomputed on load.
            "unexercised": [f.value for f in self.unexercised], "missed_aims": [f.value for f in self.missed_aims],
            "lines": self.lines(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> Exercise:
        """An `Exercise` from `to_json` (None or {}: none yet). A damaged one (progress.json
        written by hand, or by a version with other features) is none: only the counts are lost,
        never the campaign that resumes from it."""
        if not d:
            return cls()
        try:
            return cls(int(d.get("requests", 0)), int(d.get("runs", 0)), int(d.get("scraped", 0)),
                       tuple(Count.from_json(c) for c in d.get("counts", ())),
                       tuple(Setting.from_json(s) for s in d.get("settings", ())), str(d.get("metrics_flag", "")))
        except (AttributeError, KeyError, TypeError, ValueError):
            return cls()


def _n(k: int, unit: str) -> str:
    return f"{k:,} {unit}{'' if k == 1 else 's'}"


def _by_source(counts: Sequence[Count]) -> list[list[Count]]:
    groups: dict[str, list[Count]] = {}
    for c in counts:
        groups.setdefault(c.source, []).append(c)
    return list(groups.values())


def _counted(counts: Sequence[Count]) -> str:
    return ", ".join(f"{c.value:,} {c.what}" for c in counts)


@dataclass(frozen=True)
class Trigger:
    """Evidence that what a finding hinges on happened in the execution that showed it:
    `value` `what` of `feature` for `request_id` in its `label` run ("cached tokens" of the
    prefix cache in r03's warm run), read from `source`. A `request_id` of "-" is the whole
    scenario's (a counter that moved during its loaded runs)."""

    request_id: str
    label: str
    feature: Feature
    what: str
    value: int
    source: str

    def line(self) -> str:
        who = "the loaded runs" if self.request_id == "-" else f"{self.request_id}, {self.label} run"
        return f"{self.feature.words}: {self.value:,} {self.what} ({who}; {self.source})"

    def to_json(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "label": self.label, "feature": self.feature.value, "what": self.what,
                "value": self.value, "source": self.source}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Trigger:
        return cls(str(d["request_id"]), str(d["label"]), Feature(d["feature"]), str(d["what"]), int(d["value"]),
                   str(d["source"]))


def _profile(spec: EngineSpec, server: Server) -> Profile | None:
    """The profile the server ran under, looked up by its recorded name in the spec's presets
    (the preset of its device first)."""
    if not server.profile:
        return None
    presets = sorted(spec.presets, key=lambda p: p.device != (server.device or "cpu"))
    return next((p for preset in presets for p in preset.profiles if p.name == server.profile), None)


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def settings_of(server: Server) -> tuple[Setting, ...]:
    """What the server has on or off: its spec's switches over its recorded server args, the
    adapters it serves, and its profile's features (on and aimed at)."""
    spec = spec_of(server.engine)
    profile = _profile(spec, server)
    aimed = set(profile.features) if profile is not None else set()
    found: dict[Feature, Setting] = {}
    for switch in spec.switches:
        state = switch.state(server.server_args)
        if state is not None and switch.feature not in found:
            value = _shown(server.server_args.get(switch.key))
            found[switch.feature] = Setting(switch.feature, state, f"server arg {switch.key} = {value}")
    if server.adapters and spec.adapters:
        found[Feature.ADAPTERS] = Setting(Feature.ADAPTERS, True, f"the server serves {_n(len(server.adapters), 'adapter')}")
    for feature in aimed:
        was = found.get(feature)
        why = f"profile {server.profile}" + (f"; {was.why}" if was is not None else "")
        found[feature] = Setting(feature, True if was is None else was.on, why, aimed=True)
    return tuple(found[f] for f in Feature if f in found)


def observe(server: Server, scenario: Scenario, runs: Iterable[RunHistory]) -> Exercise:
    """What one execution of `scenario` shows the engine did: `runs` as the campaign writes them
    to histories.jsonl (the loaded runs, with their `/metrics` deltas in `meta["metrics"]`; the
    alone references, those reused from an earlier request named in the run's `meta["reused"]`
    and not counted; the cache probes). Pure."""
    spec = spec_of(server.engine)
    runs = list(runs)
    specs = scenario.by_id()
    answers: list[RequestRecord] = []
    for h in runs:
        reused = set(h.meta.get("reused", ())) if h.label == "alone" else set()
        answers += [r for r in h.records if r.request_id not in reused]
    counts: list[Count] = []
    # The prefix cache, from each answer's cached_tokens (where the engine reports it).
    reported = [r for r in answers if r.cached_tokens is not None]
    if reported:
        src = ANSWERS["cached_tokens"]
        counts += [Count(Feature.PREFIX_CACHE, "hits", sum(1 for r in reported if (r.cached_tokens or 0) > 0), src,
                         len(reported)),
                   Count(Feature.PREFIX_CACHE, "hit tokens", sum(r.cached_tokens or 0 for r in reported), src,
                         len(reported))]
    # Chunked prefill: an answered prompt whose uncached part is over the step budget was split.
    # The budget is the server's facts' (its recorded args, else its profile's flag: facts_of).
    budget = server.facts.chunk_budget
    if budget is not None:
        done = [(r, specs[r.request_id]) for r in answers if r.ok and r.request_id in specs]
        split = sum(1 for r, s in done if s.prompt_len - (r.cached_tokens or 0) > budget)
        counts.append(Count(Feature.CHUNKED_PREFILL, "prompts split", split, ANSWERS["split"], len(done)))
    # Adapter switches: consecutive requests of a loaded run, in send order, under different adapters.
    loaded = [h for h in runs if h.label == "load"]
    if any(s.adapter for s in scenario.requests):
        switches = sent = 0
        for h in loaded:
            order = sorted((r for r in h.records if r.sent_ms is not None and r.request_id in specs),
                           key=lambda r: r.sent_ms or 0.0)
            names = [specs[r.request_id].adapter for r in order]
            switches += sum(1 for a, b in zip(names, names[1:]) if a != b)
            sent += len(order)
        counts.append(Count(Feature.ADAPTERS, "adapter switches", switches, ANSWERS["adapters"], sent))
    # Aborts: requests the scenario cancelled that were cut, and answers the engine ended as aborted.
    aborted = sum(1 for r in answers
                  if (r.status is Status.CANCELLED and r.request_id in specs and specs[r.request_id].cancelled)
                  or any(c.finish_reason == "abort" for c in r.choices))
    if any(s.cancelled for s in scenario.requests) or aborted:
        counts.append(Count(Feature.ABORTS, "aborted requests", aborted, ANSWERS["status"], len(answers)))
    # The engine's own counters, over the loaded runs that had a reading: a server that serves
    # /metrics shows some counter going up in any run that answered (tokens, requests), so an
    # empty reading is a server without metrics, not one that did nothing.
    scraped = [h.meta["metrics"] for h in loaded if isinstance(h.meta.get("metrics"), Mapping) and h.meta["metrics"]]
    if scraped:
        for m in spec.meters:
            total = sum(float(d.get(m.metric, 0.0)) for d in scraped)
            counts.append(Count(m.feature, m.what, round(total), m.metric, len(scraped), m.shows, m.per, m.rate,
                                m.share))
    return Exercise(len(answers), len(loaded), len(scraped), (), settings_of(server), spec.metrics_flag).merged(
        Exercise(counts=tuple(counts)))


def triggered(server: Server, anomalies: Iterable[Anomaly], runs: Iterable[RunHistory]) -> tuple[Trigger, ...]:
    """The evidence that a finding's trigger happened, from the execution that showed it: the
    cached tokens each flagged request reported in the runs that judged it (for a cache-state
    anomaly the warm and primed probes, beside its cold one alone; for the others its loaded runs),
    and the engine counters that moved during the loaded runs (preemptions, evictions, ...)."""
    runs = list(runs)
    out: list[Trigger] = []
    for a in anomalies:
        # A cache-state anomaly's cold state is its alone reference (on a flushed cache).
        labels = ("alone", "cold", "warm", "primed") if a.oracle is Oracle.CACHE_STATE else ("load",)
        for h in runs:
            for r in h.records:
                if r.request_id == a.request_id and r.label in labels and r.cached_tokens is not None:
                    out.append(Trigger(r.request_id, r.label if r.label != "load" else f"load {r.run}",
                                       Feature.PREFIX_CACHE, "cached tokens", r.cached_tokens,
                                       "cached_tokens of its answer"))
    spec = spec_of(server.engine)
    for m in spec.meters:
        total = sum(float(h.meta["metrics"].get(m.metric, 0.0)) for h in runs
                    if h.label == "load" and isinstance(h.meta.get("metrics"), Mapping))
        if total > 0 and m.feature is not Feature.PREFIX_CACHE:
            out.append(Trigger("-", "load", m.feature, m.what, round(total), m.metric))
    return tuple(dict.fromkeys(out))
