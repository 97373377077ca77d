#!/usr/bin/env python3
"""Standalone reproduction of servefuzz finding finding_00051_1219543989.json (standard library only).

It needs no servefuzz. Write the tiny random-weight model the finding ran on (and its LoRA
adapters) with numpy alone, start the server on it as issue.md says, then replay:

    python3 repro.py --write-model ./tiny
    python3 repro.py --base-url http://127.0.0.1:30000 --runs 10

or let the script start (and, after a crash, restart) the server with your own command:

    python3 repro.py --serve "llama-server -m ./tiny/tiny.gguf --port 8080" --base-url http://127.0.0.1:8080

First every request expected to diverge is sent once alone on a flushed cache: its reference.
Then the finding's requests are sent at their recorded offsets, --runs times, each run on a
flushed cache where the engine has a flush (a request with a cache-state finding is then probed
warm, and primed by its bare prefix). A run reproduces the finding when an expected request
answers other than its reference (or, for a crash, hang, 5xx or malformed answer, when the same
failure shows again; for an isolation breach, when an expected request again reports more
cached tokens than its own cache salt allows): the rule servefuzz itself confirms with
(servefuzz.oracles.judge), which a test holds this script to.
Exit status: 0 CONFIRMED, 1 NOT REPRODUCED or UNDECIDED (servefuzz.stats decides, embedded
below), 2 bad arguments or no server to talk to.

The finding is data (the JSON text in FINDING, with the exact request bodies servefuzz sends);
nothing read from it is ever executed, and the command --serve runs is only ever the one given
on the command line.
"""

# Annotations are never evaluated: servefuzz's own functions are embedded below verbatim, typed.
from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
import urllib.request
import zlib
from pathlib import Path

# --- servefuzz.stats, verbatim: the rule that turns "k of n runs" into a decision ----------
"""Rates and every decision made from them: one module owns the rules.

A finding's rate is "k of n replays showed it again". Everything servefuzz claims about a
finding (reproduced, not reproduced, cured, still there, a shrink candidate kept) is a claim
about such rates, so each claim is made here, with its error rate stated:

- `Rate`: k of n with its Wilson score interval (95% unless asked), printed as
  "8/10 (80%, 95% CI 49-94%)".
- `SequentialTest`: Wald's sequential probability ratio test deciding "reproduced" (the rate is
  at least p1 = 0.5) against "not reproduced" (at most p0 = 0.05), each wrong at most 1% of the
  time (alpha = beta = 0.01), replaying one run at a time until the evidence decides or a cap
  is reached ("undecided").
- `fisher_less`: the one-sided Fisher exact p-value that one rate is below another.
- `CureTest`: triage's rule: "cured" only when the variant never reproduced and is
  significantly below the baseline (p < 0.01); "still there" when it came back.
- `ShrinkGate`: shrink's rule: a candidate is kept only when its rate is not significantly
  below the finding's (p >= 0.01) and a sequential test says it reproduces at the finding's
  level (at most 5% wrong either way).
- `Trail`: a finding's rates over time; a finding that reproduced and then stops is *flaky*
  (reported with its history, as Hypothesis reports a flaky test, never shrunk into nothing).

    >>> r = Rate(8, 10)
    >>> str(r)
    '8/10 (80%, 95% CI 49-94%)'
    >>> decide(2, 2), decide(0, 8), decide(1, 3)
    ('reproduced', 'not reproduced', 'undecided')
    >>> round(fisher_less(0, 5, 10, 10), 5)     # 0/5 under a flag against 10/10 without it
    0.00033
    >>> CureTest().decide(Rate(0, 3), Rate(10, 10)), CureTest().decide(Rate(0, 20), Rate(1, 5))
    ('cured', 'undecided')

Standard library only (`math`), no imports from servefuzz and no `from __future__` import:
report/repro.py embeds this module's source verbatim, so the standalone script decides exactly
as servefuzz does. Annotations beyond builtin names are strings so that the copy runs on older
Pythons too.
"""

import math

__all__ = [
    "ACCEPT",
    "CURED",
    "NOT_REPRODUCED",
    "REDUCED",
    "REJECT",
    "REPRODUCED",
    "REPRODUCTION",
    "STILL_THERE",
    "UNDECIDED",
    "CureTest",
    "Rate",
    "SequentialTest",
    "ShrinkGate",
    "Trail",
    "decide",
    "fisher_less",
    "more_runs",
    "wilson",
    "z_score",
]

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
UNDECIDED = "undecided"
CURED = "cured"
REDUCED = "reduced"
STILL_THERE = "still there"
ACCEPT = "accept"
REJECT = "reject"


def z_score(confidence: float) -> float:
    """The two-sided standard normal quantile for `confidence` (1.959964 for 0.95).

    Bisection on erfc: exact to double precision, and `math` is all this module may import.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    tail = 1.0 - confidence  # P(|Z| > z) = erfc(z / sqrt 2)
    lo, hi = 0.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if math.erfc(mid / math.sqrt(2.0)) > tail:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def wilson(k: int, n: int, confidence: float = 0.95) -> "tuple[float, float]":
    """Wilson's score interval for k successes in n trials; (0, 1) when n is 0.

    Unlike the textbook k/n +- z*sqrt(p(1-p)/n), it never leaves [0, 1] and stays honest at
    0/n and n/n, the rates replays mostly give (0/10 is not "0%, certainly").

        >>> [round(x, 4) for x in wilson(81, 263)]   # Newcombe (1998), Table I
        [0.2553, 0.3662]
    """
    if n == 0:
        return 0.0, 1.0
    z = z_score(confidence)
    p = k / n
    z2n = z * z / n
    centre = (p + z2n / 2) / (1 + z2n)
    half = z * math.sqrt(p * (1 - p) / n + z2n / (4 * n)) / (1 + z2n)
    # k = 0 and k = n are exact at the ends (the formula gives them up to rounding).
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high


def _pct(x: float) -> str:
    """A percentage for people: whole numbers, but never "0" or "100" for what is not."""
    pct = 100.0 * x
    if 0.0 < pct < 0.5:
        return f"{pct:.1g}"
    if 99.5 < pct < 100.0:
        return f"{100.0 - float(f'{100.0 - pct:.1g}'):g}"
    return f"{pct:.0f}"


class Rate:
    """`k` of `n` runs showed it; immutable, printed with its interval.

        >>> Rate(0, 10)
        Rate(0, 10)
        >>> print(Rate(0, 10), Rate.parse("10/10"), Rate(0, 0), sep="; ")
        0/10 (0%, 95% CI 0-28%); 10/10 (100%, 95% CI 72-100%); 0/0 (no runs)
        >>> Rate(1, 5) + Rate(2, 5)
        Rate(3, 10)
    """

    __slots__ = ("_k", "_n")

    def __init__(self, k: int, n: int) -> None:
        if isinstance(k, bool) or isinstance(n, bool) or not isinstance(k, int) or not isinstance(n, int):
            raise TypeError(f"a rate is two whole numbers, got {k!r}/{n!r}")
        if not 0 <= k <= n:
            raise ValueError(f"a rate needs 0 <= k <= n, got {k}/{n}")
        self._k, self._n = k, n

    @property
    def k(self) -> int:
        return self._k

    @property
    def n(self) -> int:
        return self._n

    @classmethod
    def parse(cls, text: str) -> "Rate":
        """`"8/10"` (what findings stored before rates carried intervals) as a Rate."""
        k, sep, n = str(text).partition("/")
        if not sep:
            raise ValueError(f"a rate looks like 'k/n', got {text!r}")
        return cls(int(k), int(n))

    @property
    def fraction(self) -> float:
        """k / n; NaN for no runs (there is no estimate, and 0 would be a claim)."""
        return self._k / self._n if self._n else math.nan

    def interval(self, confidence: float = 0.95) -> "tuple[float, float]":
        return wilson(self._k, self._n, confidence)

    def describe(self, confidence: float = 0.95) -> str:
        """`"8/10 (80%, 95% CI 49-94%)"`; `str(rate)` is this at 95%."""
        if self._n == 0:
            return f"{self._k}/{self._n} (no runs)"
        low, high = self.interval(confidence)
        level = f"{100 * confidence:g}%"
        return f"{self._k}/{self._n} ({_pct(self.fraction)}%, {level} CI {_pct(low)}-{_pct(high)}%)"

    def to_json(self, confidence: float = 0.95) -> "dict[str, object]":
        """What a finding stores: the counts, and the interval that goes with them."""
        low, high = self.interval(confidence)
        return {"k": self._k, "n": self._n, "low": round(low, 4), "high": round(high, 4), "confidence": confidence}

    @classmethod
    def from_json(cls, data: "dict[str, object]") -> "Rate":
        return cls(int(data["k"]), int(data["n"]))  # type: ignore[call-overload]

    def __add__(self, other: "Rate") -> "Rate":
        """Pooled runs of the same scenario on the same server."""
        if not isinstance(other, Rate):
            return NotImplemented
        return Rate(self._k + other._k, self._n + other._n)

    def __str__(self) -> str:
        return self.describe()

    def __repr__(self) -> str:
        return f"Rate({self._k}, {self._n})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rate) and (self._k, self._n) == (other._k, other._n)

    def __hash__(self) -> int:
        return hash((Rate, self._k, self._n))


class SequentialTest:
    """Wald's SPRT: does a finding reproduce (rate >= p1) or not (rate <= p0)?

    Hypotheses (defaults): "reproduced" means the rate is at least p1 = 0.5, a finding one can
    shrink and triage; "not reproduced" means at most p0 = 0.05, the odd coincidence. Each run
    adds log(p1/p0) to the log likelihood ratio when the finding came back and
    log((1-p1)/(1-p0)) when not; the test decides "reproduced" once the ratio reaches 1/alpha
    and "not reproduced" once it falls to beta. With these bounds (rather than Wald's usual
    (1-beta)/alpha) the error rates are at most alpha and beta exactly, not approximately:
    P(reproduced | rate <= p0) <= alpha and P(not reproduced | rate >= p1) <= beta. Stopping
    at `cap` runs only turns decisions into "undecided", so it keeps both bounds. Between p0
    and p1 (the indifference zone) either answer may come; the rate and its interval are
    always printed beside the word.

    With the defaults: 2/2 is reproduced, 3/6 too; 0/8 is not reproduced, 1/12 too; a
    finding that always reproduces is decided in 2 runs, one that never does in 8.

        >>> t = SequentialTest()
        >>> [t.decide(k, 6) for k in (0, 1, 2, 3)]
        ['undecided', 'undecided', 'undecided', 'reproduced']
        >>> t.more_runs(0, 0), t.more_runs(0, 5), t.more_runs(2, 2)
        (2, 3, 0)
    """

    __slots__ = ("alpha", "beta", "cap", "p0", "p1", "_fail", "_hi", "_lo", "_succ")

    def __init__(self, p0: float = 0.05, p1: float = 0.5, alpha: float = 0.01, beta: float = 0.01, cap: int = 30) -> None:
        if not 0.0 < p0 < p1 < 1.0:
            raise ValueError(f"need 0 < p0 < p1 < 1, got p0={p0}, p1={p1}")
        if not (0.0 < alpha < 0.5 and 0.0 < beta < 0.5):
            raise ValueError("alpha and beta must be in (0, 0.5)")
        if cap < 1:
            raise ValueError("cap must be at least 1")
        self.p0, self.p1, self.alpha, self.beta, self.cap = p0, p1, alpha, beta, cap
        self._succ = math.log(p1 / p0)
        self._fail = math.log((1.0 - p1) / (1.0 - p0))
        # A hair of slack so that a ratio landing exactly on a bound (2/2 gives exactly 100
        # with the defaults) is not lost to rounding.
        self._hi = math.log(1.0 / alpha) - 1e-9
        self._lo = math.log(beta) + 1e-9

    def llr(self, k: int, n: int) -> float:
        """Log likelihood ratio of "reproduces" against "does not", after k of n."""
        return k * self._succ + (n - k) * self._fail

    def decide(self, k: int, n: int) -> str:
        """REPRODUCED, NOT_REPRODUCED, or UNDECIDED (not yet, or not within the cap)."""
        if not 0 <= k <= n:
            raise ValueError(f"need 0 <= k <= n, got {k}/{n}")
        ratio = self.llr(k, n)
        if ratio >= self._hi:
            return REPRODUCED
        if ratio <= self._lo:
            return NOT_REPRODUCED
        return UNDECIDED

    def more_runs(self, k: int, n: int) -> int:
        """The fewest further runs after which a decision is possible; 0 when decided, at the
        cap, or when no decision can come within the cap (replay no more: it is undecided).

        Replaying this many at once never runs past a decision, so callers may batch them.
        """
        if self.decide(k, n) != UNDECIDED:
            return 0
        ratio = self.llr(k, n)
        # Only successes, or only failures, decide soonest; solve for each, then make the
        # rounding exact against `decide` itself.
        best = self.cap - n + 1

        def by_successes(m: int) -> bool:
            return self.decide(k + m, n + m) == REPRODUCED

        def by_failures(m: int) -> bool:
            return self.decide(k, n + m) == NOT_REPRODUCED

        for m, decides in (
            (math.ceil((self._hi - ratio) / self._succ), by_successes),
            (math.ceil((ratio - self._lo) / -self._fail), by_failures),
        ):
            m = max(1, m)
            while m > 1 and decides(m - 1):
                m -= 1
            while not decides(m):
                m += 1
            best = min(best, m)
        return best if best <= self.cap - n else 0

    def operating_characteristic(self, p: float) -> "tuple[float, float, float, float]":
        """Exactly, for a finding that reproduces with probability `p` on each run: the
        probabilities of deciding reproduced, not reproduced and undecided (at the cap), and
        the expected number of runs.

            >>> a, b, u, runs = SequentialTest().operating_characteristic(0.05)
            >>> a <= 0.01, round(runs, 1)
            (True, 10.0)
        """
        reproduced = not_reproduced = runs = 0.0
        alive = {0: 1.0}  # successes -> probability of having reached (k, n) undecided
        for n in range(1, self.cap + 1):
            nxt: "dict[int, float]" = {}
            for k, prob in alive.items():
                for kk, q in ((k + 1, p), (k, 1.0 - p)):
                    mass = prob * q
                    if mass == 0.0:
                        continue
                    verdict = self.decide(kk, n)
                    if verdict == REPRODUCED:
                        reproduced += mass
                        runs += mass * n
                    elif verdict == NOT_REPRODUCED:
                        not_reproduced += mass
                        runs += mass * n
                    else:
                        nxt[kk] = nxt.get(kk, 0.0) + mass
            alive = nxt
        undecided = sum(alive.values())
        return reproduced, not_reproduced, undecided, runs + undecided * self.cap

    def describe(self, k: int, n: int) -> str:
        """`"reproduced: 2/2 (100%, 95% CI 34-100%)"`."""
        return f"{self.decide(k, n)}: {Rate(k, n)}"

    def statement(self) -> str:
        """The hypotheses and error rates, in one line for reports."""
        return (
            f"sequential test (Wald SPRT): reproduced = rate >= {self.p1:g}, not reproduced = rate <= {self.p0:g}; "
            f"each wrong at most {self.alpha:g} / {self.beta:g} of the time; undecided after {self.cap} runs"
        )

    def __repr__(self) -> str:
        return f"SequentialTest(p0={self.p0}, p1={self.p1}, alpha={self.alpha}, beta={self.beta}, cap={self.cap})"


REPRODUCTION = SequentialTest()


def decide(k: int, n: int) -> str:
    """`REPRODUCTION.decide`: the default sequential test."""
    return REPRODUCTION.decide(k, n)


def more_runs(k: int, n: int) -> int:
    """`REPRODUCTION.more_runs`: the default sequential test."""
    return REPRODUCTION.more_runs(k, n)


def fisher_less(k: int, n: int, k_ref: int, n_ref: int) -> float:
    """One-sided Fisher exact test: the p-value that rate k/n is below rate k_ref/n_ref.

    Given the total number of reproductions (k + k_ref), under equal rates the count falling
    in the first sample is hypergeometric; the p-value is the chance of k or fewer there.
    This is scipy's `fisher_exact([[k, n-k], [k_ref, n_ref-k_ref]], alternative="less")`,
    computed in whole numbers (exact, whatever the counts).

        >>> fisher_less(0, 20, 1, 5)     # 0/20 under a flag against 1/5: no evidence
        0.2
    """
    Rate(k, n), Rate(k_ref, n_ref)  # validates
    total, hits = n + n_ref, k + k_ref
    lowest = max(0, hits - n_ref)
    if k < lowest:
        return 0.0
    tail = sum(math.comb(hits, x) * math.comb(total - hits, n - x) for x in range(lowest, min(k, hits) + 1))
    return min(1.0, tail / math.comb(total, n))


class CureTest:
    """Triage's rule for one flag variant against the baseline (the finding's server as found).

    - "cured": the variant never reproduced in n runs and that is significantly below the
      baseline: `fisher_less(0, n, baseline) < alpha` (alpha = 0.01).
    - "still there": it came back under the variant (the finding's own verdict), not
      significantly less often than at baseline; "reduced": it came back, significantly less.
    - "undecided": n reached the cap with neither (0/n, but the baseline is too weak for 0/n
      to mean anything: 0/20 against 1/5 has p = 0.2).

    Checking after every run keeps the stated rate: the test is only ever passed along the
    all-zero path, at the first n where 0/n would be significant, so it is one test per row.
    (Over the baseline's own chance, a variant exactly as bad as the baseline is called cured
    at most 0.55% of the time for baselines of 5, 10 or 20 runs; tests/test_stats.py checks it.)

        >>> t = CureTest()
        >>> t.runs_to_cure(Rate(10, 10)), t.runs_to_cure(Rate(5, 10)), t.runs_to_cure(Rate(1, 5))
        (3, 12, None)
        >>> t.decide(Rate(0, 2), Rate(10, 10)), t.more_runs(Rate(0, 2), Rate(10, 10))
        ('undecided', 1)
        >>> t.decide(Rate(4, 5), Rate(10, 10)), t.decide(Rate(1, 10), Rate(10, 10))
        ('still there', 'reduced')
    """

    __slots__ = ("_needed", "alpha", "cap")

    def __init__(self, alpha: float = 0.01, cap: int = 40) -> None:
        if not 0.0 < alpha < 0.5:
            raise ValueError("alpha must be in (0, 0.5)")
        self.alpha, self.cap = alpha, cap
        self._needed: "dict[tuple[int, int], int | None]" = {}

    def p_value(self, variant: Rate, baseline: Rate) -> float:
        return fisher_less(variant.k, variant.n, baseline.k, baseline.n)

    def runs_to_cure(self, baseline: Rate) -> "int | None":
        """How many runs without the finding make a cure significant (None: not within the
        cap; more baseline runs would help)."""
        key = (baseline.k, baseline.n)
        if key not in self._needed:
            self._needed[key] = next(
                (n for n in range(1, self.cap + 1) if fisher_less(0, n, baseline.k, baseline.n) < self.alpha), None
            )
        return self._needed[key]

    def decide(self, variant: Rate, baseline: Rate) -> str:
        """CURED, REDUCED, STILL_THERE or UNDECIDED (so far, or for good at the cap)."""
        if variant.k > 0:
            return REDUCED if self.p_value(variant, baseline) < self.alpha else STILL_THERE
        needed = self.runs_to_cure(baseline)
        if needed is not None and variant.n >= needed:
            return CURED
        return UNDECIDED

    def more_runs(self, variant: Rate, baseline: Rate) -> int:
        """Runs the variant's row still needs; 0 once decided or at the cap.

        While a cure is within reach this is exactly the number of runs after which 0/n would
        be significant (a batch that big decides the row either way). Out of reach, the row
        runs to the cap to see whether the finding comes back ("still there"), else it ends
        "undecided" with its numbers.
        """
        if self.decide(variant, baseline) != UNDECIDED or variant.n >= self.cap:
            return 0
        needed = self.runs_to_cure(baseline)
        return (needed if needed is not None else self.cap) - variant.n

    def describe(self, variant: Rate, baseline: Rate) -> str:
        """`"cured: 0/3 (0%, 95% CI 0-56%) against 10/10 (...), p = 0.0035"`."""
        p = self.p_value(variant, baseline)
        return f"{self.decide(variant, baseline)}: {variant} against {baseline}, p = {p:.2g}"


class ShrinkGate:
    """Shrink's acceptance rule for candidates, against the finding's own rate `reference`.

    A smaller candidate is only worth keeping if it reproduces about as often as the finding:
    one that comes back 6 times in 10 where the finding came back 10 in 10 has lost part of
    the bug (on the reference engine, a burst without its blocker), and a minimal finding must
    not be harder to reproduce than the one it came from. So a candidate, replayed one run at
    a time, is
    - rejected as soon as its rate is significantly below the reference's
      (`fisher_less(k, n, reference) < alpha`, alpha = 0.01);
    - kept once a sequential test says it reproduces at the finding's level: Wald's SPRT
      between `keep` = the finding's rate (at most 0.95) and `drop` = keep - 0.2 (keep x 0.6
      for a finding rarer than 50%), each error at most 5%: a candidate as good as the
      finding is turned down at most 5% of the time (some of those end undecided), one that
      lost 0.2 of its rate is kept at most 5% of the time;
    - rejected when that test says "drop", and left undecided at the cap (30 runs), which is
      not an acceptance: a finding that reproduces too seldom to tell says "undecided".

    Against a finding at 10/10 a candidate that always reproduces is kept after 13 runs; one
    that never does is dropped after 2. (A gentler test, with `drop` at 0.6 x keep, kept a
    pair of requests sent at once without their blocker that came back 29 times in 40 on a
    busy machine: the minimal finding then reproduced 5/10 where the original did 10/10.)

        >>> g = ShrinkGate(Rate(10, 10))
        >>> g.decide(13, 13), g.decide(0, 2), g.decide(12, 12), g.decide(12, 13)
        ('accept', 'reject', 'undecided', 'undecided')
        >>> g.more_runs(0, 0), g.more_runs(12, 13)
        (2, 3)
        >>> ShrinkGate(Rate(10, 10)).decide(1, 5)   # 1/5 against 10/10: p = 0.0001
        'reject'
    """

    __slots__ = ("alpha", "reference", "test")

    KEEP_MAX = 0.95  # a finding seen 10/10 may still fail now and then: do not demand 100%
    # How much lower a candidate's rate may be before it has lost part of the bug: 0.2, or
    # 40% of the rate for a rare finding (where 0.2 would be all of it).
    SLACK = 0.2
    SLACK_FACTOR = 0.4
    ERROR = 0.05

    def __init__(self, reference: Rate, alpha: float = 0.01, cap: int = 30) -> None:
        """`cap`: runs per candidate at most; raised to the fewest that can keep one (13 against
        a finding at 100%), since a gate that can only reject would shrink nothing."""
        if reference.k == 0:
            raise ValueError(f"a finding seen {reference.k}/{reference.n} has no rate to keep: it is not reproduced")
        self.reference, self.alpha = reference, alpha
        keep = min(self.KEEP_MAX, reference.fraction)
        drop = keep - min(self.SLACK, self.SLACK_FACTOR * keep)
        test = SequentialTest(p0=drop, p1=keep, alpha=self.ERROR, beta=self.ERROR, cap=1)
        fewest = next(n for n in range(1, 10_000) if test.decide(n, n) == REPRODUCED)
        self.test = SequentialTest(p0=drop, p1=keep, alpha=self.ERROR, beta=self.ERROR, cap=max(cap, fewest))

    def p_value(self, k: int, n: int) -> float:
        return fisher_less(k, n, self.reference.k, self.reference.n)

    def decide(self, k: int, n: int) -> str:
        """ACCEPT, REJECT or UNDECIDED."""
        if n and self.p_value(k, n) < self.alpha:
            return REJECT
        verdict = self.test.decide(k, n)
        if verdict == REPRODUCED:
            return ACCEPT
        if verdict == NOT_REPRODUCED:
            return REJECT
        return UNDECIDED

    def more_runs(self, k: int, n: int) -> int:
        """The fewest further runs after which the gate may decide; 0 when it has or cannot."""
        if self.decide(k, n) != UNDECIDED:
            return 0
        for m in range(1, self.test.cap - n + 1):
            if self.decide(k + m, n + m) != UNDECIDED or self.decide(k, n + m) != UNDECIDED:
                return m
        return 0

    # The fresh-server re-check: a candidate the gate accepted is replayed on a freshly started
    # server, where all it must show is that it does not need the old server's state.
    RECHECK_MIN = 5

    @property
    def recheck_runs(self) -> int:
        """How many fresh-server runs the re-check plans: enough that a candidate which never
        comes back there is rejected (0 of them significantly below the finding's rate), and at
        least RECHECK_MIN; at most the gate's cap. Against 10/10 that is 5."""
        fewest = next((n for n in range(1, self.test.cap + 1) if self.p_value(0, n) < self.alpha), self.test.cap)
        return min(self.test.cap, max(self.RECHECK_MIN, fewest))

    def recheck(self, k: int, n: int) -> str:
        """ACCEPT, REJECT or UNDECIDED for `k` reproductions in `n` of the re-check's runs.

        The candidate already passed the full gate on the old server, so the fresh server only
        has to rule out that it owed its rate to damage earlier candidates left behind (such a
        candidate comes back seldom or never there). The rule is the gate's reject rule alone,
        over `recheck_runs` runs, curtailed: it accepts as soon as even failing every remaining
        run could not make the rate significantly low, and rejects as soon as succeeding in every
        remaining run could not save it. Against 10/10: accepted after 2 reproductions in a row
        (2/5 has p = 0.022), rejected at 0/4 or 1/5.

            >>> g = ShrinkGate(Rate(10, 10))
            >>> g.recheck_runs, g.recheck(2, 2), g.recheck(0, 3), g.recheck(0, 4), g.recheck(1, 5)
            (5, 'accept', 'undecided', 'reject', 'reject')
        """
        planned = self.recheck_runs
        if k and self.p_value(k, planned) >= self.alpha:
            return ACCEPT
        best = k + max(0, planned - n)
        if self.p_value(best, planned) < self.alpha:
            return REJECT
        return UNDECIDED

    def describe(self, k: int, n: int) -> str:
        """`"accept: 6/6 (...) against 10/10 (...), p = 1"`."""
        return f"{self.decide(k, n)}: {Rate(k, n)} against {self.reference}, p = {self.p_value(k, n):.2g}"


class Trail:
    """One finding's rates over time, each labelled by where it was measured.

    Hypothesis's flaky rule: a finding that reproduced and then, replayed from the same state,
    is decided "not reproduced" is *flaky*. Shrink reports it so, with this history, instead
    of shrinking it into nothing (every candidate of a finding that no longer reproduces looks
    as good as the empty one).

        >>> t = Trail()
        >>> t.add("campaign confirmation", Rate(1, 5)).add("shrink: finding re-checked", Rate(0, 8)).flaky
        True
        >>> print(t)
        flaky: it reproduced, then stopped
          campaign confirmation: 1/5 (20%, 95% CI 4-62%): undecided
          shrink: finding re-checked: 0/8 (0%, 95% CI 0-32%): not reproduced
    """

    __slots__ = ("entries", "test")

    def __init__(self, test: "SequentialTest | None" = None) -> None:
        self.test = REPRODUCTION if test is None else test
        self.entries: "list[tuple[str, Rate]]" = []

    def add(self, label: str, rate: Rate) -> "Trail":
        self.entries.append((label, rate))
        return self

    @property
    def last(self) -> str:
        """The decision of the latest measurement (UNDECIDED when there is none)."""
        return self.test.decide(self.entries[-1][1].k, self.entries[-1][1].n) if self.entries else UNDECIDED

    @property
    def flaky(self) -> bool:
        """It came back at least once before, and the latest replays say it does not."""
        return self.last == NOT_REPRODUCED and any(rate.k > 0 for _, rate in self.entries[:-1])

    def lines(self) -> "list[str]":
        return [f"{label}: {rate}: {self.test.decide(rate.k, rate.n)}" for label, rate in self.entries]

    def to_json(self) -> "list[dict[str, object]]":
        return [{"label": label, **rate.to_json()} for label, rate in self.entries]

    def __str__(self) -> str:
        head = "flaky: it reproduced, then stopped" if self.flaky else f"history ({self.last})"
        return "\n".join([head, *("  " + line for line in self.lines())])

# --- servefuzz.reports.tiny_model, verbatim: the model the finding ran on, numpy alone --------
"""The tiny random-weight models of servefuzz's findings, written with numpy and the standard
library alone, so that a maintainer can rebuild the exact model a finding ran on without
servefuzz: every generated repro.py embeds this module's source verbatim (`--write-model DIR`).

It writes what `servefuzz.models.build_models` writes for the same seed, in the same layout
(`DIR/tiny.gguf`, `DIR/hf-<dtype>/`, `DIR/lora/`), byte for byte (tests/reports/test_tiny_model.py
holds the two together): the same random streams (numpy's `default_rng([seed, k])`), the same
weights, and the two file formats written by hand with `struct` and `json` (GGUF v3 as gguf-py
lays it out; safetensors as the safetensors package does). The one thing it cannot make is the
Hugging Face tokenizer, which servefuzz trains with the `tokenizers` package: the caller hands
its `tokenizer.json` in (repro.py carries it, compressed, as data), and the weights' quiet rows
are read from it.

    >>> spell_bytes("\u0120a\u00c3")
    b' a\\xc3'

Nothing here imports servefuzz, and numpy only when a model is written: repro.py's replay runs
on the standard library alone.
"""


import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

try:
    import numpy as np
except ImportError:  # repro.py embeds this module: a replay needs no numpy, only --write-model does
    np = None  # type: ignore[assignment]

__all__ = ["TINY", "TinyShape", "spell_bytes", "write_model"]


class TinyShape(NamedTuple):
    """servefuzz's tiny llama (`servefuzz.models.ModelShape`): RMSNorm, rotary, SwiGLU. A
    NamedTuple, not a dataclass: a dataclass looks its module up in sys.modules, which a script
    loaded by path (repro.py, embedding this) need not be in."""

    layers: int = 2
    hidden: int = 256
    heads: int = 4
    ffn: int = 512
    context: int = 2048
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


TINY = TinyShape()
ADAPTERS = ("lora-a", "lora-b")
LORA_RANK = 8
LORA_ALPHA = 16.0
LORA_TARGETS = ("q_proj", "v_proj")
LOGIT_SCALE = 3.0  # the ordinary tokens' output rows: their best logit far above the quiet ones' 0
GGUF_VOCAB = 1024
HF_SPECIALS = ("<s>", "</s>", "<pad>")
GGUF_LAYER_NAMES = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}
GGUF_MODEL_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def write_model(out_dir: Path, fmt: str, *, seed: int = 0, dtype: str = "float32", adapters: bool = True,
                tokenizer_json: str | None = None) -> list[Path]:
    """Write the model of format `fmt` ("gguf": llama.cpp; "hf": vLLM, SGLang) and, with
    `adapters`, its two LoRA adapters under `out_dir`; the paths written. "hf" needs the
    tokenizer servefuzz trained for `seed` (`tokenizer_json`, the text of its tokenizer.json)."""
    if np is None:
        raise RuntimeError("writing the model needs numpy (pip install numpy); the replay itself does not")
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if fmt == "gguf":
        written.append(_write_gguf(out_dir / "tiny.gguf", TINY, seed))
    elif fmt == "hf":
        if tokenizer_json is None:
            raise ValueError("an hf model needs the tokenizer.json servefuzz trained for it")
        written += _write_hf(out_dir / f"hf-{dtype}", TINY, seed, dtype, tokenizer_json)
    else:
        raise ValueError(f"unknown model format {fmt!r} (gguf or hf)")
    if adapters:
        written += _write_adapters(out_dir / "lora", TINY, seed, gguf=fmt == "gguf")
    return written


# --- the random streams, as servefuzz.models draws them ------------------------------------


def _words(rng: Any, count: int) -> list[str]:
    onsets = ["", "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "st", "tr", "kl"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou"]
    codas = ["", "", "n", "r", "s", "t", "l", "m"]
    words: set[str] = set()
    while len(words) < count:
        syllables = int(rng.integers(1, 4))
        words.add("".join(
            onsets[rng.integers(len(onsets))] + vowels[rng.integers(len(vowels))] + codas[rng.integers(len(codas))]
            for _ in range(syllables)
        ))
    return sorted(words)


def _weights(rng: Any, shape: TinyShape, vocab: int, quiet: Sequence[int]) -> dict[str, Any]:
    def proj(out: int, inp: int) -> Any:
        return np.asarray(rng.standard_normal((out, inp)) / np.sqrt(inp), dtype=np.float32)

    h, f = shape.hidden, shape.ffn
    w: dict[str, Any] = {"model.embed_tokens.weight": rng.standard_normal((vocab, h)).astype(np.float32)}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            w[p + f"self_attn.{name}.weight"] = proj(h, h)
        w[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "mlp.gate_proj.weight"] = proj(f, h)
        w[p + "mlp.up_proj.weight"] = proj(f, h)
        w[p + "mlp.down_proj.weight"] = proj(h, f)
    w["model.norm.weight"] = np.ones(h, np.float32)
    head = proj(vocab, h) * LOGIT_SCALE
    head[list(quiet)] = 0.0
    w["lm_head.weight"] = head
    return w


def _lora_pairs(rng: Any, shape: TinyShape) -> dict[str, tuple[Any, Any]]:
    h = shape.hidden
    out = {}
    for i in range(shape.layers):
        for target in LORA_TARGETS:
            a = np.asarray(rng.standard_normal((LORA_RANK, h)) / np.sqrt(h), dtype=np.float32)
            b = np.asarray(rng.standard_normal((h, LORA_RANK)) * 0.18, dtype=np.float32)
            out[f"model.layers.{i}.self_attn.{target}"] = (a, b)
    return out


def _gguf_name(hf_name: str) -> str:
    stem = hf_name.removesuffix(".weight")
    if stem in GGUF_MODEL_NAMES:
        return GGUF_MODEL_NAMES[stem] + ".weight"
    _, _, layer, rest = stem.split(".", 3)
    return f"blk.{layer}.{GGUF_LAYER_NAMES[rest]}.weight"


# --- GGUF (llama.cpp), version 3, laid out as gguf-py writes it -----------------------------

_U32, _I32, _F32, _BOOL, _STR, _ARR = 4, 5, 6, 7, 8, 9  # GGUF value types
_ALIGN = 32
# llama.cpp's token types
_NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6


def _gguf_str(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _gguf_value(vtype: int, value: Any) -> bytes:
    if vtype == _STR:
        return _gguf_str(value)
    return struct.pack({_U32: "<I", _I32: "<i", _F32: "<f", _BOOL: "?"}[vtype], value)


def _gguf_file(path: Path, kv: Sequence[tuple[str, int, Any]], tensors: Sequence[tuple[str, Any]]) -> Path:
    """`kv`: (key, type, value), an array as (key, _ARR, (element type, values))."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, vtype, value in kv:
        out += _gguf_str(key) + struct.pack("<I", vtype)
        if vtype == _ARR:
            sub, items = value
            out += struct.pack("<IQ", sub, len(items)) + b"".join(_gguf_value(sub, v) for v in items)
        else:
            out += _gguf_value(vtype, value)
    offset = 0
    for name, array in tensors:
        out += _gguf_str(name) + struct.pack("<I", array.ndim)
        out += b"".join(struct.pack("<Q", d) for d in reversed(array.shape))  # ggml's ne: innermost first
        out += struct.pack("<IQ", 0, offset)  # 0: F32
        offset += -(-array.nbytes // _ALIGN) * _ALIGN
    out += bytes(-len(out) % _ALIGN)
    with open(path, "wb") as fh:
        fh.write(out)
        for _, array in tensors:
            data = np.ascontiguousarray(array, dtype="<f4").tobytes()
            fh.write(data + bytes(-len(data) % _ALIGN))
    return path


def _write_gguf(path: Path, shape: TinyShape, seed: int) -> Path:
    """`servefuzz.models._write_gguf`: <unk>, <s>, </s>, the 256 byte tokens, then word pieces."""
    rng = np.random.default_rng([seed, 2])
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    kinds = [_UNKNOWN, _CONTROL, _CONTROL] + [_BYTE] * 256
    quiet = list(range(len(tokens)))
    pieces = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581"]
    pieces += ["\u2581" + w for w in _words(rng, GGUF_VOCAB - len(tokens) - len(pieces))]
    tokens += pieces
    kinds += [_NORMAL] * len(pieces)
    scores = [0.0] * len(quiet) + [-float(i) for i in range(len(pieces))]
    kv = [
        ("general.architecture", _STR, "llama"),
        ("general.name", _STR, "servefuzz-tiny"),
        ("llama.context_length", _U32, shape.context),
        ("llama.embedding_length", _U32, shape.hidden),
        ("llama.block_count", _U32, shape.layers),
        ("llama.feed_forward_length", _U32, shape.ffn),
        ("llama.attention.head_count", _U32, shape.heads),
        ("llama.attention.head_count_kv", _U32, shape.heads),
        ("llama.rope.dimension_count", _U32, shape.head_dim),
        ("llama.rope.freq_base", _F32, shape.rope_theta),
        ("llama.attention.layer_norm_rms_epsilon", _F32, shape.rms_eps),
        ("general.file_type", _U32, 0),  # all F32
        ("llama.vocab_size", _U32, len(tokens)),
        ("tokenizer.ggml.model", _STR, "llama"),
        ("tokenizer.ggml.tokens", _ARR, (_STR, tokens)),
        ("tokenizer.ggml.scores", _ARR, (_F32, scores)),
        ("tokenizer.ggml.token_type", _ARR, (_I32, kinds)),
        ("tokenizer.ggml.unknown_token_id", _U32, 0),
        ("tokenizer.ggml.bos_token_id", _U32, 1),
        ("tokenizer.ggml.eos_token_id", _U32, 2),
        ("tokenizer.ggml.add_bos_token", _BOOL, False),  # prompts are exact token ids
    ]
    weights = _weights(rng, shape, len(tokens), quiet)
    return _gguf_file(path, kv, [(_gguf_name(n), a) for n, a in weights.items()])


# --- safetensors and the Hugging Face folder (vLLM, SGLang) ---------------------------------


def _safetensors(path: Path, tensors: dict[str, Any], dtype: str) -> Path:
    """As the safetensors package writes one dtype: tensors sorted by name, the JSON header
    compact and padded with spaces to a multiple of 8."""
    names = sorted(tensors)
    blobs = {n: _bf16_bits(tensors[n]).tobytes() if dtype == "bfloat16"
             else np.ascontiguousarray(tensors[n], dtype="<f4").tobytes() for n in names}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for n in names:
        header[n] = {"dtype": "BF16" if dtype == "bfloat16" else "F32", "shape": list(tensors[n].shape),
                     "data_offsets": [offset, offset + len(blobs[n])]}
        offset += len(blobs[n])
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        for n in names:
            fh.write(blobs[n])
    return path


def _bf16_bits(a: Any) -> Any:
    """float32 -> bfloat16 bit patterns, rounding to nearest even as torch does."""
    bits = np.ascontiguousarray(a, dtype="<f4").view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype("<u2")


def _json(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
    return path


def _byte_chars() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the character each byte is spelled with -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_BYTE_CHARS = _byte_chars()


def spell_bytes(token: str) -> bytes:
    """The bytes a byte-level BPE token stands for."""
    return bytes(_BYTE_CHARS[c] for c in token)


def _quiet_tokens(tokenizer: dict[str, Any]) -> tuple[int, list[int]]:
    """(vocabulary size, quiet ids): the specials and every token that is not whole UTF-8 on its
    own (`tokenizers` decodes it to U+FFFD, which servefuzz.models reads as quiet)."""
    vocab: dict[str, int] = dict(tokenizer["model"]["vocab"])
    specials = {t["content"]: int(t["id"]) for t in tokenizer.get("added_tokens") or ()}
    size = max([*vocab.values(), *specials.values()]) + 1
    quiet = {specials[t] for t in HF_SPECIALS}
    for token, i in vocab.items():
        if token in specials:
            continue
        if "\ufffd" in spell_bytes(token).decode("utf-8", "replace"):
            quiet.add(i)
    return size, sorted(quiet)


def _write_hf(hf_dir: Path, shape: TinyShape, seed: int, dtype: str, tokenizer_json: str) -> list[Path]:
    hf_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = json.loads(tokenizer_json)
    vocab, quiet = _quiet_tokens(tokenizer)
    ids = {t["content"]: int(t["id"]) for t in tokenizer.get("added_tokens") or ()}
    (hf_dir / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    specials = dict(zip(("bos_token", "eos_token", "pad_token"), HF_SPECIALS, strict=True))
    written = [hf_dir / "tokenizer.json", _json(hf_dir / "special_tokens_map.json", specials)]
    written.append(_json(hf_dir / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": shape.context,
        "add_bos_token": False, "add_eos_token": False, **specials,
    }))
    written.append(_json(hf_dir / "config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": shape.hidden, "intermediate_size": shape.ffn, "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads, "num_key_value_heads": shape.heads, "head_dim": shape.head_dim,
        "hidden_act": "silu", "max_position_embeddings": shape.context, "rms_norm_eps": shape.rms_eps,
        "rope_theta": shape.rope_theta, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "pad_token_id": ids["<pad>"], "dtype": dtype,
    }))
    weights = _weights(np.random.default_rng([seed, 1]), shape, vocab, quiet)
    written.append(_safetensors(hf_dir / "model.safetensors", weights, dtype))
    return written


# --- the LoRA adapters ------------------------------------------------------------------------


def _write_adapters(out_dir: Path, shape: TinyShape, seed: int, *, gguf: bool) -> list[Path]:
    """Each of ADAPTERS: `NAME.gguf` (llama.cpp's LoRA GGUF) or `NAME/` (PEFT's layout)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for index, name in enumerate(ADAPTERS):
        pairs = _lora_pairs(np.random.default_rng([seed, 3 + index]), shape)
        if gguf:
            kv = [("general.architecture", _STR, "llama"), ("general.type", _STR, "adapter"),
                  ("adapter.type", _STR, "lora"), ("adapter.lora.alpha", _F32, LORA_ALPHA)]
            tensors = [(_gguf_name(m + ".weight") + suffix, t) for m, (a, b) in pairs.items()
                       for suffix, t in ((".lora_a", a), (".lora_b", b))]
            written.append(_gguf_file(out_dir / f"{name}.gguf", kv, tensors))
            continue
        folder = out_dir / name
        folder.mkdir(exist_ok=True)
        written.append(_json(folder / "adapter_config.json", {
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": None, "r": LORA_RANK,
            "lora_alpha": LORA_ALPHA, "lora_dropout": 0.0, "bias": "none", "target_modules": list(LORA_TARGETS),
            "fan_in_fan_out": False, "use_rslora": False, "use_dora": False,
        }))
        tensors_hf = {f"base_model.model.{m}.lora_{ab}.weight": t for m, (a, b) in pairs.items()
                      for ab, t in (("A", a), ("B", b))}
        written.append(_safetensors(folder / "adapter_model.safetensors", tensors_hf, "float32"))
    return written

# --- the finding ---------------------------------------------------------------------------

FINDING = json.loads(
    '{"name":"finding_00051_1219543989.json","bug":"crash (vllm:liveness:crash:abort,prefix=none)","e'
    'xpected":[],"expect_failure":"crash","expect_cached":{},"choices":{},"base_url":"http://127.0.0.'
    '1:33893","dialect":"openai","path":"/v1/completions","flush":"vllm","model":"tiny","requests":[{'
    '"id":"r01","offset_ms":0.0,"cancel_after_ms":null,"copies":1,"body":{"model":"tiny","prompt":[66'
    '8,478,235,338,179,243,74,529,603,495,264,11,150,941,449,729,782,24,327,123,872,710,637,703,453,6'
    '72,785,165,322,833,77,13,586,726],"max_tokens":2,"temperature":0.0,"n":1,"logprobs":5,"stream":f'
    'alse,"ignore_eos":true,"return_token_ids":true,"return_tokens_as_token_ids":true}},{"id":"r02","'
    'offset_ms":0.5,"cancel_after_ms":null,"copies":1,"body":{"model":"tiny","prompt":[910,126,280,53'
    '5,436,264,622,768,371,322,456,154,784,888,844,768,537,693,790,391,640,201,84,322,75,1020,124,540'
    ',390,117,340,248,477,872,207],"max_tokens":2,"temperature":0.0,"n":1,"logprobs":5,"stream":false'
    ',"ignore_eos":true,"return_token_ids":true,"return_tokens_as_token_ids":true}},{"id":"r04","offs'
    'et_ms":59.9,"cancel_after_ms":32.7,"copies":4,"body":{"model":"tiny","prompt":[333,143,248,376,6'
    '4,128,162,651,704,904,268,459,167,596,526,978,232,758,176,568,339,744,759,1007,37,838,392,793,20'
    '1,6,58,414,787,889,796,209,182,472,22,256,512,184,1020,510,899],"max_tokens":2,"temperature":0.0'
    ',"n":1,"logprobs":5,"stream":true,"ignore_eos":false,"return_token_ids":true,"return_tokens_as_t'
    'oken_ids":true,"stream_options":{"include_usage":true}}},{"id":"r05","offset_ms":151.9,"cancel_a'
    'fter_ms":38.2,"copies":1,"body":{"model":"tiny","prompt":[333,143,248,376,64,128,162,651,704,904'
    ',268,459,167,596,526,978,209,710,501],"max_tokens":1,"temperature":0.0,"n":1,"logprobs":5,"strea'
    'm":false,"ignore_eos":true,"return_token_ids":true,"return_tokens_as_token_ids":true}},{"id":"r0'
    '6","offset_ms":152.4,"cancel_after_ms":null,"copies":4,"body":{"model":"tiny","prompt":[351,485,'
    '229,979,232,792,285,37,198,506],"max_tokens":1,"temperature":0.0,"n":1,"logprobs":5,"stream":tru'
    'e,"ignore_eos":true,"return_token_ids":true,"return_tokens_as_token_ids":true,"stream_options":{'
    '"include_usage":true}}},{"id":"r07","offset_ms":152.8,"cancel_after_ms":210.6,"copies":2,"body":'
    '{"model":"tiny","prompt":[333,143,248,376,64,128,162,651,704,904,268,459,167,596,526],"max_token'
    's":5,"temperature":0.0,"n":1,"logprobs":5,"stream":true,"ignore_eos":false,"return_token_ids":tr'
    'ue,"return_tokens_as_token_ids":true,"stream_options":{"include_usage":true}}},{"id":"r08_l_c","'
    'offset_ms":153.4,"cancel_after_ms":5.6,"copies":1,"body":{"model":"tiny","prompt":[668,478,235,3'
    '38,179,243,74,529,603,495,264,11,150,941,449,729,782,24,327,123,872,710,637,703,453,672,785,165,'
    '322,833,77,13,462,105,317,350,687,50,571,652,795,909,873,249,158,910,539,660,203,630,963,745,753'
    ',633,760,833,628,736,911,446,608],"max_tokens":128,"temperature":0.0,"n":1,"logprobs":5,"stream"'
    ':false,"ignore_eos":false,"return_token_ids":true,"return_tokens_as_token_ids":true}},{"id":"r09'
    '","offset_ms":224.4,"cancel_after_ms":null,"copies":2,"body":{"model":"tiny","prompt":[910,126,2'
    '80,535,436,264,622,768,371,322,456,154,784,888,844,768,537,693,790,391,640,201,84,322,75,1020,12'
    '4,540,390,117,340,248,259,1013,416,362,640,995,381,745,264,488,270,947,289,917,80,622,222,535,83'
    '9,523,1021,846,372,544,588,601,976,844,180,1012,291,472],"max_tokens":6,"temperature":0.0,"n":1,'
    '"logprobs":5,"stream":true,"ignore_eos":true,"return_token_ids":true,"return_tokens_as_token_ids'
    '":true,"stream_options":{"include_usage":true}}},{"id":"r10","offset_ms":225.2,"cancel_after_ms"'
    ':7.6,"copies":4,"body":{"model":"tiny","prompt":[333,143,248,376,64,128,162,651,704,608,782,259,'
    '913,240,863],"max_tokens":16,"temperature":0.0,"n":1,"logprobs":5,"stream":false,"ignore_eos":tr'
    'ue,"return_token_ids":true,"return_tokens_as_token_ids":true}},{"id":"r11","offset_ms":249.2,"ca'
    'ncel_after_ms":null,"copies":1,"body":{"model":"tiny","prompt":[188,524,709,553,614,566,422,386,'
    '617,1022,20,613,988,280,732,251,238,213,678,482,101,627,129,1016,521,375,783,690,169,804,517,246'
    ',68,899,179,763,551,429,978,524,723,486,658,243,742,539,279,606,381,126,718,458,717,53,665,344,4'
    '75,5,258,941,313,765,559,27,329,791,503,47,341,447,200,123,28,394,286,577,1013,650,603,301,439,6'
    '81,1015,610,739,640,864,489,722,580,336,546,402,695,781,766,936,358,787,891,837,294,781,351,740,'
    '362,828,626,408,319,569,245,691,920,945,20,15,67,747,519,989,838,762,977,861,9,167,393,7,745,277'
    ',862,554,193,901,472,868,940,896,165,366,320,27,510,399,822,788,19,164,278,1006,444,983,11,286,7'
    '86,162,961,226,627,344,43,199,255,846,255,172,92,36,948,739,796,543,496,118,841,552,880,458,429,'
    '120,852,337,306,251,860,34,622,905,21,667,234,719,723,63,164,475,584,213,325,814,884,914,741,684'
    ',200,429,903,590,333,308,683,518,349,649,57,309,560,724,637,915,505,426,528,903,923,998,78,391,4'
    '54,83,148,30,240,980,718,1019,512,64,984,22,210,292,72,261,479,832,34,655,794,170,386,245,852,49'
    '7,68,567,470,180,1018,818,980,11,765,991,182,402,867,749,186,214,980,13,189,789,877,529,669,76,9'
    '5,838,455,113,749,674,28,532,880,337,364,122,960,110,652,981,612,40,194,782,948,344,221,667,112,'
    '526,147,921,181,124,786,698,410,13,644,410,744,466,227,315,757,502,969,651,406,849,370,336,559,8'
    '12,919,623,895,677,142,634,653,928,629,74,1023,357,107,137,291,860,768,618,227,537,130,631,876,6'
    '53,496,979,429,41,60,616,923,648,138,799,803,42,77,346,497,1000,53,619,399,58,834,1018,212,513,2'
    '41,1017,679,781,640,908,39,928,484,960,592,48,32,475,900,596,632,14,597,827,246,422,60,634,843,8'
    '98,53,272,858,566,971,204,459,375,793,441,60,70,717,962,77,418,134,401,476,552,629,794,721,735,6'
    '32,894,835,660,415,659,33,758,513,688,103,104,170,961,672,772,428,559,714,306,162,350,792,165,15'
    '3,47,71,111,819,201,583,545,590,643,75,996,989,965,854,143,448,360,402,578,231,871,568,281,393,7'
    '67,833,874,31,732,392],"max_tokens":11,"temperature":0.0,"n":1,"logprobs":5,"stream":false,"igno'
    're_eos":true,"return_token_ids":true,"return_tokens_as_token_ids":true}},{"id":"r12","offset_ms"'
    ':250.2,"cancel_after_ms":null,"copies":1,"body":{"model":"tiny","prompt":[528,466,459,703,938,63'
    '8,195,890,97,294,405,519,160,960,153,163,113,291,326,518,795,958,322,716,435,537,203,965,708,607'
    ',389,897,615,432,835,180,665,432,168,926,882,829,449,964,470,995,511,601,416,14,876,412,99,565,9'
    '39,458,982,807,366,678,307,601,492,619,764,923,338,162,852,218,560,880,154,461,646,148,364,136,9'
    '15,672,587,356,149,137,981,39,789,254,33,151,884,66,583,877,175,496,318,283,544,531,44,274,329,1'
    '54,590,863,338,705,260,797,778,803,655,665,799,681,299,362,442,960,306,385,590,516,1004,855,453,'
    '753,820,177,663,159,720,26,418,149,282,156,84,252,1013,658,415,115,868,14,304,35,806,232,476,969'
    ',989,496,571,236,325,227,125,429,811,27,901,676,107,299,429,683,935,407,871,216,22,896,523,388,7'
    '56,108,104,383,176,119,824,165,881,981,112,602,245,797,715,583,226,855,232,217,95,987,714,294,30'
    '9,582,100,4,828,366,928,402,940,946,915,612,25,682,735,45,778,67,1020,704,447,170,632,388,835,70'
    '4,800,596,719,610,259,387,286,284,874,748,836,546,843,116,559,628,465,98,737,140,272,601,716,973'
    ',712,306,802,594,852,100,582,286,54,735,265,340,906,996,645,674,975,436,756,762,366,343,1006,137'
    ',69,835,46,965,144,55,104,940,733,937,366,972,815,743,570,763,861,244,740,52,598,84,733,172,682,'
    '655,764,700,545,805,517,656,177,47,634,487,691,176,115,589,570,23,607,57,40,603,690,969,265,677,'
    '244,4,218,181,84,187,241,147,793,810,701,663,115,851,398,289,739,435,699,522,845,574,796,125,921'
    ',715,925,208,516,765,764,722,28,926,196,874,549,901,542,814,718,44,528,216,743,686,645,710,1005,'
    '461,769,998,896,571,14,329,876,777,303,311,557,124,759,805,504,585,11,243,872,918,146,328,433,58'
    '2,466,404,257,666,666,987,790,522,428,735,24,16,92,780,832,866,91,813,679,597,104,95,293,417,304'
    ',8,143,464,406,370,605,81,417,925,921,359,91,688,475,796,28,197,998,40,48,731,522,972,505,753,17'
    '7,879,301,692,572,683,256,635,763,744,804,704,53,932,207,721,666,234,425,277,355,734,924,771,558'
    ',154,266,1019,758,587,449,384,260,137,395,884,727,817,402,830,901,99,880,739,862,623,96,525,711,'
    '166,809,351,890,818,853,786,233,598,328,416,580,529,706,1000,429,408,906,355,548,268,686,767,737'
    ',548,818,525,652,48,401,489,542,694,992,184,575,393,238,531,416,649,442,658,701,16,443,903,650,8'
    '74,30,508,104,636,61,21,72,206,882,446,551,623,756,661,954,372,180,828,801,376,662,468,187,679,1'
    '80,339,35,42,214,882,408,987,153,980,680,576,929,282,646,707,904,554,918,522,810,403,350,199,103'
    ',400,179,292,507,506,156,369,1015,761,730,711,788,532,496,639,110,658,230,446,863,838,371,928,60'
    ',847,917,525,592,306,1011,989,940,954,4,629,683,560,1019,337,309,595,661,446,715,936,996,967,768'
    ',978,670,134,968,367,194,535,944,433,522,1008,794,674,240,329,750,923,281,403,20,586,630,593,959'
    ',671,349,862,795,628,537,447,418,392,303,816,34,156,512,276,682,106,312,499,908,730,78,278,744,1'
    '64,717,818,632,39,637,255,440,779,89,611,408,172],"max_tokens":43,"temperature":0.0,"n":1,"logpr'
    'obs":5,"stream":false,"ignore_eos":true,"return_token_ids":true,"return_tokens_as_token_ids":tru'
    'e}},{"id":"r13","offset_ms":257.3,"cancel_after_ms":null,"copies":1,"body":{"model":"tiny","prom'
    'pt":[113,317,944,1010,74,921,163,1006,892,565,592,197,711,553,706,777,667,379,698,1020,232,373,2'
    '65,762,634,995,368,469,614,690,73,451,87,768,665,375,224,304,621,763,258,304,141,869,411,414,855'
    ',661,556,296,260,5,678,111,206,434,589,540,308,819,123,144,268,801,523,467,325,977,111,84,888,47'
    ',238,822,676,754,138,787,1000,298,179,452,750,996,579,374,723,268,577,325,742,331,662,214,442,68'
    '0,105,907,491,916,329,190,843,834,593,730,287,481,891,574,595,320,996,783,399,872,353,195,699,42'
    '5,536,593,171,252,591,745,453,418,46,875,283,355,265,420,72,302,29,970,444,73,574,822,74,344,903'
    ',175,925,711,483,210,378,571,794,122,703,694,447,169,573,523,721,435,888,354,1008,790,374,910,98'
    '1,907,397,894,986,729,382,417,273,226,527,99,351,278,866,496,196,731,917,514,356,73,806,952,521,'
    '697,787,636,759,669,467,376,185,735,261,1004,963,344,70,448,326,344,976,975,78,493,791,228,449,4'
    '0,616,691,497,257,207,1021,990,135,735,580,908,374,777,27,201,996,591,821,340,818,829,692,785,65'
    '7,329,654,275,1006,10,119,143,476,437,321,922,365,220,583,100,144,220,565,403,237,721,259,674,81'
    '1,518,389,737,563,606,462,234,731,871,751,827,797,177,706,300,712,96,269,1011,109,560,356,353,10'
    '19,582,255,247,687,521,707,484,135,96,558,983,696,236,136,944,537,144,968,670,684,797,910,702,80'
    '0,390,907,747,439,479,787,103,629,109,30,713,20,875,295,165,992,988,335,820,1004,441,462,946,849'
    ',272,696,997,298,169,561,671,703,437,155,431,768,949,221,205,930,518,403,670,41,99,260,345,77,93'
    '8,389,961,227,737,778,141,506,475,440,116,371,541,437,577,468,650,516,643,627,907,730,24,927,53,'
    '516,567,865,568,870,890,965,638,46,918,380,312,620,377,939,726,551,217,192,699,207,995,889,635,8'
    '45,344,284,184,244,231,810,386,1007,397,636,129,56,423,388,363,786,636,386,440,378,18,1004,447,5'
    '23,685,985,219,747,355,99,918,353,229,161,412,978,295,921,48,759,451,656,970,410,338,710,360,554'
    ',560,335,677,676,779,946,886,944,875,589,871,636,220,43,41,16,589,83,430,399,930,635,274,737,289'
    ',822,627,975,683,3,29,644,1015,61,414,50,546,929,9,272,543,20,228,502,590,822,562,654,962,187,99'
    '7,8,998,417,1002,806,296,824,625,662,420,584,636,155,373,51,656,408,527,367,527,325,750,941,878,'
    '692,983,400,588,522,906,820,254,775,715,958,810,337,621,396,22,962,572,567,77,303,142,784,319,98'
    '1,126,948,124,512,128,695,699,619,95,467,889,328,521,573,162,531,3,89,306,266,445,903],"max_toke'
    'ns":11,"temperature":0.0,"n":1,"logprobs":5,"stream":false,"ignore_eos":true,"return_token_ids":'
    'true,"return_tokens_as_token_ids":true}},{"id":"r14","offset_ms":262.9,"cancel_after_ms":null,"c'
    'opies":1,"body":{"model":"tiny","prompt":[144,574,609,876,376,46,559,132,411,489,877,459,997,162'
    ',853,507,705,287,991,1000,933,443,137,553,375,1020,159,872,616,849,517,138,694,571,809,770,128,2'
    '68,703,261,645,734,221,270,811,892,127,767,842,1019,612,790,449,327,509,259,602,23,123,389,287,9'
    '15,769,358,1003,626,817,459,1008,362,884,969,913,110,396,375,587,301,617,122,592,107,909,627,249'
    ',749,753,257,118,463,672,340,198,495,51,199,763,730,477,710,457,66,919,803,813,51,294,287,750,83'
    ',302,873,93,235,126,976,472,1015,997,256,544,646,808,183,685,777,379,218,724,338,957,546,228,618'
    ',912,636,161,688,751,860,986,965,966,848,417,611,254,617,567,376,87,318,799,476,1021,202,15,982,'
    '776,52,720,131,594,16,838,740,343,316,116,647,476,165,201,655,733,172,537,694,121,959,309,225,37'
    '9,637,721,849,972,993,489,60,939,528,246,712,712,41,838,972,96,130,835,277,729,328,864,87,529,84'
    '4,670,604,328,472,65,75,790,951,722,742,9,652,284,598,717,125,870,995,639,414,182,36,181,804,887'
    ',85,385,41,269,804,240,942,43,112,927,596,59,95,584,388,181,709,87,677,61,1010,184,359,763,978,2'
    '89,754,274,260,874,222,212,578,201,323,938,12,549,354,617,59,575,780,563,807,786,1004,302,98,360'
    ',935,405,304,362,637,353,556,446,285,821,897,483,141,66,880,263,875,93,490,859,466,97,153,663,13'
    '9,294,776,991,821,803,806,90,163,420,231,58,656,139,809,368,526,958,398,187,923,805,217,977,127,'
    '775,645,426,873,551,449,590,237,723,944,935,744,758,589,739,467,366,733,170,252,372,246,396,782,'
    '536,806,379,415,935,991,961,905,400,705,631,325,763,735,794,295,14,63,584,863,737,187,367,580,24'
    '8,953,698,198,324,154,60,466,81,50,630,699,528,994,875,441,714,678,688,655,292,687,230,916,547,7'
    '51,933,520,431,515,203,547,665,707,85,956,409,990,577,57,634,568,193,756,641,476,785,77,520,972,'
    '125,468,389,93,669,94,464,334,943,739,979,941,308,731,427,6,937,418,193,791,280,70,1005,736,339,'
    '887,904,461,894,989,917,394,184,54,335,620,61,671,359,491,506,879,1010,339,229,839,958,1018,265,'
    '113,575,429,384,186,923,744,736,618,735,754,228,606,362,480,109,653,926,728,630,101,427,684,829,'
    '687,515,144,498,415,214,385],"max_tokens":48,"temperature":0.0,"n":1,"logprobs":5,"stream":false'
    ',"ignore_eos":true,"return_token_ids":true,"return_tokens_as_token_ids":true}},{"id":"r15","offs'
    'et_ms":270.0,"cancel_after_ms":null,"copies":1,"body":{"model":"tiny","prompt":[312,945,471,786,'
    '652,515,985,454,9,538,661,399,1017,956,32,898,152,334,680,721,865,428,1005,17,336,571,736,900,77'
    '9,942,986,686,668,443,196,732,360,883,565,208,933,11,759,263,914,86,217,885,619,502,833,943,508,'
    '425,382,204,515,146,1011,267,779,703,588,150,801,763,680,493,449,846,486,370,13,566,504,112,792,'
    '960,91,222,885,746,630,139,814,121,302,613,637,438,888,784,640,387,976,481,497,104,133,551,492,6'
    '49,81,158,1008,32,438,652,167,883,265,299,741,861,409,816,82,434,551,726,400,123,194,187,295,414'
    ',344,93,226,180,214,1007,296,262,97,553,688,476,709,596,254,386,475,39,566,846,558,724,540,212,4'
    '83,239,818,789,310,286,787,840,973,12,463,890,76,573,274,694,902,102,652,232,932,614,509,399,92,'
    '932,126,801,543,239,931,324,262,699,281,84,841,244,871,710,418,358,887,678,109,746,381,441,126,7'
    '73,645,666,142,486,806,897,268,511,280,851,266,657,154,110,839,922,515,753,233,243,929,850,873,2'
    '64,1015,69,223,142,445,897,426,489,304,224,13,608,519,651,1003,821,859,247,101,679,947,572,516,1'
    '18,869,737,663,104,900,510,927,408,458,780,890,986,260,758,42,313,162,4,584,106,8,857,32,55,771,'
    '811,1011,755,450,363,93,238,959,332,143,455,48,74,185,222,691,169,925,289,49,645,503,698,786,686'
    ',471,970,981,455,542,573,850,794,537,844,206,346,996,456,443,769,995,187,381,858,755,665,541,751'
    ',789,842,44,938,419,633,57,466,1012,108,376,919,205,642,143,594,568,992,343,787,50,216,18,232,10'
    '18,403,920,773,193,666,76,344,542,519,278,630,853,251,326,75,24,915,351,114,841,332,897,736,568,'
    '1000,162,18,410,883,786,970,878,765,968,434,32,181,305,1003,408,457,289,576,794,584,68,564,167,7'
    '79,61,922,634,313,101,849,707,236,465,857,536,704,767,555,644,801,975,541,742,135,984,31,967,517'
    ',520,468,858,212,274,425,958,147,709,707,667,201,98,967,551,689,219,880,380,877,528,425,787,248,'
    '747,179,124,989,39,448,127,34,764,581,810,348,577,59,707,444,918,283,448,881,715,367,666,363,337'
    ',933,471,266,579,734,374,497,626,266,954,361,755,990,283,409,34,712,221,121,142,193,74,616,182,7'
    '60,304,682,832,964,439,321,341,388,996,520,17,67,479,359,976,735,637,910,255,456,540,413,821,677'
    ',195,732,445,729,27,633,13,824,523,360,33,540,112,331,874,675,320,888,87,236,404,419,791,542,617'
    ',197,98,748,657,615,469,160,34,658,822,277,188,288,725,553,788,218,675,336,724,215,853,802,93,60'
    ',329,532,982,482,251,932,122,365,412,346,84,953,38,707,500,633,856,346,575,458,301,478,353,303,2'
    '45,7,20,376,710,477,742,988,565,289,528,808,997,421,184,433,972,199,153,587,373,641,1017,511,888'
    ',950,750,458,962,276,586,165,905,946,681,47,173,468,740,384,790,370,234,321,200,96,831,898,435,8'
    '44,309,749,580,961,129,539,644,776,902,185,27,335,879,904,67,399,24,871,993,483,446,354,315,614,'
    '572,456,144,537,499,176,113,436,665,805,484,823,258,449,7,909,853,149,106,559,60,549,736,798,659'
    ',667,811,272,806,540,365,994,1005,766,538,179,187,862,760,787,353,883,577,490,320,390,393,634,67'
    '2,230,690,490,716,133,142,252,647,721,933,118,596,755,258,111,821,227,904,587,1014,594,700,323,9'
    '73,293,598,142,454,683,818,256,760,529,499,285,159,96,351,570,79,577,328,907,810,786,341,233,20,'
    '816,497,84,914,714,732,3,20,369,202,644,120,937,226,904,541,821,996,549,655,717,134,717,262,75,4'
    '87,906,825,331,633,114,103,531,1005,113,215,629,716,516,129,137,916,773,973,750,788,949,120,963,'
    '191,317,723,980,292,588,62,137,460,137,781,781,43,294,328,28,554,345,864,68,402,659,205,480,485,'
    '305,255,258,826,659,124,245,286,794,230,473,531,656,713,503,466,746,886,801,206,870,954,851,718,'
    '91,755,71,869,665,676,67,554,146,526,923,429,823,956,664,202,730,357,359,289,235,768],"max_token'
    's":40,"temperature":0.0,"n":1,"logprobs":5,"stream":false,"ignore_eos":true,"return_token_ids":t'
    'rue,"return_tokens_as_token_ids":true}},{"id":"r16","offset_ms":276.1,"cancel_after_ms":null,"co'
    'pies":1,"body":{"model":"tiny","prompt":[950,542,439,729,461,521,756,841,278,278,404,923,503,269'
    ',262,321,835,821,717,11,296,55,647,770,226,534,87,378,512,299,194,177,939,184,56,913,448,533,279'
    ',28,821,114,900,425,658,88,637,53,935,668,889,873,783,298,385,473,23,186,790,128,299,147,139,820'
    ',135,573,32,739,32,779,456,39,769,886,589,121,783,125,765,396,451,92,486,814,38,76,568,52,620,15'
    '7,227,86,179,501,763,1015,607,236,248,962,315,807,99,399,809,53,298,498,156,221,284,105,76,999,3'
    '90,809,260,556,400,382,163,570,657,751,312,253,952,578,871,342,83,745,321,319,340,931,286,310,87'
    '8,889,926,388,661,915,173,496,63,538,597,27,322,910,208,149,266,277,123,727,528,1015,174,808,87,'
    '811,259,305,253,215,562,455,769,33,968,82,321,995,751,76,316,917,747,792,890,566,579,212,408,177'
    ',309,918,730,471,339,567,254,126,663,973,532,853,1007,503,829,790,647,945,807,1010,123,833,864,6'
    '38,147,469,314,332,767,232,439,886,398,912,535,299,492,966,45,142,80,197,554,241,425,433,843,780'
    ',16,712,612,162,907,693,149,241,18,367,379,205,916,85,529,713,212,925,341,356,967,298,352,951,52'
    ',751,497,280,854,342,390,109,758,971,950,963,977,138,945,517,467,53,906,870,479,347,425,964,413,'
    '456,399,911,233,780,443,75,289,279,183,908,587,661,737,846,239,674,742,598,370,99,826,213,541,66'
    '7,991,541,331,470,250,270,484,636,643,54,130,794,227,493,74,32,654,140,714,930,549,277,924,56,57'
    '2,978,844,313,914,205,394,980,520,851,952,701,1016,434,815,159,10,103,918,446,23,937,382,735,273'
    ',7,242,63,823,115,869,142,684,942,311,270,793,46,711,837,1002,87,78,435,235,747,351,49,81,862,81'
    '3],"max_tokens":47,"temperature":0.0,"n":1,"logprobs":5,"stream":false,"ignore_eos":true,"return'
    '_token_ids":true,"return_tokens_as_token_ids":true}},{"id":"r17","offset_ms":280.7,"cancel_after'
    '_ms":null,"copies":1,"body":{"model":"tiny","prompt":[138,863,735,380,493,877,687,728,260,32,352'
    ',539,777,1016,649,988,802,344,724,781,847,870,489,247,317,286,26,786,785,382,192,743,493,647,871'
    ',287,308,244,681,543,842,233,588,1018,596,609,919,203,583,271,632,1007,670,627,6,67,829,644,498,'
    '862,318,459,798,587,412,342,46,487,602,128,304,409,526,990,661,1016,217,296,457,929,233,1005,379'
    ',271,332,402,916,295,104,681,751,93,256,823,390,674,876,722,640,729,750,624,124,888,193,117,745,'
    '688,313,822,361,914,398,778,468,213,587,480,925,432,78,35,93,826,778,321,781,440,879,592,398,737'
    ',914,392,521,581,495,849,356,396,1014,878,795,925,247,653,366,734,286,506,543,232,760,723,374,59'
    ',469,498,965,522,675,1005,242,592,762,341,316,888,310,396,155,375,936,493,615,373,618,984,178,41'
    '9,486,966,713,41,320,624,747,111,502,388,781,629,177,165,86,11,234,318,702,785,868,67,902,398,98'
    '9,872,891,910,680,153,646,525,46,521,430,524,820,246,513,779,179,9,300,426,708,673,457,601,307,2'
    '06,874,987,864,390,240,460,778,781,540,71,117,585,388,946,377,424,398,583,817,185,832,323,29,383'
    ',1016,587,372,523,955,641,416,551,504,757,907,750,610,749,58,279,377,840,767,525,359,774,505,481'
    ',607,470,599,398,102,933,57,200,95,266,936,857,373,833,751,540,74,436,521,20,828,1009,430,143,10'
    '16,801,649,910,164,541,617,71,686,624,468,73,973,470,367,764,882,944,401,324,111,835,653,340,664'
    ',195,329,880,795,949,224,892,911,1012,58,842,185,1002,34,202,488,728,893,117,968,39,612,210,261,'
    '853,756,127,728,14,468,605,769,831,96,118,284,573,674,607,524,904,32,798,580,492,850,884,193,917'
    ',727,998,110,690,593,511,49,678,836,840,789,31,729,663,814,281,914,779,159,171,300,857,467,690,6'
    '25,263,718,871,432,990,993,133,191,903,76,245,900,187,715,361,747,64,511,613,662,467,670,461,198'
    ',364,99,125,557,510,363,981,297,669,664,234,81,829,43,259,132,615,597,445,921,127,130,943,743,45'
    '8,250,672,547,1023,692,970,73,95,10,244,957,103,363,782,61,103,157,538,527,261,538,835,743,981,4'
    '64,255,73,637,101,542,618,93,165,639,623,156,67,1004,1009,972,412,69,87,25,700,521,733,345,322,1'
    '05,810,164,620,916,1021,663,762,76,90,533,979,963,325,16],"max_tokens":15,"temperature":0.0,"n":'
    '1,"logprobs":5,"stream":false,"ignore_eos":true,"return_token_ids":true,"return_tokens_as_token_'
    'ids":true}},{"id":"r18","offset_ms":286.2,"cancel_after_ms":null,"copies":1,"body":{"model":"tin'
    'y","prompt":[181,60,1022,522,524,386,603,998,622,636,239,539,822,838,1010,498,201,676,850,492,41'
    '7,69,422,509,94,496,518,569,18,347,845,922,906,547,1003,4,866,151,451,991,547,542,919,921,632,41'
    '8,669,318,42,572,725,725,312,995,630,480,418,845,363,24,96,235,272,36,667,242,106,602,127,192,91'
    ',1004,607,190,636,365,989,376,5,230,288,653,179,773,86,74,826,427,675,881,653,147,884,998,377,84'
    '4,581,189,739,179,164,78,894,639,720,699,66,58,196,703,544,109,809,402,995,688,515,397,601,708,9'
    '41,495,126,339,884,355,818,662,760,402,691,552,543,104,564,1000,747,1006,171,66,737,862,674,248,'
    '224,684,552,898,860,954,541,65,366,134,930,219,802,4,719,306,308,385,486,924,186,694,59,1012,263'
    ',328,510,297,721,282,473,239,243,465,210,904,909,91,843,166,521,219,73,704,769,295,833,318,69,81'
    '2,179,438,729,765,203,498,705,247,239,433,475,937,606,795,172,930,943,755,60,498,165,442,847,869'
    ',788,217,132,785,992,735,124,194,239,923,534,676,67,845,860,941,910,569,812,596,815,303,511,180,'
    '53,879,525,481,248,669,1008,569,936,30,810,270,537,588,94,119,7,601,888,1002,695,320,785,553,577'
    ',140,78,243,526,391,487,102,311,224,542,863,869,644,545,522,302,104,1012,125,754,1020,779,957,48'
    '9,959,114,710,684,209,129,504,185,281,59,182,301,919,704,960,114,245,320,398,374,89,795,616,139,'
    '186,853,141,1011,944,944,433,618,21,993,909,90,553,1005,629,330,429,901,342,524,237,205,35,6,312'
    ',664,393,463,34,137,303,152,881,275,231,128,326,818,708,356,870,645,422,701,28,356],"max_tokens"'
    ':45,"temperature":0.0,"n":1,"logprobs":5,"stream":false,"ignore_eos":true,"return_token_ids":tru'
    'e,"return_tokens_as_token_ids":true}},{"id":"r19","offset_ms":286.7,"cancel_after_ms":null,"copi'
    'es":1,"body":{"model":"tiny","prompt":[246,964,847,189,171,308,8,374,316,646,113,360,629,903,12,'
    '969,309,520,8,933,586,761,6,261,670,89,529,740,976,456,3,197,750,885,699,156,101,871,833,514,792'
    ',384,833,169,796,369,336,102,416,772,477,817,343,728,670,628,22,286,353,763,428,993,1015,100,175'
    ',633,587,996,28,362,579,53,291,661,265,194,230,670,782,657,177,244,321,298,876,622,254,626,390,1'
    '36,321,444,211,744,327,277,948,716,632,873,507,444,674,735,330,532,83,300,1020,835,420,19,586,96'
    '3,949,166,864,250,710,88,451,298,432,96,484,683,845,848,222,796,671,623,506,875,1022,1005,796,57'
    '4,891,980,684,644,74,492,935,650,904,346,110,512,249,845,565,187,871,565,149,993,692,279,367,986'
    ',531,664,93,47,599,645,340,733,515,85,777,1016,386,686,203,988,60,591,486,189,633,360,354,267,78'
    '3,148,837,805,829,795,915,324,100,886,8,921,468,309,313,130,700,440,949,34,804,521,827,446,748,1'
    '33,269,232,900,678,831,672,593,593,848,217,447,377,533,9,332,607,405,964,834,137,172,748,955,816'
    ',317,165,845,628,853,671,606,679,351,969,4,43,157,735,197,882,215,574,584,555,409,659,1015,496,1'
    '44,573,21,374,935,303,639,1010,823,913,11,651,940,675,203,324,934,922,449,817,337,57,363,9,451,1'
    '008,206,163,878,343,101,868,890,22,260,494,848,46,754,1017,342,275,566,230,582,289,186,960,674,9'
    '45,596,54,613,332,286,444,455,431,697,829,535,176,744,238,792,405,92,103,911,107,988,723,584,990'
    ',86,395,638,455,65,859,982,836,255,725,816,577,351,833,515,376,326,1002,121,733,225,672,861,615,'
    '870,594,769,215,1006,223,880,751,918,140,923,130,750,859,600,445,391,726,515,501,556,333,949,102'
    '1,856,228,508,922,780,534,686,340,745,528,616,73,810,652,542,440,555,350,910,613,347,736,876,651'
    ',765,73,68,760,1005,172,158,196,13,172,153,673,820,588,428,296,953,891,664,633,283,77,482,347,62'
    ',931,39,975,940,888,888,361,892,469,266,346,750,462,395,1006,479,57,556,572,565,645,958,979,779,'
    '399,587,687,421,562,121,246,662,421,559,1008,428,654,392,225,657,640,258,777,398,345,310,373,991'
    ',820,95,431,902,786,56,523,898,988,371,809,255,907,999,528,688,337,162,221,799,126,251,254,952,5'
    '96,154,709,959,700,723,853,151,106,1000,196,419,300,374,1008,240,683,661,200,218,451,220,960,798'
    ',835,724,629,74,230,329,794,192,431,412,825,706,884,275,871,534,772,851,892,496,81,143,682,877,1'
    '71,533,289,648,822,854,851,1016,264,534,396,669,498,507,937,611,780,427,853,41,698,391,594,718,6'
    '95,797,429,695,296,674,619,1012,128,425,527,825,836,999,366,646,659,233,101,201,743,5,637,249,80'
    '4,39,823,411,493,1011,609,133,422,751,788,62,966,473,91,585,162,117,610,444,378,959,163,54,226,3'
    '4,736,398,135,92,954,1006,867,609,78,199,422,400,328,231,757,500,295,461,906,1011,446,748,479,81'
    '8,800,553,570,254,470,19,71,766,22,924,939,528,829,746,592,354,604,319,534,869,29,217,382,402,50'
    ',144,768,362,914,443,323,553,421,329,601,956,948,593,355,892,1006,22,338,312,122,1010,138,768,29'
    '8,185,393,878,865,48,834,926,371,486,495,818,687,701,38,843,348,356,1023,79,397,223,9,374,220,97'
    '4,694,299,839,339,466,836,36,428,491,509,336,713,502,165,320,667,883,316,970,616,960,797,490,758'
    ',151,550,648,107,771,454,673,39,478,88,702,878,111,372,408,782,595,837,533,119,705,432,51,655,78'
    '0,638,181,1022,587,173,13,974,809,406,310,147,471,687,642,255,984,253,397,13,88,896,147,151,258,'
    '817,246,420,358,928,459,574,885,739,332,126,473,730,981,437,817,985,996,162,749,1004,102,858,173'
    ',476,138,944,613,982,353,288,127,654,494,543,452,699,604,829,936,54,167,125,794,88,25,373,56,59,'
    '607,824,46,1011,693,528,1013,806,42,55,990,47,616,815,781,31,709,407,687,637,25,736,906,15,139,4'
    '10,386,133,829,612,949,558,1014,647,884,468,1011,683,756,1022,727,748,889,591,428,186,265,173,19'
    '5,567,91,336,441,89,589,972,657,548,933,473,500,141,67,913,942,631,666,725,191,816,257,386,527,1'
    '35,376,318,519,848,791,303,691,500,273,999,138,119,906,581,1012,913,145,577,210,549,887,124],"ma'
    'x_tokens":24,"temperature":0.0,"n":1,"logprobs":5,"stream":false,"ignore_eos":true,"return_token'
    '_ids":true,"return_tokens_as_token_ids":true}},{"id":"r20","offset_ms":296.2,"cancel_after_ms":n'
    'ull,"copies":1,"body":{"model":"tiny","prompt":[764,721,984,860,174,777,36,185,115,815,189,967,8'
    '01,676,715,408,513,451,741,845,110,379,705,503,929,138,554,459,482,613,165,492,27,648,751,685,11'
    '1,338,861,19,735,821,144,785,403,140,354,706,254,528,721,861,415,281,524,360,340,372,994,480,590'
    ',782,764,878,996,61,452,721,731,249,730,592,317,442,612,467,175,996,299,692,685,592,937,37,442,9'
    '57,636,476,681,438,341,788,327,520,59,33,443,195,745,81,362,567,749,459,509,424,207,302,874,46,5'
    ',225,160,75,800,24,700,691,825,542,613,1011,519,731,882,677,205,833,378,1004,307,803,498,421,888'
    ',925,383,52,432,702,517,511,137,774,761,603,538,374,876,307,119,183,882,281,398,108,778,339,690,'
    '463,547,508,679,300,725,68,697,789,659,129,836,870,385,12,781,356,357,776,702,347,818,20,850,917'
    ',797,778,170,504,437,695,230,279,647,28,717,498,443,103,242,200,615,926,593,531,976,380,841,702,'
    '769,549,966,1006,815,243,819,860,260,545,780,373,869,460,773,616,383,779,652,785,840,1009,897,26'
    ',943,959,758,960,1006,791,864,65,529,686,574,596,699,693,625,311,454,689,657,345,385,240,684,442'
    ',898,531,426,1004,553,896,886,983,84,351,427,833,535,990,819,406,275,560,152,398,893,73,573,983,'
    '785,692,704,967,897,592,244,484,797,40,151,47,139,344,213,887,1020,380,881,151,918,263,385,59,81'
    '7,29,710,366,378,650,222,313,978,334,49,659,1003,531,274,6,132,374,724,142,71,502,82,53,635,683,'
    '427,775,136,790,968,211,437,664,706,29,910,586,867,122,263,377,688,558,463,911,335,196,755,436,8'
    '74,45,57,144,906,359,473,796,872,582,874,567,396,574,397,600,814,38,595,306,326,125,1013,206,386'
    ',932,634,115,668,812,244,82,702,778,911,789,967,910,79,192,74,143,473,586,742,729,842,44,773,214'
    ',853,768,133,913,508,858,375,724,275,150,505,914,892,569,265,798,267,953,937,378,776,794,661,13,'
    '380,407,41,999,50,1003,99,529,251,571,936,966,71,479,277,229,744,368,329,186,791,851,833,415,330'
    ',225,327,122,582,161,698,50,123,839,858,597,471,285,813,369,432,668,26,903,38,618,978,46,605,564'
    ',506,95,562,713,1006,657,238,505,80,237,267,595,180,692,655,14,770,295,515,35,430,130,271,407,15'
    '6,582,650,230,871,158,481,1022,845,776,334,898,637,681,561,971,534,530,791,741,703,47,313,400,51'
    '0,204,668,561,925,31,606,210,444,513,399,32,572,956,294,949,658,153,483,46,428,174,518,469,447,8'
    '55,704,410,545,153,557,396,167,165,277,494,1019,591,285,631,852,6,735,539,553,291,766,129,308,14'
    '5,425,81,487,147,477,892],"max_tokens":8,"temperature":0.0,"n":1,"logprobs":5,"stream":false,"ig'
    'nore_eos":true,"return_token_ids":true,"return_tokens_as_token_ids":true}},{"id":"r21","offset_m'
    's":298.3,"cancel_after_ms":null,"copies":1,"body":{"model":"tiny","prompt":[299,355,682,373,999,'
    '610,179,918,415,688,501,278,322,78,538,189,1010,312,866,928,394,676,154,195,936,575,369,417,474,'
    '143,502,785,239,514,233,616,101,486,107,468,923,628,101,140,124,876,558,54,926,1018,955,270,584,'
    '130,470,966,501,88,491,977,498,946,468,336,70,563,758,92,947,643,281,529,17,623,517,337,876,751,'
    '190,211,940,547,414,805,300,864,359,324,889,844,87,466,626,95,82,226,796,709,218,903,364,550,394'
    ',172,234,458,716,827,613,766,318,581,264,454,382,781,535,33,918,416,647,757,944,258,605,812,547,'
    '283,245,206,773,706,617,169,743,742,623,397,815,988,106,495,282,614,500,102,227,444,797,800,50,4'
    '82,713,280,669,246,191,143,621,501,432,816,282,299,161,121,386,997,954,33,128,463,756,372,660,10'
    '03,576,793,114,62,285,147,599,727,501,319,726,1013,492,515,994,622,423,680,620,94,1018,21,426,74'
    '7,772,267,742,162,833,798,689,702,745,330,476,953,109,492,122,354,554,794,683,525,478,485,33,85,'
    '239,918,387,168,926,136,941,472,857,605,523,152,343,934,439,591,506,314,690,863,258,773,139,653,'
    '252,233,542,961,501,523,657,88,587,593,636,31,845,387,467,109,355,549,917,690,905,22,958,185,539'
    ',863,339,566,34,889,365,137,368,845,550,842,771,777,422,862,85,767,289,473,342,732,296,572,245,5'
    '6,173,753,911,736,628,158,965,83,729,168,449,242,804,661,926,568,482,900,683,265,366,367,938,272'
    ',903,929,756,550,892,324,213,456,749,614,529,861,101,369,296,338,625,298,801,152,505,749,382,361'
    ',594,591,880,129,762,623,461,492,101,991,385,658,100,930,909,502,565,366,592,798,510,323,218,722'
    ',382,112,705,1011,407,223,313,611,756,786,135,251,443,128,698,76,480,210,281,271,1013,147,398,81'
    '2,200,548,770,697,558,776,322,811,95,194,876,104,671,259,654,637,922,898,542,765,86,960,338,104,'
    '318,875,968,841],"max_tokens":19,"temperature":0.0,"n":1,"logprobs":5,"stream":false,"ignore_eos'
    '":true,"return_token_ids":true,"return_tokens_as_token_ids":true}},{"id":"r22","offset_ms":300.5'
    ',"cancel_after_ms":null,"copies":1,"body":{"model":"tiny","prompt":[834,898,296,702,99,817,239,2'
    '32,996,855,1019,953,235,250,173,50,895,806,44,389,187,891,284,261,272,996,849,961,264,793,778,51'
    '9,433,510,945,987,750,627,9,1007,343,537,912,591,841,255,218,369,189,376,450,119,390,724,633,183'
    ',344,749,846,877,842,844,702,976,53,437,500,903,884,590,281,1007,454,566,806,227,27,705,209,968,'
    '250,581,609,965,712,273,159,339,26,578,426,607,816,832,846,814,754,855,887,806,225,824,48,854,51'
    '0,430,744,562,225,330,545,280,847,927,131,879,995,799,998,394,189,434,155,647,621,89,671,381,972'
    ',362,694,53,921,126,727,947,545,259,743,573,104,48,454,838,702,946,20,99,428,529,426,287,3,246,1'
    '93,48,990,960,307,161,879,671,107,393,917,812,296,259,232,855,502,486,27,194,3,652,499,902,19,38'
    '7,455,131,687,346,914,414,238,944,57,1006,759,568,926,805,841,726,527,324,153,524,381,373,611,97'
    '5,348,511,961,826,108,238,149,941,316,454,819,261,58,355,477,395,965,447,505,861,679,700,579,53,'
    '187,373,1019,627,64,633,676,841,282,70,663,656,932,342,585,240,70,158,261,399,230,52,796,290,236'
    ',320,972,789,357,243,423,413,80,950,371,289,206,690,875,514,131,580,145,97,100,268,1021,480,676,'
    '317,466,853,340,380,643,400,370,472,268,142,973,513,127,735,572,947,225,564,270,669,341,822,926,'
    '181,1017,618,798,649,725,105,972,235,258,81,781,218,707,30,42,116,275,835,602,504,402,505,539,70'
    '4,286,966,244,1012,706,731,661,637,620,536,793,486,334,64,8,569,604,877,346,973,670,568,315,969,'
    '56,934,77,673,834,540,156,687,29,75,961,183,791,137,54,325,427,935,831,324,485,569,906,130,136,5'
    '03,563,464,578,425,500,353,220,986,246,559,198,24,265,617,81,38,855,933,24,840,572,100,949,241,6'
    '34,922,17,676,642,780,941,671,336,383,981,87,360,752,441,372,485,848,53,695,128,268,837,634,464,'
    '777,298,920,332,814,319,335,556,357,529,1019,286,561,16,398,985,685,639,768,250,238,180,450,812,'
    '386,965,959,88,233,681,262,903,567,169,442,517,601,556,685,183,656,497,749,559,831,100,335,720,4'
    '88,712,698,317,476,738,802,997,410,590,167,110,596,290,801,1002,593,405,863,899,597,953,418,27,5'
    '93,287,815,585,565,228,774,325,1012,17,213,707,300,257,907,858,932,887,422,225,866,424,1015,982,'
    '344,173,178,168,254,357,445,41,301,871,445,214,364,690,730,843,608,485,255,912,453,472,126,396,9'
    '55,626,516,109,658,694,896,451,448,377,357,215,848,707,16,535,40,111,180,677,767,131,88,282,917,'
    '248,819,813,666,61,717,380,931,976,182,686,752,811,645,104,131,504,835,122,23,511,240,745,259,99'
    '0,254,136,601,765,894,75,931,294,554,8,1006,16,897,454,139,464,902,590,279,630,236,524,677,791,2'
    '69,1008,641,1010,244,327,514,859,337,758,917,453,811,511,458,935,716,335,623,432,1004,247,169,38'
    '1,472,341,333,283,432,780,131,927,41,273,325,408,742,139,18,89,534,786,1004,433,535,689,404,176,'
    '838,410,921,259,965,724,463,153,850,616,876,597,656,688,264,278,948,587,845,720,339,347,250,259,'
    '484,975,437,237,487,795,741,158,261,373,348,648,387,734,184,241,1002,238,59,503,481,208,906,711,'
    '851,307,24,690,542,420,269,494,950,903,809,977,885,520,58,714,567,101,47,654,350,133,326,164,894'
    ',136,159,55,722,827,936,765,150,159,256,257,838,1022,160,35,377,296,466,145,591,655,952,856,471,'
    '754,239,386,374,210,948,837,233,888,17,73,383,553,902,599,795,939,575,533,534,205,641,501,348,78'
    '2,169,431,460,834,96,435,936,895,562,32,335,297,792,728,918,207,957,790,893,928,223,922,862,123,'
    '25,93,745,30,250,150,1014,130,263,466,823,551,459,264,597,388,775,914,96,720,394,667,759,500,896'
    ',905,43,74,457,381,710,759,512,576,31,570,965,453,181,181,431,476,926,864,167,89,723,833,445,256'
    ',882,519,978,166,985,817,565,387,596,214,525,975,288,573,112,267,794,947,431,34,148,755,636,490,'
    '133,1009,78,336,641,559,788,621,619,198,498,98,423,538,752,649,264,125,336,541,991,218,781,99,45'
    '0,976,75,742,376,745,52,216,235,760,884,878,99,922,564,581,557,841,37,195,248,142,368,206,381,20'
    '7,808,838,435,693,648,209,87,549,130,671,982,33,745,511,953,288,498,222,832,195,994,127,238,1001'
    ',664,757,519,943,547,998,854,773,514,282,514,239,677,902,530,715,989,954,143,473,925,666,725,887'
    ',528,548,593,43,219,429,462,945,597,21,1020,820,222,909,378,335],"max_tokens":15,"temperature":0'
    '.0,"n":1,"logprobs":5,"stream":false,"ignore_eos":true,"return_token_ids":true,"return_tokens_as'
    '_token_ids":true}},{"id":"r23","offset_ms":308.5,"cancel_after_ms":null,"copies":1,"body":{"mode'
    'l":"tiny","prompt":[924,129,169,489,575,369,327,654,207,976,703,665,586,439,84,500,918,86,732,30'
    '8,360,98,750,245,769,563,132,130,56,266,317,898,582,269,51,576,854,699,916,683,149,46,974,651,69'
    '1,675,767,868,250,800,757,523,181,530,599,439,89,172,359,536,105,665,796,847,32,71,219,853,46,87'
    '7,283,209,39,106,339,694,190,765,270,914,422,182,771,537,888,327,225,210,1017,825,735,98,265,325'
    ',32,652,767,398,737,896,1014,1002,220,79,379,1003,303,901,124,765,965,511,402,842,527,391,131,68'
    '3,278,686,701,305,367,786,559,911,981,583,519,454,858,497,936,700,993,587,584,179,140,137,750,76'
    ',9,20,509,863,1021,647,636,910,865,192,585,661,864,242,41,404,29,586,624,612,148,502,746,940,350'
    ',433,639,757,897,898,13,86,847,919,353,228,516,756,260,714,865,334,449,392,928,305,212,446,550,4'
    '7,421,891,745,384,711,57,167,214,72,894,902,77,216,17,740,256,980,670,846,88,917,667,989,110,93,'
    '287,911,301,549,750,505,840,449,155,605,948,769,903,788,763,623,334,601,479,504,450,772,340,188,'
    '757,958,748,74,343,503,486,83,279,874,380,257,848,338,929,995,979,266,469,334,471,305,885,838,27'
    '4,232,905,65,692,613,596,329,801,290,620,922,376,805,669,1008,571,740,743,382,305,110,412,736,48'
    '2,786,118,573,645,506,748,387,321,459,197,434,626,793,858,26,516,739,900,475,940,163,399,689,180'
    ',777,395,927,493,25,120,75,54,342,633,647,356,253,210,176,495,992,384,811,277,66,149,752,287,377'
    ',377,636,733,892,769,765,997,439,687,61,74,656,87,426,601,89,877,75,182,891,976,960,973,919,418,'
    '965,543,563,743,182,276,97,547,271,87,181,335,348,923,299,481,584,366,148,214,780,452,508,157,35'
    '2,229,176,709,501,895,633,153,596,521,506,224,510,767,503,643,261,926,186,820,375,780,980,266,83'
    '8,108,732,939,288,797,48,129,152,588,899,87,168,194,840,370,890,295,14,998,91,90,75,676,696,739,'
    '398,371,703,1005,891,889,122,195,119,286,72,906,491,937,776,635,634,689,290,241,464,518,942,225,'
    '705,265,255,187,99,715,13,590,212,557,111,181,282,692,550,847,718,915,980,480,462,483,946,873,70'
    '4,183,187,191,281,326,391,37,870,813,673,402,742,468,959,434,704,251,742,701,762,791,712,890,844'
    ',1023,186,315,436,171,581,119,616,190,208,717,989,256,59,256,157,390,462,1016,595,696,575,508,47'
    '7,383,927,650,660,720,841,417,379,461,344,305,93,824,720,547,175,762,706,968,152,995,48,661,109,'
    '299,267,212,969,237,121,618,619,993,165,862,496,776,453,154,141,994,739,326,407,882,431,77,743,2'
    '80,457,160,427,222,725,746,648,984,562,367,930,203,828,955,632,740,99,745,979,88,785,28,399,859,'
    '221,506,729,770,136,1017,568,440,419,724,649,217,191,55,837,773,725,380,349],"max_tokens":35,"te'
    'mperature":0.0,"n":1,"logprobs":5,"stream":false,"ignore_eos":true,"return_token_ids":true,"retu'
    'rn_tokens_as_token_ids":true}},{"id":"r24","offset_ms":315.0,"cancel_after_ms":null,"copies":1,"'
    'body":{"model":"tiny","prompt":[833,161,762,174,292,324,141,108,478,327,334,922,739,388,650,764,'
    '351,641,44,176,660,163,655,648,276,338,230,581,90,717,347,48,726,594,988,629,536,877,409,503,640'
    ',565,942,252,1021,581,853,900,298,640,609,37,335,622,214,536,470,905,267,249,69,540,942,154,228,'
    '878,417,47,1023,667,376,963,66,905,234,66,281,539,955,74,994,878,798,694,734,844,885,941,243,955'
    ',234,115,110,1017,671,92,911,510,799,77,242,1011,586,298,515,913,230,648,213,468,637,763,873,302'
    ',804,526,603,792,794,990,234,723,735,16,734,1014,11,161,734,19,310,385,795,44,973,9,226,228,5,64'
    '0,298,939,833,552,225,127,522,19,697,846,726,598,32,890,474,81,1012,180,1018,690,268,571,249,674'
    ',462,456,926,581,886,640,876,847,269,679,502,510,165,282,995,40,823,554,798,32,895,346,514,122,5'
    '84,506,63,882,289,778,131,948,118,605,487,309,467,487,940,890,73,740,153,604,853,56,661,330,697,'
    '690,401,922,117,515,273,34,388,574,469,876,994,699,454,37,886,933,672,969,615,825,530,307,1021,8'
    '56,781,302,581,310,835,351,209,786,638,813,255,410,772,528,142,103,39,148,993,219,162,415,874,62'
    '1,73,648,295,161,504,946,872,93,121,508,649,644,921,873,178,553,684,96,318,383,726,61,422,226,59'
    '7,986,955,909,968,827,938,459,50,728,311,920,409,899,479,558,959,804,22,754,865,154,767,540,328,'
    '425,809,552,359,410,137,565,83,779,1007,801,676,749,517,115,289,378,540,612,633,822,572,860,203,'
    '159,319,258,292,302,565,407,915,33,70,21,348,568,994,835,308,649,728,107,215,633,133,550,252,454'
    ',926,1004,331,196,647,914,687,263,48,764,718,707,819,848,979,690,89,279,249,676,569,424,177,126,'
    '572,969,519,21,853,472,881,955,916,187,996,395,561,517,461,779,27,74,782,358,152,862,302,496,317'
    ',554,695,949,643,565,119,705,290,88,90,882,952,951,768,187,707,232,968,155,303,528,23,340,195,57'
    '7,562,306,344,646,115,260,979,892,259,711,744,370,355,336,734,967,484,315,732,887,218,732,1005,4'
    '77,65,956,489,125,876,325,40,51,133,843,108,912,938,934,371,614,770,259,468,535,319,300,343,852,'
    '801,697,868,942,129,98,299,1017,806,601,465,910,609,253,511,106,57,490,49,1022,925,803,867,675,6'
    ',361,413,100,654,793,103,400,601,285,689,794,930,764,948,51,132,508,156,284,963,193,232,63,85,11'
    ',758,834,997,887,771,31,713,318,758,412,44,887,619,702,309,748,683,916,712,992,405,591,282,703,6'
    '71,771,929,461,716,1002,453,124,105,867,537,405,680,688,256,297,939,781,907,183,542,147,309,719,'
    '687,176,431,482,424,850,183,347,700,969,235,378,969,316,307,144,377,152,354,732,240,163,211,776,'
    '289,632,67,168,603,63,505,63,331,563,230,513,391,610,333,853,8,999,535,669,411,303,299,494,740,9'
    '25,357,61,795,160,266,997,591,144,301,65,767,166,872,1022,629,426,215,926,341,281,544,627,660,24'
    '9,924,29,876,310,463,677,146,337,230,798,320,781,605,605,49,545,192,892,626,623,301,275,178,492,'
    '894,81,643,363,598,398,263,604,357,565,828,373,287,846,819,111,13,439,651,947,408,286,156,527,72'
    ',909,208,645,893,693,1000,722,467,865,739,641,555,470,656,733,257,611,670,1013,388,279,641,457,5'
    '92,100,789,110,329,1022,685,515,276,361,889,588,638,785,531,755,978,289,455,127,639,1018,786,142'
    ',652,272,120,1015,540,516,159,470,209,984,57,556,74,253,254,321,275,608,430,786,887,808,962,785,'
    '954,686,642,455,258,214,460,680,857,20,51,446,486,305,826,146,738,527,669,775,665,587,960,130,36'
    '9,870,521,624,413,952,845,639,977,67,922,487,1007,10,411,406,110,651,141,639,831,102,500,133,290'
    ',963,58,803,757,611,871,801,458,878,317,974,392,479,895,249,963,831,117,877,354,493,577,600,502,'
    '218,898,510,290,837,481,626,943,405,261,331,7,14,396,765,79,377,886,62,975,607,208,852,835,453,8'
    '11,939,744,297,706,938,670,123,42,916,532,567,337,394,84,82,871,984,748,590,272,7,713,827,288,29'
    '1,151,972,811,60,964,784,34,823,909,943,705,349,878,145],"max_tokens":15,"temperature":0.0,"n":1'
    ',"logprobs":5,"stream":false,"ignore_eos":true,"return_token_ids":true,"return_tokens_as_token_i'
    'ds":true}},{"id":"r25","offset_ms":323.6,"cancel_after_ms":null,"copies":1,"body":{"model":"tiny'
    '","prompt":[992,520,343,859,568,215,352,127,171,593,86,223,898,192,198,276,406,41,376,289,208,15'
    '0,600,238,658,942,880,843,872,126,181,984,255,144,47,239,725,299,321,997,729,110,396,662,164,957'
    ',63,241,518,925,606,476,942,179,551,633,468,257,59,823,962,209,907,782,866,770,626,734,742,885,1'
    '66,111,5,636,222,584,868,36,251,79,177,312,247,190,501,578,450,924,527,446,315,715,960,940,234,5'
    '63,989,204,79,83,230,113,475,231,435,546,410,588,952,809,547,423,394,823,488,568,778,750,868,661'
    ',610,127,385,181,812,272,457,16,847,385,907,744,255,658,617,542,348,42,689,59,991,622,583,462,90'
    ',498,414,953,611,29,929,489,737,760,53,207,505,651,499,226,343,129,366,760,23,810,226,218,364,75'
    '5,553,792,528,379,557,242,18,1007,69,564,981,304,105,69,984,3,412,282,259,317,657,976,805,794,73'
    '2,782,744,270,692,822,544,497,847,611,770,953,957,851,645,432,452,430,762,938,808,100,468,357,28'
    '1,1001,643,1016,139,398,84,271,175,222,355,805,994,677,969,778,696,750,770,413,251,20,414,759,95'
    '5,77,714,809,592,456,799,427,627,704,913,627,300,939,267,577,370,732,635,805,664,586,666,267,260'
    ',952,887,1019,836,681,255,91,828,240,862,618,866,155,481,988,525,813,929,406,181,481,470,432,323'
    ',139,521,268,658,707,490,821,595,323,579,605,790,290,790,773,958,135,732,835,350,554,414,885,356'
    ',558,896,782,745,674,709,914,934,721,358,518,389,578,831,185,994,205,519,153,25,464,745,762,731,'
    '320,74,813,982,509,227,659,222,326,338,943,240,875,654,652,717,190,354,435,760,626,900,833,413,1'
    '59,321,993,1001,690,691,993,589,917,72,949,814,1014,876,259,1016,485,973,174,532,206,654,16,383,'
    '924,673,230,118,1007,226,926,311,716,341,18,317,790,144,609,932,403,217,322,113,178,501,904,131,'
    '54,95,950,223,556,651,266,857,741,65,77,496,97,516,459,943,252,876,67,962,971,287,318,36,275,654'
    ',537,149,589,303,273,204,3,565,863,812,908,786,167,351,998,973,275,813,419,482,597,237,115,5,302'
    ',778,489,368,171,684,74,771,758,882,1007,272,721,550,633,533,976,426,409,545,53,871,537,951,54,7'
    '59,124,963,195,110,148,284,731,697,911,102,57,47,511,705,150,776,847,111,651,20,338,312,457,757,'
    '250,922,147,82,104,211,688,516,209,353,46,213,82,956,913,422,453,78,623,733,1002,389,453,749,899'
    ',96,15,152,592,117,904,575,498,367,775],"max_tokens":40,"temperature":0.0,"n":1,"logprobs":5,"st'
    'ream":false,"ignore_eos":true,"return_token_ids":true,"return_tokens_as_token_ids":true}}],"prob'
    'es":[],"health":"/health","others":23,"model_files":{"format":"hf","seed":0,"dtype":"float32","a'
    'dapters":false,"tokenizer":"eNrNfVe79NhS3j2/4nic7WPY6ijhuLcHJ7CNDY6Ax+ppdVtuhbZCA42PH4ITOQcT7AFM'
    'zjnD88we/pelqlLrrfUda63a3HDzzai2eqlWqnorrFpf8zmf+tR7t6xp87p67/M/9V70uU/vfXqkdU1ffZh2TK76oiDqNT0e'
    '8+qMpIGSHT/o6ktWtQP9ywbapz71NfTv8Nf8ONCePj09flhXXVZ145f+Rvu33nvQ26HRIvvgK+tmfP+UFm32+FvRdk1+fYfc'
    'fHZyVTdlWuT37N2G2mv2YZ4WA33oXEbUz3z6s7AbfVZ2P+9PLb+rz8rvMFV/Ghge/v0KWieP3zVqQTUZrx35A/fsve6rr9nY'
    'i5ev7rIvym5ZIT0ZV9sHw29O+Vd90F7TDzPNw7Bq8/KD+nRqs64VNuQvfZt90GTn7Ktm7j7DHNRtNzRZf5i1ba14O2Yf1se3'
    'cgWffgNT5fDh4rN8+Iu/YPrksamvdd8Bv2N71YVHU5PHZZFX/bAEPmj7w7gGhFv9WlYdBzZpjQzvnd75+2lkd/iEM+aHYTQ+'
    'GAjFIf3Q/Vt+HqY9+6DMmnPWOn+71R+mh0cfP8USAYUFbTncjrymccH/meFp/Xj68veGx83j8c8OT9vH058bnnaPpz8/PO0f'
    'T39heIofT39xeEoeT39pZGFm6i+PjzNLf2V8nPn5q+PjzNCnx8eZob82Ps4cfe74OLP0eePjzNPT+DgzFY2PM1ercRhmrtbj'
    '48zVZnycudqOjzNXu/Fx5mo/Ps5cxePjzFUyPs5cff74OHP118fHmau/MU7HzNXfHB9nrsapW89c/e3xcebq74yPM1fP4+PM'
    '1cv4OHP1d8fHmav3x8eZqy8YH2eu/t64Kmau/v74OHP1D8bHmat/OD7OXP2j8XHm6gvHx5mrLxofZ67+8fg4c/VPxseZq386'
    'Ps5cffG4Omeu/tn4OHP1z8fHmasvGR9nrr50fJy5+hfj48zVvxwfZ67+1fg4c/Wvx8eZq38zPs5c/dtxl8xcfdn4OHP15V8+'
    'Ps9sfcX4OLP178bHma0PxseZrX8/Ps5spePjzNYoCXYzWx+OjzNbo67Zz2yNwnA/s3UaH2euRniyn7n6D+PjzFU+Ps5c/cfx'
    'ceZqFGD7matRBu9nrsrxceZqFLPxzFU9Ps5cjaoznrn6T+PjzNWoVuKZq1E4xjNXo1yPZ6768XHm6jY+zlx95fg4czVK7WTm'
    '6qvHx5mr+/g4c/U14+PM1X8eH2euPjM+zlz9l/Fx5urjHx2fZ7Y+/rHxeebr4x8fn2fGPv6/JEpn1j7+CSLMzH38k0SY2fv4'
    'p4gwM/jxTxNhZvHjnyHCzOTHP0sEYPPniAB8/jwRgNFfJAJw+ksk5YHTXyYCcPorRABOf5UIwOmvEQE4/XUiAKe/QQTg9DeJ'
    'AJz+FhGA098mAnD6O6SAgNPfJQJw+ntEAE5/nwjA6R8QATj9QyIAp39EhJnT168lwszp69cRYeb09euJMHP6+g2kG2dOX/8r'
    'EWZOX/8bEWZOX/87EWZOX/8HEWZOX/8nEWZOX7+RCMDpNxEBOP1mIgCn30IE4PRbSW0Dp99GBOD024kAnH4HEYDT7yQCcPpd'
    'RABOv5sIwOn3EAE4/V4iAKffRwTg9PsJUQCnP0AE4PR/EQE4/UEiAKc/RATg9IeJAJz+CBGA0/9NBOD0/xABOP2ICMDpjxLY'
    'AU5/jAjA6Y8TATglcQHq5ZXEBSiYVxIXoGJeSVyAknklcQFq5pXEBSiaVxIXoGpeSVyAsnklcQHq5vUXiACckvwAlfNK8gOU'
    'zivJD1A7ryQ/QPG8kvwA1fNK8gOUzyvJD1A/ryQ/QAG9kvwAFfRK8gOU0CvJD1BDryQ/QBG9kvwAVfRK8gOU0SvJD1BHryQ/'
    'QCG9kvwAlfRK8gOU0ickP0AtfULyAxTTJyQ/QDV9QvIDlNMnJD9APX1C8gMU1CckP0BDfULyA1TUJyQ/QEd98o0ErIHTbyIC'
    'cPrNRABOv4UIwOm3EgE4/TYiAKffTgTg9DuIAJx+JxGA0+8iAnD63YT5gdPvIQJw+r1EAE6/jwjA6fcTATj9ASIAp/+LCMDp'
    'DxIBOP0hIgCnP0wE4PRHyBwBTv83EYDT/0ME4PQjIgCnP0oE4PTHiACc/jgRgNP/SwTg9CeIAJz+JBGA058iSwk4/WkiAKc/'
    'QwTg9GeJAJz+HBGA058nAnD6C0QATn+RCMDpLxEBOP1lIgCnv0JGHHD6q0QATn+NCMDprxMBOP0NIgCnv0kE4PS3iACc/jYR'
    'gNPfIQJw+rtEAE5/j+xL4PT3iQCc/gERgNM/JAJw+kdEmDn9468lwszpH38dEWZO//jriTBz+sffQISZ0zQnAnD6EZNAS9U9'
    'ESJ8hyi4VA9EmbltOyJsVMMF0WBoPyLXHeiqjF+ZOe4bIswcX/iNmeOO3gBdlZdEmPnNiRfQVVfuIyiroQNCAyOJvgT6KuUv'
    'zdyyf2oFCmugTI3PLGf8u5nlnn4GSuuTj05EUWOcz43FK/UH6iAoMPaBrWI92hXRZvYz/hlYn9xD0GJtx2MFeqzuW6LM3F94'
    'TkCT5fQKaLLhlakpUGc9MQDqTHoC+oyZBn2WMWGneobNz8ynTIDFza3PnGcd+WaeVGMN0XDkz0SZ+Sb3//oJ+W6JMvNdM2EL'
    'w8btzowXGVNmhuuCCLBQuJWZ4bok79HMcEpvgH6re34FuKXPgIIjZ/QaFFzdMwU34oVJuDhosEDJ5QV/CqUHjQyoOVosa1Bz'
    'PLwrvbALGQul7C5EmdnuqW3QdikTtsgQLaA1KLyauAaF13JnUeN9JC0B2/Qr0Hnlo+21wzr8BcacmUUN+BEP+1rvSRoeUIPP'
    'ORFw2GlkUA9+xA1hB/j7WmoX0lPUhx8RW6AQTz0RVlrwUXOgFNOGmACtWKRMAe9Mw1JnvdF7s5RPYAfkx7F+cWozAfHDuwYU'
    '5cAKicA16MoDSbL1VgtFYmarZoBJuPBL2ttbXPk0JVvdiWr+LPbjQPJ+vcWOXIkC6mj6CGhQonF7O5wL6qxSo0yZO3Ej+bcG'
    'PVrSPlFKlIXCDrtA6ne92+teycDtkH9+US+lChjeK2nJXwfdemT9sAbtSiuDV7rSsKSo13u9IRoZhf1WLUniar9TNH5v7lLD'
    'om8fq7eIhN25k18c4Ex1I0oEm5CmNcYusCiO15pZ6JpSttzi3IVK9hQo2yPBqHWsp6SRCQaFm3VHoiSop6kTCeoB+hkaj+NG'
    'pn6Axj3zQCa4oIgxULljX6f39CSwdE/0LPAndC9aEWyge0vpBmjfkUQiauNoYNn2G6WED/T1zZPe5K2M7Aa08blnil5Yc7c2'
    'oJbvtXxKdypnou5VBwxDx1jsbZ70lul4YDcR4uZi+lyke0ZtgsquUiLMXTrmRJh7dGbCFpYTN7yDVfzAi5tISS3eohtQ3MPW'
    'meT3Bo3UYSioF2inDlKPSLhf+KW5A7L0NiutAGEEUI+3FcGlzUoJsUJEyQa0+Wn69R63b86vxcAQrRVQ6MOamH4LWn1cakQC'
    'IUxYYLNWy6zA8QGl3tE8gUq/0aberLdaRhKw26x3DnXiXCn3tHqMxxqtHFnnSskfeKUrDX8gdLoBHV+fiKB0PLGJZu9HR9aY'
    'm43aNhUMHCj7k0yN0vUHxpEbUPXXUXUSLYaly0yr/VIxcfuktyF9ZKs3C/ECun6UhiQ0N6DsrzyNoOuH16h/WwRbs+GwAY1/'
    '5b2kVX3NDMYATmQQtnrDcHOg7Yd1PO0HZTQfaWRA3T9z30DdX3lYtNlc8bLTKv8x0qD2LwUvR632m3nAdtgbEhSg+O/TiIHG'
    'JxrztFc4uIFO7tXeaWU0QfV3jKU2WvU3jzWudT/vBdD9N1kXoPpPvOFB9d97piR6iVP7oPzPwjNo/0r2Oaj/u2jcDeh/orFK'
    '3Cjdf+TOgfb/Qv6E2v4tDKXGAN1jYcU4PTSICALKmmLneu/TfGsUQNwkak46kXKAA2RFAA4YtfA0FgoIpNh1QAMXwkibRG8b'
    '6nuCcGbSmAgFagr8q3kpiaRQGZuJWzTFuwtR5o5cuCnsR8pNzX0oUyIo4UVragsq/5iTkt2iv/kj9vBsQdm3vOG3kZoIkphb'
    'peaPtJC3oOZv0slorYQK/3QDzhN+a4vS7So/3UE2GxHctfSYxG0UO1bexHmiTRoy/beg8kc+ZehX6NPh91ao/URnb0HxXwpi'
    'DBR+VvEv1TYnuLRdOTisfCyXLej8A6m07crpUFFzGwm+KJ0Erf9cESECn+KVKI4VLEpuu1bTQ6yv9YbnL2wBbfAnEIyRs2S7'
    'Rt8aD+k6Vm9N7oSt1vTptBy1sucPbdSGz5i20jKJvgUaP+s6JkF6EfVtgwqSBgC0fEkSZqus+XHk5xUJmn7ApCwTtqDsGVFu'
    'QdOfyF7dgpofVi1RVBd4uW0dH20Fi267URuav+OYMCUsZlD5WcsU7NeRJNx2624b0RlbV++X82oD7T8oYXp755hmJZurW9D/'
    '/bRTd0ouM7Tf7vSa4x8r3zmPIwCAU0aEPe5Q/oCSacKIUpW01kDzVzyRoPVb1kBbpe6PhD63StnzW4jESrHwtqDpM16OoOdf'
    'RDyinueJxuwjWdl7ZzKqefGBuq+4q8qvfuQhiRWilBUYO6utmZSJ0vgjUBWstQW1T/huq9Q+b03Q98PokPthC7qeaKxnQN9f'
    'ZdWBwn+efHxb1+6f5BSo/ayhwUjW777JiHybOH1q5rUH+v9GvQK1f6N+O1q/4tkEvX+Xj+A8kczfKev/SG6dHej9QRATZe5K'
    'kxFhjf40oqgO1NyQs/+7efXtAADU5MjaPTlyrZVFvkODP2eu0R9DP44c42XazjuAAYxmd5HaMzSxu8iZme42/Ry7deIxAzCQ'
    'tvwWuJZoS+y00Z8Wj2W9AyTQMZjeRQjGqMHVk7I+6a0VGsotKaTdCtEYfVhZ/QzNd2jvNw0PoQYAOX91hwqy5fbmjpxpXe9A'
    '87e0GFYOzqdvrp0JmTfWDrT/kWTKDrT/hXDEDvR+zx0DtX+kZaEM/SP3QJn5x4xpSq/w+ILeHy1+ArI7UPpM5N9v0IvU3IiE'
    'W5702Q5U/p3Y26z1YPKwgMY/03LYaHuLv7hT5hoNCGj9S0HDvtG6ke26HWp7xno7UPet7FblwK8K/qlW+azXd1vtp+AGtbBq'
    'WLLvQN0PuJN/rSFl+Vi4WwSUPbc69+cmv1YLi2XKTgssftHR7+Vjz4CCHzEXT+hOW8O36d2NkvfT5twpzwtxunN84bKlQNc/'
    'S+hlB8q+o2Wx07oS1tle7xj6OKp8mRBH5dNXnOB5AQsOdP+Flo1j4LOYU979Y8q/dESYiCbQ/xym34H6v5GG3oHWTzsyCnex'
    'niIceND+Io5B9Rc8EKDz7/xVUPZkuIlqiB0jhn0Ru1h3pplXfazdyXdpBnwxLPaU7pd42S5Rhgx3Xuv9mQxOclZEaO/z3IKq'
    'b1kOgq4fDEpGuDvQ98/MBojknODjDnT9KaVkdTDwadL3ysV/JN22Vy7+I0GmPRr4RU0UCEb2RAAs2Zb8Dvj0+B3HD87fU0KM'
    'RmGPBv5gp7F3bK80PG2ufeSsKdYd+0jbkg3s5r1W9BlDgj1o+Wca4r2KxzPy3YOWv3PCP2JJGmTHzO9kNvag4c+8j/eg4ita'
    'IXu072nN7VVM/pQzTfeggMW/X2nBLCOnVP2Jw+P7lUo9uRJJ75Fu3g77FUIwImi/xbzO91rxZyVbrXtQ+nehoGwmBtZO18hV'
    'tFeKnyZnjakdHXVnjXDyQBQnWPzYPvu12vENkd5xw4jc2m9QeRI/SvkfeVkpg/9Mi2ODMoxmTnn3GSfutfpnqLMH/c+WzX6j'
    'bWMaaND/LyTK9qD7C95eW3QfEyFSeSZMU5kf3JRj6ndsSe63uFEegfk9an5ZX1vtCqd+KQv/JD+NId+ITtU4pn0nuw8UP7ta'
    '96D1ByuKPXV7FcGniUCXPoOpvTLnCZDsd9ohBoJHa/txbUwiDhU+rSxl2nP4b79T0ozGRmn6EzW1xyyigt+C/dHeiOLGjOij'
    'qOELWeKg5DsGLXut4nlM93pCaJJAv99SfkuHvfgIkt7lBZmFe1DyNZkP+xhzoU78ktOL8k7UuRcvGX9i7gP7k/Zatz8A3V4r'
    '97ycV0McKwFKJGeri/DFeD4d33Ic+RIf2SfK5SqaFHR7zltY2fNH2RPKk89aGfT7UdqCw15CiXW3m4kV3ZNKnLXxE6Zf0rEu'
    'tOibgigrrRP4NXB91dwUWI4dqfoYVP0YlieSjg8xCIxB348RBepvDPq+YAJm67Dai0HVfwmxAYr+mhMB8kdpKcfox+dhUKb7'
    'hfV/HKGDFVJrYnTmk6URR86qIl9LDBr+XDMFdTu5MmI032lXxSsdjaDVGa/Q7dXSzo1XKpO0yvjXG/UJ5hjUesXzpx34ecPW'
    'QYwJeB0Bnlh5748sIWKl0088FaDNv5S+geF68jfGaw0Z+S2EjMSE8tqfZKWu9YbIub0dZlydhQ8QtdQDUOLt1BpIWhIMMZru'
    'FcdCYq2+JQshBgU+MEyf3GhPCn0VVPgYoeBIdwxKfBCsjNxjUOLXlBvEBXXJmIYJpzc6sLnR00Cjp2PzdfkQPbEToOfAUAwq'
    '/Sz6JAaVXub8FgbqeMS2GitST0CVU2O8PUCZN6m0FytwwZwnOo9ItECMXnoSBKDNZWx0TntezPsBVHqVtbL6MS+P99IOTURZ'
    'XUqbn0QqqCD9iUWf0uWHUVaIdAKFPgA7cjTHSqOfyZSK9xpq0eJTxvuFOwNa/XlKC4z32p1acAggBr0+gCB278V7DKUQ73s0'
    'THgwVWYeO51jUOyDRJIJw+y80Yv6oEcY+H3Iq1hPUjVvAO2/z4tZCYCuf2aBCbr+hQVmrOEK03CazjJ3sZ6nAjRQjJKZhgq0'
    '/JXXLKh56RFo+Lzid1AmV8SK9tfX5SyWdd7e6Ix/iB5Q9mdZjqDtWxYmWtsP22WWM4mzl0QlJ6Dwb9RsorP3aiLpiWrIjktA'
    '5ZcUYmEokDju/KEXNNoJaP+KtkOCjvzqVvOv0WncswsmAdWfd0zR/WF1lUTo+85IdCba0hdJmShD/0TyMFEG/plHA5BAdiYC'
    '+PQYMSeg/zs2RxMAAHfulzbvcXskKpB/5IBaotz4bPcnaOWzlZZoM19UUgJIYNjoYrwmAAVGPmtpYat3BnV7hSFwye1NtJFf'
    'Nw8xkqzQnuRvYb4ozYMy7k9Cc1LEHko70UH9vGMYnAA4OHEEMQF0cJaOrtGmpJEDYMDu5UTb+HX3UAYJwAOOaiVrZYdRWQH0'
    '6Enyb7LBeBEvKcAGFc/hBnN4iaC3yywfE2XgX2RmNmpm5kTmBCACp7EkGzzhQd63ZOOIAY5DJi5GmJRToiFCXaiNvtVz1M4a'
    'PtGu/5ps0ERjhooY2qL0JgIIOhofAAuXnLmF/EpeAwopsLxOlLf/LOsHkMJgIUlCWwJo4YXxSIIwgZeQMvwfW3KHQo32k4sS'
    'uLm9mgoev53GPLwltJO/bh9yTOGEY89pIMleBVyZAywfwitpjyExdhgnDkxoZ2m7V8efbvMvdrj5mCmFfngb7GN1UINEHMCF'
    'USAxV/GTAs4UoU5iNBJYQmmc8NAUsTIUiMNYpcPzj1EW8O92GEUlivZlMHPK/Cclmij7X9JJEpXJJwZAkji+Mvp5gnE+ZjjR'
    '+4RI6JMhZJ04xj+veZ3PX7cUUE0AFBzSUnyUSYKWZyuKHiDBlSYkegI08EIvDSQQailTwN5Jpx+u0e1YMA3yq3OmKIGWyU93'
    'Dlx4qKbhb47fv5Dg4PAXDd3aWc0Nf0tUgDDjtpxEvzYVMp6BYcZ1qp/QlCewYZqSCDJekRMjK0QVDH9Bt/mlZ5rTwe4yfQ+d'
    'HTx6GOqXPqlAgGz/gYoOQT4BMxAxX3k+VDH8Ye0wjC1t0Fcii3Ygb/UHjsI0oIbDNIUAGsrpi5jGQO7QgZYoTyRXylHygYdX'
    'IQZW7gMRBQRvtoG4Bh8gfxigAnssBxJOlwwVBgT6A5P2ej/n3Lm1A+raSa8Nf0owJH2QLgFuGET45N0e6CD1MiHhNmPGADuU'
    'MhWAHppaxghwwz2V/QKwoW/KaQVvVBSKJ1HlBpymadyoMxmPTznAoX9Il+FPEeZVHmTEtrgM24m7LXrg5Oe4uarpPWdzPdTG'
    '8CctRrpZvQ9/w+i6ZBENVB0/fOil4S8JSjPK24ie8BxgxkO1w9RHnvadDrF3/ClAE3klmYUDdaMRChO3zkpj6k5JTh4NABXE'
    '5rQ9dyq6w8OJ9ceEBIDiJB0HNHFhA3agae0LgGD4m0qxlWaVt06Wj8ocOMnq2zunUFr2HA9/2Ouc7PO03/ax4o/HBrDFRfY+'
    'IItyWqqxiiIKTWeqMs2JMTz2qModPMvLjvHUcgdiR6fJLMZOsp2MunZD1O2suIe/6QBKBbJEZRXIubWBilPI7QPuuE5vYRIe'
    'j4XjlkC5Dvijr46yUJPdO7Jv+p6rtZWoAyxyEVGXoPDnqY5UdqGsz0gf7xfFijXWxp+z2zzCSmsvLNuw1poci4wi5ZZgytyz'
    'anoJzkZx/yOFQKbXEidPgZdJpBMQGPhEyjExLfFIOSbOIqgj5ZoQdRBFzoy1M9qJoq2TRj7Jd6zRxoA9ipS3opcGdGIr0xLF'
    'Bbe3enK5YGQVqbjFYTyPxq0oJDIdBI0iF4d0s57Cem43WUdY0u1WSxO4JEVDYmE3iuJFWNntJJOJ8IMpAD6ujFuwvFsrjK3V'
    'cWnmYu10pAXoFKlYxjAoEwCK1jqa37DXJMLyb/mo0HgMFR45T20rP20tTOs5k8HeOKlwJSqQSDsyhIaZVkLCE5UsKrBK3LDl'
    'Wx4lp9yA/HqnfdzCmBb9JQclIqwcR+3yoAEqeZnaBUjyMq0fwCIlT686iChnIKJIuS0EikdbZ8rYeRlFGoz0AIuwvtxxklIq'
    'g+H84Fb7AGSLAAAZjBKBRJHyaMjy0OmL8ikFQibojNXnRgzBPVYYpJDBdo4niFstinY61W+GdZGKghzpuAb3b+cg5IfaxjJ1'
    '96GPlCATYa26gzShqhQICfzsd6aAfSYSDIBIK6MFMKQVLQEgJC87EQcAQGqGf1i8bqwlPr8Kng35CqCPYtoXKoexkN9qx0Y/'
    'NPsAh1jX7sqLPXbCoPKegxd5gOKdgyJ5CSgAUkizsZ66o+yZ2NVlInf1ycW+aEWdAfA4ynpRFQyYXQAeElePsA7eRVYwII5S'
    'BkThjUdzqkMy8QmezJpP/0eRKmLAtUaxM8z16smJ8lazwFk9uTMmjtUIa+ZRsn6kiuZ9xEeXIiyc105CE4vnpVXFJOxYlQpR'
    'WyzlvG9UMb2Rae5e5Ir5+yzssLreAHMEVGCJvZIHGYvsjSabECG9ozwyaavOCsyvukgRUJqqvseJSbOaw0p8Y5S54r5i1gQn'
    'fkVYke8i/cNoCQMdrMpXiazGwnxXXvpYmq+f2lelZh4zh3ESKJMQqVJ94wkvTiyJVitnt7Xi0MLKfWOnZG9g/b4LSw2s4Des'
    'TG5Wh0t6lFCqnt/4Sclki1bOachcXKbRysEilfhZVmud+MniDmv9XSeuMcOCKXhAnXne6FQ2/iXWP5A9ulk5sow/q3IsJr+g'
    'qgA4wh2eDRVJEZtalQL8qJyWnAIgrUhZVRRwGKpZKWN1wGesNxGpMoG8srk/AEZeGCpjvcDTRFKRrhPTNhhxla9g3jdPuHKF'
    'TPtMwY9ptBT6qCa+HVHSyfGBaOUcoBCLAksKjhmD58frK9WFaYQBhxynXgAMKWQlAAgpZawBfzTcVcAdAr+xxuAtk6YSle/P'
    'XKt4SjkRUfZPRvhKu0D6BsSlm1dZXSa5ste7q8BdvVdRo/P0i51yrJ+nAQM0UmaMX7Es4dDLk4w4gJEX2SYARg7yHazrzhI1'
    'xpqKPIyxTmEqeSRiVZhDmlM+EBEKCoCcxahcxdqNKlI5dnJ/eEko/MFGGdYqHOZR8lMirFiYtrLL0OmRdpM7GqsWXqfxTXRk'
    'TxYNOj1akZiAQQ7CER5GEm5idMpzZwB5iDLH8oUTbNPlCyW9IFor0FHk8vM11lETYxdLGT5DDZho/bR1kcD0B6zSUzIJ1tv0'
    'tRhcSEzByp3SFsCNrpFfRk4kjHcAFjqkShcRVjrks2IR1jpsRWnpaocMPbHc4aWQTmDBw5bP/URrlYRRipxaR67Am8Iz65UW'
    'eCWIMayF2NaNKDVdCnHM5ZgWJJZE5MOg0VrlZvbSwBYqTTJ/ADI6llOqMGI3fdqBFpOCxgKJg3biNteYqiXST9dI5KOCEZZH'
    'HDN/5E2scSXya+1WV6BzLdFaH7ZMO7F+1vrAJZ08E4SnyyYe00qyBCNdPZEyMEXFYxXFEZ2dZe9ssF4BL4IN5v4z5xs8pCwk'
    'lH+yaBW4OE/NKQOMxYwupigDqZBFOTUZu8q2mxbYRi/LdpL9aw0shs3Pg7aNVKqZTPRWBZ2rC/MC6IILT0VYX/Es+xmwxTkV'
    '0g6Fm3xCzxZAfyyxmDUHJiVa2vOAKWhxkQWlnBuF7Fbl3Khk9neOGm4mOxpLLo604/SDLeYRTu+qimXCA6SfMNheO1UYJo84'
    'Vl98wFSsuzheQ8c0Z59xs3un8kfHnkEsvvj8KDIW6QKMxxGRzJBBl2EcYckMM9bOgc28vYq4Ra9HeRBLFOsylsMXuKuY/kmv'
    'igKLMabEMxtj6RluEuBGO3Ec6+Q7niXl8iger+rONZN6XsfOUdTLtGYU7jhmDSCCdfyOSOF9rfAHkxI80CXyGrDHCP25TSyW'
    'XEiAZa1yPaYtljg9ZH5Vwkc1NYq9q0Q3JI753MzSHHBIXV5EFyS6WkgxeQc3TjWHYkaVWM9xNAVYwW7c454I/bGsoyQrzSIJ'
    'KzyK/YqlHSf5h7UdR4+AvKgQ5PRrrdaZlujzVPxpLMF8ehAjyPFMmaQ8Vyw0sbDjiT8CAKWScdSBF7FhNxqh8ATp6o4jWVqA'
    'eZP46caBKJKvo+s7HrNiBiIbfWok7R4gaKMhSloCktaFH491xbl00WalhU37kAS6+ONxPLveMB3DTOXkrsQKkC+5vDn3930e'
    'fQAs708Tj/GYXkiw9Vj+YP3Hu8yucn/I2l1rxM+iWpd/vEgkTZd/fEySQihtKg1oUdI+8BKWf2zT6sSLYoPZVkwBH6q8s8JI'
    'Ag/YBrN7hQRpIDyGAEsaGQkAJYLOsebjjdUQlny8yUBv0HnDo+JgEP6Ac0K0Zt4w5WMqDhph0cdjehMOVahlQM+SZhhh9ccx'
    'yPlYTltdtKME6Id1IM+8XTFxdBpMnevBvwQwchURo6CIqLbNTsdqmQYJ/w0PspM5KhvUSfSQlbnTIUx5VS02XioKhLSyVnd4'
    'cr8Sq3Kzd6QE4CBdDvLQcwR840CRcrYwN9rhkVUzqMS6kFk77UhAItMywZsXJmGP99RlQtLhTKapDExZBLHO9BUinicV6abT'
    'PbLiznwr6JFVU0Qay0NKZA2rQx6nr+MRJ/khYEYZNo0yHvoYK0NexPOFtSGHwZ1SEHV5SIkU6gKRlSwthTTYxYMVIsfz9kxz'
    'LDNJPdsopHHMZ00JaGPowF1awaoewir2imcdq0Q+c9nYaOuEWroHWNpqdJFXE57ePjka6mF+bp/0udmOqwdEWEBysDY4FVUX'
    'kTyPtaWYDOqpFh6he73wAAmmvI+wjORV3gJYcZtIoJ4yIeHB2ek17IkMlVNVQr6KvWhSIWqwW0wRaCwkeUrby8SARoQoXrca'
    'X+SdpI5t3SOpckop2q6cCjPFAz1hacnnuYhyhAUmR5ciSzIsMvnSCwmcb9IkVP2cXoLIQ8oULDEj/K9VkUweNqwywbJLV5Y8'
    'oqGzVadUBRTo8pLlg6rAPI+TAhWVrHmFKa6y/DSmqJsHfNCFJsczFrx7daXJkT7td6w3OdAn+x1LTr4IKxs8/iAkLDkjXwLU'
    '3ktbcAK3lreUr0oaUyWyebFt0E0lu13BDNGcWwUzSgYkuuhkK9ody04+c/3lSJebPOazotRFJ4flDsB1q5HGgGKm2AUWn3ye'
    'izRHugDlgJkFhm0dxCFxi60OroxHISdTC2tQjgm9jAC276SasvrAKpQv0xTv8PAxdwhPuArHAD5usit26lIh+aWurMvAR9eh'
    'PEuL+nArn92Ltgp0TMnUuiBl9aBqed89kMVWO0Dq5rHhtPMjKx/4cqtdH3nzaGqPiIRJKCy533vMgeYfYqLppKEAeZTT6gHk'
    'McUHsUilJNhheUrxaWBhynb6ABQTYmaVf2Na+7GTyC0cJ3pG+G5LjaD4zUQnWzI7iQ7GylpSgONBxPm5Cu8Kclwz+bw+sFtO'
    'wU1dnfKYFwLktolTg6CdhDgAj2FMpVRvhKUqh0FkSI+1KqXCeITVKk88dVivcvL9Y8XKcyq/xHTElkkqtSiT5pQXOGWa8l+k'
    '8o1EV9EV17IuVzl6cCYgtnPKVveSDY1VK18ypoDxlUmz4CfNmYKFt7lHCm/U0rpee9JaDGiThztSSb7825Vzdoq/otBFJdOg'
    'kMWUvKFLVkr11GinvRV9MeMKXbtysDABYO9WWsR3D7SIlSwHmTx/XZ8Ry0GpYmXLa19O4wLAY4z41EKNcKTF6sbKltN4AeqY'
    'oldY3LKR4ypY3/KWSms7lXgkv1WH/Zmkg7Es+nYKa0iloGinr6iSLQQgYyyUxzSnInTN1LXjwZ5A/k6Xu6or0JO66uWRTg3w'
    'JsfSl307uSKx+uU4PjIReLGFyAPAHxcZn63K5OM5wFxS+bJb/ZLb2zoJKkJVGFHGTAGPUjqqEIf46Hcq1iKu6p1CGpL2gxUw'
    's+7I87BDB7ZMuPJsZOXlMbuAL1JJM9vpOEve3HkmdY3rARtNTWyxMtOFu7BT5y/vsmeVjyNrWxnaHToHubcANN4XoQow4yhC'
    'b4/nSNvpPQg8yHcBX9xYce40sOBRAkzRF/JLzIYqJXcMS18Oinha0MqXcZEm8d66aRErX0Yl8EFXwGQH3845u9LNJh3WwGwy'
    'SUvAMpjDZuI1AuBipM1cuGBXjsthLcyXR6X9CAthXkTeAM4Q/yqWwZSFizUwZXYBYAzLm78K8CKruPlEh2J5xyROmpf8WrnU'
    'ZIgUsqgEJuCdk00jY68jJn0nR2j2Kn8jb1k6OIUx60aMICyOOVgbEmTeO2GSVmrsRlgl81qLq32vczio7SlHBEtmvrDwwqKZ'
    '01js1QVYwoO6t4/7BhgjayTvEEtmjkX9pMP6vAr7enSpzCl9fB85flBmSV9fSQXUon3kON3lVY2deFnpwplX6VXkoKep8lm0'
    '1z6NvngAwr32avTlJPL3TsSkkQFR4CNreC/oQprDLD2gHxbTHLWT5CFiOc173fNxRiyoWZd8iVGEpTQpPDz/wa0gwi0D2ngR'
    'nteYfCjzssYLwISEIQbmfq2ScZgEMIMh0V7BDOk3oIy05Po6EVbSHE+88djpwyqTJsJCmuNJJqbpCrQFqHxdUnMAZTOo2ruY'
    'Q5CQW2Czg02KF2s8LjuK9htHRpZgcGDRzWe4MijCypuXvJFdqTI9smKGKViEc9zvzNAWDwsXch4NS3E+T7dKRViMU47YYCFO'
    'CRVjEc5WWtupWy+ZhhdS8HBu8aIAIamrqJimcIf8dKfNSz4pq2twVtOrCuXLAtKYo26n6A2W4xzrPDIe0KU4h20v+mavcUfJ'
    'gAarcY47TeZJX7UxDAsYA05lTrrJgukR1mWRI3d7HWHp5agmlukcT+JJrgfW6TwNW0jY2WNpi06S5rBY58v0c1VOkUlQXyCT'
    'byd4xpHZBDjSTFI4jrQlwb9Wt27KptI5pDNI2uujLA9du9eppCJ48Kbrgude55FOEx9rM1qWu3J4SD7jXjk8WpE+yuExJabs'
    'lcdjEvJYkTu/8pA6dTtbic3q0p3HfLYG94lz5cDs3NsrfJJN58B1Pc9h4GYjUpf0HKskzuA6fnLW5gNoYHnPrOVKQpGu8CnZ'
    'GxOUxUqfY+JnLz/Z6AQHBqlY8VMqV0ZY8vP8oO3xYIY0qfJoK6Zhll/DDCmHCF89EWHZz3YSYLEu+jUZNbFCK6dZZugyoGcB'
    '43HknPkGRRxHOvVeiPrUlTAYa2+ntI2TyCVqo1ghFnG0Y1XQEdtMBYmiWIOVvpTjMFgdNGvaafAUWsmaw8SI8pNkzQOYYKHQ'
    'oQ1Rn26d0CknNXY9JJX+a6KLsD2wZqyLhaXVw4TDIqJDJ+RgDxYSHdeFDJxK/chGhc7+CKwoymNRMxkihTJ3gGfKqbNrVb5S'
    'GMCbTeSnAKzllxvMXxeSWqi8Nhz8wh3frFV2IX92owWpNKkLcUoOUawAy+kBJ3RtUS4NGmFx0bSQzCFdXvTCQ6kiNBceRwAo'
    'fVfJulROEknyj5WPpBINEysfyXV6FXslcCpWPhIuNB5hedF7Xk4+eF1i9JSVgMF1qdHTuJ0miy7WcZlBMc7GT7xzPK7FSSTH'
    'Dv39paw6dfCFBwVATDtJKX36Fu3yWF0SmgsNEt1LSbHQFUjPE1N49VEzpaHpAqSSg6ArkE6fUqClTIW4Vr4r+flGReOEuFVe'
    'DCHqEDZzutdeLhEXyonyyPyOVU5IJ1wpP8q015Qb5SZTj8mooySdByZ2itjNIAvLkL7gbYdRHOtKJ8XDfNdlSalUYy0/2bt/'
    'aB6tqVIukiQUxxqHAlLEKqUDPJC6GViptOzlzDYWK63S6jY1oMId4nbEmqXTYkjUNelCA1NWtr0O4Uw7PImV9pKP6E04mYqJ'
    'Ri8gsHWt0ukwZOKclxGiClExvNWlSuWAc6LcLBWrnUTli0gSQKJiOY0sm+RJL9PpU2qV8nglCrrIaTVdsHR0Q7Bc0CVLxyve'
    'uGMKvWSliKZE3z42JoALXa/P6mGFJpFj0M7WShLpFcqiX5c0PQ5vP0wTp6Rp30wADsuavkx3Y0aJk08yFudnj3WiryltzlMz'
    'a3AL8zgAkjmI+YK1Tbm6DxY2Pcp84zVlmbQF0FN+l6goFzfvoJSHoYh1TdOCD0zpiqaS45YohCKwJVFpJFUqTW51fgMTVYhA'
    '1p+TRsL7MFlrL5n0XTlcSPoReaNqaMiVl1Gi7y6rZIo2el1OByATXQQ9k2RGXe80ayTarIudZs1sWiQObumryeJK3KtNHs5u'
    'LH36LLcmR1j89PlxW3Oki5+e8vbhjtLVT8dc1Icux9qndBpcRBUWSh9mnmcJ4Mz7YpVi3dOc6ztg5dOLiERV/HSSL9tYHYJk'
    'GiQ5icRSPhfWdVj+dDx9KS8qq+hhBWIJ1LFWMTO5c85XSxPa8c40tTbl+3sN13hedD5JXUl1scR1t8zOLiyG+gx3mEeJwi2n'
    'vn2AV6yKOh7svchSx9M1cud5lKh7UbIpPwgLo77IIgf48r50B8DLF/Bk471nMrh7vFlXaHh4RnacqobKUw145czeRqyEWtTT'
    'L/FoAo9NjCnhQoKUcOkk3nI6rVblWRHRoTJXZfkneH0IO4awFGpOdYCjRLlUztJ7lUMiCQdJokUhz6Q+HZPJp3fKecNTocCH'
    'OJkS5UOZ1qDCHhxqXj0p4MHnOFdPCnPIZlk9Kcxxp125enrS/q8GDfXV05NjuyH4XOlaqWOgbfq8KsLbSAL1SpdKHf/ysI5X'
    'WCx1WH/kl1ypKqnyHsCRQ8ZMAhjhuwlWWB6Va7iusDpqO3VAAZDHhTsrLJDaivxaYW3U8QJCpqFPgVXQCuuiXiSqtcLKqFPt'
    'kBXWRh2WMR/PWT2tdNE1/jpehVoISVeCYtpGex2Zo5WWfUJUMUdhc6Vrusibyg8kC0+hDfLIr54U2Gilk+rELrmzVroaKl+Y'
    'tnpSQOPGSwm9IJ2kD66ciqizAb16Wu/esXbFQFjpAqmntJvMjBXWSH3B+51XWCK1HWt58rrUZUEGpT5ZtSuskkquqsesbrDS'
    'RCFB0RXWS+2LAvq4eXdtyuLG+1hqaRyLeclbe6J8hv/wXjnAGGLxy+TF6b/j2nvv0/ND/p78/1d8+t03P/kIX00X363x1d7Q'
    'avirh6VXW3yzW2506Am8XIRzcFx6NQtutMc3m6U3L8FtdsFtqs6XwW8ujuk1fKF88tEh/OXwiUqD+3/EN7PFRo/Dn+Hl6zKz'
    'WTAL/RvX38myrgfmr76pSMMXQ92/eYdVwaO2yIFh27ZqO+RdeMfa4O3Yh++y5UaHhvDdbpnd/o3jFb7Tw6ersqyCoZ++vqXB'
    'SywN7lr25mXbhG/Mc7BqrMJnrA1utA1f34udUtIua4K/XwRPQHifyuDpN/S+DP58E/z5IvzzBlF/KcIXyuKqzos3CowqWAq1'
    'waKl8e0/xWyRGbbgJZjdKnhqq+WBLZWSCV9bXTCQ7T0rJn3bhC0yoHtVlMsde2fSSu9P6t6iQwz7xyA+n4ONoDfrBMNmt41w'
    '2xuaXhzek8FoOxjgRNq8TeWki692qtXRUeMZNbWST71hoTWmpotlvjUYXYaNadOEW0fKkMpKy+boDIPhQc9lMBDSK7P18Vvp'
    'pdGY7MrMsEeuwYb1eIHC4sv0QvAEnsIXhuZ48dWbGocqWNZfDGuiNcxzZ5rog28hm/C8anq6ITu8m+Ul2JMwOtEXhdcosFDp'
    'GIaw88qjRou6xuKB6SwvL7asuOhLS7vhg3FfFEdqwm/hEKAI1zxZa5qN6UbM4A4ucq2F4jLQctanievbsuDIumC/qINeFqcv'
    'bQ3Q8GBwCJ3DV/wtXKuOt9Yp7efdSwYTy90hXvDb6qXRBgv+rFucwPG+ApNRomF4Z5JGeWXqZuXZAmeLRHIgklxJuPCTu95g'
    'jWnyvTJdbTG5NCJ0SgPQcae3u8dk03u4ts1pES7RguVZHjztebiMXOzVs9m9fjAAhEYDacYLBvFg0bZZuF4sgw2QNPfJhUIP'
    'R+FbRmmr1kbdWto/esb7ZNi7dXULh27P4eLsrOf85BuPPBxXq+6llWXkHndGhFpFabA69YKQUoVY6sL2OpXwWv6FljZUu3gp'
    'NlMY4JazyUz4t66CvYcnCw/L7x517zrL2E21/MO3WGsSlotTf3VwVBquDEpLJ70TbnA5ukrRs9WLe7gZfw3f7A4a78IVXkD8'
    '7hquTN35LsM9aP6VZPB1HbU3+uDVYsdgyfccPt3Xty/RLjX4M/gYdrDA84prx1lJlebCw/LB0Ho8rr74Mr1gGcLGgQr+edem'
    '6bU2uKq9LqdGR/5semZZg90MRuEpHLmo6ekrk5oJN9hSg+XgASzuerr71pPzA1sXl17+QktESy26qWzD8k86DRI90rINTxxL'
    'tYVp0uYWxWjp3ykNX6Y+2aTzcCq/Ce3Ozd2zTC4WL+IhHAhrZ1zpYTx8Fs+GfftsCt3XXXDg4RLMrl7KywZxaXA+H8Jtv6MC'
    'HufcIDSWA1atCakfLHGl45uViQmzhee5LhtOVw1/rh4u3ixZRnnglwEHJxTsnxqdUrqc5nNzA82ZYRSXW9aw1+cs0bBwOQu2'
    'Mug3UwTbHWs54xzqn6pP3uaLcJPkUJ8M8/4cnqfTBEem3zF0TiZdX5sMnS7cy14Zom4GEZJ5nLOFNXHpoBQ4Hf01SFVL7Caz'
    'occmXNkvR4afg7fic7iOK03IztlUg/T2SOxjra2hZZxk8IHr/WrYKBYnmi82dnBSEgY5fLR5xnKjlBx1iEdv6CCmBS7klY2Z'
    's9fMdn8xyFmPbHVcFsb2m2W00ZtsTK37jrVlKH0BnGP48j0Fx3puppjh0eLeDg/WVeFmkYbBZW1BtpUht3DZg1pa4ttZuLh+'
    'McBrnToWLrA92uVdCSXHI0Pnz7Qslhecm/ba+XWNc5Im9cvKVqPxZX12fGPKUmZZe9XNk0emg5GZJVBSGEz4NkCXOa6mZS9F'
    'YwmVUDWiQlvTpW3+72NJmvBMyfAopm8d6iS05T1/t+h2i7V0DE/bc6yI4Ay/zJA3a3F2+SVU50hKnxCuLYmurlRoPYrGcAzE'
    'ORFn2l99ZbJ2W4t6LmwjfvNChVP4Uk3DkxqO4RG1kWkneF94NEj31vy5urPkECxDN+3xP4efufflCBuCO84hBFM0ahmrOxZ9'
    '2wR7Fepw92hmMrZtSaakfj2HxsOR2SXc39SHz/XREKY5hs+d66+2vLy8Q9w8r+7ieXt8I5iVWrvUbgYVG665PYGJcaWHZ4VZ'
    'sEb4KLsx6TJcaGW+PfLmQ0tVYYkhLLY7tmUIuh9NKSVHSyq2Mx5Vbxjq3AuMdcpg2p7Dh9uTVXWzMHK0QLajQQW+08dL4fnF'
    'WC8nXB6MBZkcB1nrMaF0ypQli6LuC9PpmsYXZTWcaezeGq5nCZuZ0o/D3Ta2veZ3MDtOgkHUWqLwpiwGi8pLKxPjZd0ZMq3D'
    'jdpl6K3D8LUlXjJuI9/WMRgZRfhquoePxZj+0ujT6baMzrs3zqNl/aiFllkqnXOA92WO7uEg+Nl0KrlvruELJWt0WYLmmoZn'
    'cdXhsqE3iBHDym4t4dnls9z6DEj46d7wDGWTlDF5gZbdkE4cJXiz9uGhpWU/yvXNuNeUau+LkWduOSaDXe1VVo7ALU3CZUQi'
    'nR89ZTp+ZjisYnHq9OEyOjOYJaYBbPNj+DEwD+6owqWh6YzKyeRoywo3e7Mx5jHYFmzdW04LXE2zM2o6j3YrDelZ2nBsWq8S'
    'GoezdBgynOYMT8K4mia1DD/jWHscG11wWpF2gB9MDKedT3+WtnOwdPGq+sDFkthp8Wh5ZOU5WEwVFgeAzU9tcO2ZTmccw524'
    'L+GQugiP9t4N0+asCM/LpnKjqZMxVS+DaFvZmYtBmrqHaywee0+d1Cq4HMM7A3LqW4MDaVHdagPk0lvCmYYodmnY1LkFLI3g'
    'z6s/3xFfWbuMa58NFWsM5WadWEpl0fqGs/5VOLz3uNaPThTRFDXrDLFmi3T2OaNO4WH0W7gLwzVJbLCwWdwsdXg2n061PGXe'
    '+SuDK7m8hOeoHN4cbJQi/ss/cDIQ89Irl04mAaJ3Sxoe6/blo+eWw+dOQv952YuQWyLHR4OKczdMeKC0CwcdnUWm8z3bnh9U'
    'lgNUTgJpeCHEwmSYGYKPXbgrrOiX7b0uWNHenDSZm8cl6NZjTMPh9nLJPe1SWRzkL3lbRfs83G1l8HV2JpDbGlBrQKG71pRx'
    '5aSU9wanS/irZfg5wNQmsjw5Wa2lWHxXhacInOvSYKpUllN7h9w9wm4IpNsCcCaxtfjylwYLzlN46rbr5G7CYWVvEsidyVxb'
    '5PmmNc65Dj+cYwm0hhea9qTQVDoen9ui/Qagb1psnjj86PDVR48W0Yh+u132zV8t7qBLOBbO2pshan8yRcq1D3AAjGcvknIK'
    'wBQGuV9UhiLjBjvXsguX5/BMTAarwcZU7MwkaA65w8eyKXYJBkcXS0lkx+AYVd2yMK20+V8t66zyrWmi3hzNkym76BQOnd+Z'
    'ma72AMzCKUKXWvzPpWVJ5RaZ0xjAo7cA80Gfy6g8JzS1YXrKw6+XaQ35jL7FbSgC5pQ0vyybTLV7RLD0/aBzkX1uW4SDpmq9'
    'kWO9l0fj6xRerGoZib+8GYn7QO3Zliao+zjaozdLWkp4SbU8PPl8eS7zynBzTGU4leso99Hw8MZF6so9eeZBdmeDVG5NuXCO'
    'I3JAblfvb5xATbe8626mY8uWzMncSTBb1IHvHFH0R0vdacrD0xiWdZVzkLD2mLK9IS8u7yxlrnODJXspMlMqtg7U3CyA2oeO'
    'z+FLKgu+I+P01rBH1l3DHYam0ozjwTOfUnvncEhjCYQaas+YfPc+2/OkZYgvzaEbx9iSd2YRmM/WOxy0zBxglgdavYTXcykt'
    'yOpkszHcWwbO3ooNeWcIQJwMh93Phr12CXeg2c5z6FJoA5j2mFGGc72O5WxYfZ7bHyxp8VW4e/z25sz87hIAoy9v340Bd3gY'
    'aq65haZMQMd/LL920sALnxXqGHQjSAkBJtpvTt4U7zmgOjxhoO20k7QOF27Bmz7czbJsAlwsCV9ni2/7bJB9Rd+5kU9D0peh'
    '1GprcVRY8m5rm3YvLLvMt56dpB7vLnMqh2TepMDeULkrzS2OzHADVPPQeitP1e4e9wD/YZR1qYyuNVzD4PWqnsJTntyb2HoL'
    'EPRVnOodz4PhPKDtVoBbbQlntQZ/mSHDvTFUTbDsX1NArTJBbZt33vS2oeKw8aij4UC2LRbZmHZ5u6gVncO5pUeunh2Nnxu8'
    'bl2w9srD4Wp4vMRjERRvPllt8dx3tlpDg4XqFzFOhuel8HtaW8eH7zOV3W94Ywp9G37+5hju47oZxMLVdD/XxeRQdIbjUPtK'
    'n11MBae0Wr9Yjtrm4Y6A0nAx4akuDUU5sjb8HpKAe9neHfDKy9FVr8C7R3YPHdDRz2NeGExmQ3Fywz1MZW1JqTYAi8qwF3zW'
    'gUGZGioLnSxBqfCl59wOY8IJuV8Ot87pg2pxAm9aDB+Wp9CxN8bahuEpV4ZC42l4oSzPDXgGU/duiBQ6FQA8cMg5j2rL2S0N'
    't7013lRqJ3Q+QKmb7z45Hcn3FROx3BjaWgRCZXOB9k68vbilJq9p0Xc+Z8ez9VJSN2uhNaHB5hYeuLGUQDLV3GrCQ9GDdChM'
    'jiibJLQg3mXfuutg8KjpF4PP11DZ+hSumBycWJgib83N60BxFoglVcp2DqaxabO7N7VKy+WzryJZXoXnP13CMUb5Vq1Tm669'
    'st3EWNSmVJnellZjsykD8kgsRSQcZ8MhLUt/qEHrtQEHHXzS3nK78SWc/6vhcnDLvnT3fdZ67Im+MiRNfDasmRstqAFOeiHk'
    '5a2J+LlJEnUmTeVx5TpnllNDhfbCULGrCo+BBL9p8KX51sfbs6P68mw5RpF1JlllS7CwuGzS1rZjxv3grbaUumHj5TViCGfc'
    'DYaGm9ZnGZXCOCreEizuFdeVwSSpQmxofVdL47Pvboag4M0SmzRYuuEHjA0nPMI9htdw/1IbDgGdVWd0flz79u6/CEcvps57'
    'A4iDMctlWyt3S+RaYk69pdRMbUtVKW0H88lIqk1lPQxlHFtDNLAwZAG2ltXVm1IQcpuQ8hx0GmBQ27wtM8VmrYYfp/Ec6rbc'
    'mOhGNgrT0FXebD6nTEHpc4MdTYcwz3+CVbKsmo61cztKZfAxW6x+77nwt7vmffjFFBU/po753pne76uDVa7dUqMnMa+WDzTc'
    'nTldvkvdUPDYcKdqHlxS5Rruu2nferNsE174oluGI3VjyPRz7pvwNG3IOC5MaSGm8mqH3mG78jlRr28/2mvLUGlt3tnKMire'
    'LauDon6vYWkqe6CdEm1muC8m/ArTtDAkiYTf8GG5l9vijU8ty7ovDY6zMuuOy2uvNORsm+4aSd8JULRNbduRox81GKwaHCSe'
    '6zRbCwjWt1lbwmreA3J6Zw26zqPf3tm9AfXAnDis73LXyplUQ+x4eZG7oczlMS+DqyW6VyG1/gtMHcN29DBevKdkB/TU6e3R'
    '+A5YdroIbRWe9Z5Xx3B3eLjnPDP4OHtDGmBj8IMvD7NpZz67CX53b5ziqG/vanu/kFM/8CTinceJe6Pu8Z2qNBVF6DVqbryI'
    '7R3Rcg1xajhZX6UpSHRZht3D5F8N12iGe0DaYLR0f3My9HLXaotOvhR/gsRpX2bHxeSeN+UMlCYI29oKhOqL4QfF6bnTvnBu'
    'lKbjYkaJn4U7hgzXnBtezU+GS4Q7QxUqyxqxLBHf6qtMt2o4pQ9bf+5+asgU65xo6tnT/Mk5AGRJXTHlrRuS96rg5L0+PM2v'
    'DD8QakmD8W3x0uLpMpa31zGHAfJe0tZo7PhzS1LnbuTq6EEDlVMhxFOq3NkOZ88CLLNwf/RNJ06fDD5xQ461AWGm4W+a8hRK'
    'yylgS6wps+XqmepK+QqJX4o3FzHtPRLSwXvLNpzhcPtVl8A9eEbEOQdiGo9lIaUtw2UEfAgeuUO446gy6AmDs8HmfrSUOHFV'
    '/vJxAee6l2XB8lw5kahTgH3neDwMGfW14SKccNFluFqpN8RX88pmNYSHmvNwGGMIW+SWmyYM5UiXJ00b73eTyRIAL91b7i9e'
    'E9spsJ2ffD4kHaS5+4zQY+Y4WNsuCw/UGEqzGarBZ+H5CL0h0z7tbAm712V15aQvtIb6g7bYz+J8uKXKlu8xzw140TWau8br'
    'au6clBUT4B29n5X3E7qCnte5caTc6HCXRedAuLPliFpucNcGm1OZISnBdDeW6QhHb0kzyAxCMzfKzLbzeoYcl+1gx/gWogMy'
    'Uk8RR8PGvzs1Hy9ZOOwz3ChvqInVGMCk6Qb1pvGGUvQ9nKajl70lw6m3hL97i88pb2zpwr78Afp7eHT9uTRcVGm5FfJiCRbo'
    'UzDV0RKI8KwQB9/aDDWjP9BzxVfl3p/u2w1uIDTvzgGySv+qqssAtZw7VfCXa4KWOsupWvb6OE6i3tP02FywoXh6YxiyN9Sl'
    'NWX4GuMXlcl93Lf+gJiTEOG1IDLn9uDu4PUFvQOBcgOgCEfXfWfJ9V3kWfvVO1M9td42o6Z4Q2l4OWttimIYkt6zjU2V/4+5'
    'UxDG6H6+Za3Hi9s6WRG+4wHHzL3QqDj7TebxGLijxxpDrc7aUGpjeXu7eUgWL6lPoZaGdDzHlbkcEbdco5Cdwwsu6rVyCfcY'
    'hJ+EMx3FrcvMUpy4sBU7XC5KZzp/rU3qqzdlzrk8vG78Dh1theet14nlOJmGjenz1I9VP53bjnyzpSHLgDJ8RwyPzt1yHr9s'
    '5pxJW57jl3AQ8H7wrnjfICCuBtUZjq/uFsvaIrudHBGb+6o0ZWhb0j689TlT57Cbxz/Wajx2Ck/gCPeBZ4aTMeGhiNxwz1Hw'
    'm3l4bR/P3WjhZtotfGPcLWHcowWcOQqgCc8UOvrO3aVO1QOvd97x/xeWEn0nf15U5hy/zIuzIau+NiQrNoZaO+Gys+5M4XuL'
    'fzT8KIwttGY6DGY7otwZhGdueHdZhp+02Cy8uTFZ4frI/KdK+sp0ZqV07r8q/aZ15RQLrJZxbdZ2bzw9lrWGxK8qPGxmqjtu'
    'salNuSlF+E3mXpSpF8rdE1jQM+irNGA4oXkMH41z+Oa9WLzQjrlzyUznsA23Ut2MR+pM51s88ik8hatvwt99xyY6ZT4vvjKx'
    '05MvK99ZpoYjp4ZZzAypL37HoxNF7/wGnCPjc5uFeMz9fu3acc/3yzcj6IPEHnV21uZkG16IujZIkfBcxmV9dw1v9Rb+6j1c'
    '9t5NDpM3133yeWsb072EmQvFl2P32ji8+D2qbu2gAHitoylHbwTBDRd772V2k9DTYhm1uBHEymODDPu8CkeCL+G+sMPbjGLD'
    'IfnUUEW8MrzbhBulNqU+BtPS1uLIrEzpaaYKr4Z3fbrjagoTaNOqTatT5r2B6BZepe7d9wcskS6XCXErWIVnt9eGA5ThQc4+'
    '/PoOw/VcteUItCV52BDxN2HP1BJW8TmIWoO3QoMt7xHsXPtwKr+BnDt4tQxQNU447ujxQD+75+rvmc2H3+S+sr7OdWu+je+U'
    'sxz6s/yTu5MH0Xp1pSVl88UQOjuFG8BtuMV+C8eLToC/sPhCz6YLzU3ZFV1lCsZb4uv+w8bamsjazrvrtOYp/Se2tPP0mPr9'
    'uU4xydTiCQpPRA33UPSGag15YSi6XBiuBejC3w3XkXk4UMzDTSFD7oz36MnJdHjg/PZ6uaYyhqZIYG1yFRUGmJhbXvZm/vVO'
    'gq837p47NYmMytdjJDTaN9J2nuozuSGn5WiQkqdw34Hl6PI5HHfdDFXVdKQqs5zwTS3v+qS+c9WWN+XDycTKinvqXU06kzT8'
    'EuhwQ9pSPz1cR1hyDiqLLC3Dr4MxHAazHYozZYr78HplS3voLJLUWaKjD8db5zpzr+S+Bbh4nStbymUvbFs7hUV9vT45pefq'
    '1md8X/vScn2PU2rac6BTOwxvhhNtueW+CsuNSodwv1VnKXBmuXbUFPw22fc+NW2IeWT6qpHUtIFqW+a/OThSjCl3fseYexvL'
    'sheoby3VSZpxLQX7WQ2Vry/hGUWWbPsy3HPl+llt1Xhzi5Mpt2Rr+Cb8atk4phT/LryaT9Ydg/dNaxIM2ngeN01nqA6Rmgzt'
    'e23yPR0999S6+SueE6VOzUbPsDheMENyah786jJ4PobDYaeGmaEuseGS196yvbPwkyWeu+ZLnardGC4/9RddC2e5Mwj9d2Bl'
    'YYmvmi67P6WtJ2TaZDpgunz5URdebsp9t/OOiqs7T547gfSePXl05yUcZxnyqMMFeh8uBRw10SxDpmCryk2dLE0orzEozcxi'
    'Vi27VZxCsN4Ai17/V48BXejghD/yr4urL6/oQpsijTd0414Vtqz0r7XhECjxftPsn1LLTe8WUBh+gYbHV9yFo1196PKyPHY6'
    's6prTOdRM1sBBxOQTU1XaZ1MhzYaU2VPi2u3tnnjxhrLpekXbV7UNvdxYT0I7CuEkjWmTNDavVphWSaeHd1XpJ4LNHqdDmo4'
    'W75s0Qzr1bF/Dv4zo056gOFaHkNwtwtP2AwvB5Nbil2FY2GDVMsMJdNvyzrbveHTeB3FsmWXNwag4WT5dX0bcIpYs1+m7c1b'
    'PDY31kLRKRuDgvYo5efGNX/9/h/nsvHKFzh6dquZFZ3vRt7GUh5BT8XoQlpWpLVz0fOyaalbvy7v6GenFPlyJSnDVWKGwl1t'
    'eGVMg5P6Fu5ru4c7ru6W4s+d5cTV2XBjuWuvWs4veU/86U1fePx+mVNowBgG7H2nrLMy3CHlasq8sYmGti6DgivOhcOLWlA7'
    'OE5+i0Nf29V5MIcTGfJU0nZS/5evJdbGzDENPxm+zIahmpqhTtHVEBdsDCj8nQiPoV5Lbiv/Wl5zS+rLYIebTph5boJRY22p'
    'GuYNDJSmBLTSYv63lii6reCRwbg46ws9cpOAPeWmU1XXvvSXLtJB6THh05fkmbmoyicEGydK1vlskpMTNO7S3OvUP7mpqh4H'
    'jHO2NLdXyWm8hdZ6w8IYr4nXWC81lDGwVIktDRcOtYZShlV4iY3GcNopaxvLFQaWs1Gp924v5xb2rklNJ4BNQneEJAEG++XN'
    'bmBTYMPrQ2os6YGGAxOjf8k5u+4vYaUDnZ48haY1LUanpKZ3YDInLtovO3jG74ebwYNYc8Sc9w4kB4SOLQT8SkvgrLn4XGxO'
    'iYKTN1Sp9cJlGe52zjD5FlzWOiV+i9SzJpwP1OEe89KQ4B2eeeSrQh6eadi+8Sby2nJ3jCk/pLBUM61MEt2SEH4yaYsxBGOq'
    'k9iFg+i7qVR0aoHc4ZHvyidnTZeYVKb4xdXSdGdJCOrCb52/64SE0qu/nZpoo5s0AA876i1vrWeW084f9HKPLZ+WkUtTOwGY'
    '8OwVw8V+vaWEVD8AaF/egZNIZriI+2gLBFYG93rhXTeF5fBIYfFTlZZ4ZGlho7W83FiEsskpaLtwwnQzgSNYUsvLvgG5WRJI'
    'HBzQFAFHU3WlhbrzOeGc5KtssD18YveUO+ECb4XJk1sYue6MP/DdCfni3CbhT/F1wHnp9YRqr+yym7VUPtmD515njZhvPkZy'
    'Q0lyg9Co3lp7wVZQyXKTktfGcu7rvJmumGOwX5tO4Znu27K8bCow0VsseFMel0lGe8WRk/pTWeBcYxCkmc0xUPjwR+aEazpL'
    'wMkLyU7uRQS29y95ExClUvKnb7xRpFOqD8L5BtRJQitvXp6cmz09Bt1L6tS0MpYcyAbNtxjrdfKIz8vsvB+ONg6GsNIxOI59'
    'fOMtNFn4NYW95ZRgZbumsFxeHtoKvmaWK5AslQ8yi7HqA36mm5qvlgTYq+m8+tVkYb+DKi3wsDFKztTytv/iXsfO9gHVzIk4'
    'tZbXx7CNb+RPjkF+zr2RPGc8M0+y/nNnMN6fOzfy5eM/d6w5b7rZycHZTV0WnpNKzi88blJHEvSGMznL101qkyX8kMEyBL0Y'
    '8FBnCIHfwhGca9sa6lxWFnidtV1uuXrxUltcmbZyVJbyFia3YGU6Tdr60yF7nctT+JLrGqewoj/OdHIKYhQeJ3LpIJ9Lbshs'
    'vPr8cO7p3/DKT304AFuepi8ITks5hEdEDm8tUtWH1wWpw8vBZ5Ya7+GRfkMxoTz81bQ1XA1kuIy4N/iEl9WOpWSt1pk3SzpV'
    'a3HatqYovcUhYKnPl5pyniy5ArWlZZ8/z3Ch/TsnuD0DfbdATsdNOCYxBCQuaOO7HX8V4Ow9aeXiu07aiU4c/RFV5xdt2nii'
    '8we9Nzx5ruFW3CHc2XN+Y+WdZcuwfXOR5jFZKLPkfPeGlzNDZN5jul0sp/86S4aCY0JWvSV4vuxq0Te6Wu6Jy03ZqqZDtqZk'
    'VVMqlqVqY20R8r3lMhOLFzc1iFafB+UWLOHdAwZew1/FgvKyDCkB60TV82vqzUzVRfd7T1jo5Z1TA4P49d0T6WTM+cz/0jng'
    '6ImGZ40Dg0vPbj6lheWwcl8Uruz0zh3L12ChfwyHIMf/z376nOnfz3zOZ/4fNFZCjQ=="}}'
)

RULE = "=" * 60

# Characters that act on a terminal instead of showing (C0 but tab and newline, DEL, C1, bidi
# controls, line separators, lone surrogates): servefuzz.sanitize.visible's set, which a test
# keeps equal to this one. Whatever the server answers is printed with them made visible.
INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def visible(text):
    """`text` with every control character written as its escape (ESC becomes the text \\x1b)."""
    def escape(m):
        code = ord(m.group())
        return "\\x%02x" % code if code < 0x100 else "\\u%04x" % code
    return INVISIBLE.sub(escape, str(text))


class ReproError(Exception):
    """The server cannot be used at all; main() prints one line and exits 2."""


class Outcome:
    """How one request ended: a status, its choices {index: (token ids, text)}, an error."""

    def __init__(self, rid, status, choices=None, error="", http_status=None, end=0.0, cached=None):
        self.rid, self.status, self.error, self.http_status = rid, status, error, http_status
        self.choices = choices or {}
        self.end = end
        self.cached = cached  # the prompt tokens the server says it served from its cache


class Server:
    """The target: where it is, how long to wait, and how to empty its prefix cache."""

    def __init__(self, base_url, timeout_s):
        url = urllib.parse.urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ReproError("--base-url must look like http://127.0.0.1:30000, got %r" % base_url)
        self.base_url, self.url, self.timeout_s = base_url.rstrip("/"), url, timeout_s

    def connection(self, timeout_s=None):
        cls = http.client.HTTPSConnection if self.url.scheme == "https" else http.client.HTTPConnection
        return cls(self.url.hostname, self.url.port, timeout=timeout_s or self.timeout_s)

    def call(self, method, path):
        """One small request outside the timed part: (status, text)."""
        conn = self.connection(30)
        try:
            conn.request(method, self.url.path.rstrip("/") + path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as e:
            raise ReproError("cannot reach %s: %s" % (self.base_url, str(e) or type(e).__name__))
        finally:
            conn.close()

    def call_json(self, method, path):
        status, text = self.call(method, path)
        try:
            return status, json.loads(text) if status == 200 else None
        except ValueError:
            raise ReproError("%s%s answered something that is not JSON: %r" % (self.base_url, path, text[:60]))

    def flush(self):
        """Empty the prefix cache; False when the engine offers no flush. Busy servers refuse
        a flush while requests run, so it is retried for a few seconds."""
        kind = FINDING["flush"]
        if kind is None:
            return False
        if kind == "llamacpp":
            status, props = self.call_json("GET", "/props")
            slots = props.get("total_slots", 0) if isinstance(props, dict) else 0
            for slot in range(slots):
                status, _ = self.call("POST", "/slots/%d?action=erase" % slot)
                if status in (404, 501):
                    return False  # started without --slot-save-path
            return bool(slots)
        path = "/flush_cache" if kind == "sglang" else "/reset_prefix_cache"
        for _ in range(50):
            if kind == "sglang":
                status, _ = self.call("POST", path)
                done = status == 200
            else:
                status, reply = self.call_json("POST", path)
                done = isinstance(reply, dict) and reply.get("success") is True
            if status == 404:
                return False
            if done:
                return True
            time.sleep(0.1)
        raise ReproError("%s%s still refused after 50 tries (HTTP %d)" % (self.base_url, path, status))


def first_model(server):
    status, models = server.call_json("GET", "/v1/models")
    try:
        return models["data"][0]["id"]
    except (TypeError, KeyError, IndexError):
        raise ReproError("%s/v1/models (HTTP %d) names no model; pass --model" % (server.base_url, status))


# --- one request -------------------------------------------------------------------------


class Exchange:
    """One request on its own connection: `send` writes it (at its offset, from the dispatcher),
    `answer` reads the reply (on a thread of its own). Every way it can end becomes an Outcome."""

    def __init__(self, server, req, model, t0):
        self.server, self.req, self.t0 = server, req, t0
        body = dict(req["body"])
        if "model" in body and req.get("adapter") is None:  # under a LoRA adapter, the adapter is the model
            body["model"] = model
        self.body = body
        self.conn = server.connection()
        self.cut = threading.Event()
        self.timer = None
        self.outcome = None

    def send(self):
        if self.req["cancel_after_ms"] is not None:
            # Cut the connection at the deadline, as servefuzz does: the server sees the client go.
            self.timer = threading.Timer(self.req["cancel_after_ms"] / 1000.0, self.cut_connection)
            self.timer.start()
        try:
            path = self.server.url.path.rstrip("/") + FINDING["path"]
            self.conn.request("POST", path, body=json.dumps(self.body).encode(),
                              headers={"Content-Type": "application/json"})
        except (OSError, http.client.HTTPException) as e:
            self.outcome = self.ended("cancelled" if self.cut.is_set() else "connection_error", str(e) or type(e).__name__)

    def answer(self):
        if self.outcome is None:
            self.outcome = self.read()
        if self.timer is not None:
            self.timer.cancel()
        self.conn.close()

    def read(self):
        try:
            resp = self.conn.getresponse()
            if resp.status >= 300:
                text = resp.read().decode("utf-8", "replace")
                return self.ended("http_error", "HTTP %d: %s" % (resp.status, text[:200]), resp.status)
            chunks = stream_chunks(resp) if self.body.get("stream") else [json.loads(resp.read())]
            if self.cut.is_set():
                return self.ended("cancelled", "cut by the client")
            return Outcome(self.req["id"], "ok", choices=parse(chunks), http_status=resp.status, end=clock(self.t0),
                           cached=cached_tokens(chunks))
        except InBandError as e:
            return self.ended("http_error", "in-band error: %s" % e)
        except socket.timeout:
            return self.ended("cancelled" if self.cut.is_set() else "timeout", "no answer in time")
        except (OSError, http.client.HTTPException) as e:
            return self.ended("cancelled" if self.cut.is_set() else "connection_error", str(e) or type(e).__name__)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
            status = "cancelled" if self.cut.is_set() else "malformed"
            return self.ended(status, "%s: %s" % (type(e).__name__, e))

    def ended(self, status, error, http_status=None):
        return Outcome(self.req["id"], status, error=error, http_status=http_status, end=clock(self.t0))

    def cut_connection(self):
        self.cut.set()
        if self.conn.sock is not None:
            try:
                self.conn.sock.shutdown(socket.SHUT_RDWR)  # wakes the reading thread up
            except OSError:
                pass


def stream_chunks(resp):
    chunks = []
    for line in resp:
        line = line.strip()
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload and payload != b"[DONE]":
                chunks.append(json.loads(payload))
    return chunks


class InBandError(Exception):
    """An error the server reported inside a 200 answer."""


def parse(chunks):
    """{choice index: (token ids, text)} from the answer (or its stream chunks)."""
    ids, texts = {}, {}
    for chunk in chunks:
        if isinstance(chunk, dict) and "error" in chunk:
            raise InBandError(json.dumps(chunk["error"])[:200])
        dialect = FINDING["dialect"]
        if dialect == "openai":
            for c in chunk.get("choices") or ():
                i = int(c["index"])
                new = c.get("token_ids")
                if new is None:  # token ids spelled "token_id:N" (vLLM's return_tokens_as_token_ids)
                    new = [int(t.split(":", 1)[1]) for t in (c.get("logprobs") or {}).get("tokens") or ()]
                ids.setdefault(i, []).extend(int(t) for t in new)
                texts[i] = texts.get(i, "") + (c.get("text") or "")
            continue
        for position, item in enumerate(chunk if isinstance(chunk, list) else [chunk]):
            if "error" in item:
                raise InBandError(json.dumps(item["error"])[:200])
            i = int(item.get("index", position))
            if dialect == "llamacpp":
                ids.setdefault(i, []).extend(int(t) for t in item.get("tokens") or ())
                texts[i] = texts.get(i, "") + (item.get("content") or "")
                continue
            meta = item["meta_info"]  # sglang: a chunk is cumulative unless it is shorter
            reason = meta.get("finish_reason")
            if isinstance(reason, dict) and reason.get("type") == "abort":
                raise InBandError("aborted: %s" % reason.get("message"))  # a cut answer, not a finished one
            lps = meta.get("output_token_logprobs")
            new = item.get("output_ids")
            if new is None:
                new = [t[1] for t in lps or ()]
            new = [int(t) for t in new]
            produced = meta.get("completion_tokens")
            whole = produced is None or len(new) == produced
            if whole:
                ids[i] = new
            else:
                ids.setdefault(i, []).extend(new)
            # The older --stream-output cut only output_ids: the text goes with the logprob lists.
            if lps:
                whole = produced is None or len(lps) == produced
            texts[i] = (item.get("text") or "") if whole else texts.get(i, "") + (item.get("text") or "")
    return {i: (tuple(ids[i]), texts.get(i, "")) for i in ids}


def cached_tokens(chunks):
    """The cached prompt tokens the answer reports (the last report wins), or None."""
    found = None
    for chunk in chunks:
        if not isinstance(chunk, (dict, list)):
            continue
        if FINDING["dialect"] == "openai":
            usage = chunk.get("usage") if isinstance(chunk, dict) else None
            details = (usage or {}).get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                found = int(details["cached_tokens"])
            continue
        for item in chunk if isinstance(chunk, list) else [chunk]:
            meta = item.get("meta_info") if isinstance(item, dict) else None
            if isinstance(meta, dict) and meta.get("cached_tokens") is not None:
                found = int(meta["cached_tokens"]) if found is None else min(found, int(meta["cached_tokens"]))
    return found


def clock(t0):
    return (time.perf_counter() - t0) * 1000.0


# --- one run -----------------------------------------------------------------------------


def run_requests(server, requests, model):
    """Send every request at its offset_ms, in the finding's order (so requests due at the same
    moment leave in the order servefuzz sent them), and read all answers concurrently."""
    t0 = time.perf_counter()
    sent = []  # (request, its exchanges: one per copy)
    readers = []
    for req in requests:
        delay = t0 + req["offset_ms"] / 1000.0 - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        # A request with copies > 1 (n > 1 on vLLM, which rejects it at temperature 0) goes out
        # as that many requests at once; copy k is choice k.
        copies = [Exchange(server, req, model, t0) for _ in range(req["copies"])]
        for ex in copies:
            ex.send()
            reader = threading.Thread(target=ex.answer, daemon=True)
            reader.start()
            readers.append(reader)
        sent.append((req, copies))
    for reader in readers:
        reader.join()
    return [merge(req, [ex.outcome for ex in copies]) for req, copies in sent]


def merge(req, outcomes):
    if len(outcomes) == 1:
        return outcomes[0]
    bad = [o for o in outcomes if o.status != "ok"]
    if bad:
        return bad[0]
    choices = {k: o.choices[0] for k, o in enumerate(outcomes)}
    cached = [o.cached for o in outcomes if o.cached is not None]
    return Outcome(req["id"], "ok", choices=choices, end=max(o.end for o in outcomes), cached=min(cached) if cached else None)


# --- judging -----------------------------------------------------------------------------


def judge(runs):
    """Requests that diverged (with their variants), stayed stable, or could not be judged."""
    table = {}  # rid -> choice -> [(key, ids, text)]
    for outcomes in runs:
        for o in outcomes:
            if o.status == "ok":
                for i, (ids, text) in o.choices.items():
                    table.setdefault(o.rid, {}).setdefault(i, []).append((ids or text, ids, text))
    diverged, stable, undetermined = [], [], []
    for rid in sorted({o.rid for outcomes in runs for o in outcomes}):
        per_choice = table.get(rid, {})
        if not per_choice or min(len(v) for v in per_choice.values()) < 2:
            undetermined.append(rid)
            continue
        variants = {i: group(outs) for i, outs in sorted(per_choice.items())}
        if all(len(v) == 1 for v in variants.values()):
            stable.append(rid)
        else:
            diverged.append((rid, {i: v for i, v in variants.items() if len(v) > 1}))
    return diverged, stable, undetermined


def group(outs):
    """[(ids, text, count)], most frequent first, ties in the order first seen."""
    counts, first = {}, {}
    for key, ids, text in outs:
        counts[key] = counts.get(key, 0) + 1
        first.setdefault(key, (ids, text))
    return sorted(((first[k][0], first[k][1], c) for k, c in counts.items()), key=lambda v: -v[2])


def failures(runs):
    """Crash, hang, 5xx and malformed answers, as servefuzz's liveness oracle names them."""
    seen = {}
    for outcomes in runs:
        considered = sorted((o for o in outcomes if o.status != "cancelled"), key=lambda o: o.end)
        tail = []
        for o in reversed(considered):
            if o.status != "connection_error":
                break
            tail.insert(0, o)
        if len(tail) >= 2 or (tail and len(tail) == len(considered)):
            seen.setdefault(("crash", tail[0].rid), []).append(tail[0].error)
        for o in outcomes:
            kind = {"timeout": "hang", "malformed": "malformed"}.get(o.status)
            if o.status == "http_error" and (o.http_status is None or o.http_status >= 500):
                kind = "server-error"
            if kind:
                seen.setdefault((kind, o.rid), []).append(o.error)
    return seen


def preview(ids, text, width=36):
    if text:
        cut = text[:width] + ("..." if len(text) > width else "")
        return "'" + cut.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
    shown = ", ".join(str(t) for t in ids[:8])
    return "[%s%s]" % (shown, ", ..." if len(ids) > 8 else "")


# --- servefuzz.terms.first_difference, verbatim: where two answers first differ -------------
def first_difference(a: Sequence[Hashable], b: Sequence[Hashable]) -> int | None:
    """The first position at which `a` and `b` differ; None when they are equal.

    When one is a strict prefix of the other they differ at the shorter one's length: the first
    position that one of them has and the other lacks (an output that stopped there against one
    that went on). Token ids and text alike (text differs character by character).

    >>> first_difference([5, 7, 9], [5, 8, 9])
    1
    >>> first_difference([5, 7], [5, 7, 9, 11])  # one a prefix of the other
    2
    >>> first_difference([], [3])
    0
    >>> first_difference([5, 7], [5, 7]) is None
    True
    >>> first_difference("abc", "abd")
    2
    """
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))



def id_block(ids):
    if not ids:
        return []
    return textwrap.wrap(", ".join(ids), width=76, initial_indent="    ", subsequent_indent="    ",
                         break_on_hyphens=False)


def reproduction(runs, alone, probes=(), died=()):
    """(runs that reproduced the finding, requests that diverged in some run): the rule of
    servefuzz.oracles.judge.reproduction. `runs` are the loaded runs' outcomes, `alone` each
    expected request's reference outcome by id, `probes` [(run index, outcome)] of the
    cache-state probes, `died` the runs after which the server --serve started was dead (a
    crash whose requests got 5xx answers before the server went)."""
    expected = FINDING["expected"]
    failure = FINDING["expect_failure"]
    if failure is not None:
        hits = {k for k, run in enumerate(runs) if any(kind == failure for kind, _ in failures([run]))}
        if failure == "crash":
            hits |= {k for k in died if k < len(runs)}
        return hits, []
    # Each choice has its own reference: at temperature 0 they all agree; the choices of a
    # seeded draw each draw their own.
    references = {}
    for rid in expected:
        ref = alone.get(rid)
        if ref is not None and ref.status == "ok" and ref.choices:
            references[rid] = {i: answer(c) for i, c in sorted(ref.choices.items())}
            continue
        # No reference alone: the most frequent answer over the runs stands in, choice by
        # choice (ties to the first seen).
        per_choice = {}
        for run in runs:
            for o in run:
                if o.rid == rid and o.status == "ok":
                    for i, choice in o.choices.items():
                        per_choice.setdefault(i, []).append(answer(choice))
        if per_choice:
            references[rid] = {i: max(keys, key=keys.count) for i, keys in sorted(per_choice.items())}
    hits, diverged = set(), []
    allowed = FINDING.get("expect_cached") or {}
    for k, run in enumerate(runs):
        for o in run:
            if o.rid in allowed and o.status == "ok" and o.cached is not None and o.cached > allowed[o.rid]:
                hits.add(k)
                if o.rid not in diverged:
                    diverged.append(o.rid)
    for k, o in [(k, o) for k, run in enumerate(runs) for o in run] + list(probes):
        if o.rid in references and o.status == "ok" and k < len(runs):
            refs = references[o.rid]
            first = next(iter(refs.values()))  # a choice the reference lacks is held to its first
            if any(answer(choice) != refs.get(i, first) for i, choice in o.choices.items()):
                hits.add(k)
                if o.rid not in diverged:
                    diverged.append(o.rid)
    return hits, [rid for rid in expected if rid in diverged]


def violations(runs, alone):
    """[(request id, where, text)] of every answer that is no prefix of any of its request's
    choices: it broke its own structured-output constraint whatever the engine's numerics (a
    strict prefix that stopped early is let pass here; servefuzz's oracle, which reads the
    finish reason, holds a finished answer to a whole choice)."""
    bound = FINDING.get("choices") or {}
    seen = [("alone", o) for o in alone.values()] + [("run %d" % k, o) for k, run in enumerate(runs) for o in run]
    found = []
    for where, o in seen:
        if o.rid in bound and o.status == "ok":
            for i, (_, text) in sorted(o.choices.items()):
                if not any(c.startswith(text) for c in bound[o.rid]):
                    found.append((o.rid, where if not i else "%s/c%d" % (where, i), text))
    return found


def answer(choice):
    """What two answers are compared by: the token ids, or the text when an engine gives none."""
    ids, text = choice
    return ("ids", tuple(ids)) if ids else ("text", text)


def expectation(expected, failure):
    """What the replay looks for, in words: an isolation breach is a cached-token count, not a
    divergence of outputs."""
    if FINDING.get("expect_cached"):
        return "%s to report cached tokens its own cache salt does not allow" % expected
    return "%s to diverge" % expected if expected else "%s again" % failure


def report(runs, alone, probes, n_runs, died=()):
    """The replay block of servefuzz's report (and of the seed report it is shaped after)."""
    expected = FINDING["expected"]
    references = [o for o in alone.values()]
    diverged, stable, undetermined = judge(runs + ([references] if references else []))
    seen = failures(runs)
    failure = FINDING["expect_failure"]
    hits, reproduced = reproduction(runs, alone, probes, died)
    lines = [
        RULE,
        "  Finding  : %s" % FINDING["name"],
        "  Bug      : %s" % FINDING["bug"],
        "  Expect   : %s" % expectation(expected, failure),
        "  Runs     : %d" % n_runs,
        RULE,
        "",
        "  [DIVERGED \u2014 %d/%d requests non-deterministic]" % (len(diverged), len(FINDING["requests"])),
    ]
    for rid, per_choice in diverged:
        lines += ["", "    %s  %s" % (rid, "\u2713 (expected)" if rid in expected else "(unexpected)")]
        for i, variants in per_choice.items():
            total = sum(v[2] for v in variants)
            prefix = "choice %d " % i if len(per_choice) > 1 or i else ""
            for k, (ids, text, count) in enumerate(variants, 1):
                lines.append("      %svariant %d: %s  (%d/%d)" % (prefix, k, preview(ids, text), count, total))
            unit = "token" if variants[0][0] else "character"  # text-only engines give no ids
            where = min(first_difference(variants[0][0] or variants[0][1], v[0] or v[1]) for v in variants[1:])
            lines.append("      first difference at %s %d" % (unit, where))
    lines += ["", "  [STABLE \u2014 %d requests consistent across all runs]" % len(stable)] + id_block(stable)
    if undetermined:
        lines += ["", "  [UNDETERMINED \u2014 %d requests without two determinate answers]" % len(undetermined)]
        lines += id_block(undetermined)
    if seen:
        lines += ["", "  [FAILURES \u2014 %d]" % len(seen)]
        for (kind, rid), errors in sorted(seen.items()):
            lines.append("    %s: %s in %d/%d runs (%s)" % (kind, rid, len(errors), len(runs), (errors[0] or "")[:80]))
    broken = violations(runs, alone)
    if FINDING.get("choices"):
        lines += ["", "  [CONSTRAINTS — %d answers outside their own choices]" % len(broken)]
        for rid, where, text in broken[:20]:
            lines.append("    %s (%s): %s is none of its choices" % (rid, where, preview((), text)))
    k, n = len(hits), max(len(runs), len(hits))
    lines += [""] + plain_words(runs, alone, hits)
    decision = decide(k, n)
    confirmed = decision == REPRODUCED
    if expected:
        what = "breaches" if FINDING.get("expect_cached") else "divergences"
        tally = "%d/%d expected %s reproduced" % (len(reproduced), len(expected), what)
    else:
        tally = "%s %s again" % (failure, "seen" if hits else "not seen")
    result = {REPRODUCED: "CONFIRMED", NOT_REPRODUCED: "NOT REPRODUCED"}.get(decision, "UNDECIDED")
    lines += ["", "  RESULT: %s  (in %d/%d replays; %s)" % (result, k, n, tally),
              "  RATE   : %s (sequential test, each error <= 1%%)" % REPRODUCTION.describe(k, n), RULE]
    return visible("\n".join(lines) + "\n"), confirmed


def others():
    count = FINDING.get("others", 0)
    return "with the other request" if count == 1 else "with the other %d requests" % count


def shown(choice):
    ids, text = choice
    return "%s %s" % (preview(ids, ""), preview((), text)) if ids and text else preview(ids, text)


def plain_words(runs, alone, hits):
    """What went wrong, in the words of a bug report: what each expected request answers alone,
    what it answered with the other requests, and in how many runs it was wrong."""
    lines = ["  IN PLAIN WORDS"]
    n = len(runs)
    failure = FINDING["expect_failure"]
    if failure is not None:
        lines.append("    expected: every request answered, the server up")
        lines.append("    actual (%s): %s in %d/%d runs" % (others(), {"crash": "the server died"}.get(failure, failure), len(hits), n))
        return lines
    allowed = FINDING.get("expect_cached") or {}
    for rid in FINDING["expected"]:
        if rid in allowed:
            seen = [o.cached for run in runs for o in run if o.rid == rid and o.status == "ok" and o.cached is not None]
            wrong = sum(1 for run in runs if any(o.rid == rid and o.status == "ok" and o.cached is not None
                                                 and o.cached > allowed[rid] for o in run))
            lines.append("    %s: expected: at most %d prompt tokens served from cache (what its own cache salt allows)"
                         % (rid, allowed[rid]))
            lines.append("    %s  actual (%s): %s cached tokens; wrong in %d/%d runs"
                         % (" " * len(rid), others(), ", ".join(str(c) for c in sorted(set(seen))) or "none reported", wrong, n))
            continue
        ref = alone.get(rid)
        reference = ref.choices.get(0) if ref is not None and ref.status == "ok" else None
        answers = [o.choices[0] for run in runs for o in run if o.rid == rid and o.status == "ok" and 0 in o.choices]
        if reference is None and answers:
            keys = [answer(a) for a in answers]
            reference = answers[keys.index(max(keys, key=keys.count))]
            said = "expected (the most frequent answer; no alone reference)"
        else:
            said = "expected (alone)"
        wrong = [a for a in answers if reference is not None and answer(a) != answer(reference)]
        runs_wrong = sum(1 for run in runs if any(o.rid == rid and o.status == "ok" and reference is not None
                                                  and any(answer(c) != answer(reference) for c in o.choices.values())
                                                  for o in run))
        lines.append("    %s: %s: %s" % (rid, said, shown(reference) if reference is not None else "no answer"))
        if wrong:
            common = max(wrong, key=lambda a: sum(1 for b in wrong if answer(b) == answer(a)))
            where = first_difference(answer(reference)[1], answer(common)[1])
            if where and answer(common)[0] == "ids":
                # Past the preview's first tokens the two look alike: show where they part.
                lines.append("    %s  actual (%s): the same %d tokens, then %s where alone gives %s"
                             % (" " * len(rid), others(), where, preview(common[0][where:], ""),
                                preview(reference[0][where:], "")))
            else:
                lines.append("    %s  actual (%s): %s, from %s %d on"
                             % (" " * len(rid), others(), shown(common), "token" if answer(common)[0] == "ids" else "character", where))
        else:
            lines.append("    %s  actual (%s): the same" % (" " * len(rid), others()))
        lines.append("    %s  wrong in %d/%d runs" % (" " * len(rid), runs_wrong, n))
    return lines


# --- --write-model: the tiny model, numpy alone ----------------------------------------------


def write_the_model(folder):
    files = FINDING.get("model_files")
    if not files:
        raise ReproError("this finding ran on a model servefuzz did not build (%s): serve that one"
                         % (FINDING.get("model") or "the server's own"))
    text = None
    if files["format"] == "hf":
        if not files.get("tokenizer"):
            raise ReproError("this script was made without the model's tokenizer; run servefuzz report again")
        text = zlib.decompress(base64.b64decode(files["tokenizer"])).decode("utf-8")
    try:
        written = write_model(Path(folder), files["format"], seed=files["seed"], dtype=files["dtype"],
                              adapters=files["adapters"], tokenizer_json=text)
    except (RuntimeError, OSError) as e:
        raise ReproError(str(e))
    for path in written:
        print(path)
    print("wrote servefuzz's tiny %s model (seed %d, %s%s) under %s"
          % (files["format"].upper() if files["format"] == "gguf" else "Hugging Face", files["seed"], files["dtype"],
             ", and its LoRA adapters in lora/" if files["adapters"] else "", folder), file=sys.stderr)


# --- --serve: the user's own server command --------------------------------------------------


class Served:
    """The server started with the command given to --serve (never one read from the finding),
    in a process group of its own, its output in a log file, stopped with it."""

    def __init__(self, command, log_path, server, start_timeout_s):
        self.argv = shlex.split(command)
        if not self.argv:
            raise ReproError("--serve needs a command")
        self.log_path, self.server, self.start_timeout_s = log_path, server, start_timeout_s
        self.proc = None
        self.deaths = []  # (exit status, the log's traceback or tail) of every death seen

    def start(self):
        with open(self.log_path, "ab") as log:
            log.write(("\n=== repro.py --serve: %s\n" % " ".join(shlex.quote(a) for a in self.argv)).encode())
            try:
                self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             start_new_session=True)
            except OSError as e:
                raise ReproError("--serve: cannot start %s: %s" % (self.argv[0], e))
        deadline = time.monotonic() + self.start_timeout_s
        url = self.server.base_url + FINDING.get("health", "/health")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ReproError("the server exited with status %s before it answered; its log: %s\n%s"
                                 % (self.proc.returncode, self.log_path, self.last_words()))
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        raise ReproError("the server did not answer %s within %d s; its log: %s" % (url, self.start_timeout_s, self.log_path))

    def dead(self, wait_s=5.0):
        """Whether the server died (waiting a little: a crash takes its processes down slowly);
        a death is recorded once, with its traceback."""
        if self.proc is None:
            return False
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            return False
        self.deaths.append((self.proc.returncode, self.last_words()))
        self.stop()
        self.proc = None
        return True

    def last_words(self):
        """This start's log from its first Python traceback on, whole (a crash report needs the
        decisive one, and an engine of several processes logs the cause first and its
        consequences after), at most 400 lines; without one, its last 40 lines."""
        try:
            text = Path(self.log_path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        text = text.rsplit("\n=== repro.py --serve: ", 1)[-1]
        lines = text.splitlines()
        starts = [i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]
        if starts:
            return "\n".join(lines[starts[0]:][:400])
        return "\n".join(lines[-40:])

    def stop(self):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except OSError:
            pass
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # what outlived the TERM (workers of the group)
        except OSError:
            pass


# --- main --------------------------------------------------------------------------------


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a whole number, got %r" % text)
    if value < 1:
        raise argparse.ArgumentTypeError("expected at least 1, got %d" % value)
    return value


def main(argv=None):
    p = argparse.ArgumentParser(description="Replay servefuzz finding %s." % FINDING["name"])
    p.add_argument("--base-url", default=FINDING["base_url"], help="server to replay against (default %(default)s)")
    p.add_argument("--runs", type=positive_int, default=10, help="loaded runs (default 10)")
    p.add_argument("--timeout", type=positive_int, default=120, help="seconds to wait for one answer (default 120)")
    p.add_argument("--model", help="model name for /v1/completions (default: the finding's, else the server's first)")
    p.add_argument("--write-model", metavar="DIR",
                   help="write the tiny model the finding ran on (and its LoRA adapters) under DIR with numpy, then exit")
    p.add_argument("--serve", metavar="COMMAND",
                   help="start the server with COMMAND (split as a shell would, run without one) before the replay, "
                        "and again after it dies; its output goes to --serve-log")
    p.add_argument("--serve-log", default="server.log", help="where --serve's server writes (default %(default)s)")
    p.add_argument("--start-timeout", type=positive_int, default=300, help="seconds --serve waits for the server (default 300)")
    args = p.parse_args(argv)
    if args.write_model:
        try:
            write_the_model(args.write_model)
        except ReproError as e:
            print("repro.py: error: %s" % visible(e), file=sys.stderr)
            return 2
        return 0
    requests = FINDING["requests"]
    by_id = {r["id"]: r for r in requests}
    runs, alone, probes = [], {}, []
    served, died = None, set()
    try:
        server = Server(args.base_url, args.timeout)
        if args.serve:
            served = Served(args.serve, args.serve_log, server, args.start_timeout)
            served.start()
        model = args.model or FINDING["model"]
        if model is None and any("model" in r["body"] for r in requests):
            model = first_model(server)
        if not server.flush():
            print("repro.py: note: this engine offers no cache flush; the runs share its cache", file=sys.stderr)
        for rid in FINDING["expected"] if FINDING["expect_failure"] is None else ():
            req = by_id.get(rid)
            if req is not None and req["cancel_after_ms"] is None:
                server.flush()
                alone[rid] = run_requests(server, [dict(req, offset_ms=0.0)], model)[0]
        for i in range(args.runs):
            if served is not None and served.proc is None:
                served.start()  # a fresh server after the last one died
            server.flush()
            runs.append(run_requests(server, requests, model))
            for probe in FINDING["probes"]:
                # warm: again, right after the loaded run; primed: flush, bare prefix, again
                req = dict(by_id[probe["id"]], offset_ms=0.0, cancel_after_ms=None)
                probes.append((i, run_requests(server, [req], model)[0]))
                server.flush()
                run_requests(server, [dict(req, id=req["id"] + "~prefix", body=probe["prime"], copies=1)], model)
                probes.append((i, run_requests(server, [req], model)[0]))
            if served is not None and served.dead(wait_s=15.0 if any(o.status != "ok" for o in runs[-1]) else 0.1):
                died.add(i)  # the server is gone after this run: it crashed, whatever its answers said
            print("run %d/%d done" % (i + 1, args.runs), file=sys.stderr)
    except ReproError as e:
        if not runs:
            if served is not None:
                served.stop()
            print("repro.py: error: %s" % visible(e), file=sys.stderr)
            return 2
        # The server went away mid-replay (a crash finding does exactly that): judge what ran.
        print("repro.py: %s; judging the %d runs that ended" % (visible(e), len(runs)), file=sys.stderr)
    finally:
        if served is not None:
            served.stop()
    text, confirmed = report(runs, alone, probes, args.runs, died)
    sys.stdout.write(text)
    if served is not None and served.deaths:
        status, words = served.deaths[-1]
        sys.stdout.write(visible("  The server (--serve) died %d time%s in %d runs; the last time with exit status %s "
                                 "(log %s). Its last words:\n\n%s\n" % (len(served.deaths), "" if len(served.deaths) == 1 else "s",
                                                                           len(runs), status, args.serve_log, words)))
    return 0 if confirmed else 1


if __name__ == "__main__":
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="replace")  # the report's dashes and ticks on any terminal
    sys.exit(main())
