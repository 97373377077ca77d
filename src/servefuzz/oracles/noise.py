"""The campaign's noise model: how far logprobs move on tokens that agree, over a whole campaign.

A scenario's own noise (`oracles.verdict.measure_noise`) is measured on its stable requests, the
ones whose batch shapes repeated: by selection it runs low (on an H200, a scenario p99 of 0.0002
next to benign shifts of 0.013 in the same campaign). Here every agreeing token pair the
campaign sees (loaded vs loaded, loaded vs alone, cold vs warm and primed) adds two shifts:

- `linf`: the largest |lpA(t) - lpB(t)| over the tokens t in both top-k lists (the top-k L-inf
  shift), the measure of "the logprobs moved";
- `gap`: |gapA - gapB|, where gap is the logprob of the top-1 token minus that of the top-2
  token: how far a near-tie can move. A benign flip needs the gap to move by more than the
  flip's margin, so the margin is held against the largest gap shift seen.

Shifts are kept by position (0, 1-7, 8-31, 32+: the first token comes from prefill, which
engines compute with other kernels than decode) and by whether the request was served from the
prefix cache. Each bucket keeps a count, the exact maximum and a log-spaced histogram (so it is
bounded, mergeable and persisted as a small file); quantiles are read from the histogram as the
upper edge of the bin (never below the truth by more than one bin, 12%).

Threshold at a bucket = CAMPAIGN_K x its largest shift, once the bucket holds MIN_SAMPLES; a
thinner bucket borrows the largest shift over every bucket (a campaign's first minutes should
not call anything corruption that a later sample would have excused). Requests flagged by any
oracle never add samples: a corrupted or shifted request is not noise.

Nor does a request the execution itself implicates (`implicated`): one whose agreeing tokens
moved more than IMPLICATED_K times as far as the engine's benign move, which is the campaign's
largest (its calibration, once it holds MIN_SAMPLES) or, before that, the typical move of the
execution's requests that did not flip (the lower median). A fault that corrupts one request's
state often leaves another victim's tokens standing while its logprobs move by nats; counted as
noise, that move would raise the bar above the very flip the fault caused (a planted fault's
2.56-nat flip judged against a 12.9-nat threshold built from its other victim's 3.23-nat move).
The bar is set by what the finding does not implicate, so on an exact engine, whose calibration
is zero, it is the floor; benign numerics move requests as far as the campaign has seen them
move, and nothing is set aside.

    >>> from servefuzz.history import ChoiceRecord
    >>> a = ChoiceRecord(0, (5, 6), (-0.1, -0.5), (((5, -0.1), (7, -2.0)), ((6, -0.5), (8, -0.9))))
    >>> b = ChoiceRecord(0, (5, 6), (-0.1, -0.52), (((5, -0.1), (7, -2.01)), ((6, -0.52), (8, -0.9))))
    >>> [(s.position, round(s.linf, 3), round(s.gap, 3)) for s in pair_shifts(a, b)]
    [(0, 0.01, 0.01), (1, 0.02, 0.02)]
    >>> m = CampaignNoise.empty().with_shifts(pair_shifts(a, b) * 40, cached=False)
    >>> m.samples, round(m.threshold(1, False), 4)
    (80, 0.04)
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from servefuzz.evidence import Picture
from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, TopLogprobs
from servefuzz.oracles.outputs import Output, Outputs, determinate_outputs
from servefuzz.terms import common_prefix

__all__ = [
    "BUCKETS",
    "CAMPAIGN_K",
    "GRID_MIN",
    "IMPLICATED_K",
    "MIN_SAMPLES",
    "NOISE_FLOOR",
    "SHIFT_K",
    "SHIFT_MIN_SAMPLES",
    "NOISE_FILE",
    "CampaignNoise",
    "Shift",
    "ShiftHistogram",
    "Pair",
    "benign_shifts",
    "fmt_lp",
    "implicated",
    "jitter_by_request",
    "logit_step",
    "picture",
    "step_at",
    "bucket_of",
    "pair_shifts",
    "pairs",
]

NOISE_FILE = "noise.json"
BUCKETS = ("0", "1-7", "8-31", "32+")
# Twice the largest benign shift seen, as the scenario's rule (`verdict.NOISE_MAX_K`): the max of
# a few thousand samples still understates a heavy tail.
CAMPAIGN_K = 2.0
MIN_SAMPLES = 30
# An anomalous shift is a claim, not an excuse: it needs a well-measured bar. Four times the
# largest of at least a thousand benign shifts (a raised threshold is safe early, an accusation
# is not: on batch-variant-numerics 30 samples' max understated the benign tail).
SHIFT_K = 4.0
SHIFT_MIN_SAMPLES = 1000
# A request is implicated when its agreeing tokens moved more than this many times as far as the
# execution's typical request and the campaign's largest benign move: benign numerics spread over
# a batch within a small factor (batch-variant-numerics: every batched request by 0.01-0.02),
# while a wrong state read moves a victim by nats next to bystanders that move by nothing.
IMPLICATED_K = 8.0
# Histogram bins: zero, then 12 per decade from 1e-7 to 100 nats (log-spaced edges).
_LO, _DECADES, _PER_DECADE = 1e-7, 9, 12
_EDGES = tuple(_LO * 10 ** (i / _PER_DECADE) for i in range(_DECADES * _PER_DECADE + 1))
_METRICS = ("linf", "gap")
NOISE_FLOOR = 0.001  # GRIEF's logprob gap: below it no engine's numerics are worth arguing over
# The finest logit grid the step rule recognises: bfloat16 logits of magnitude 2 or more are at
# least this coarse; float16 and float32 logits are far finer, so the rule leaves them alone.
GRID_MIN = 2.0**-6
_GRIDS = tuple(2.0**-k for k in range(1, 7))  # 0.5 down to GRID_MIN
# JSON carries float32 logprobs to about 1e-6 at these magnitudes; a gap is on the grid within this.
_GRID_TOLERANCE = 2e-5


def fmt_lp(x: float) -> str:
    """A logprob quantity for a verdict line: four decimals, or scientific notation where four
    decimals would read as zero (a 4e-6 shift printed as 0.0000 looks like no shift at all)."""
    return f"{x:.4f}" if x == 0 or abs(x) >= 1e-4 else f"{x:.1e}"


def bucket_of(position: int) -> str:
    """The position bucket: '0', '1-7', '8-31' or '32+'.

    >>> [bucket_of(p) for p in (0, 1, 7, 8, 31, 32, 900)]
    ['0', '1-7', '1-7', '8-31', '8-31', '32+', '32+']
    """
    return "0" if position == 0 else "1-7" if position < 8 else "8-31" if position < 32 else "32+"


@dataclass(frozen=True)
class Shift:
    """How one agreeing token moved between two runs (see the module docstring)."""

    position: int
    linf: float
    gap: float


def pair_shifts(a: ChoiceRecord, b: ChoiceRecord, upto: int | None = None) -> list[Shift]:
    """The shifts at every position before `upto` (default: the first differing token) where
    both runs chose the same token and both gave top-k logprobs sharing at least one token."""
    n = min(len(a.token_ids), len(b.token_ids), len(a.top_logprobs), len(b.top_logprobs))
    if upto is not None:
        n = min(n, upto)
    out: list[Shift] = []
    for i in range(n):
        if a.token_ids[i] != b.token_ids[i]:
            break
        ta, tb = dict(a.top_logprobs[i]), dict(b.top_logprobs[i])
        shared = ta.keys() & tb.keys()
        if not shared:
            continue
        linf = max(abs(ta[t] - tb[t]) for t in shared)
        out.append(Shift(i, linf, abs(_gap(a.top_logprobs[i]) - _gap(b.top_logprobs[i]))))
    return out


def _gap(top: Sequence[tuple[int, float]]) -> float:
    lps = sorted((lp for _, lp in top), reverse=True)
    return lps[0] - lps[1] if len(lps) > 1 else 0.0


@dataclass(frozen=True)
class ShiftHistogram:
    """Count, exact maximum and a log-spaced histogram of one kind of shift in one bucket."""

    count: int = 0
    max: float = 0.0
    zeros: int = 0
    bins: tuple[int, ...] = field(default_factory=lambda: (0,) * len(_EDGES))

    def with_values(self, values: Iterable[float]) -> ShiftHistogram:
        bins = list(self.bins)
        count, top, zeros = self.count, self.max, self.zeros
        for v in values:
            if not math.isfinite(v):
                continue
            count += 1
            top = max(top, v)
            if v < _LO:
                zeros += 1
            else:
                bins[min(bisect.bisect_left(_EDGES, v), len(_EDGES) - 1)] += 1
        return ShiftHistogram(count, top, zeros, tuple(bins))

    def merged(self, other: ShiftHistogram) -> ShiftHistogram:
        return ShiftHistogram(self.count + other.count, max(self.max, other.max), self.zeros + other.zeros,
                              tuple(x + y for x, y in zip(self.bins, other.bins, strict=True)))

    def quantile(self, q: float) -> float | None:
        """The q-quantile, read as the upper edge of its bin (the max caps it); None when empty."""
        if not self.count:
            return None
        rank = math.ceil(q * self.count)
        seen = self.zeros
        if seen >= rank:
            return 0.0
        for edge, n in zip(_EDGES, self.bins, strict=True):
            seen += n
            if seen >= rank:
                return min(edge, self.max)
        return self.max

    def to_json(self) -> dict[str, Any]:
        sparse = {str(i): n for i, n in enumerate(self.bins) if n}
        return {"count": self.count, "max": self.max, "zeros": self.zeros, "bins": sparse,
                "p50": self.quantile(0.5), "p99": self.quantile(0.99), "p999": self.quantile(0.999)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ShiftHistogram:
        bins = [0] * len(_EDGES)
        for i, n in dict(d.get("bins", {})).items():
            if 0 <= int(i) < len(bins):
                bins[int(i)] = int(n)
        return cls(int(d["count"]), float(d["max"]), int(d.get("zeros", 0)), tuple(bins))


def _key(position_bucket: str, cached: bool) -> str:
    return f"{position_bucket}/{'cached' if cached else 'uncached'}"


@dataclass(frozen=True)
class CampaignNoise:
    """Benign shifts of one campaign (one target configuration), by bucket and kind."""

    hists: Mapping[str, Mapping[str, ShiftHistogram]] = field(default_factory=dict)  # metric -> key -> hist
    # The longest run of tokens unrelated requests' answers shared by chance so far
    # (`controls.chance_run`): what a leak must beat on this target (`controls.leak_tokens`).
    chance_run: int = 0
    # Every bucket pooled, by metric, made on first use: `basis` falls back to it for a thin
    # bucket once per position it checks (thousands in one judgement), and pooling each time
    # was a quarter of a campaign's own CPU (docs/benchmarks.md). The model is immutable (each
    # change makes a new one), so a pool never goes stale.
    _pooled: dict[str, ShiftHistogram] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def empty(cls) -> CampaignNoise:
        return cls({m: {} for m in _METRICS})

    @property
    def samples(self) -> int:
        return sum(h.count for h in self.hists.get("gap", {}).values())

    def with_shifts(self, shifts: Iterable[Shift], *, cached: bool) -> CampaignNoise:
        by_key: dict[str, list[Shift]] = {}
        for s in shifts:
            by_key.setdefault(_key(bucket_of(s.position), cached), []).append(s)
        hists = {m: dict(self.hists.get(m, {})) for m in _METRICS}
        for key, group in by_key.items():
            for m in _METRICS:
                values = [s.linf if m == "linf" else s.gap for s in group]
                hists[m][key] = hists[m].get(key, ShiftHistogram()).with_values(values)
        return CampaignNoise(hists, self.chance_run)

    def with_chance_run(self, run: int) -> CampaignNoise:
        """The model with a chance run seen (the longest is kept)."""
        return dataclasses.replace(self, chance_run=max(self.chance_run, run))

    def merged(self, other: CampaignNoise) -> CampaignNoise:
        hists: dict[str, dict[str, ShiftHistogram]] = {}
        for m in _METRICS:
            mine, theirs = self.hists.get(m, {}), other.hists.get(m, {})
            hists[m] = {k: mine.get(k, ShiftHistogram()).merged(theirs.get(k, ShiftHistogram()))
                        for k in {*mine, *theirs}}
        return CampaignNoise(hists, max(self.chance_run, other.chance_run))

    def largest(self, metric: str = "linf") -> tuple[int, float]:
        """How many shifts of `metric` the campaign holds over every bucket, and the largest."""
        hists = self.hists.get(metric, {}).values()
        return sum(h.count for h in hists), max((h.max for h in hists), default=0.0)

    def basis(self, position: int, cached: bool, metric: str = "gap",
              min_samples: int = MIN_SAMPLES) -> tuple[ShiftHistogram, str]:
        """The histogram a threshold at this position stands on, and how to name it: the bucket's
        own once it holds `min_samples`, else every bucket pooled."""
        hists = self.hists.get(metric, {})
        own = hists.get(_key(bucket_of(position), cached))
        where = f"position {bucket_of(position)}" if bucket_of(position) != "0" else "position 0"
        if own is not None and own.count >= min_samples:
            return own, f"{where}{', cached' if cached else ''}"
        return self._pool(metric), "any position (too few at this one)"

    def _pool(self, metric: str) -> ShiftHistogram:
        pooled = self._pooled.get(metric)
        if pooled is None:
            pooled = ShiftHistogram()
            for h in self.hists.get(metric, {}).values():
                pooled = pooled.merged(h)
            self._pooled[metric] = pooled  # a cache in a frozen record: the dict itself, not the field
        return pooled

    def threshold(self, position: int, cached: bool, metric: str = "gap", *, k: float = CAMPAIGN_K,
                  min_samples: int = MIN_SAMPLES) -> float:
        """`k` x the largest benign shift there; 0.0 while the campaign has fewer than
        `min_samples` (the scenario's own threshold then decides alone)."""
        hist, _ = self.basis(position, cached, metric, min_samples)
        return k * hist.max if hist.count >= min_samples else 0.0

    def where(self, value: float, position: int, cached: bool, *, what: str = "margin", metric: str = "gap",
              min_samples: int = MIN_SAMPLES) -> str:
        """Where a margin (or a shift) sits against the benign ones, for verdict lines:
        'margin 0.3800 = 28x the largest of 4,222 benign shifts at position 0'."""
        hist, name = self.basis(position, cached, metric, min_samples)
        kind = "benign shifts" if metric == "gap" else "benign logprob shifts"
        if hist.count < min_samples:
            return f"the campaign has {hist.count:,} benign shifts so far, too few to compare with"
        if hist.max <= 0:
            return f"{what} {fmt_lp(value)}; all {hist.count:,} {kind} at {name} are zero"
        return f"{what} {fmt_lp(value)} = {value / hist.max:.3g}x the largest of {hist.count:,} {kind} at {name}"

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "buckets": list(BUCKETS), "k": CAMPAIGN_K, "min_samples": MIN_SAMPLES,
                "shifts": {m: {k: h.to_json() for k, h in sorted(self.hists.get(m, {}).items())} for m in _METRICS},
                "chance_run": self.chance_run}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CampaignNoise:
        shifts = d.get("shifts", {})
        return cls({m: {str(k): ShiftHistogram.from_json(h) for k, h in dict(shifts.get(m, {})).items()}
                    for m in _METRICS}, int(d.get("chance_run", 0)))  # noise.json from before it: none seen


@dataclass(frozen=True)
class Pair:
    """Two outputs of one request that the campaign compares: `kind` is 'replay' (loaded vs the
    first loaded run), 'isolation' (loaded vs alone) or 'cache' (a warm or primed probe vs cold)."""

    request_id: str
    kind: str
    a: Output
    b: Output

    @property
    def cached(self) -> bool:
        return self.a.cached or self.b.cached

    def shifts(self) -> list[Shift]:
        return pair_shifts(self.a.choice, self.b.choice)


def pairs(
    loaded: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    cache: Sequence[RequestRecord] = (),
    *,
    outputs: Outputs | None = None,
) -> list[Pair]:
    """Every comparison one execution offers, choice by choice (indeterminate records left out).
    `outputs`: `determinate_outputs(loaded)`, where the caller has it."""
    out: list[Pair] = []
    table = determinate_outputs(loaded) if outputs is None else outputs
    refs = {rid: [Output.of(r, c) for r in recs if r.ok for c in r.choices] for rid, recs in alone.items()}
    for rid, per_choice in sorted(table.items()):
        for index, outs in sorted(per_choice.items()):
            out += [Pair(rid, "replay", outs[0], o) for o in outs[1:]]
            ref = next((o for o in refs.get(rid, ()) if o.choice.index == index), None)
            if ref is not None:
                out += [Pair(rid, "isolation", ref, o) for o in outs]
    for r in cache:
        cold = next((o for o in refs.get(r.request_id, ()) if r.ok), None)
        if cold is not None:
            out += [Pair(r.request_id, "cache", cold, Output.of(r, c)) for c in r.choices if c.index == cold.choice.index]
    return out


def logit_step(*tops: TopLogprobs) -> float:
    """The coarsest power-of-two step (at least GRID_MIN) that every gap between consecutive
    top-k logprobs is a whole multiple of; 0.0 when there is none or too few gaps to tell.

    >>> logit_step(((1, -1.0), (2, -1.0625), (3, -1.1875)), ((2, -1.0), (1, -1.03125), (3, -1.125)))
    0.03125
    >>> logit_step(((1, -1.0), (2, -1.0631), (3, -1.1875)), ((2, -1.0), (1, -1.0312), (3, -1.125)))
    0.0
    """
    every = [abs(x - y) for top in tops for (_, x), (_, y) in zip(top, top[1:])]
    gaps = [g for g in every if g > _GRID_TOLERANCE]
    # A few gaps fit some grid by chance; three float32 gaps all do ~1e-8 of the time. An exact
    # tie between distinct tokens is itself a sign of coarse logits (float32 ones never tie), so
    # with a tie two gaps are enough.
    ties = len(every) - len(gaps)
    if len(gaps) < (2 if ties else 3):
        return 0.0
    for q in _GRIDS:
        if all(abs(g / q - round(g / q)) * q <= _GRID_TOLERANCE for g in gaps):
            return q
    return 0.0


def step_at(a: ChoiceRecord, b: ChoiceRecord, pos: int) -> float:
    """`logit_step` of two outputs' top-k at token `pos`; 0.0 where either has none there."""
    tops = [c.top_logprobs[pos] for c in (a, b) if pos < len(c.top_logprobs)]
    return logit_step(*tops) if len(tops) == 2 else 0.0


def jitter_by_request(compared: Iterable[Pair]) -> dict[str, float]:
    """Each request's largest logprob move on agreeing tokens, over its pairs whose tokens agree
    whole (the outputs the noise is measured on): the chosen token's logprob and, where both
    runs give top-k, every token both list. A move within two logit steps where the logits lie
    on a coarse grid (`logit_step`: bfloat16) is rounding, and counts as none.

    >>> from servefuzz.history import ChoiceRecord
    >>> a = Output(0, "load", ChoiceRecord(0, (5, 6), (-0.1, -0.5)))
    >>> b = Output(1, "load", ChoiceRecord(0, (5, 6), (-0.1, -0.75)))
    >>> c = Output(1, "load", ChoiceRecord(0, (5, 7), (-0.1, -0.75)))
    >>> jitter_by_request([Pair("r01", "replay", a, b), Pair("r02", "replay", a, c)])
    {'r01': 0.25}
    """
    out: dict[str, float] = {}
    for p in compared:
        ca, cb = p.a.choice, p.b.choice
        if ca.token_ids != cb.token_ids:
            continue
        moves = {i: abs(x - y) for i, (x, y) in enumerate(zip(ca.logprobs, cb.logprobs))
                 if x is not None and y is not None}
        for sh in p.shifts():
            moves[sh.position] = max(moves.get(sh.position, 0.0), sh.linf)
        unexplained = [m for i, m in moves.items() if m > 2 * step_at(ca, cb, i)]
        out[p.request_id] = max(out.get(p.request_id, 0.0), *unexplained, 0.0)
    return out


def implicated(compared: Sequence[Pair], campaign: CampaignNoise | None = None) -> dict[str, float]:
    """The requests this execution implicates, with how far their agreeing tokens moved: more than
    IMPLICATED_K x the engine's benign move and above the noise floor. The benign move is the
    campaign's calibration, its largest benign move once it holds MIN_SAMPLES (an exact engine's
    is zero); before that, the typical move of this execution's requests that did not flip (the
    lower median, so a minority of victims cannot raise it), where at least two did not. Where
    neither is known nothing is set aside. Their moves are not noise: whatever moved them is what
    a finding here is about.

    >>> from servefuzz.history import ChoiceRecord
    >>> ref = Output(0, "alone", ChoiceRecord(0, (5, 6), (-0.1, -7.25)))
    >>> def pair(rid, lp, tokens=(5, 6)):
    ...     return Pair(rid, "isolation", ref, Output(1, "load", ChoiceRecord(0, tokens, (-0.1, lp))))
    >>> implicated([pair("r01", -7.25), pair("r02", -10.48), pair("r03", -7.25)])
    {'r02': 3.2300000000000004}
    >>> implicated([pair("r01", -7.26), pair("r02", -7.27), pair("r03", -7.24)])  # benign: alike
    {}
    >>> implicated([pair("r02", -10.48), pair("r03", -7.25, (5, 7))])  # no other to be typical of
    {}
    >>> exact = CampaignNoise.empty().with_shifts([Shift(1, 0.0, 0.0)] * MIN_SAMPLES, cached=False)
    >>> implicated([pair("r02", -10.48)], exact)  # the campaign's calibration: an exact engine
    {'r02': 3.2300000000000004}
    """
    moved = jitter_by_request(compared)
    if not moved:
        return {}
    count, largest = campaign.largest("linf") if campaign is not None else (0, 0.0)
    if count >= MIN_SAMPLES:
        benign = largest
    else:
        # A request that flipped is the finding's, and its agreeing prefix says little of the
        # others: the typical move is read from the requests that did not.
        flipped = {p.request_id for p in compared if p.a.choice.token_ids != p.b.choice.token_ids}
        steady = [m for rid, m in moved.items() if rid not in flipped]
        if len(steady) < 2:
            return {}
        benign = statistics.median_low(steady)
    bar = max(NOISE_FLOOR, IMPLICATED_K * benign)
    return {rid: m for rid, m in sorted(moved.items()) if m > bar}


def benign_shifts(
    loaded: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    cache: Sequence[RequestRecord] = (),
    *,
    exclude: Iterable[str] = (),
    campaign: CampaignNoise | None = None,
) -> CampaignNoise:
    """The shifts one execution adds to the campaign's noise: every agreeing token of every pair,
    up to the pair's first differing token, except for the `exclude`d requests (those an oracle
    flagged as anything but numeric drift: corrupted or shifted logprobs are not noise) and the
    requests the execution implicates against the `campaign` so far (`implicated`)."""
    compared = pairs(loaded, alone, cache)
    skip = set(exclude) | set(implicated(compared, campaign))
    model = CampaignNoise.empty()
    for p in compared:
        if p.request_id not in skip:
            model = model.with_shifts(p.shifts(), cached=p.cached)
    return model


def picture(
    campaign: CampaignNoise, reference: ChoiceRecord, deviant: ChoiceRecord, *, cached: bool, margin: float | None
) -> Picture:
    """What the report draws for a finding (kept as the anomaly's `picture`): the
    deviant run's top-k L-inf shift from the reference at every agreeing position before the
    flip against the campaign's band there (CAMPAIGN_K x its largest benign shift), the flip's
    position and margin; and the campaign's gap-shift histogram at the flip's bucket."""
    shifts = pair_shifts(reference, deviant)
    flip = common_prefix(reference.token_ids, deviant.token_ids)  # their first difference (the end if equal)
    hist, name = campaign.basis(flip, cached)
    return Picture(tuple(x.position for x in shifts), tuple(x.linf for x in shifts),
                   tuple(campaign.threshold(x.position, cached, "linf") for x in shifts), flip, margin,
                   campaign.threshold(flip, cached), name, hist.to_json(),
                   # bin i spans edges[0] * 10**((i-1)/per) .. edges[0] * 10**(i/per)
                   (_EDGES[0], _PER_DECADE))
