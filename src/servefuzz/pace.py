"""How fast the target is, measured from its own answers, and the request timeout it implies.

A fixed timeout is wrong for someone: 120 s is an age for the tiny models (a few ms a token),
and a real model on CPU (SmolLM2-135M at 12-35 tokens/s on SGLang CPU) has scenarios that take
longer than that while the server is perfectly well, which made a false `hang`. So the runner
measures the target and gives each request `PACE_MULTIPLE` times what it should take, never less
than the floor (`RunConfig.request_timeout_s`, 120 s: a fast target behaves as it always did).

What a request should take is a serial bound: every prompt token of the run at the measured
prefill cost and every output token (`n * max_tokens`) at the measured decode cost, one request
after another, as if the server batched nothing. A request alone is bounded by its own work; a
request in a loaded run by the whole run's, since it may be served last. Batching only makes a
healthy server faster than that.

The costs come from the requests the runner sends alone (a campaign's isolation references and
cache probes): each gives its time, its prompt and its output length, and the two costs are the
least-squares fit of time = prompt x prefill + output x decode over the recent ones (no request
is sent to measure). `slowdown` keeps the fit honest: the largest ratio of a recent run's time
(lone or loaded) to what the fit predicts for it, so a machine that becomes busy stretches the
timeout with it.

Before anything is measured (a campaign's first loaded runs) the runner does not guess a speed:
a request's floor then restarts whenever another request of the runner completes
(`Runner._exchange`), so a request times out only after the floor passed with no answer at all
from the server; one stuck while the rest are served is still caught, the floor after the rest.

    >>> p = Pace(prefill_s=0.002, decode_s=0.08)    # SmolLM2 on SGLang CPU, about 12 tokens/s
    >>> r = RequestSpec("r", 0.0, tuple(range(500)), max_tokens=64)
    >>> round(p.expected_s([r]), 2), p.timeout_s([r], floor_s=120.0)
    (6.12, 120.0)
    >>> round(p.timeout_s([r] * 40, floor_s=120.0))   # forty of them in one run
    979

The same bound sizes a campaign's scenarios (`fit`): a scenario whose serial bound passes
`SCENARIO_S` at the measured pace is cut to fit it, its output lengths first (one factor for all,
never below `MIN_FITTED_TOKENS`), then its costliest requests (on a slow target the long prompts:
a blocker, whose only job is to hold a fast scheduler for a few ms, pressure, long variants), so
that as many requests as fit still run together, never fewer than `MIN_FITTED_REQUESTS` (a bug
of concurrency needs two; past that the paced timeout still holds). Prompt lengths themselves are
left alone: they carry the aims (page, tile and chunk boundaries). A fast target is not cut (the
reference engine's largest scenarios, eviction's, are 6 s at its measured pace, 14 s with a load
of 9 on two cores); SmolLM2 on a CPU engine is, and its scenarios then end in about `SCENARIO_S`
of serial work instead of minutes.

    >>> s = Scenario(seed=1, requests=tuple(dataclasses.replace(r, id=f"r{i}") for i in range(40)))
    >>> f = fit(s, p)
    >>> len(f.requests), f.requests[0].max_tokens, round(p.expected_s(f.requests), 1), f.meta["fitted"]
    (13, 16, 29.6, {'from_s': 244.8, 'max_tokens': 0.25, 'dropped': 27})
    >>> fit(s, Pace(prefill_s=0.0003, decode_s=0.0025)) is s       # the reference engine
    True
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from servefuzz.history import RequestRecord
from servefuzz.workload import RequestSpec, Scenario

__all__ = ["MIN_FITTED_REQUESTS", "MIN_FITTED_TOKENS", "PACE_MULTIPLE", "SCENARIO_S", "Pace", "PaceMeter", "fit"]

# The timeout is this many times the expected time: the bound is already serial, so this is
# room for a machine busier than when it was measured (the campaigns ran at load 2-5 here).
PACE_MULTIPLE = 4.0
# The serial bound a scenario may have (`fit`): the default timeout floor (120 s) over
# `PACE_MULTIPLE`, so a fitted scenario's requests time out at the floor, as on a fast target.
SCENARIO_S = 30.0
# Requests a fit leaves at least: two run together.
MIN_FITTED_REQUESTS = 2
# Output lengths a fit leaves at least (a smaller one stays as written): enough decode steps for a
# batch to change under a request, and to cross a 16-token page.
MIN_FITTED_TOKENS = 16
# How many recent lone requests the fit reads, and how many recent runs `slowdown` is over.
_WINDOW = 32
# Lone requests needed for a fit: two shapes at least; a few more steady it.
_MIN_LONE = 3
# Runs predicted shorter than this say nothing about `slowdown`: their time is the fixed cost of
# a request (HTTP, scheduling), which on a fast target is many times its few tokens' worth.
_MIN_PREDICTED_S = 1.0


@dataclass(frozen=True)
class Pace:
    """The measured cost of one prompt token and of one output token, in seconds, and how much
    slower than that the recent runs were (1.0: as measured)."""

    prefill_s: float
    decode_s: float
    slowdown: float = 1.0

    def work_s(self, prompt_tokens: int, output_tokens: int) -> float:
        return prompt_tokens * self.prefill_s + output_tokens * self.decode_s

    def expected_s(self, requests: Iterable[RequestSpec]) -> float:
        """The serial bound of `requests` (the module docstring)."""
        return self.slowdown * sum(self.work_s(len(r.prompt_ids), r.n * r.max_tokens) for r in requests)

    def timeout_s(self, requests: Sequence[RequestSpec], *, floor_s: float) -> float:
        """The request timeout for a run of `requests`: `PACE_MULTIPLE` times their serial bound,
        at least `floor_s`."""
        return max(floor_s, PACE_MULTIPLE * self.expected_s(requests))


class PaceMeter:
    """The measurements so far (mutable, owned by one runner); `pace` is None until enough lone
    requests answered."""

    def __init__(self) -> None:
        self._lone: deque[tuple[int, int, float]] = deque(maxlen=_WINDOW)  # (prompt, output, seconds)
        self._runs: deque[tuple[tuple[tuple[int, int], ...], float]] = deque(maxlen=_WINDOW)

    @property
    def pace(self) -> Pace | None:
        fit = _fit(self._lone)
        if fit is None:
            return None
        base = Pace(*fit)
        ratios = [wall / p for work, wall in self._runs
                  if (p := sum(base.work_s(i, o) for i, o in work)) >= _MIN_PREDICTED_S]
        return Pace(base.prefill_s, base.decode_s, max([1.0, *ratios]))

    def observe(self, records: Sequence[RequestRecord]) -> None:
        """Fold in one run: a lone request's shape and time, and any run's wall time (first send
        to last end) against what it actually did. Runs with a failed request say nothing."""
        if not records or not all(r.ok and r.end_ms is not None and r.sent_ms is not None for r in records):
            return
        work = tuple((r.prompt_tokens or 0, sum(len(c.token_ids) for c in r.choices)) for r in records)
        sent = min(r.sent_ms or 0.0 for r in records)
        wall = max(0.0, (max(r.end_ms or 0.0 for r in records) - sent) / 1000.0)
        if len(records) == 1 and work[0][0] > 0:
            self._lone.append((*work[0], wall))
        self._runs.append((work, wall))


def _fit(lone: Iterable[tuple[int, int, float]]) -> tuple[float, float] | None:
    """The least-squares (prefill, decode) seconds a token, both >= 0, from (prompt, output,
    seconds) triples; None with too few (or none with a token).

    >>> _fit([(100, 10, 1.2), (200, 10, 1.4), (100, 50, 5.2)])   # 2 ms in, 100 ms out
    (0.002, 0.1)
    """
    rows = list(lone)
    if len(rows) < _MIN_LONE:
        return None
    spp = sum(p * p for p, _, _ in rows)
    soo = sum(o * o for _, o, _ in rows)
    spo = sum(p * o for p, o, _ in rows)
    spt = sum(p * t for p, _, t in rows)
    sot = sum(o * t for _, o, t in rows)
    det = spp * soo - spo * spo
    if det > 1e-9 * spp * soo:
        a, b = (spt * soo - sot * spo) / det, (sot * spp - spt * spo) / det
        if a >= 0 and b >= 0:
            return round(a, 9), round(b, 9)
    # Alike shapes or a negative term (noise: a busy machine, a probe's cached prompt): the best
    # fit with both >= 0 then has one of them 0, so it is the better of the two one-kind fits.
    # (Each kind's largest rate at once, as before, charged a 100-token prompt 90 s on vLLM CPU
    # at load 20 and cut every scenario to two requests: an over-estimate costs `fit` too.)
    edges = [(spt / spp, 0.0)] if spp else []
    edges += [(0.0, sot / soo)] if soo else []
    if not edges:
        return None
    a, b = min(edges, key=lambda e: sum((t - e[0] * p - e[1] * o) ** 2 for p, o, t in rows))
    return round(a, 9), round(b, 9)


def fit(scenario: Scenario, pace: Pace | None, budget_s: float | None = None) -> Scenario:
    """`scenario` cut to a serial bound of `budget_s` (default `SCENARIO_S`) at `pace` (the module
    docstring); the same object where it fits already, or nothing is measured yet. What was cut
    is in `meta["fitted"]`: the bound before, the output factor, the requests dropped."""
    budget_s = SCENARIO_S if budget_s is None else budget_s
    before = pace.expected_s(scenario.requests) if pace is not None else 0.0
    if pace is None or before <= budget_s:
        return scenario
    prefill = pace.slowdown * sum(len(r.prompt_ids) for r in scenario.requests) * pace.prefill_s
    # One factor for every output length, a power of two: a little jitter in the measured pace
    # does not make each scenario a slightly different size.
    factor, longest = 1.0, max(r.max_tokens for r in scenario.requests)
    while longest * factor > MIN_FITTED_TOKENS and prefill + (before - prefill) * factor > budget_s:
        factor /= 2
    requests = [dataclasses.replace(r, max_tokens=min(r.max_tokens, max(MIN_FITTED_TOKENS, round(r.max_tokens * factor))))
                for r in scenario.requests]
    dropped = 0
    while len(requests) > MIN_FITTED_REQUESTS and pace.expected_s(requests) > budget_s:
        # The costliest, the last written of equals; the rest keep their order and ids.
        del requests[max(range(len(requests)),
                         key=lambda i: (pace.work_s(len(requests[i].prompt_ids), requests[i].n * requests[i].max_tokens), i))]
        dropped += 1
    meta = {**scenario.meta, "fitted": {"from_s": round(before, 1), "max_tokens": factor, "dropped": dropped}}
    return dataclasses.replace(scenario, requests=tuple(requests), meta=meta)
