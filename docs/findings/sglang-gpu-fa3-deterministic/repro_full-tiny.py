#!/usr/bin/env python3
"""Standalone reproduction of servefuzz finding finding_00101_1610553322.json (standard library only).

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

# --- servefuzz.models.files and .llama, verbatim: the model the finding ran on, numpy alone ---
"""The file formats of servefuzz's tiny models, written with numpy and the standard library alone:
GGUF v3 as gguf-py lays it out, safetensors as the safetensors package writes it, the Hugging Face
folder's JSON files, and the random streams every architecture draws from.

Every architecture module writes through these, and every repro.py embeds this module's source
verbatim with `models.llama`'s (`reports/repro.py`), so a maintainer rebuilds the exact model a
finding ran on without servefuzz. Nothing here imports servefuzz, and numpy only when a model is
written: repro.py's replay runs on the standard library alone.

    >>> spell_bytes("\u0120a\u00c3")
    b' a\\xc3'
"""


import json
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    import numpy as np
except ImportError:  # repro.py embeds this module: a replay needs no numpy, only --write-model does
    np = None  # type: ignore[assignment]

__all__ = ["HF_SPECIALS", "spell_bytes"]

HF_SPECIALS = ("<s>", "</s>", "<pad>")  # ids 0, 1, 2: the trainer numbers specials first
# Scale of the ordinary tokens' output rows: the final norm makes the hidden state unit-RMS, so
# logits spread with about this standard deviation, which puts the best of them far above the
# quiet tokens' 0 and keeps greedy choices away from near-ties in float32.
LOGIT_SCALE = 3.0


def need_numpy() -> None:
    if np is None:
        raise RuntimeError("writing the model needs numpy (pip install numpy); the replay itself does not")


# --- the random streams ----------------------------------------------------------------------


def made_up_words(rng: Any, count: int) -> list[str]:
    """A made-up lexicon of pronounceable words, so BPE finds plenty of merges."""
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
    return sorted(words)  # sorted: a set's order depends on string hashing, which is salted


def projection(rng: Any, out: int, inp: int) -> Any:
    """A weight matrix scaled by 1/sqrt(fan-in), so every layer moves the residual stream by about
    as much as the embedding: attention then matters, and a corrupted cache entry shows in the
    output instead of being drowned by the current token's embedding."""
    return np.asarray(rng.standard_normal((out, inp)) / np.sqrt(inp), dtype=np.float32)


def output_head(rng: Any, vocab: int, hidden: int, quiet: Sequence[int]) -> Any:
    """The output layer: quiet tokens' rows zero (their logit 0 never wins a greedy step)."""
    head = projection(rng, vocab, hidden) * LOGIT_SCALE
    head[list(quiet)] = 0.0
    return head


def random_weights(rng: Any, shapes: Mapping[str, tuple[int, ...]], *, vocab: int, quiet: Sequence[int],
                   embed_std: float = 1.0) -> dict[str, Any]:
    """Random float32 weights for every tensor of `shapes` (Hugging Face names, in order), by what
    the name says it is: norms ones, biases zeros, the output layer `output_head`, the embeddings
    N(0, embed_std), a Mamba / gated-delta-net decay (`A_log`, `dt_bias`, `D`) in the range trained
    models keep it, a depthwise convolution over its kernel, every other matrix (2-D, or 3-D
    stacked experts) a `projection` over its fan-in (dimension 1 in both layouts)."""
    w: dict[str, Any] = {}
    for name, shape in shapes.items():
        leaf = name.rsplit(".", 1)[-1]
        if name.endswith("embed_tokens.weight") or name.endswith("embeddings.weight"):
            w[name] = np.asarray(rng.standard_normal(shape) * embed_std, dtype=np.float32)
        elif name.endswith("lm_head.weight") or name.endswith("shared_head.head.weight"):
            w[name] = output_head(rng, vocab, shape[1], quiet)
        elif "norm" in name and leaf == "weight":
            w[name] = np.ones(shape, np.float32)
        elif leaf == "A_log":  # A = -exp(A_log) in [-16, -1]: each head forgets at its own rate
            w[name] = np.log(rng.uniform(1.0, 16.0, shape)).astype(np.float32)
        elif leaf == "dt_bias":  # softplus(dt_bias) = a step in [0.001, 0.1]
            w[name] = np.log(np.expm1(np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), shape)))).astype(np.float32)
        elif leaf == "D":
            w[name] = np.ones(shape, np.float32)
        elif leaf == "sinks":  # attention sinks: a logit per head, about as large as the scores
            w[name] = np.asarray(rng.standard_normal(shape), dtype=np.float32)
        elif leaf.endswith("bias"):
            w[name] = np.zeros(shape, np.float32)
        elif len(shape) == 3 and shape[1] == 1:  # depthwise conv1d [channels, 1, kernel]
            w[name] = np.asarray(rng.standard_normal(shape) / np.sqrt(shape[2]), dtype=np.float32)
        elif len(shape) == 3:  # stacked experts
            w[name] = np.asarray(rng.standard_normal(shape) / np.sqrt(shape[1]), dtype=np.float32)
        else:
            w[name] = projection(rng, shape[0], shape[1])
    return w


# --- GGUF (llama.cpp), version 3, laid out as gguf-py writes it -----------------------------

U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9  # GGUF value types
_ALIGN = 32
# llama.cpp's token types
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6


def _gguf_str(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _gguf_value(vtype: int, value: Any) -> bytes:
    if vtype == STR:
        return _gguf_str(value)
    return struct.pack({U32: "<I", I32: "<i", F32: "<f", BOOL: "?"}[vtype], value)


def gguf_file(path: Path, kv: Sequence[tuple[str, int, Any]], tensors: Sequence[tuple[str, Any]]) -> Path:
    """`kv`: (key, type, value), an array as (key, ARR, (element type, values)); float32 tensors."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, vtype, value in kv:
        out += _gguf_str(key) + struct.pack("<I", vtype)
        if vtype == ARR:
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


# --- safetensors and the Hugging Face folder (vLLM, SGLang, transformers) --------------------


def safetensors_file(path: Path, tensors: Mapping[str, Any], dtype: str) -> Path:
    """As the safetensors package writes one dtype: tensors sorted by name, the JSON header
    compact and padded with spaces to a multiple of 8."""
    names = sorted(tensors)
    blobs = {n: bf16_bits(tensors[n]).tobytes() if dtype == "bfloat16"
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


def bf16_bits(a: Any) -> Any:
    """float32 -> bfloat16 bit patterns, rounding to nearest even as torch does."""
    bits = np.ascontiguousarray(a, dtype="<f4").view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype("<u2")


def json_file(path: Path, obj: Any) -> Path:
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


def hf_tokens(tokenizer_json: str) -> tuple[int, list[int], dict[str, int]]:
    """(vocabulary size, quiet ids, special token -> id) of a trained tokenizer.json. Quiet: the
    specials and every token that is not whole UTF-8 on its own (`tokenizers` decodes it to
    U+FFFD; llama.cpp would misalign its probabilities)."""
    tokenizer = json.loads(tokenizer_json)
    vocab: dict[str, int] = dict(tokenizer["model"]["vocab"])
    specials = {t["content"]: int(t["id"]) for t in tokenizer.get("added_tokens") or ()}
    size = max([*vocab.values(), *specials.values()]) + 1
    quiet = {specials[t] for t in HF_SPECIALS}
    for token, i in vocab.items():
        if token in specials:
            continue
        if "\ufffd" in spell_bytes(token).decode("utf-8", "replace"):
            quiet.add(i)
    return size, sorted(quiet), specials


def write_hf_folder(hf_dir: Path, *, tokenizer_json: str, config: Mapping[str, Any], weights: Mapping[str, Any],
                    dtype: str, context: int) -> list[Path]:
    """A Hugging Face model folder: the tokenizer files, config.json and model.safetensors."""
    hf_dir.mkdir(parents=True, exist_ok=True)
    (hf_dir / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    specials = dict(zip(("bos_token", "eos_token", "pad_token"), HF_SPECIALS, strict=True))
    written = [hf_dir / "tokenizer.json", json_file(hf_dir / "special_tokens_map.json", specials)]
    written.append(json_file(hf_dir / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": context,
        "add_bos_token": False, "add_eos_token": False, **specials,
    }))
    written.append(json_file(hf_dir / "config.json", dict(config)))
    written.append(safetensors_file(hf_dir / "model.safetensors", weights, dtype))
    return written
"""servefuzz's tiny llama (RMSNorm, rotary positions, SwiGLU MLP): the model every preset serves
by default, and the one architecture whose GGUF servefuzz writes itself (with a SentencePiece-style
vocabulary of its own) rather than through llama.cpp's converter.

`write_model` writes it in the layout `servefuzz.models.build_models` uses (`DIR/tiny.gguf`,
`DIR/hf-<dtype>/`, `DIR/lora/`); every repro.py embeds this module's source verbatim, after
`models.files`'s, so it imports nothing but that module (whose import line the embedding drops),
the standard library and numpy. The one thing it cannot make is the Hugging Face tokenizer, which
servefuzz trains with the `tokenizers` package: the caller hands its `tokenizer.json` in (repro.py
carries it, compressed, as data), and the weights' quiet rows are read from it.
"""


from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

try:
    import numpy as np
except ImportError:  # as in `files`: only writing a model needs numpy
    np = None  # type: ignore[assignment]


__all__ = ["TINY", "ModelShape", "write_model"]


class ModelShape(NamedTuple):
    """The architecture both files share. A NamedTuple, not a dataclass: a dataclass looks its
    module up in sys.modules, which a script loaded by path (repro.py, embedding this) need not be in."""

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


TINY = ModelShape()
ADAPTERS = ("lora-a", "lora-b")
LORA_RANK = 8
LORA_ALPHA = 16.0  # PEFT scales B @ A by alpha / rank: 2 here
LORA_TARGETS = ("q_proj", "v_proj")  # PEFT's default for llama
GGUF_VOCAB = 1024
GGUF_NAME, DRAFT_NAME = "servefuzz-tiny", "servefuzz-tiny-draft"
# truth.py's own copy of these names is held equal to this one by tests/models/test_llama.py.
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
    need_numpy()
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if fmt == "gguf":
        written.append(write_gguf(out_dir / "tiny.gguf", TINY, seed))
    elif fmt == "hf":
        if tokenizer_json is None:
            raise ValueError("an hf model needs the tokenizer.json servefuzz trained for it")
        written += write_hf(out_dir / f"hf-{dtype}", TINY, seed, dtype, tokenizer_json)
    else:
        raise ValueError(f"unknown model format {fmt!r} (gguf or hf)")
    if adapters:
        written += write_adapters(out_dir / "lora", TINY, seed, gguf=fmt == "gguf")
    return written


def llama_weights(rng: Any, shape: ModelShape, vocab: int, quiet: Sequence[int]) -> dict[str, Any]:
    """Random llama weights under Hugging Face names, as float32."""
    h, f = shape.hidden, shape.ffn
    w: dict[str, Any] = {"model.embed_tokens.weight": rng.standard_normal((vocab, h)).astype(np.float32)}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            w[p + f"self_attn.{name}.weight"] = projection(rng, h, h)
        w[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "mlp.gate_proj.weight"] = projection(rng, f, h)
        w[p + "mlp.up_proj.weight"] = projection(rng, f, h)
        w[p + "mlp.down_proj.weight"] = projection(rng, h, f)
    w["model.norm.weight"] = np.ones(h, np.float32)
    w["lm_head.weight"] = output_head(rng, vocab, h, quiet)
    return w


def lora_pairs(rng: Any, shape: ModelShape) -> dict[str, tuple[Any, Any]]:
    """Module (HF name, without `.weight`) -> (A [rank, in], B [out, rank]), PEFT's shapes."""
    h = shape.hidden
    out = {}
    for i in range(shape.layers):
        for target in LORA_TARGETS:
            a = np.asarray(rng.standard_normal((LORA_RANK, h)) / np.sqrt(h), dtype=np.float32)
            # Spread of (B @ A) * alpha / rank = sqrt(rank) * 0.18 * (1 / sqrt(h)) * 2 ~ 1 / sqrt(h):
            # the base projections' own.
            b = np.asarray(rng.standard_normal((h, LORA_RANK)) * 0.18, dtype=np.float32)
            out[f"model.layers.{i}.self_attn.{target}"] = (a, b)
    return out


def gguf_name(hf_name: str) -> str:
    stem = hf_name.removesuffix(".weight")
    if stem in GGUF_MODEL_NAMES:
        return GGUF_MODEL_NAMES[stem] + ".weight"
    _, _, layer, rest = stem.split(".", 3)  # model.layers.<i>.<rest>
    return f"blk.{layer}.{GGUF_LAYER_NAMES[rest]}.weight"


def write_gguf(path: Path, shape: ModelShape, seed: int, noise: tuple[Any, float] | None = None) -> Path:
    """A SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then word pieces.

    `noise` (a random stream and a scale): the draft model's weights, each tensor but the norms
    plus that many of its own standard deviations of Gaussian noise (`models.build_draft`)."""
    rng = np.random.default_rng([seed, 2])
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    kinds = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL] + [TOKEN_BYTE] * 256
    quiet = list(range(len(tokens)))
    pieces = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581"]  # ▁ is SentencePiece's space
    pieces += ["\u2581" + w for w in made_up_words(rng, GGUF_VOCAB - len(tokens) - len(pieces))]
    tokens += pieces
    kinds += [TOKEN_NORMAL] * len(pieces)
    scores = [0.0] * len(quiet) + [-float(i) for i in range(len(pieces))]  # earlier pieces merge first
    kv = [
        ("general.architecture", STR, "llama"),
        ("general.name", STR, GGUF_NAME if noise is None else DRAFT_NAME),
        ("llama.context_length", U32, shape.context),
        ("llama.embedding_length", U32, shape.hidden),
        ("llama.block_count", U32, shape.layers),
        ("llama.feed_forward_length", U32, shape.ffn),
        ("llama.attention.head_count", U32, shape.heads),
        ("llama.attention.head_count_kv", U32, shape.heads),
        ("llama.rope.dimension_count", U32, shape.head_dim),
        ("llama.rope.freq_base", F32, shape.rope_theta),
        ("llama.attention.layer_norm_rms_epsilon", F32, shape.rms_eps),
        ("general.file_type", U32, 0),  # all F32
        ("llama.vocab_size", U32, len(tokens)),
        ("tokenizer.ggml.model", STR, "llama"),
        ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
        ("tokenizer.ggml.scores", ARR, (F32, scores)),
        ("tokenizer.ggml.token_type", ARR, (I32, kinds)),
        ("tokenizer.ggml.unknown_token_id", U32, 0),
        ("tokenizer.ggml.bos_token_id", U32, 1),
        ("tokenizer.ggml.eos_token_id", U32, 2),
        ("tokenizer.ggml.add_bos_token", BOOL, False),  # prompts are exact token ids
    ]
    tensors = []
    for name, array in llama_weights(rng, shape, len(tokens), quiet).items():
        if noise is not None and not name.endswith("norm.weight"):
            source, scale = noise
            moved = array + np.float32(scale * float(array.std())) * source.standard_normal(array.shape, dtype=np.float32)
            if name == "lm_head.weight":
                moved[quiet] = 0.0  # the specials and byte tokens stay unpickable
            array = np.asarray(moved, dtype=np.float32)
        tensors.append((gguf_name(name), array))
    return gguf_file(path, kv, tensors)


def llama_config(shape: ModelShape, vocab: int, ids: dict[str, int], dtype: str) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": shape.hidden, "intermediate_size": shape.ffn, "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads, "num_key_value_heads": shape.heads, "head_dim": shape.head_dim,
        "hidden_act": "silu", "max_position_embeddings": shape.context, "rms_norm_eps": shape.rms_eps,
        "rope_theta": shape.rope_theta, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "pad_token_id": ids["<pad>"], "dtype": dtype,
    }


def write_hf(hf_dir: Path, shape: ModelShape, seed: int, dtype: str, tokenizer_json: str) -> list[Path]:
    vocab, quiet, ids = hf_tokens(tokenizer_json)
    weights = llama_weights(np.random.default_rng([seed, 1]), shape, vocab, quiet)
    return write_hf_folder(hf_dir, tokenizer_json=tokenizer_json, config=llama_config(shape, vocab, ids, dtype),
                           weights=weights, dtype=dtype, context=shape.context)


# --- the LoRA adapters ------------------------------------------------------------------------


def write_adapters(out_dir: Path, shape: ModelShape, seed: int, *, gguf: bool) -> list[Path]:
    """Each of ADAPTERS: `NAME.gguf` (llama.cpp's LoRA GGUF, as its convert_lora_to_gguf.py writes
    one: llama.cpp checks A against the base tensor's input size, B against its output size) or
    `NAME/` (PEFT's layout)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for index, name in enumerate(ADAPTERS):
        pairs = lora_pairs(np.random.default_rng([seed, 3 + index]), shape)
        if gguf:
            kv = [("general.architecture", STR, "llama"), ("general.type", STR, "adapter"),
                  ("adapter.type", STR, "lora"), ("adapter.lora.alpha", F32, LORA_ALPHA)]
            tensors = [(gguf_name(m + ".weight") + suffix, t) for m, (a, b) in pairs.items()
                       for suffix, t in ((".lora_a", a), (".lora_b", b))]
            written.append(gguf_file(out_dir / f"{name}.gguf", kv, tensors))
            continue
        folder = out_dir / name
        folder.mkdir(exist_ok=True)
        written.append(json_file(folder / "adapter_config.json", {
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": None, "r": LORA_RANK,
            "lora_alpha": LORA_ALPHA, "lora_dropout": 0.0, "bias": "none", "target_modules": list(LORA_TARGETS),
            "fan_in_fan_out": False, "use_rslora": False, "use_dora": False,
        }))
        tensors_hf = {f"base_model.model.{m}.lora_{ab}.weight": t for m, (a, b) in pairs.items()
                      for ab, t in (("A", a), ("B", b))}
        written.append(safetensors_file(folder / "adapter_model.safetensors", tensors_hf, "float32"))
    return written

# --- the finding ---------------------------------------------------------------------------

FINDING = json.loads(
    '{"name":"finding_00101_1610553322.json","bug":"contract-violation (sglang:cache-state:contract-v'
    'iolation:prefix=shared)","expected":["r01"],"expect_failure":null,"promise":{"mode":"--enable-de'
    'terministic-inference","words":"\\"SGLang achieves fully deterministic inference while maintainin'
    'g compatibility with chunked prefill, CUDA graphs, radix cache, and non-greedy sampling\\"; for e'
    'very cache-reuse path, \\"Any nonzero KL is a KV/state reuse bug.\\"","source":"https://docs.sglan'
    'g.io/advanced_features/deterministic_inference.html; https://github.com/sgl-project/sglang/issue'
    's/34899"},"expect_cached":{},"choices":{},"base_url":"http://127.0.0.1:56531","dialect":"sglang"'
    ',"path":"/generate","flush":"sglang","model":null,"requests":[{"id":"r01","offset_ms":0.9,"cance'
    'l_after_ms":null,"copies":1,"body":{"input_ids":[173,144,832,599,717,250,254,310,58,917,198,144,'
    '494,599,802,973,430,839,143,644,837,124,585,391,517,545,44,334,683,307,116,480,144,842,259,215,2'
    '07,499,30,729,956,185,1008,618,408,568,11,179,514,412,871,866,402,5,450,470,779,954,839,724,585,'
    '324,557,597,866,784,194,58,973,1001,1013,257,360,144,658,665,379,472,180,860,538,306,929,462,537'
    ',863,216,41,643,930,896,659,251,449,309,528,797,531,674,37,86,705,7,482,1017,527,791,948,76,440,'
    '547,463,361,822,96,286,817,672,50,459,731,438,648,967,132,159,555,93,587,526,45,733,794,568,544,'
    '22,344,503,363,149,478,496,385,735,110,594,1014,236,331,161,723,228,482,114,606,334,710,988,834,'
    '260,784,27,308,635,44,31,710,227,302,574,705,228,306,314,608,1015,419,814,182,811,11,124,519,45,'
    '322,592,585,529,84,458,455,940,901,156,866,364,261,953,832,677,674,782,171,390,444],"sampling_pa'
    'rams":{"temperature":0.0,"max_new_tokens":99,"ignore_eos":true,"n":1},"return_logprob":true,"top'
    '_logprobs_num":5,"logprob_start_len":-1,"stream":false}},{"id":"r02","offset_ms":1.4,"cancel_aft'
    'er_ms":null,"copies":1,"body":{"input_ids":[173,144,832,599,717,250,254,310,58,917,198,144,494,5'
    '99,802,973,430,839,143,644,837,124,585,391,517,545,44,334,683,307,116,480,144,842,259,215,207,49'
    '9,30,729,956,185,1008,618,408,568,11,179,514,412,871,866,402,5,450,470,779,954,839,724,585,324,5'
    '57,597,866,784,194,58,973,1001,1013,257,360,144,658,665,379,472,180,860,538,306,929,462,537,863,'
    '216,41,643,930,896,659,251,449,309,528,797,531,674,37,86,705,7,482,1017,527,791,948,76,440,547,4'
    '63,361,822,96,286,817,672,50,459,731,438,648,967,132,159,555,93,587,526,45,733,794,568,544,22,34'
    '4,503,363,149,478,496,385,735,110,594,1014,236,331,161,723,228,482,114,606,334,710,988,834,260,7'
    '84,27,308,635,44,31,710,227,302,574,705,228,306,314,608,1015,419,814,182,811,11,124,519,45,322,5'
    '92,585,529,84,458,455,940,616,611,217,64,263,769,516,970,159,727,69,183,549,166,540,663,953,1002'
    ',470,827,534,483,991,499,515,659,746],"sampling_params":{"temperature":0.0,"max_new_tokens":99,"'
    'ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,"strea'
    'm":false}},{"id":"r03","offset_ms":86.4,"cancel_after_ms":null,"copies":1,"body":{"input_ids":[5'
    '67,1015,793,1020,727,610,402,286,538,905,329,929,973,381,478,650,83,399,673,606,760,797,82,941,3'
    '2,446,225,136,853,1017,165,83,631,687,525,951,753,593,428,143,384,745,917,995,317,156,871,118,51'
    ',629,989,126,184,384,13,26,759,402,287,411,335,189,252,873,878,151,186,653,236,368,15,679,840,61'
    ',333,397,20,953,126,552,201,25,214,319,150,714,923,845,687,292,754,417,258,756,869,138,530,841,2'
    '85,729,119,306,983,628,714,816,160,56,480,195,1018,892,673,240,956,311,468,957,421,623,918,863,3'
    '99,90,456,792,901,902,55,183,49,36,610,457,343,28,694,148,744,452,12,91,123,311,671,15,238,202,9'
    ',351,278,571,906,327,35,782,43,793,545,997,61,610,170,917,346,368,134,1015,738,283,372,939,747,2'
    '20,683,113,951,988,956,626,797,25,127,153,429,754,836,768,226,566,922,92,137,178,738,346,458,456'
    ',387,525,150,567,416,276,926,536,43,988,879,19,697,180,832,506,641,549,369,524,302,887,158,422,5'
    '01,635,524,1014,60,161,199,599,65,910,760,791,446,481,151,541,944,426,920,602,1019,37,636,420,89'
    '1,85,307,842,889,211,171,50,703,247,1001,33,776,244,804,184,791,793,43,826,792,892,620,593,125,1'
    '020,314,950,41,69,216,461,323,350,203,35,869,888,718,122,933,101,453,333,960,704,604,904,402,724'
    ',492,167,722,12,960,228,607,279,360,1009,662,690,298,21,385,430,798,98,918,321,198,858,766,599,7'
    '60,508,882,19,645,407,3,417,964,461,604,536,576,102,693,711,158,388,923,308,599,288,230,809,247,'
    '73,830,198,479,407,841,894,249,5,627,719,273,530,656,493,629,255,320,660,879,27,258,579,644,308,'
    '897,106,238,900,769,918,104,798,308,41,92,902,951,225,834,22,132,31,922,675,331,822,246,344,582,'
    '428,951,683,875,369,601,132,679,675,87,405,234,112,103,317,442,660,751,203,920,169,67,49,1001,71'
    ',745,337,539,33,398,131,260,752,334,285,74,20,722,709,364,958,990,149,600,253,321,259,240,558,60'
    '1,122,267,357,437,773,110,670,310,828,236,483,613,314,38,644,921,850],"sampling_params":{"temper'
    'ature":0.0,"max_new_tokens":44,"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num"'
    ':5,"logprob_start_len":-1,"stream":false}},{"id":"r04","offset_ms":94.0,"cancel_after_ms":null,"'
    'copies":1,"body":{"input_ids":[837,217,397,432,461,838,208,102,741,48,68,993,813,186,463,419,994'
    ',762,868,758,444,308,762,111,283,868,245,1007,345,519,192,940,327,779,906,261,281,479,996,48,866'
    ',944,545,612,522,253,624,489,831,417,67,249,202,179,699,557,648,405,667,268,971,559,67,364,632,9'
    '1,102,275,168,328,565,943,235,194,759,588,989,309,201,381,83,895,193,450,582,525,72,963,280,238,'
    '86,791,800,770,127,497,928,993,503,914,650,438,523,648,415,1023,382,246,331,675,311,1018,543,45,'
    '214,284,1004,971,135,36,877,248,553,617,50,552,530,908,769,477,993,841,722,458,57,520,776,848,53'
    '0,178,96,708,136,812,990,887,735,797,105,870,625,923,148,934,165,663,95,424,107,182,616,582,775,'
    '607,542,619,163,165,102,437,115,786,763,4,365,63,985,488,692,422,165,325,806,483,756,902,70,317,'
    '982,673,244,241,757,885,757,94,199,143,560,694,747,672,354,841,647,949,586,841,933,95,633,602,84'
    '7,674,427,50,174,509,502,216,487,682,409,358,722,525,853,877,907,3,562,256,550,479,313,424,467,8'
    '62,287,860,503,93,683,628,101,752,557,760,217,689,777,421,773,134,703,281,327,430,763,886,428,83'
    '6,99,215,781,959,376,763,612,254,201,95,974,233,460,778,70,63,766,748,898,931,244,910,419,882,37'
    '6,420,460,702,139,204,631,327,574,447,978,571,708,461,984,265,301,764,71,884,527,430,499,541,57,'
    '692,505,423,77,752,308,582,113,170,179,425,67,242,591,747,643,421,568,160,394,917,665,595,259,10'
    '10,495,91,655,202,402,292,988,802,327,136,134,728,178,246,481,552,833,1013,138,522,551,671,209,9'
    '35,792,248,389,315,797,287,755,417,336,807,444,312,628,313,909,363,996,207,981,208,540,549,827,3'
    '62,897,330,434,933,875,325,627,464,81,315,577,315,867,840,160,942,421,282,419,613,140,310,298,74'
    ',192,64,280,473,128,996,999,71,507,266,143,68,589,824,237,201,1006,729,308,17,458,459,273,21,465'
    ',64,903,37,954,360,421,900,595,706,653,662,34,407,931,759,608,387,293,760,325,570,221,309,802,71'
    ',26,422,263,333,113,65,451,327,347,904,798,254,901,671,858,279,942,46,892,598,610,331,468,494,21'
    '5,810,218,952,589,962,20,692,689,438,731,527,888,851,449,175,587,166,1005,57,1021,513,654,155,93'
    '1,16,515,699,303,878,916,110,157,593,309,520,625,344,183,109,61,471,668,383,800,475,126,612,557,'
    '821,845,361,1004,496,119,68,770,864,644,174,18,261,190,1017,181,944,286,831,99,969,317,736,223,7'
    '60,497,985,354,911,616,471,55,525,161,200,766,878,30,340,897,593,489,466,697,812,711,682,295,733'
    ',126,105,487,680,228,31,826,827,589,147,727,962,611,6,76,74,935,170,13,240,500,312,267,299,556,1'
    '20,366,457,846,581,1006,377,1012,241,702,522,330,559,189,601,817,76,868,222,43,197,172,817,28,92'
    '7,882,62,299,101,888,565,266,265,330,323,559,298,462,917,694,762,184,337,243,509,145,608,375,506'
    ',941,751,425,901,861,134,664,360,331,206,592,889,409,987,212,1021,989,728,368,917,675,1007,486,4'
    '81,847,748,857,874,542,70,474,279,965,464,538,8,257,143,156,969,315,819,918,445,283,111,420,799,'
    '139,185,718,241,373,843,131,221,632,816,283,173,57,98,188,676,389,397,382,764,132,112,1017,518,3'
    '66,658,112,640,907,894,233,225,784,755,780,397,784,334,300,420,839,710,392,229,388,867,494,173,1'
    '45,428,215,176,74,1007,281,255,112,400,621,791,598,983,39,119,350,559,392,839,11,606,71,589,657,'
    '411,152,533,909,923,871,7,145,759,112,124,139,463,512,205,640,378,862,850,964,39,1001,248,175,88'
    '8,229,922,668,824,345,236,757,755,277,465,480,860,277,890,381,794,611,246,685,33,367,508,812,110'
    ',229,785,214,118,236,974,219,825,512,469,450,804,816,378,368,797,68,49,167,499,608,720,284,602,7'
    '11,979,344,903,331,608,611,315,303,805,725,826,427,588,922,473,944,417,744,213,450,151,1005,907,'
    '564,1002,443,974,843,10,441,493,458,540,280],"sampling_params":{"temperature":0.0,"max_new_token'
    's":10,"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1'
    ',"stream":false}},{"id":"r05","offset_ms":100.4,"cancel_after_ms":null,"copies":1,"body":{"input'
    '_ids":[321,1000,277,943,357,374,140,476,828,900,768,262,669,591,980,32,466,142,99,434,300,943,37'
    '0,279,532,102,184,685,1011,23,656,631,669,498,348,193,184,731,440,978,838,845,816,968,250,257,42'
    '4,841,394,338,642,47,428,109,528,764,851,781,260,135,710,437,449,141,623,771,1014,637,937,367,8,'
    '257,481,612,247,161,90,349,394,395,970,63,83,346,377,363,1003,619,164,200,719,901,286,358,477,36'
    '8,959,365,256,628,83,129,532,834,520,135,406,514,662,591,657,412,48,750,403,32,508,754,51,498,54'
    '9,637,913,74,399,847,836,968,229,416,441,399,749,903,808,806,137,15,571,63,786,153,332,155,745,5'
    '15,333,322,955,1021,214,372,577,907,800,94,471,391,281,742,133,931,251,43,327,734,735,817,713,11'
    '8,253,137,837,482,467,406,437,797,998,425,359,115,663,378,395,930,875,920,145,700,27,838,867,831'
    ',95,669,408,525,503,629,324,826,68,225,176,398,252,197,584,405,668,909,664,216,851,308,447,925,8'
    '44,210,180,394,403,742,777,75,366,291,691,549,594,115,22,223,136,82,89,689,974,459,578,788,579,8'
    '07,323,922,928,448,523,960,749,798,287,352,465,995,9,913,524,674,606,601,442,193,45,326,879,601,'
    '380,776,944,549,399,665,478,325,56,172,793,734,632,6,977,592,866,164,859,625,994,756,95,70,765,8'
    '11,550,152,898,52,191,96,840,811,683,557,987,342,313,196,120,389,109,75,739,530,683,614,648,875,'
    '555,1012,842,957,906,753,116,286,899,49,700,627,651,234,984,396,1006,32,941,70,970,23,915,383,71'
    '4,904,582,160,176,74,238,885,390,419,235,124,339,199,101,127,174,830,275,437,406,302,504,596,762'
    ',315,823,590,44,711,851,198,18,149,170,952,960,354,44,3,750,795,255,792,599,862,646,394,590,14,6'
    '27,206,787,761,777,299,878,905,30,572,82,909,573,85,794,51,365,274,906,309,328,457,647,947,97,69'
    '3,74,20,614,630,688,894,550,806,253,793,58,913,1017,552,364,816,785,739,915,624,805,607,279,146,'
    '390,245,149,833,936,976,874,233,362,392,82,365,554,485,516,119,759,257,499,834,251,134,124,855,2'
    '78,219,692,474,486,926,279,881,877,894,341,316,565,215,480,775,613,708,644,544,484,102,747,96,42'
    '0,488,927,923,815,701,810,324,60,184,826,583,518,826,687,515,144,297,560,1008,525,870,563,1005,9'
    '38,518,866,247,838,1004,442,433,114,579,132,720,96,949,24,72,901,989,651,783,538,700,927,476,776'
    ',281,585,747,755,707,737,893,399,233,880,466,983,197,49,901,694,748,502,511,949,528,95,932,42,24'
    '9,268,378,48,254,946,644,614,184,453,217,773,850,973,332,473,601,837,799,443,910,741,283,147,489'
    ',308,508,574,570,303,239,298,266,383,729,780,181,344,809,554,858,193,709,730,763,228,152,643,539'
    ',547,532,910,965,247,109,932,895,678,388,966,51,645,234,788,207,369,251,527,782,528,214,770,634,'
    '750,224,865,961,512,903,501,874,83],"sampling_params":{"temperature":0.0,"max_new_tokens":15,"ig'
    'nore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,"stream"'
    ':false}},{"id":"r06","offset_ms":109.8,"cancel_after_ms":null,"copies":1,"body":{"input_ids":[28'
    '4,682,492,989,462,515,421,740,594,745,1019,942,193,206,1019,878,815,398,988,620,260,83,547,862,5'
    '78,643,357,348,14,406,918,696,602,970,472,571,363,174,253,150,892,680,667,851,730,744,994,938,21'
    '4,422,982,486,286,661,996,776,241,368,836,45,637,1009,94,969,852,353,360,235,101,8,144,1020,910,'
    '821,873,930,865,813,799,516,493,269,526,270,809,958,50,675,762,718,92,358,110,883,346,257,341,45'
    '1,198,773,673,561,689,238,679,575,100,212,40,239,436,741,502,926,16,586,965,577,125,405,121,672,'
    '832,211,308,806,74,232,576,629,154,808,570,357,473,254,278,23,837,282,66,855,598,28,217,901,345,'
    '452,1018,707,112,441,319,539,286,704,672,26,901,283,310,322,558,462,471,452,239,555,218,320,414,'
    '236,446,796,675,433,464,996,61,353,528,346,811,564,36,655,250,311,521,418,22,532,158,880,732,937'
    ',577,232,992,703,237,757,81,603,998,700,755,233,5,48,245,952,354,175,451,969,1007,274,773,260,12'
    '5,653,754,677,163,622,306,565,463,678,564,654,933,980,673,377,795,618,357,313,257,972,745,53,891'
    ',742,899,766,449,680,661,60,908,830,179,754,123,260,606,827,303,556,329,505,277,995,549,791,654,'
    '135,1019,423,192,790,906,634,480,436,29,23,5,77,536,240,393,872,791,734,679,444,592,483,82,409,4'
    '54,457,507,170,319,138,998,509,377,219,498,489,286,711,606,769,715,124,465,649,178,432,990,411,7'
    '03,760,888,692,858,326,329,383,859,63,725,832,289,821,91,110,230,902,582,934,479,804,841,786,101'
    '4,865,782,900,199,319,392,819,987,331,343,188,41,101,796,565,49,78,329,104,676,165,999,655,494,7'
    '51,72,797,116,555,762,91,531,527,847,743,1000,729,622,631,470,50,998,811,141,982,705,891,879,582'
    ',776,711,766,939,42,63,656,921,485,176,440,502,760,803,647,769,472,23,83,252,899,121,359,56,957,'
    '333,632,735,607,127,334,529,869,153,681,327,859,660,62,635,1023,370,624,856,980,504,247,359,519,'
    '270,603,210,882,106,700,557,806,243,269,180,945,684,136,245,851,6,63,234,968,484,334,318,664,347'
    ',304,907,333,57,110,536,625,650,397,15,558,124,581,507,957,130,494,358,936,1002,148,930,57,763,4'
    '23,106,760,155,581,910,775,601,914,1003,563,409,912,309,460,997,818,212,318,957,147,259,965,854,'
    '189,155,394,952,507,84,323,542,861,433,262,968,816,90,1016,185,1000,704,459,239,461,990,520,109,'
    '632,663,964,318,862,557,487,87,159,376,43,590,381,225,454,572,110,951,923,223,446,98,89,931,212,'
    '705,902,404,297,30,380,801,816,248,225,98,226,955,697,489,247,604,442,286,937,887,761,707,392,71'
    '9,540,691,89,1006,388,360,182,75,758],"sampling_params":{"temperature":0.0,"max_new_tokens":21,"'
    'ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,"strea'
    'm":false}},{"id":"r07","offset_ms":113.8,"cancel_after_ms":null,"copies":1,"body":{"input_ids":['
    '1006,989,16,63,769,925,228,253,540,362,268,582,356,586,172,680,323,1015,361,718,591,372,1013,721'
    ',913,449,314,649,549,958,1013,921,973,885,980,242,40,290,860,983,938,898,491,715,814,234,536,77,'
    '476,568,76,126,445,225,850,774,676,401,463,1011,111,995,121,173,691,487,914,30,170,447,601,188,8'
    '97,452,160,565,149,339,44,243,337,853,1013,749,714,638,417,20,341,544,22,590,979,213,597,703,628'
    ',200,693,265,873,555,797,636,118,329,613,9,176,870,804,499,480,328,177,733,44,143,359,668,554,33'
    '1,425,427,582,325,951,429,624,641,229,93,963,235,242,945,775,283,957,205,995,556,140,520,312,573'
    ',59,767,554,537,169,618,214,174,429,228,145,669,934,155,666,804,956,516,665,862,543,24,530,524,9'
    '22,362,476,286,881,410,235,693,588,923,977,782,672,896,743,286,810,440,457,85,844,254,763,185,66'
    '5,857,843,240,778,960,401,472,413,777,729,464,558,735,994,429,596,566,708,717,455,729,157,280,97'
    '9,605,658,358,458,393,858,821,976,499,812,778,518,905,166,505,507,394,678,155,502,883,962,296,40'
    '0,572,533,627,680,82,346,663,956,258,35,922,881,871,753,836,191,249,753,801,381,720,810,624,926,'
    '506,525,617,162,61,392,363,781,733,691,331,257,793,1020,452,253,503,290,376,916,368,137,951,877,'
    '671,213,142,57,835,256,808,920,402,1007,181,466,365,167,512,504,799,750,624,178,102,114,408,4,53'
    '5,841,740,939,663,549,934,642,898,557,862,864,829,16,922,11,498,310,372,384,975,919,440,240,297,'
    '7,179,823,926,39,946,997,544,915,734,239,584,96,250,177,454,433,425,194,289,700,346,348,276,48,2'
    '64,340,415],"sampling_params":{"temperature":0.0,"max_new_tokens":19,"ignore_eos":true,"n":1},"r'
    'eturn_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,"stream":false}},{"id":"r09","of'
    'fset_ms":133.6,"cancel_after_ms":null,"copies":1,"body":{"input_ids":[448,453,724,706,781,975,66'
    '4,89,110,522,825,815,974,38,992,757,755,351,573,450,985,763,577,279,931,981,346,849,874,586,906,'
    '122,292,335,792,708,52,779,160,20,423,229,14,323,986,884,156,640,906,485,829,403,498,839,539,511'
    ',454,111,557,752,567,571,222,628,653,508,115,860,702,304,693,436,324,867,674,522,544,363,521,855'
    ',633,575,394,790,278,541,927,369,274,332,504,470,671,347,984,541,383,788,27,1022,127,613,33,948,'
    '425,392,655,725,202,994,324,75,232,560,578,858,578,814,176,932,909,209,665,878,545,317,531,647,6'
    '82,157,248,385,134,137,824,274,351,690,588,130,722,207,966,859,84,175,557,596,919,53,953,37,416,'
    '161,736,546,620,267,380,145,798,187,7,697,1019,940,667,696,370,953,680,154,832,255,428,342,898,5'
    '25,659,155,160,1005,555,241,477,321,480,266,676,116,175,209,401,606,738,411,211,516,159,310,985,'
    '108,793,760,566,117,1004,640,902,178,172,84,265,1017,976,858,781,592,349,704,958,774,649,550,220'
    ',249,381,767,919,351,807,986,371,970,247,921,87,3,571,7,400,994,850,145,549,37,126,854,187,571,5'
    '63,342,529,333,94,645,417,817,737,760,268,465,986,674,832,160,653,947,240,593,422,697,51,981,553'
    ',906,603,929,212,225,335,967,378,459,124,1005,420,13,261,164,953,971,281,678,107,3,115,197,785,5'
    '51,1019,71,896,883,189,38,207,934,471,50,657,667,642,30,773,325,836,864,944,545,427,944,674,752,'
    '606,384,104,937,780,211,696,217,542,365,988,268,43,129,241,264,5,451,635,661,691,122,407,649,100'
    '2,455,611,578,928,70,759,945,455,1018,368,538,783,545,70,182,685,770,257,919,370,607,379,788,218'
    ',1005,745,672,807,150,960,62,856,294,558,298,770,828,735,911,392,444,7,714,464,578,595,290,302,1'
    '007,655,295,40,999,676,405,204,621,775,286,281,718,890,781,984,744,136,623,473,402,859,650,538,1'
    '77,419,113,496,472,961,276,283,504,559,129,1011,569,167,390,979,1004,86,359,273,936,876,967,3,83'
    '8,218,488,725,671,309,121,851,812,929,846,804,561,786,795,561,86,712,461,665,43,671,261,190,250,'
    '446,471,218,732,298,872,203,740,86,904,226,937,631,546,797,293,470,629,726,746,279,267,392,794,2'
    '18,753,260,1006,485,824,205,616,855,721,210,360,885,230,260,967,767,313,14,872,75,55,514,523,584'
    ',282,979,934,827,334,853,532,597,739,703,467,987,195,448,557,177,510,777,648,209,210,914,824,679'
    ',1004,888,710,573,42,675,15,255,363,129,990,381,300,983,855,658,736,781,253,760,855,259,860,44,7'
    '36,670,571,709,235,672,400,448,479,1009,211,29,266,217,165,135,437,800,172,22,875,641,21,234,814'
    ',705,878,55,406,194,174,795,84,120,268,321,407,869,364,1012,86,243,221,926,590,605,912,108,67,49'
    '9,110,614,325,69,352,201,890,912,125,831,596,603,342,196,148,421,904,574,315,930,265,445,536,110'
    ',113,179,178,247,301,596,468,368,936,748,1018,823,981,545,814,276,615,926,334,26,111,262,223,920'
    ',754,711,87,934,772,393,122,215,574,580,567,981,860,968,199,351,521,412,765,340,194,401,568,36,8'
    '69,28,438,772,195,478,564,495,822,152,101,543,599,954,112,491,540,905,617,484,628,233,276,815,84'
    '9,663,477,1014,944,326,77,906,95,321,942,32,870,896,189,515,389,138,783,712,12,694,720,620,932,9'
    '33,976,519,793,628,634,559,844,995,77,705,478,652,451,264,417,559,292,862,610,890,195,581,292,74'
    '3,19,647,686,258,922,181,17,831,9,921,361,661,223,839,390,842,587,304,833,746,715,306,107,289,91'
    '2,582,425,602,516,387,361,159,1020,942,26,949,830,117,594,318,735,933,182,77,370,918,956,853,288'
    ',863,533,669,389,588,827,833,142,566,359,903,863,969,581,65,1010,508,345,723,306,729,951,202,114'
    ',741,1008,803,252,552,804,114,790,944,1002,464,966,967,828,903,253],"sampling_params":{"temperat'
    'ure":0.0,"max_new_tokens":33,"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5'
    ',"logprob_start_len":-1,"stream":false}},{"id":"r10","offset_ms":150.5,"cancel_after_ms":null,"c'
    'opies":1,"body":{"input_ids":[725,659,479,789,599,880,914,285,654,783,298,431,983,436,540,626,66'
    '1,96,199,957,924,451,156,680,628,486,246,819,986,565,835,599,560,769,498,253,458,823,457,802,311'
    ',338,271,589,562,766,114,388,500,611,975,408,923,638,189,141,839,216,313,579,144,403,699,616,305'
    ',842,267,609,779,839,896,208,426,656,299,191,229,578,943,876,152,1022,947,230,190,13,753,934,103'
    ',260,945,99,660,614,469,863,495,888,710,863,874,45,656,399,791,535,236,346,266,813,253,803,947,9'
    '1,592,529,824,484,360,370,369,314,853,96,108,579,533,639,723,924,227,87,169,885,761,72,657,270,7'
    '92,417,209,675,327,403,799,882,508,974,663,573,46,299,744,599,510,515,1022,204,153,266,798,738,7'
    '77,264,756,192,654,18,168,766,546,644,260,665,199,878,555,63,1007,365,993,668,226,421,1018,530,9'
    '19,851,284,605,302,288,215,739,782,167,836,821,560,798,620,405,565,295,427,806,585,447,948,658,1'
    '51,592,799,594,745,79,861,660,911,20,631,989,298,738,864,70,42,921,747,191,670,591,323,448,138,8'
    '08,518,90,677,452,451,619,697,894,338,152,334,806,881,35,251,535,768,276,951,927,619,199,902,924'
    ',1007,179,915,107,723,368,113,211,691,428,690,290,384,200,845,344,146,875,294,679,619,454,558,41'
    '9,126,353,159,26,772,399,648,178,743,986,222,903,492,745,611,82,155,112,348,1016,526,76,724,518,'
    '515,41,669,213,845,615,985,474,768,401,206,461,122,950,313,662,818,508,409,407,566,450,109,854,7'
    '55,701,640,891,796,589,323,227,117,127,790,190,603,223,1009,260,302,574,873,673,458,535,520,623,'
    '837,261,296,994,568,706,638,768,496,87,148,700,268,900,405,93,691,264,646,909,152,687,868,46,949'
    ',783,434,766,450,794,859,296,951,753,285,126,92,365,334,619,467,82,805,219,830,570,916,39,883,68'
    ',237,830,44,404,337,126,337,168,648,881,923,176,900,698,946,909,754,674,221,302,244,968,550,1019'
    ',917,844,511,576,46,888,1013,830,724,270,310,618,30,71,597,880,926,622,985,500,931,119,992,568,9'
    '27,997,732,55,547,60,300,349,846,514,261,604,145,854,296,174,414,931,855,294,612,305,314,682,593'
    ',169,71,904,165,729,946,770,224,403,88,812,1001,519,759,77,823,656,45,576,37,30,45,309,260,1012,'
    '817,211,311,740,123,444,154,212,517,718,547,743,452,372,117,633,80,70,252,315,398,927,527,115,39'
    '7,584,25,552,224,947,109,983,720,146,947,319,449,645,1012,452,9,213,138,992,93,616,243,263,121,2'
    '59,681,754,661,159,78,438,197,209,399,1004,276,237,197,327,565,293,285,612,5,803,252,412,771,580'
    ',808,113,89,574,1012,450,216,733,992,460,322,124,1006,103,568,762,240,76,133,456,262,247,917,866'
    ',838,252,12,984,588,367,215,696,110,863,37,910,333,499,896,575,515,550,62,688,905,999,268,826,20'
    '4,801,228,658,362,468,462,159,490,990,676,212,520,56,313,536,208,664,794,17,621,374,441,517,983,'
    '340,205,677,566,507,280,973,975,460,121,964,394,730,896,906,457,219,455,459,688,1000,595,535,414'
    ',267,191,300,737,367,583,525,163,963,331,263,396,59,49,548,885,602,984,463,291,774,376,700,878,5'
    '00,92,767,215,577,397,427,411,489,809,639,724,158,966,87,973,743,664,746,116,112,9,87,982,980,76'
    '7,155,503,447,290,380,482,989,411,895,462,696,846,322,399,290],"sampling_params":{"temperature":'
    '0.0,"max_new_tokens":8,"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logp'
    'rob_start_len":-1,"stream":false}},{"id":"r11","offset_ms":159.3,"cancel_after_ms":null,"copies"'
    ':1,"body":{"input_ids":[64,446,842,652,216,991,679,843,385,546,725,215,167,370,521,359,791,864,9'
    '45,601,165,831,273,904,874,913,502,909,9,64,758,60,596,882,45,926,354,433,714,34,157,995,676,566'
    ',860,450,372,523,829,954,205,468,202,247,25,1001,412,341,279,521,252,674,31,108,108,750,950,429,'
    '1001,539,380,999,324,143,128,864,277,736,888,33,233,786,291,783,229,909,401,835,261,444,818,349,'
    '570,470,306,933,744,399,483,520,33,211,251,854,963,248,955,767,961,530,564,930,938,724,923,3,217'
    ',983,202,659,945,78,102,534,133,904,828,689,780,47,540,359,832,800,324,924,180,354,676,681,66,28'
    '7,442,563,203,704,539,422,831,665,946,629,891,80,1005,528,873,420,807,369,765,611,645,361,706,69'
    '4,914,403,793,149,994,231,143,740,302,804,55,37,565,380,373,9,877,596,508,525,1002,375,327,13,80'
    '4,162,785,609,549,627,81,952,705,966,643,355,466,333,641,371,805,899,37,535,837,913,168,804,704,'
    '92,986,187,780,917,980,703,594,692,974,749,567,51,588,430,173,243,775,193,937,226,875,443,766,28'
    '3,142,164,981,838,653,262,129,578,340,255,227,63,545,218,984,961,874,547,377,392,356,513,650,3,7'
    '62,868,504,495,987,930,311,359,436,867,290,845,473,894,826,213,466,986,998,637,322,675,247,742,2'
    '79,219,574,823,291,142,133,866,839,925,752,648,330,334,804,444,205,398,293,790,250,761,391,38,65'
    '2,993,553,459,173,26,345,523,444,26,605,713,875,575,189,131,774,324,370,47,326,195,43,922,196,44'
    '8,589,554,764,345,911,339,938,903,198,399,745,628,55,11,134,104,447,24,383,953,651,570,228,367,2'
    '8,33,488,871,642,260,630,502,322,1011,356,927,605,742,194,514,519,710,746,1016,288,672,360,797,4'
    '79,561,57,521,220,335,650,981,124,642,880,39,226,990,267,796,577,849,365,942,875,115,876,775,304'
    ',398,372,645,587,661,1016,648,920,713,834,678,260,117,16,941,992,1015,361,87,66,253,632,85,560,8'
    '49,412,447,929,228,979,71,758,340,285,42,173,706,960,810,445,49,19,514,381,294,516,525,915,323,9'
    '87,962,953,742,445,264,505,576,104,713,815,677,1018,927,691,240,9,712,871,941,482,143,78,711,333'
    ',338,185,338,156,414,774,653,205,390,159,408,375,292,341,747,849,377,949,342,610,495,263,769,382'
    ',395,65,474,402,210,716,937,543,833,281,610,348,696,82,691,551,544,314,721,924,159,377,323,850,5'
    '20,475,120,676,754,584,381,310,980,1021,703,85,418,441,314,701,614,415,80,352,816,970,943,177,10'
    '03,655,811,24,757,116,429,209,113,638,922,478,796,672,362,418,755,801,273,190,40,496,258,297,232'
    ',646,705,248,362,639,195,847,441,492,406,461,992,222,183,553,938,483,816,321,840,343,546,33,663,'
    '132,752,302,422,606,730,215,886,111,131,598,1023,958,270,581,913,885,374,754,712,923,418,162,754'
    ',982,815,1018,107,415,892,311,42,793,106,713,980,877,386,458,877,521,984,875,19,772,487,645,343,'
    '877,1015,352,201,260,738,168,412,201,677,374,1015,699,455,463,737,617,741,543,741,781,208,269,86'
    '4,321,225,858,716,376,276,536,938,529,447,817,699,339,60,794,786,371,810,596,1016,410,602,63,79,'
    '657,17,313,395,246,645,915,231,214,231,967,372,977,10,910,198,751,48,450,719,712,600,473,301,101'
    '4,1010,1019,731,160,423,19,73,477,387,213,538,300,930,320,474,936,725,437,680,765,472,64,740,273'
    ',614,1022,908,675,536,267,763,291,540,247,845,485,190,440,777,298,1006,887,831,159,185,596,772,5'
    '39,235,788,391,357,1009,313,132,488,617,97,938,268,7,899,111,593,1005,626,571,955,251,204,117,21'
    '2,438,247,547,910,399,266,666,230,43,305,103,493,358,779,869,760,6,187,820,497,551,291,271,535,2'
    '95,162,908,588,961,289,292,843,972,32,637,58,130,609,179,545,519,164,30,439,244,425,50,573,475,8'
    '09,107,91,153,362,664,101,578,636,809,339,877,369,640,505,710,610,677,73,852,424,509,650,608,663'
    ',175,230,201,359,356,701,299,263,611,936,297,842,944,356,783,198,89,992,39,99,735,1003,945,378,4'
    '90,742,89,331,842,925,886,566,577,376,1018,804,966,178,143,786,985,204,785,140,191,911,360,505,3'
    '72,987],"sampling_params":{"temperature":0.0,"max_new_tokens":28,"ignore_eos":true,"n":1},"retur'
    'n_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,"stream":false}},{"id":"r12","offset'
    '_ms":170.1,"cancel_after_ms":null,"copies":1,"body":{"input_ids":[176,376,827,147,517,901,533,34'
    '6,625,489,527,963,768,134,912,407,179,417,684,221,103,684,342,347,164,151,839,898,974,483,408,51'
    '7,874,507,420,110,467,435,605,836,586,761,841,162,523,119,700,934,540,270,477,626,837,901,851,60'
    ',99,723,789,559,535,116,488,940,535,387,1019,63,663,825,472,411,664,393,401,451,733,95,787,776,6'
    '30,143,877,477,180,216,1017,941,815,1012,619,488,461,367,162,784,883,199,745,11,428,235,250,959,'
    '1008,859,780,873,527,767,668,544,367,523,152,304,280,160,470,604,604,923,568,787,497,782,265,101'
    '1,626,444,997,985,199,997,93,969,723,538,949,992,311,979,130,408,515,480,780,110,16,922,1000,913'
    ',261,151,299,816,532,622,71,940,107,502,966,1020,269,434,871,860,898,190,442,987,566,499,173,439'
    ',397,200,265,905,520,565,1004,352,417,307,761,517,402,282,362,403,545,764,513,124,904,837,503,12'
    '2,598,679,301,818,735,759,728,35,404,901,962,822,571,643,436,361,213,257,43,202,149,402,643,928,'
    '269,41,897,676,1023,502,817,818,793,692,53,468,956,495,602,644,386,198,688,305,323,562,182,142,6'
    '99,99,756,357,243,865,791,129,1005,904,214,76,70,838,715,103,891,799,535,357,1015,814,513,962,72'
    '1,197,954,115,626,465,120,149,339,663,730,860,482,149,524,926,501,212,955,451,482,786,923,63,100'
    '8,309,476,229,1013,777,428,711,906,235,9,12,597,294,17,79,261,575,1019,136,784,860,938,834,434,3'
    '08,169,610,598,131,782,945,479,194,387,87,77,487,263,226,519,486,483,649,918,290,472,629,659,249'
    ',455,810,629,909,820,317,688,469,334,155,4,472,56,188,195,1011,874,221,618,327,454,226,520,586,5'
    '98,950,246,994,752,490,132,647,568,645,878,11,850,473,348,190,995,228,26,966,712,591,997,136,455'
    ',565,191,847,443,256,669,710,851,505,1020,427,605,541,397,902,966,220,712,603,717,12,632,675,412'
    ',254,764,303,776,495,57,324,313,108,306,341,877,961,40,743,441,696,51,966,334,567,588,249,553,89'
    '4,346,589,428,921,239,727,94,952,820,420,1008,911,26,550,427,292,28,595,71,295,457,282,112,785,6'
    '69,29,658,611,394,173,671,115,84,386,218,655,349,434,426,151,664,869,73,508,121,838,49,229,867,3'
    '07,907,629,1013,499,502,685,698,185,717,742,880,136,608,199,24,958,258,686,146,215,212,368,419,7'
    '71,29,135,3,930,486,615,961,756,660,914,709,318,665,194],"sampling_params":{"temperature":0.0,"m'
    'ax_new_tokens":11,"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_s'
    'tart_len":-1,"stream":false}},{"id":"r13_w","offset_ms":573.3,"cancel_after_ms":null,"copies":1,'
    '"body":{"input_ids":[695,562,136,793,496,898,701,345,649,88,889,676,933,288,541,639,169,787,863,'
    '961,921,548,112,588,644,137,967,463,122,993,380,295,842,291,505,468,654,929,550,338,985,39,459,5'
    '26,939,90,267,883,242,608,604,313,902,1005,741,614,325,275,87,688,705,758,86,596,340,39,643,369,'
    '155,493,856,812,13,794,499,84,158,1023,184,393,437,769,575,276,256,515,101,895,728,236,615,214,6'
    '91,820,167,893,838,573,225,729,658,457,178,703,162,721,872,322,839,444,859,160,953,796,661,777,4'
    '15,340,173,821,389,350,139,964,927,133,321,740,773,894,576,531,79,990,829,74,933,504,634,30,767,'
    '747,1007,138,301,12,341,834,384,485,16,712,540,635,531,960,113,617,177,108,475,474,1010,53,284,2'
    '98,779,432,591,917,1003,542,286,47,761,808,394,232,654,195,774,419,111,61,301,610,454,463,504,22'
    '1,263,971,890,455,437,151,160,36,80,976,857,91,143,954,788,698,1012,533,845,106,661,397,829,405,'
    '970,445,675,926,335,31,227,695,134,159,921,492,113,502,204,832,281,819,268,242,654,925,776,250,9'
    '69,644,279,283,223,471,313,956,244,670,485,977,261,574,296,812,714,437,584,954,970,889,316,870,4'
    '37,95,513,733,917,702,340,860,161,819,639,57,152,449,385,93,512,298,144,276,595,728,303,889,215,'
    '283,783,944,683,40,445,785,373,914,106,170,726,676,884,727,188,312,348,428,738,79,579,776,799,71'
    '2,261,496,572,964,936,78,623,764,686,778,843,715,931,498,318,101,340,204,323,487,114,355,126,164'
    ',963,793,493,722,589,706,807,126,86,576,529,999,180,278,474,648,420,850,422,108,305,579,611,380,'
    '500,964,686,351,508,400,606,353,99,461,114,444,288,938,69,214,815,340,448,293,736,110,337,402,82'
    '3,292,893,487,587,596,949,855,173,385,570,209,65,802,18,443,811,685,767,682,312,182,867,580,145,'
    '19,684,705,280,196,137,213,645,996,928,802,428,589,870,825,396,698,360,745,120,940,881,312,966,2'
    '07,199,343,386,738,32,920,638,622,511,580,503,5,559,737,564,924,375,271,28,857,86,516,558,97,520'
    ',349,405,718,822,83,894,534,363,474,686,657,649,51,482,922,490,608,721,970,675,857,634,968,169,4'
    '6,46,717,207,815,73,235,597,322,25,898,835,275,501,711,49,29,53,725,53,419,927,807,818,434,186,6'
    '41,1016,304,427,764,990,205,852,577,865,144,622,839,403,404,117,313,283,369,474,25,503,181,897,9'
    '67,563,430,582,703,691,760,961,345,89,120,993,719,315,715,54,301,746,979,986,234,403,911,575,475'
    ',185,1003,209,624,602,282,578,507,422,430,87,952,326,493,269,458,752,944,136,40,386,438,947,750,'
    '524,491,169,361,822,93,19,999,335,127,275,465,599],"sampling_params":{"temperature":0.0,"max_new'
    '_tokens":30,"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_start_l'
    'en":-1,"stream":false}},{"id":"r14_w","offset_ms":576.0,"cancel_after_ms":null,"copies":1,"body"'
    ':{"input_ids":[520,517,900,754,428,175,573,651,5,370,701,855,377,178,134,84,581,657,613,393,741,'
    '312,741,394,247,166,439,305,521,825,105,219,936,784,649,71,443,55,652,707,354,1021,154,225,759,1'
    '96,909,1006,161,959,813,351,161,93,318,143,21,827,171,154,558,207,712,247,361,492,355,418,710,11'
    '6,22,477,462,114,675,15,397,780,704,683,86,748,915,359,659,351,256,499,645,555,268,222,716,214,9'
    '15,542,922,56,195,146,604,132,134,51,643,542,902,840,328,752,160,599,895,442,385,984,554,312,81,'
    '938,457,507,813,733,951,191,309,868,393,731,408,779,474,223,306,753,328,612,489,419,164,455,737,'
    '743,904,998,878,743,45,259,104,352,122,966,889,495,520,64,651,315,296,519,697,989,786,738,41,871'
    ',195,549,328,900,37,85,678,461,206,208,376,389,221,866,380,998,749,366,800,633,936,273,47,590,49'
    '6,933,331,522,153,545,948,464,346,375,874,879,476,174,690,516,683,73,940,766,6,299,880,621,444,3'
    '41,468,345,100,623,125,836,318,256,233,606,56,557,386,278,571,597,744,31,358,167,149,752,586,856'
    ',1007,332,202,47,136,137,186,445,539,968,924,759,236,947,116,997,358,221,16,764,893,864,897,835,'
    '994,744,509,909,397,853,773,947,976,473,959,834,973,556,893,969,547,56,438,577,960,723,170,282,2'
    '39,640,392,755,638,278,92,600,684,797,459,913,909,872,161,357,861,680,381,173,7,71,1023,498,829,'
    '684,511,833,123,523,606,336,346,947,16,48,713,213,645,975,273,654,477,290,104,240,385,825,36,982'
    ',718,121,747,1000,498,397,962,519,245,536,817,122,933,170,791,977,705,585,298,60,495,425,279,932'
    ',438,292,279,708,572,907,382,12,81,962,145,204,625,332,307,323,169,766,855,797,696,182,733,938,5'
    '46,735,614,792,582,298,490,550,711,324,92,514,998,223,70,795,68,328,830,167,123,147,858,412,523,'
    '746,463,107,390,628,947,702,224,516,595,130,746,975,110,88,567,536,894,932,784,139,580,244,677,8'
    '52,552,850,621,435,509,351,503,383,938,303,951,805,495,351,601,95,290,127,336,290,200,737,994,78'
    '5,924,564,942,918,381,813,915,994,125,379,152,551,140,1008,1021,87,333,10,863,314,599,47,636,75,'
    '200,903,358,728,483,304,462,513,35,360,955,916,464,73,295,362,204,834,769,565,460,249,675,621,55'
    ',347,766,618,773,321,680,725,434,440,158,634,505,291,921,52,222,704,773,625,448,545,237,558,790,'
    '833,9,498,271,796,214,934,927,998,121,58,631,608,925,750,949,286,402,639,559,401,441,406,913,869'
    ',628,877,798,597,404,252,380,395,988,458,426,926,407,323,399,325,1023,488,951,666,631,873,417,70'
    '7,692,437,281,224,37,110,403,683,954,757,64,463,252,515,910,594,256,78,85,999,1009,296,442,252,7'
    '0,261,725,288,728,858,864,485,91,871,928,426,409,830,719,234,156,140,285,54,404,43,987,670,936,1'
    '52,860,177,845,919,622,833,132,275,140,916,305,139,907,704,370,24,694,681,727,524,993,781,195,25'
    '8,850,111,134,702,853,342,556,696,86,452,712,1018,86,895,226,1007,777,318,807,128,445,649,192,64'
    '6,32,822,846,313,89,140,469,487,818,499,330,268,77,102,201,767,899,775,965,129,1014,36,923,366,2'
    '07,741,953,970,783,157,215,966,300,225,144,503,79,292,378,392,70,823,324,581,858,110,411,635,560'
    ',356,112,544,759,763,528,51,618,386,811,310,861,209,413,741,364,83,28,152,562,320,456,671,26,499'
    ',884,307,103,875,463,195,207,202,303,533,528,867,148,532,1022,486,695,736,323,255,223,63,871,771'
    ',809,202,260,551,356,829,241,800,780,979,574,720,476,456,69,244,652,332,779,483,854,49,977,114,8'
    '25,793,701,780,664,176,692,18,829,590,896,608,303,900,592,225,639,353,799,781,100,399,211,836,29'
    '8,159,26,307,4,520,532,816,153,75,1009,271,138,380,788,239,428,177,553,729,938,240,65,911,373,32'
    '2,844,704,851,267,30,68,634,176,469,1022,967,685,700,706,210,655,283,546,685,145,495,226,987,314'
    ',31,796,884,534,719,945,526,977,279,501,166,955,256,883,632,469,496,124,747,971,381,439,247,434,'
    '430,665,591,45,82,652,303,410,329,451,658,258,909,830,417,162,703,474,958,80,42,247,330,123,158,'
    '967,679,197,613,225,844,360,442,391,697,984,69,174,812,397,183,116,818,791,524,499,253,189,903,5'
    '57,996,312,1016,100,112,317,972,21,821,870,147,48,753,401,333,277,187,683,299,237,952,329,606,70'
    '6,419,882,889,512,178,586,517,485,111,627,727,920,621,1011,839,464,277,632,211,38,734,526,925,50'
    '0,420,863,64],"sampling_params":{"temperature":0.0,"max_new_tokens":31,"ignore_eos":true,"n":1},'
    '"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,"stream":false}},{"id":"r15_w"'
    ',"offset_ms":585.2,"cancel_after_ms":null,"copies":1,"body":{"input_ids":[92,932,806,466,529,551'
    ',584,144,804,300,680,436,236,929,394,514,677,156,239,183,963,490,267,542,769,911,787,328,15,643,'
    '426,856,820,174,174,335,387,867,294,886,936,809,296,904,281,565,389,262,1015,309,480,250,186,888'
    ',944,748,844,331,560,618,740,157,964,837,1006,366,4,296,453,810,503,979,576,702,460,252,392,828,'
    '180,763,357,526,609,87,443,660,718,202,155,841,935,357,501,604,546,225,398,602,488,895,755,252,4'
    '02,15,342,493,790,883,585,658,194,152,641,417,534,518,670,541,661,253,863,469,828,993,578,694,13'
    '4,554,628,879,83,381,202,887,1002,719,566,634,522,376,496,908,524,670,168,230,307,611,880,944,82'
    '9,573,949,308,845,178,550,352,838,863,779,159,393,127,456,745,215,287,514,896,342,506,226,411,60'
    ',699,142,853,552,46,809,746,320,860,254,199,166,1023,4,775,134,646,783,240,604,826,66,458,1000,5'
    '37,323,371,468,719,784,204,194,623,635,866,948,277,85,16,340,52,751,943,938,121,659,425,284,842,'
    '405,291,374,283,347,462,571,858,100,74,915,828,451,623,343,184,982,191,572,20,398,957,692,833,60'
    '2,676,720,822,52,174,188,10,40,743,584,74,952,718,36,802,927,901,204,160,597,515,342,470,433,837'
    ',7,230,386,319,861,226,366,371,58,425,391,877,359,279,139,956,261,645,737,643,69,583,931,606,348'
    ',818,865,489,392,599,133,99,524,110,411,745,942,768,1002,296,416,983,589,909,824,851,748,168,684'
    ',420,748,378,545,133,36,96,854,484,697,635,209,495,343,936,302,731,843,710,709,892,521,7,931,107'
    ',307,489,488,477,298,572,895,266,944,422,205,886,647,489,349,39,873,366,47,448,813,143,598,408,4'
    '80,1017,675,157,116,307,278,261,522,293,605,245,905,361,745,268,939,1013,730,1004,34,916,43,714,'
    '762,739,1010,859,712,276,949,170,464,472,188,31,660,876,7,563,254,384,80,868,13,642,940,346,328,'
    '63,370,939,435,910,536,413,810,657,475,611,683,355,740,527,255,283,917,442,609,447,185,792,248,9'
    '40,480,301,623,892,419,115,699,917,317,717,654,218,110,720,337,623,903,12,414,419,733,423,507,34'
    '3,924,824,890,145,690,171,89,123,6,943,624,771,35,551,708,212,114,73,122,699,873,522,987,50,884,'
    '416,54,419,585,865,4,567,218,60,885,935,208,732,301,265,182,303,485,559,864,404,651,365,965,847,'
    '637,987,306,155,27,111,803,356,211,460,586,641,57,735,980,210,223,300,176,260,796,822,852,118,83'
    '8,265,965,64,535,97,638,79,334,625,399,840,9,87,138,767,49,31,931,924,747,810,585,771,111,51,284'
    ',1020,603,891,441,665,386,48,225,798,980,537,990,430,978,623,12,944,576,929,450,234,121,696,732,'
    '398,596,968,191,988,249,680,352,923,671,562,311,670,291,223,687,833,918,370,553,655,191,112,791,'
    '907,605,881,154,281,338,561,756,195,737,107,922,230,247,209,101,881,227,871,798,185,887,432,226,'
    '566,813,448,933,657,599,539,1001,92,47,778,416,37,821,236,71,618,1010,148,1001,362,473,770,43,38'
    '8,440,64,535,139,638,499,237,505,225,102,599,548,735,270,229,752,644,41,900,291,961,790,18,683,2'
    '1,529,467,767,123,995,453,104,992,335,793,438,17,58,661,426,433,531,491,848,563,902,928,652,987,'
    '713,775,37,478,605,318,589,463,814,30,62,810,226,248,702,531,39,725,600,759,697,325,709,853,424,'
    '908,67,27,665,950,422,1006,377,240,782,314,748,883,316,702,481,724,594,425,85,10,702,709,250,216'
    ',718,538,464,160,797,677,935,858,473,483,981,132,574,28,924,287,74,447,779,57,708,739,984,494,98'
    '9,329,887,275,291,318,53,399,870,740,372,154,271,861,797,226,782,217,862,155,864,473,210,846,519'
    ',879,133,1012,958,460,789,616,305,655,505,297,491,964,840,861,179,774,525,245,102,338,57,111,307'
    ',691,732,157,371,404,603,355,752,516,547,3,418,495,1021,626,434,634,551,129,491,359,787,84,227,1'
    '39,330,317,395,286,61,747,88,437,121,506,272],"sampling_params":{"temperature":0.0,"max_new_toke'
    'ns":26,"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-'
    '1,"stream":false}},{"id":"r16_w","offset_ms":603.3,"cancel_after_ms":null,"copies":1,"body":{"in'
    'put_ids":[800,120,984,66,289,806,408,164,439,245,445,804,263,320,938,193,836,594,688,826,37,683,'
    '193,724,1001,953,237,167,817,474,792,154,349,147,855,610,741,413,837,281,461,308,830,1003,728,22'
    '6,316,773,136,888,721,239,17,397,133,774,74,533,610,158,430,632,374,903,112,438,668,771,637,916,'
    '566,771,701,568,292,842,478,774,480,915,997,490,92,62,29,84,773,668,875,330,621,972,234,830,439,'
    '139,586,848,777,416,1007,168,922,59,723,149,307,149,874,1003,384,1011,737,1004,189,398,220,53,10'
    '03,842,178,515,694,292,498,165,401,979,403,187,705,637,938,538,297,229,126,690,232,235,272,797,8'
    '37,923,657,725,310,839,40,622,366,460,293,243,997,368,471,126,389,91,266,321,642,986,416,666,912'
    ',4,368,515,370,629,133,203,900,87,1003,472,743,485,378,187,330,83,924,121,912,214,155,98,976,778'
    ',641,1004,708,942,345,730,156,774,195,748,104,535,47,705,986,944,800,444,449,284,590,373,935,660'
    ',262,450,816,202,417,613,738,553,556,931,207,850,916,32,955,10,541,484,794,787,961,259,588,196,3'
    '11,508,810,642,54,603,353,865,360,476,96,268,725,233,752,742,185,583,5,584,214,191,409,700,922,3'
    '6,247,37,1000,687,280,248,294,660,898,841,867,934,689,877,951,378,606,832,882,114,726,810,73,264'
    ',861,724,672,685,136,397,308,537,663,792,538,320,702,944,106,905,113,603,605,972,355,484,368,640'
    ',564,744,264,559,735,668,989,659,318,396,661,984,27,914,199,467,995,749,429,562,1009,173,849,815'
    ',827,453,257,719,199,170,614,215,339,850,487,711,873,115,348,957,695,465,941,706,583,117,818,998'
    ',693,910,351,726,412,129,566,555,410,566,1003,833,381,652,134,303,620,946,153,86,160,772,9,514,3'
    '85,633,320,321,143,280,844,996,221,559,403,777,364,634,746,44,890,724,839,759,270,43,32,888,823,'
    '738,61,864,578,809,64,408,828,1006,604,419,735,325,810,554,382,242,819,848,574,824,295,532,951,7'
    '17,231,601,552,142,498,220,171,562,962,994,910,741,380,563,850,835,324,66,546,826,762,243,195,65'
    '4,437,938,902,449,778,404,402,972,67,1000,331,35,403,38,799,115,604,798,688,489,464,286,83,320,6'
    '04,102,196,324,211,921,996,845,295,649,799,238,728,71,289,724,257,356,677,924,483,37,535,369,493'
    ',726,424,353,186,833,733,358,254,196,753,599,394,180,693,899,133,516,371,1009,162,665,661,208,53'
    '5,954,823,141,211,347,82,445,956,361,253,35,319,959,48,571,22,158,942,568,206,672,252,655,179,91'
    '3,984,879,937,850,579,946,567,559,684,517,177,88,436,565,895,389,396,940,816,851,181,730,313,707'
    ',322,775,727,447,1005,33,699,45,422,252,693,360,829,388,541,32,40,475,506,1013,340,838,977,877,7'
    '05,832,373,418,481,426,403,990,142,481,502,752,654,461,506,719,804,174,389,481,341,462,546,708,4'
    '52,251,833,551,406,140,247,313,366,51,770,938,950,79,343,882,451,220,777,798,759,890,489,6,1013,'
    '406,565,34,343,544,205,880,379,696,55,657,500,518,169,544,6,680,338,700,608,1018,361,488,512,378'
    ',841,550,769,404,873,27,16,968,837,125,98,724,746,845,677,733,98,972,876,845,774,806,785,266,564'
    ',219,3,183,946,915,937,575,193,277,842,705,307,81,316,961,117,609,157,817,806,709,637,34,463,915'
    ',590,914,847,676,906,686,277,362,646,572,1023,65,685,245,520,578,949,512,755,862,81,559,633,10,5'
    '72,792,653,47,1021,3,347,287,635,23,684,977,546,793,471,986,248,107,437,220,934,515,216,139,186,'
    '689,476,902,505,359,1015,361,620,608,376,457,8,337,223,301,417,697,128,153,957,99],"sampling_par'
    'ams":{"temperature":0.0,"max_new_tokens":41,"ignore_eos":true,"n":1},"return_logprob":true,"top_'
    'logprobs_num":5,"logprob_start_len":-1,"stream":false}},{"id":"r17_w","offset_ms":620.1,"cancel_'
    'after_ms":null,"copies":1,"body":{"input_ids":[63,802,576,845,933,252,64,545,532,911,647,600,584'
    ',906,25,717,20,766,726,687,339,732,208,999,199,24,770,855,731,601,350,975,965,591,468,135,33,131'
    ',770,626,34,574,379,720,109,203,729,396,564,778,795,550,945,790,543,431,487,844,1012,467,34,358,'
    '524,452,113,246,412,804,162,786,203,897,176,133,993,298,344,587,290,56,632,438,986,206,954,76,21'
    ',822,41,223,970,61,426,807,853,817,439,530,31,945,192,637,173,802,220,105,696,417,780,950,637,46'
    '8,343,815,388,630,787,102,609,80,895,95,942,651,480,61,399,332,784,291,303,153,657,875,27,789,53'
    '9,966,438,572,249,85,743,284,322,794,179,806,749,39,461,158,170,243,769,564,323,462,243,705,852,'
    '457,787,294,339,362,740,440,87,496,839,334,862,775,721,839,898,53,919,499,136,881,890,772,424,87'
    ',118,568,708,55,374,227,406,834,650,900,196,107,227,986,145,480,949,41,79,449,763,452,572,414,84'
    '0,515,160,515,696,594,235,447,211,1005,519,21,973,274,124,538,927,512,1007,873,402,909,847,169,2'
    '67,632,486,777,788,975,60,67,320,295,860,456,332,5,690,67,654,8,580,768,262,583,339,500,823,997,'
    '491,319,915,880,709,717,766,342,752,968,350,522,590,805,142,339,535,507,99,958,967,172,434,24,99'
    '6,895,909,237,332,198,165,73,860,607,853,317,969,894,316,823,312,673,411,825,733,533,116,277,274'
    ',105,938,658,370,197,28,78,772,489,448,10,379,520,146,882,339,365,801,162,463,505,860,580,640,37'
    '9,19,930,256,911,1008,112,726,214,632,11,363,744,590,765,426,30,471,132,374,78,215,488,130,293,8'
    '73,672,408,164,486,135,922,249,801,596,263,136,373,846,290,712,548,214,80,182,359],"sampling_par'
    'ams":{"temperature":0.0,"max_new_tokens":48,"ignore_eos":true,"n":1},"return_logprob":true,"top_'
    'logprobs_num":5,"logprob_start_len":-1,"stream":false}},{"id":"r18_w","offset_ms":638.2,"cancel_'
    'after_ms":null,"copies":1,"body":{"input_ids":[545,338,765,162,106,555,22,768,793,578,684,1010,5'
    '08,582,777,874,1021,639,352,965,199,799,339,67,159,600,438,797,899,312,991,157,337,290,628,396,2'
    '04,165,229,113,586,515,885,676,180,609,266,350,187,892,602,741,336,634,506,727,803,291,76,848,61'
    '2,450,815,638,373,177,633,873,465,26,216,879,1015,176,386,1018,113,305,428,787,601,477,1018,123,'
    '108,348,556,796,231,139,406,909,253,47,787,251,972,767,848,815,734,630,622,957,380,228,30,347,94'
    '6,456,261,257,304,887,490,422,582,496,836,852,174,446,198,858,112,895,362,669,949,349,830,223,44'
    '8,10,184,351,349,672,312,833,461,687,142,114,709,524,899,43,1023,741,452,437,154,508,12,116,866,'
    '609,796,379,30,524,251,656,466,358,451,777,897,32,44,721,351,340,681,496,175,414,239,457,763,938'
    ',258,539,243,41,79,877,876,324,292,584,307,351,648,766,802,534,1011,380,296,218,118,868,323,161,'
    '250,293,743,50,386,265,837,910,459,587,661,708,815,112,954,307,828,705,334,670,871,383,21,361,24'
    ',544,346,44,930,391,606,23,666,959,1014,538,12,4,663,244,401,18,1001,131,813,185,293,1006,731,69'
    '7,390,568,125,477,508,45,146,848,1007,441,125,507,767,850,309,343,271,398,439,565,146,372,370,85'
    '5,243,771,925,454,480,287,44,380,889,148,156,989,19,438,433,984,769,480,455,825,969,97,724,719,5'
    '72,314,660,385,648,238,742,192,492,757,901,307,652,644,3,837,311,322,140,80,785,188,409,396,639,'
    '472,946,3,208,1003,68,559,784,174,243,607,426,82,500,113,645,147,483,830,863,954,227,86,832,153,'
    '143,571,683,524,252,926,759,365,230,475,400,455,162,596,787,269,272,913,667,555,862,660,558,903,'
    '1018,788,602,727,938,167,523,503,190,79,675,46,482,500,977,704,985,276,281,307,855,400,308,310,5'
    '51,256,137,301,956,916,176,918,962,467,124,143,985,156,362,216,376,73,519,501,162,469,827,640,31'
    '7,926,940,32,337,145,652,973,560,803,425,158,619,895,460,592,664,78,703,802,434,648,506,74,659,1'
    '69,688,387,23,963,731,922,972,83,913,73,72,930,141,479,458,915,727,964,648,907,748,615,984,694,6'
    '88,871,23,731,685,909,755,323,96,437,935,526,288,397,515,724,576,961,642,345,99,11,115,85,238,80'
    '7,761,838,241,498,526,578,181,9,62,534,662,864,880,731,443,320,621,986,575,378,408,611,51,633,45'
    '1,840,835,269,930,296,17,508,395,871,947,669,286,487,959,429,329,968,985,626,601,854,6,142,37,67'
    '3,155,455,85,614,498,467,36,715,437,82,942,413,460,490,212,969,1015,119,126,172,446,116,809,362,'
    '675,48,388,362,302,114,678,901,348,672,909,738,1019,522,874,607,278,940,621,681,689,360,806,427,'
    '327,716,314,152,686,941,262,701,756,480,48,25,3,837,295,350,53,322,53,829,239,808,727,487,922,54'
    '7,945,241,612,946,350,811,751,402,257,102,227,846,704,666,169,698,338,494,603,590,422,14,115,627'
    ',985,805,148,986,50,973,480,270,514,122,525,310,86,51,72,909,669,855,790,657,797,347,124,85,751,'
    '776,530,318,360,460,347,235,478,880,213,599,131,592,286,59,827,408,329,214,294,210,27,344,763,73'
    '6,530,474,327,752,369,853,616,210,972,885,176,540,866,673,540,259,703,101,872,355,767,275,532,71'
    '2,221,1004,261,927,792,33,968,551,305,403,755,892,651,713,214,739,848,126,530,31,583,985,985,516'
    ',1022,325,271,292,373,633,915,400,359,355,396,929,129,49,327,948,201,577,961,818,20,632,59,659,9'
    '62,447,530,927,524,684,657,530,503,735,571,427,472,388,345,365,238,897,307,689,647,439,790,805,4'
    '02,135,739,177,9,429,827,514,901,799,212,185,166,244,113,15,977,332,882,964,407,1009,147,767,701'
    ',527,166,172,855,662,671,398,405,437,830,95,338,708,704,430,624,28,708,858,133,117,92,729,95,321'
    ',411,953,363,402,607,57,783,501,693,189,622,506,475,680,115,838,581,485,73,108,14,175,823,470,15'
    '2,144,919,694,405,304,574,442,297,619,852,873,801,936,962,282,55,169,440,298,621,83,551,708,506,'
    '783,933,153,976,649,1022,475,806,14,56,553,961,944,805,237,296,871,997,211,328,890,745,587,1011,'
    '756,900,843,328,538,316,540,715,595,884,546,784,694,99,676,370,396,670,540,508,845,729,571,208,4'
    '26,971,59,592,247,939,446,724,762,937,192,476,801,283,516,977,799,637,678,268,435,698,756,245,78'
    '5,738,606,587,352,1010,545,926,827,321,335,18,522,900,39,886,646,41,717,451,283,152,665,891,586,'
    '480,325,910,554,5],"sampling_params":{"temperature":0.0,"max_new_tokens":23,"ignore_eos":true,"n'
    '":1},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,"stream":false}},{"id":"r'
    '19_w","offset_ms":763.2,"cancel_after_ms":null,"copies":1,"body":{"input_ids":[173,144,832,599,7'
    '17,250,254,310,58,917,198,144,494,599,802,973,430,839,143,644,837,124,585,391,517,545,44,334,683'
    ',307,116,480,144,842,259,215,207,499,30,729,956,185,1008,618,408,568,11,179,514,412,871,866,402,'
    '5,450,470,779,954,839,724,585,324,557,597,866,784,194,58,973,1001,1013,257,360,144,658,665,379,4'
    '72,180,860,538,306,929,462,537,863,216,41,643,930,896,659,251,449,309,528,797,531,674,37,86,705,'
    '7,482,1017,527,791,948,76,440,547,463,361,822,96,286,817,672,50,459,731,438,648,967,132,159,555,'
    '93,587,526,45,733,794,568,544,22,344,503,363,149,478,496,385,735,110,594,1014,236,331,161,723,22'
    '8,482,114,606,334,710,988,834,260,784,27,308,635,44,31,710,227,302,574,705,228,306,314,608,1015,'
    '419,814,182,811,11,124,519,45,322,592,585,529,84,458,455,940,695],"sampling_params":{"temperatur'
    'e":0.0,"max_new_tokens":32,"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"'
    'logprob_start_len":-1,"stream":false}}],"probes":[{"id":"r01","prime":{"input_ids":[173,144,832,'
    '599,717,250,254,310,58,917,198,144,494,599,802,973,430,839,143,644,837,124,585,391,517,545,44,33'
    '4,683,307,116,480,144,842,259,215,207,499,30,729,956,185,1008,618,408,568,11,179,514,412,871,866'
    ',402,5,450,470,779,954,839,724,585,324,557,597,866,784,194,58,973,1001,1013,257,360,144,658,665,'
    '379,472,180,860,538,306,929,462,537,863,216,41,643,930,896,659,251,449,309,528,797,531,674,37,86'
    ',705,7,482,1017,527,791,948,76,440,547,463,361,822,96,286,817,672,50,459,731,438,648,967,132,159'
    ',555,93,587,526,45,733,794,568,544,22,344,503,363,149,478,496,385,735,110,594,1014,236,331,161,7'
    '23,228,482,114,606,334,710,988,834,260,784,27,308,635,44,31,710,227,302,574,705,228,306,314,608,'
    '1015,419,814,182,811,11,124,519,45,322,592,585,529,84,458,455,940],"sampling_params":{"temperatu'
    're":0.0,"max_new_tokens":1,"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"'
    'logprob_start_len":-1,"stream":false}}],"health":"/health","others":17,"model_files":null}'
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
        # vLLM: reset_external empties the KV connector's store too (offloading's CPU tier),
        # which the plain call leaves full.
        path = "/flush_cache" if kind == "sglang" else "/reset_prefix_cache?reset_external=true"
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
    promise = FINDING.get("promise")
    if expected and promise:
        # A near-tie flip is the bug only because the server's mode promised there would be none.
        return "%s to diverge, which breaks the promise of %s: %s (%s)" % (
            expected, promise["mode"], promise["words"], promise["source"])
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
