#!/usr/bin/env python3
"""Standalone reproduction of servefuzz finding finding_00072_1592014320.json (standard library only).

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
    '{"name":"finding_00072_1592014320.json","bug":"hang (sglang:liveness:hang:n>1,prefix=shared)","e'
    'xpected":[],"expect_failure":"hang","expect_cached":{},"choices":{},"base_url":"http://127.0.0.1'
    ':53931","dialect":"sglang","path":"/generate","flush":"sglang","model":null,"requests":[{"id":"r'
    '02","offset_ms":29.2,"cancel_after_ms":null,"copies":1,"body":{"input_ids":[645,669,717,47,202,5'
    '10,488,525,912,491,515,775,215,218,162,426,470,792,977,498,406,504,894,459,285,451,330,312,260,7'
    '94,839,822,413,142,608,484,859,757,637,637,148,936,921,611,968,829,319,425,152,866,991,407,438,1'
    '44,910,296,865,769,579,102,526,822,970,648,586,244,144,11,104,455,416,961,748,634,458,525,365,54'
    '5,300,537,878,232,575,141,885,441,788,607,638,953,23,868,276,115,562,938,124,125,386,894,704,496'
    ',193,469,778,58,200,789,552,843,204,646,260,73,148,153,939,777,624,1012,14,743,579,672,145,114,7'
    '09,195,987,292,362,366,37,361,767,350,387,563,40,19,968,80,762,430,330,342,95,673,974,377,917,84'
    '6,312,10,440,829,49,330,434,898,449,249,370,724,989,255,61,346,173,411,708,193,13,913,878,141,96'
    '4,687,43,766,330,465,548,466,52,110,1021,250,897,245,703,582,443,872,819,509,365,839,274,414,510'
    ',170,645,751,538,419,77,156,239,281,1019,543,140,895,399,249,11,353,893,854,813,55,868,624,519,3'
    '52,297,563,188,151,320,507,929,350,647,154,749,356,197,261,341,1015,368,161,59,418,112,60,308,25'
    '4,161,767,123,130,898,842,26,33,156,473,63],"sampling_params":{"temperature":0.0,"max_new_tokens'
    '":11,"ignore_eos":true,"n":2},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,'
    '"stream":false}},{"id":"r02_b2","offset_ms":31.0,"cancel_after_ms":null,"copies":1,"body":{"inpu'
    't_ids":[645,669,717,47,202,510,488,525,912,491,515,775,215,218,162,426,470,792,977,498,406,504,8'
    '94,459,285,451,330,312,260,794,839,822,413,142,608,484,859,757,637,637,148,936,921,611,968,829,3'
    '19,425,152,866,991,407,438,144,910,296,865,769,579,102,526,822,970,648,586,244,144,11,104,455,41'
    '6,961,748,634,458,525,365,545,300,537,878,232,575,141,885,441,788,607,638,953,23,868,276,115,562'
    ',938,124,125,386,894,704,496,193,469,778,58,200,789,552,843,204,646,260,73,148,153,939,777,624,1'
    '012,14,743,579,672,145,114,709,195,987,292,362,366,37,361,767,350,387,563,40,19,968,80,762,430,3'
    '30,342,95,673,974,377,917,846,312,10,440,829,49,330,434,898,449,249,370,724,989,255,61,346,173,4'
    '11,708,193,13,913,878,141,964,687,43,766,330,465,548,466,52,110,1021,250,897,245,703,582,443,872'
    ',819,509,365,839,274,414,510,170,645,751,538,419,77,156,239,281,1019,543,140,895,399,249,11,353,'
    '893,854,813,55,868,624,519,352,297,563,188,151,320,507,929,350,647,154,749,356,197,261,341,1015,'
    '368,161,59,418,112,60,308,254,161,767,123,130,898,842,26,481,591,64,939],"sampling_params":{"tem'
    'perature":0.0,"max_new_tokens":11,"ignore_eos":true,"n":2},"return_logprob":true,"top_logprobs_n'
    'um":5,"logprob_start_len":-1,"stream":false}},{"id":"r02_b","offset_ms":31.1,"cancel_after_ms":n'
    'ull,"copies":1,"body":{"input_ids":[645,669,717,47,202,510,488,525,912,491,515,775,215,218,162,4'
    '26,470,792,977,498,406,504,894,459,285,451,330,312,260,794,839,822,413,142,608,484,859,757,637,6'
    '37,148,936,921,611,968,829,319,425,152,866,991,407,438,144,910,296,865,769,579,102,526,822,970,6'
    '48,586,244,144,11,104,455,416,961,748,634,458,525,365,545,300,537,878,232,575,141,885,441,788,60'
    '7,638,953,23,868,276,115,562,938,124,125,386,894,704,496,193,469,778,58,200,789,552,843,204,646,'
    '260,73,148,153,939,777,624,1012,14,743,579,672,145,114,709,195,987,292,362,366,37,361,767,350,38'
    '7,563,40,19,968,80,762,430,330,342,95,673,974,377,917,846,312,10,440,829,49,330,434,898,449,249,'
    '370,724,989,255,61,346,173,411,708,193,13,913,878,141,964,687,43,766,330,465,548,466,52,110,1021'
    ',250,897,245,703,582,443,872,819,509,365,839,274,414,510,170,645,751,538,419,77,156,239,281,1019'
    ',543,140,895,399,249,11,353,893,854,813,55,868,624,519,352,297,563,188,151,320,507,929,350,647,1'
    '54,749,356,197,261,341,1015,368,161,59,418,112,60,308,254,161,767,123,130,898,842,26,1017,286,74'
    '6,184],"sampling_params":{"temperature":0.0,"max_new_tokens":11,"ignore_eos":true,"n":2},"return'
    '_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,"stream":false}},{"id":"r03","offset_'
    'ms":34.5,"cancel_after_ms":null,"copies":1,"body":{"input_ids":[645,669,717,47,202,510,488,525,9'
    '12,491,515,775,215,218,162,426,470,792,977,498,406,504,894,459,285,451,330,312,260,794,839,822,4'
    '13,142,608,484,859,757,637,637,148,936,921,611,968,829,319,425,152,866,991,407,438,144,910,296,8'
    '65,769,579,102,526,822,970,648,586,244,144,11,104,455,416,961,748,634,458,525,365,545,300,537,87'
    '8,232,575,141,885,441,788,607,638,953,23,868,276,115,562,938,124,125,386,894,704,496,193,469,778'
    ',58,200,789,552,843,204,646,260,73,148,153,939,777,624,1012,14,743,579,672,145,114,709,195,987,2'
    '92,362,366,37,361,767,350,387,563,40,19,968,80,762,430,330,342,95,673,974,377,917,846,312,10,440'
    ',829,49,330,434,898,449,249,370,724,989,255,61,346,173,411,708,193,13,913,878,141,964,687,43,766'
    ',330,465,548,466,52,110,1021,250,897,245,703,582,443,872,819,509,365,839,274,414,510,170,645,751'
    ',538,419,77,156,239,281,1019,543,140,895,399,249,11,353,893,854,813,55,868,624,519,352,297,563,1'
    '88,151,320,507,929,350,647,154,749,356,197,261,341,1015,368,161,59,418,112,60,308,254,161,767,12'
    '3,130,898,842,26,490,548,332,745,121,257,611,351,831,359,378,439,912,987,742,54,350,639,164,464,'
    '734,309,254,256,305,104,146,564,735,451,545,253,184,503,358,450,15,432,58,498,617,267,190,509,75'
    '1,506,43,629,455,125,537,715,50,379,50,499,207,424,352,246,618,685,643,249,103,221,943,894,415,4'
    '12,536,18,211,836,804,163,931,356,381,851,646,216,854,42,552,89,584,953,746,635,1023,872,717,389'
    ',185,408,647,966,451,407,516,86,20,372,801,556,414,379,57,123,690,861,598,718,25,712,496,411,922'
    ',494,628,312,578,787,333,88,519,1008,330,237,380,935,16,581,332,468,274,824,253,958,220,230,279,'
    '827,717,742,715,987,864,115,789,388,400,202,185,675,884,644,261,170,530,983,425,11,916,96,573,78'
    '5,516,701,901,986,579,894,709,429,455,803,924,96,118,9,414,934,332,319,982,176,344,465,652,489,1'
    '55,188,563,224,189,251,225,839,186,351,765,357,102,56,420,175,74,608,71,939,978,170,833,1014,993'
    ',936,55,669,370,677,737,679,150],"sampling_params":{"temperature":0.0,"max_new_tokens":24,"ignor'
    'e_eos":true,"n":4},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,"stream":fa'
    'lse}},{"id":"r04_l","offset_ms":39.5,"cancel_after_ms":null,"copies":1,"body":{"input_ids":[645,'
    '669,717,47,202,510,488,525,912,491,515,775,215,218,162,426,470,792,977,498,406,504,894,459,285,4'
    '51,330,312,260,794,839,822,413,142,608,484,859,757,637,637,148,936,921,611,968,829,319,425,152,8'
    '66,991,407,438,144,910,296,865,769,579,102,526,822,970,648,586,244,144,11,104,455,416,961,748,63'
    '4,458,525,365,545,300,537,878,232,575,141,885,441,788,607,638,953,23,868,276,115,562,938,124,125'
    ',386,894,704,496,193,469,778,58,200,789,552,843,204,646,260,73,148,153,939,777,624,1012,14,743,5'
    '79,672,145,114,709,195,987,292,362,366,37,361,767,350,387,563,40,19,968,80,762,430,330,342,95,67'
    '3,974,377,917,846,312,10,440,829,49,330,434,898,449,249,370,724,989,255,61,346,173,411,708,193,1'
    '3,913,878,141,964,687,43,766,330,465,548,466,52,110,1021,250,897,245,703,582,443,872,819,509,365'
    ',839,274,414,510,170,645,751,538,419,77,156,239,281,1019,543,140,895,399,249,11,353,893,854,813,'
    '55,868,624,519,352,297,563,188,151,320,507,929,350,647,154,749,356,197,261,341,1015,368,161,59,4'
    '18,112,60,308,254,161,767,123,130,898,842,26,131,516,560,104,526,816,217,340,97,967,439,108,425,'
    '363,359,556,313,767,762,31,212,89,157,103,553,555,936,351,443,1010,538,673,388,520,681,775,522,7'
    '99,698,339,917,858,65,289,963,366,850,848,662,590,161,349,1017,253,932,53,919,174,309,461,866,75'
    '3,830,552,824,830,729,78,103,282,364,115,828,152,80,216,659,423,321,565,913,629,1005,989,263,559'
    ',789,529,603,838,88,976,163,1013,522,961,384,267,458,911,632,198,586,921,32,390,976,842,68,665,4'
    '52,164,86,985,1014,357,375,481,284,710,847,62,462,75,715,290,63,1012,934,895,153,120,753,773,441'
    ',847,846,500,351,567,829,1020,13,329,124,819,609,600,869,1009,853,243,43,143,927,330,875,176,101'
    '7,1009,49,913,346,620,984,79,568,631,125,650,678,106,64,61,1015,533,583,390,72,123,92,951,396,86'
    '6,932,817,563,745,232,813,298,346,393,886,750,976,303,377,800,912,174,579,927,259,539,917,709,87'
    '2,978,263,1009,964,25,858,624,250,413,503,600,252,395,173,57,941,66,590,766,520,653,967,749,880,'
    '868,373,421,28,849,942,203,757,738,645,632,944,984,287,697,336,130,319,3,703,326,249,626,300,655'
    ',320,1008,129,742,838,987,408,266,757,259,931,329,153,66,148,57,360,629,821,226,991,904,214,839,'
    '978,52,186,12,298,427,904,17,197,449,421,1013,149,218,268,88,225,248,786,721,600,834,281,941,415'
    ',472,253,156,894,672,779,976,184,864,694,688,944,4,646,777,280,857,51,416,680,899,977,410,377,85'
    '7,111,745,306,58,561,843,720,359,4,600,92,968,564,1023,244,401,29,250,959,899,742,39,577,287,410'
    ',815,413,452,937,133,588,484,182,83,615,754,377,177,575,904,653,507,336,610,626,771,962,864,465,'
    '534,44,208,324,667,333,367,51,843,219,741,870,846,958,311,307,483,590,513,982,71,608,388,995,788'
    ',745,29,149,44,25,334,588,1001,999,67,993,72,886,41,675,409,461],"sampling_params":{"temperature'
    '":0.0,"max_new_tokens":13,"ignore_eos":true,"n":2},"return_logprob":true,"top_logprobs_num":5,"l'
    'ogprob_start_len":-1,"stream":false}}],"probes":[],"health":"/health","others":4,"model_files":{'
    '"format":"hf","seed":0,"dtype":"float32","adapters":false,"tokenizer":"eNrNfVe79NhS3j2/4nic7WPY6'
    'ijhuLcHJ7CNDY6Ax+ppdVtuhbZCA42PH4ITOQcT7AFMzjnD88we/pelqlLrrfUda63a3HDzzai2eqlWqnorrFpf8zmf+tR7t'
    '6xp87p67/M/9V70uU/vfXqkdU1ffZh2TK76oiDqNT0e8+qMpIGSHT/o6ktWtQP9ywbapz71NfTv8Nf8ONCePj09flhXXVZ14'
    '5f+Rvu33nvQ26HRIvvgK+tmfP+UFm32+FvRdk1+fYfcfHZyVTdlWuT37N2G2mv2YZ4WA33oXEbUz3z6s7AbfVZ2P+9PLb+rz'
    '8rvMFV/Ghge/v0KWieP3zVqQTUZrx35A/fsve6rr9nYi5ev7rIvym5ZIT0ZV9sHw29O+Vd90F7TDzPNw7Bq8/KD+nRqs64VN'
    'uQvfZt90GTn7Ktm7j7DHNRtNzRZf5i1ba14O2Yf1se3cgWffgNT5fDh4rN8+Iu/YPrksamvdd8Bv2N71YVHU5PHZZFX/bAEP'
    'mj7w7gGhFv9WlYdBzZpjQzvnd75+2lkd/iEM+aHYTQ+GAjFIf3Q/Vt+HqY9+6DMmnPWOn+71R+mh0cfP8USAYUFbTncjrymc'
    'cH/meFp/Xj68veGx83j8c8OT9vH058bnnaPpz8/PO0fT39heIofT39xeEoeT39pZGFm6i+PjzNLf2V8nPn5q+PjzNCnx8eZo'
    'b82Ps4cfe74OLP0eePjzNPT+DgzFY2PM1ercRhmrtbj48zVZnycudqOjzNXu/Fx5mo/Ps5cxePjzFUyPs5cff74OHP118fHm'
    'au/MU7HzNXfHB9nrsapW89c/e3xcebq74yPM1fP4+PM1cv4OHP1d8fHmav3x8eZqy8YH2eu/t64Kmau/v74OHP1D8bHmat/O'
    'D7OXP2j8XHm6gvHx5mrLxofZ67+8fg4c/VPxseZq386Ps5cffG4Omeu/tn4OHP1z8fHmasvGR9nrr50fJy5+hfj48zVvxwfZ'
    '67+1fg4c/Wvx8eZq38zPs5c/dtxl8xcfdn4OHP15V8+Ps9sfcX4OLP178bHma0PxseZrX8/Ps5spePjzNYoCXYzWx+OjzNbo'
    '67Zz2yNwnA/s3UaH2euRniyn7n6D+PjzFU+Ps5c/cfxceZqFGD7matRBu9nrsrxceZqFLPxzFU9Ps5cjaoznrn6T+PjzNWoV'
    'uKZq1E4xjNXo1yPZ6768XHm6jY+zlx95fg4czVK7WTm6qvHx5mr+/g4c/U14+PM1X8eH2euPjM+zlz9l/Fx5urjHx2fZ7Y+/'
    'rHxeebr4x8fn2fGPv6/JEpn1j7+CSLMzH38k0SY2fv4p4gwM/jxTxNhZvHjnyHCzOTHP0sEYPPniAB8/jwRgNFfJAJw+ksk5'
    'YHTXyYCcPorRABOf5UIwOmvEQE4/XUiAKe/QQTg9DeJAJz+FhGA098mAnD6O6SAgNPfJQJw+ntEAE5/nwjA6R8QATj9QyIAp'
    '39EhJnT168lwszp69cRYeb09euJMHP6+g2kG2dOX/8rEWZOX/8bEWZOX/87EWZOX/8HEWZOX/8nEWZOX7+RCMDpNxEBOP1mI'
    'gCn30IE4PRbSW0Dp99GBOD024kAnH4HEYDT7yQCcPpdRABOv5sIwOn3EAE4/V4iAKffRwTg9PsJUQCnP0AE4PR/EQE4/UEiA'
    'Kc/RATg9IeJAJz+CBGA0/9NBOD0/xABOP2ICMDpjxLYAU5/jAjA6Y8TATglcQHq5ZXEBSiYVxIXoGJeSVyAknklcQFq5pXEB'
    'SiaVxIXoGpeSVyAsnklcQHq5vUXiACckvwAlfNK8gOUzivJD1A7ryQ/QPG8kvwA1fNK8gOUzyvJD1A/ryQ/QAG9kvwAFfRK8'
    'gOU0CvJD1BDryQ/QBG9kvwAVfRK8gOU0SvJD1BHryQ/QCG9kvwAlfRK8gOU0ickP0AtfULyAxTTJyQ/QDV9QvIDlNMnJD9AP'
    'X1C8gMU1CckP0BDfULyA1TUJyQ/QEd98o0ErIHTbyICcPrNRABOv4UIwOm3EgE4/TYiAKffTgTg9DuIAJx+JxGA0+8iAnD63'
    'YT5gdPvIQJw+r1EAE6/jwjA6fcTATj9ASIAp/+LCMDpDxIBOP0hIgCnP0wE4PRHyBwBTv83EYDT/0ME4PQjIgCnP0oE4PTHi'
    'ACc/jgRgNP/SwTg9CeIAJz+JBGA058iSwk4/WkiAKc/QwTg9GeJAJz+HBGA058nAnD6C0QATn+RCMDpLxEBOP1lIgCnv0JGH'
    'HD6q0QATn+NCMDprxMBOP0NIgCnv0kE4PS3iACc/jYRgNPfIQJw+rtEAE5/j+xL4PT3iQCc/gERgNM/JAJw+kdEmDn9468lw'
    'szpH38dEWZO//jriTBz+sffQISZ0zQnAnD6EZNAS9U9ESJ8hyi4VA9EmbltOyJsVMMF0WBoPyLXHeiqjF+ZOe4bIswcX/iNm'
    'eOO3gBdlZdEmPnNiRfQVVfuIyiroQNCAyOJvgT6KuUvzdyyf2oFCmugTI3PLGf8u5nlnn4GSuuTj05EUWOcz43FK/UH6iAoM'
    'PaBrWI92hXRZvYz/hlYn9xD0GJtx2MFeqzuW6LM3F94TkCT5fQKaLLhlakpUGc9MQDqTHoC+oyZBn2WMWGneobNz8ynTIDFz'
    'a3PnGcd+WaeVGMN0XDkz0SZ+Sb3//oJ+W6JMvNdM2ELw8btzowXGVNmhuuCCLBQuJWZ4bok79HMcEpvgH6re34FuKXPgIIjZ'
    '/QaFFzdMwU34oVJuDhosEDJ5QV/CqUHjQyoOVosa1BzPLwrvbALGQul7C5EmdnuqW3QdikTtsgQLaA1KLyauAaF13JnUeN9J'
    'C0B2/Qr0Hnlo+21wzr8BcacmUUN+BEP+1rvSRoeUIPPORFw2GlkUA9+xA1hB/j7WmoX0lPUhx8RW6AQTz0RVlrwUXOgFNOGm'
    'ACtWKRMAe9Mw1JnvdF7s5RPYAfkx7F+cWozAfHDuwYU5cAKicA16MoDSbL1VgtFYmarZoBJuPBL2ttbXPk0JVvdiWr+LPbjQ'
    'PJ+vcWOXIkC6mj6CGhQonF7O5wL6qxSo0yZO3Ej+bcGPVrSPlFKlIXCDrtA6ne92+teycDtkH9+US+lChjeK2nJXwfdemT9s'
    'AbtSiuDV7rSsKSo13u9IRoZhf1WLUniar9TNH5v7lLDom8fq7eIhN25k18c4Ex1I0oEm5CmNcYusCiO15pZ6JpSttzi3IVK9'
    'hQo2yPBqHWsp6SRCQaFm3VHoiSop6kTCeoB+hkaj+NGpn6Axj3zQCa4oIgxULljX6f39CSwdE/0LPAndC9aEWyge0vpBmjfk'
    'UQiauNoYNn2G6WED/T1zZPe5K2M7Aa08blnil5Yc7c2oJbvtXxKdypnou5VBwxDx1jsbZ70lul4YDcR4uZi+lyke0ZtgsquU'
    'iLMXTrmRJh7dGbCFpYTN7yDVfzAi5tISS3eohtQ3MPWmeT3Bo3UYSioF2inDlKPSLhf+KW5A7L0NiutAGEEUI+3FcGlzUoJs'
    'UJEyQa0+Wn69R63b86vxcAQrRVQ6MOamH4LWn1cakQCIUxYYLNWy6zA8QGl3tE8gUq/0aberLdaRhKw26x3DnXiXCn3tHqMx'
    'xqtHFnnSskfeKUrDX8gdLoBHV+fiKB0PLGJZu9HR9aYm43aNhUMHCj7k0yN0vUHxpEbUPXXUXUSLYaly0yr/VIxcfuktyF9Z'
    'Ks3C/ECun6UhiQ0N6DsrzyNoOuH16h/WwRbs+GwAY1/5b2kVX3NDMYATmQQtnrDcHOg7Yd1PO0HZTQfaWRA3T9z30DdX3lYt'
    'Nlc8bLTKv8x0qD2LwUvR632m3nAdtgbEhSg+O/TiIHGJxrztFc4uIFO7tXeaWU0QfV3jKU2WvU3jzWudT/vBdD9N1kXoPpPv'
    'OFB9d97piR6iVP7oPzPwjNo/0r2Oaj/u2jcDeh/orFK3Cjdf+TOgfb/Qv6E2v4tDKXGAN1jYcU4PTSICALKmmLneu/TfGsUQ'
    'Nwkak46kXKAA2RFAA4YtfA0FgoIpNh1QAMXwkibRG8b6nuCcGbSmAgFagr8q3kpiaRQGZuJWzTFuwtR5o5cuCnsR8pNzX0oU'
    'yIo4UVragsq/5iTkt2iv/kj9vBsQdm3vOG3kZoIkphbpeaPtJC3oOZv0slorYQK/3QDzhN+a4vS7So/3UE2GxHctfSYxG0UO'
    '1bexHmiTRoy/beg8kc+ZehX6NPh91ao/URnb0HxXwpiDBR+VvEv1TYnuLRdOTisfCyXLej8A6m07crpUFFzGwm+KJ0Erf9cE'
    'SECn+KVKI4VLEpuu1bTQ6yv9YbnL2wBbfAnEIyRs2S7Rt8aD+k6Vm9N7oSt1vTptBy1sucPbdSGz5i20jKJvgUaP+s6JkF6E'
    'fVtgwqSBgC0fEkSZqus+XHk5xUJmn7ApCwTtqDsGVFuQdOfyF7dgpofVi1RVBd4uW0dH20Fi267URuav+OYMCUsZlD5WcsU7'
    'NeRJNx2624b0RlbV++X82oD7T8oYXp755hmJZurW9D//bRTd0ouM7Tf7vSa4x8r3zmPIwCAU0aEPe5Q/oCSacKIUpW01kDzV'
    'zyRoPVb1kBbpe6PhD63StnzW4jESrHwtqDpM16OoOdfRDyinueJxuwjWdl7ZzKqefGBuq+4q8qvfuQhiRWilBUYO6utmZSJ0'
    'vgjUBWstQW1T/huq9Q+b03Q98PokPthC7qeaKxnQN9fZdWBwn+efHxb1+6f5BSo/ayhwUjW777JiHybOH1q5rUH+v9GvQK1f'
    '6N+O1q/4tkEvX+Xj+A8kczfKev/SG6dHej9QRATZe5KkxFhjf40oqgO1NyQs/+7efXtAADU5MjaPTlyrZVFvkODP2eu0R9DP'
    '44c42XazjuAAYxmd5HaMzSxu8iZme42/Ry7deIxAzCQtvwWuJZoS+y00Z8Wj2W9AyTQMZjeRQjGqMHVk7I+6a0VGsotKaTdC'
    'tEYfVhZ/QzNd2jvNw0PoQYAOX91hwqy5fbmjpxpXe9A87e0GFYOzqdvrp0JmTfWDrT/kWTKDrT/hXDEDvR+zx0DtX+kZaEM/'
    'SP3QJn5x4xpSq/w+ILeHy1+ArI7UPpM5N9v0IvU3IiEW5702Q5U/p3Y26z1YPKwgMY/03LYaHuLv7hT5hoNCGj9S0HDvtG6k'
    'e26HWp7xno7UPet7FblwK8K/qlW+azXd1vtp+AGtbBqWLLvQN0PuJN/rSFl+Vi4WwSUPbc69+cmv1YLi2XKTgssftHR7+Vjz'
    '4CCHzEXT+hOW8O36d2NkvfT5twpzwtxunN84bKlQNc/S+hlB8q+o2Wx07oS1tle7xj6OKp8mRBH5dNXnOB5AQsOdP+Flo1j4'
    'LOYU979Y8q/dESYiCbQ/xym34H6v5GG3oHWTzsyCnexniIceND+Io5B9Rc8EKDz7/xVUPZkuIlqiB0jhn0Ru1h3pplXfazdy'
    'XdpBnwxLPaU7pd42S5Rhgx3Xuv9mQxOclZEaO/z3IKqb1kOgq4fDEpGuDvQ98/MBojknODjDnT9KaVkdTDwadL3ysV/JN22V'
    'y7+I0GmPRr4RU0UCEb2RAAs2Zb8Dvj0+B3HD87fU0KMRmGPBv5gp7F3bK80PG2ufeSsKdYd+0jbkg3s5r1W9BlDgj1o+Wca4'
    'r2KxzPy3YOWv3PCP2JJGmTHzO9kNvag4c+8j/eg4itaIXu072nN7VVM/pQzTfeggMW/X2nBLCOnVP2Jw+P7lUo9uRJJ75Fu3'
    'g77FUIwImi/xbzO91rxZyVbrXtQ+nehoGwmBtZO18hVtFeKnyZnjakdHXVnjXDyQBQnWPzYPvu12vENkd5xw4jc2m9QeRI/S'
    'vkfeVkpg/9Mi2ODMoxmTnn3GSfutfpnqLMH/c+WzX6jbWMaaND/LyTK9qD7C95eW3QfEyFSeSZMU5kf3JRj6ndsSe63uFEeg'
    'fk9an5ZX1vtCqd+KQv/JD+NId+ITtU4pn0nuw8UP7ta96D1ByuKPXV7FcGniUCXPoOpvTLnCZDsd9ohBoJHa/txbUwiDhU+r'
    'Sxl2nP4b79T0ozGRmn6EzW1xyyigt+C/dHeiOLGjOijqOELWeKg5DsGLXut4nlM93pCaJJAv99SfkuHvfgIkt7lBZmFe1DyN'
    'ZkP+xhzoU78ktOL8k7UuRcvGX9i7gP7k/Zatz8A3V4r97ycV0McKwFKJGeri/DFeD4d33Ic+RIf2SfK5SqaFHR7zltY2fNH2'
    'RPKk89aGfT7UdqCw15CiXW3m4kV3ZNKnLXxE6Zf0rEutOibgigrrRP4NXB91dwUWI4dqfoYVP0YlieSjg8xCIxB348RBepvD'
    'Pq+YAJm67Dai0HVfwmxAYr+mhMB8kdpKcfox+dhUKb7hfV/HKGDFVJrYnTmk6URR86qIl9LDBr+XDMFdTu5MmI032lXxSsdj'
    'aDVGa/Q7dXSzo1XKpO0yvjXG/UJ5hjUesXzpx34ecPWQYwJeB0Bnlh5748sIWKl0088FaDNv5S+geF68jfGaw0Z+S2EjMSE8'
    'tqfZKWu9YbIub0dZlydhQ8QtdQDUOLt1BpIWhIMMZruFcdCYq2+JQshBgU+MEyf3GhPCn0VVPgYoeBIdwxKfBCsjNxjUOLXl'
    'BvEBXXJmIYJpzc6sLnR00Cjp2PzdfkQPbEToOfAUAwq/Sz6JAaVXub8FgbqeMS2GitST0CVU2O8PUCZN6m0FytwwZwnOo9It'
    'ECMXnoSBKDNZWx0TntezPsBVHqVtbL6MS+P99IOTURZXUqbn0QqqCD9iUWf0uWHUVaIdAKFPgA7cjTHSqOfyZSK9xpq0eJTx'
    'vuFOwNa/XlKC4z32p1acAggBr0+gCB278V7DKUQ73s0THgwVWYeO51jUOyDRJIJw+y80Yv6oEcY+H3Iq1hPUjVvAO2/z4tZC'
    'YCuf2aBCbr+hQVmrOEK03CazjJ3sZ6nAjRQjJKZhgq0/JXXLKh56RFo+Lzid1AmV8SK9tfX5SyWdd7e6Ix/iB5Q9mdZjqDtW'
    'xYmWtsP22WWM4mzl0QlJ6Dwb9RsorP3aiLpiWrIjktA5ZcUYmEokDju/KEXNNoJaP+KtkOCjvzqVvOv0WncswsmAdWfd0zR/'
    'WF1lUTo+85IdCba0hdJmShD/0TyMFEG/plHA5BAdiYC+PQYMSeg/zs2RxMAAHfulzbvcXskKpB/5IBaotz4bPcnaOWzlZZoM'
    '19UUgJIYNjoYrwmAAVGPmtpYat3BnV7hSFwye1NtJFfNw8xkqzQnuRvYb4ozYMy7k9Cc1LEHko70UH9vGMYnAA4OHEEMQF0c'
    'JaOrtGmpJEDYMDu5UTb+HX3UAYJwAOOaiVrZYdRWQH06Enyb7LBeBEvKcAGFc/hBnN4iaC3yywfE2XgX2RmNmpm5kTmBCACp'
    '7EkGzzhQd63ZOOIAY5DJi5GmJRToiFCXaiNvtVz1M4aPtGu/5ps0ERjhooY2qL0JgIIOhofAAuXnLmF/EpeAwopsLxOlLf/L'
    'OsHkMJgIUlCWwJo4YXxSIIwgZeQMvwfW3KHQo32k4sSuLm9mgoev53GPLwltJO/bh9yTOGEY89pIMleBVyZAywfwitpjyExd'
    'hgnDkxoZ2m7V8efbvMvdrj5mCmFfngb7GN1UINEHMCFUSAxV/GTAs4UoU5iNBJYQmmc8NAUsTIUiMNYpcPzj1EW8O92GEUli'
    'vZlMHPK/Cclmij7X9JJEpXJJwZAkji+Mvp5gnE+ZjjR+4RI6JMhZJ04xj+veZ3PX7cUUE0AFBzSUnyUSYKWZyuKHiDBlSYke'
    'gI08EIvDSQQailTwN5Jpx+u0e1YMA3yq3OmKIGWyU93Dlx4qKbhb47fv5Dg4PAXDd3aWc0Nf0tUgDDjtpxEvzYVMp6BYcZ1q'
    'p/QlCewYZqSCDJekRMjK0QVDH9Bt/mlZ5rTwe4yfQ+dHTx6GOqXPqlAgGz/gYoOQT4BMxAxX3k+VDH8Ye0wjC1t0Fcii3Ygb'
    '/UHjsI0oIbDNIUAGsrpi5jGQO7QgZYoTyRXylHygYdXIQZW7gMRBQRvtoG4Bh8gfxigAnssBxJOlwwVBgT6A5P2ej/n3Lm1A'
    '+raSa8Nf0owJH2QLgFuGET45N0e6CD1MiHhNmPGADuUMhWAHppaxghwwz2V/QKwoW/KaQVvVBSKJ1HlBpymadyoMxmPTznAo'
    'X9Il+FPEeZVHmTEtrgM24m7LXrg5Oe4uarpPWdzPdTG8CctRrpZvQ9/w+i6ZBENVB0/fOil4S8JSjPK24ie8BxgxkO1w9RHn'
    'vadDrF3/ClAE3klmYUDdaMRChO3zkpj6k5JTh4NABXE5rQ9dyq6w8OJ9ceEBIDiJB0HNHFhA3agae0LgGD4m0qxlWaVt06Wj'
    '8ocOMnq2zunUFr2HA9/2Ouc7PO03/ax4o/HBrDFRfY+IItyWqqxiiIKTWeqMs2JMTz2qModPMvLjvHUcgdiR6fJLMZOsp2Mu'
    'nZD1O2suIe/6QBKBbJEZRXIubWBilPI7QPuuE5vYRIej4XjlkC5Dvijr46yUJPdO7Jv+p6rtZWoAyxyEVGXoPDnqY5UdqGsz'
    '0gf7xfFijXWxp+z2zzCSmsvLNuw1poci4wi5ZZgytyzanoJzkZx/yOFQKbXEidPgZdJpBMQGPhEyjExLfFIOSbOIqgj5ZoQd'
    'RBFzoy1M9qJoq2TRj7Jd6zRxoA9ipS3opcGdGIr0xLFBbe3enK5YGQVqbjFYTyPxq0oJDIdBI0iF4d0s57Cem43WUdY0u1WS'
    'xO4JEVDYmE3iuJFWNntJJOJ8IMpAD6ujFuwvFsrjK3VcWnmYu10pAXoFKlYxjAoEwCK1jqa37DXJMLyb/mo0HgMFR45T20rP'
    '20tTOs5k8HeOKlwJSqQSDsyhIaZVkLCE5UsKrBK3LDlWx4lp9yA/HqnfdzCmBb9JQclIqwcR+3yoAEqeZnaBUjyMq0fwCIlT'
    '686iChnIKJIuS0EikdbZ8rYeRlFGoz0AIuwvtxxklIqg+H84Fb7AGSLAAAZjBKBRJHyaMjy0OmL8ikFQibojNXnRgzBPVYYp'
    'JDBdo4niFstinY61W+GdZGKghzpuAb3b+cg5IfaxjJ196GPlCATYa26gzShqhQICfzsd6aAfSYSDIBIK6MFMKQVLQEgJC87E'
    'QcAQGqGf1i8bqwlPr8Kng35CqCPYtoXKoexkN9qx0Y/NPsAh1jX7sqLPXbCoPKegxd5gOKdgyJ5CSgAUkizsZ66o+yZ2NVlI'
    'nf1ycW+aEWdAfA4ynpRFQyYXQAeElePsA7eRVYwII5SBkThjUdzqkMy8QmezJpP/0eRKmLAtUaxM8z16smJ8lazwFk9uTMmj'
    'tUIa+ZRsn6kiuZ9xEeXIiyc105CE4vnpVXFJOxYlQpRWyzlvG9UMb2Rae5e5Ir5+yzssLreAHMEVGCJvZIHGYvsjSabECG9o'
    'zwyaavOCsyvukgRUJqqvseJSbOaw0p8Y5S54r5i1gQnfkVYke8i/cNoCQMdrMpXiazGwnxXXvpYmq+f2lelZh4zh3ESKJMQq'
    'VJ94wkvTiyJVitnt7Xi0MLKfWOnZG9g/b4LSw2s4DesTG5Wh0t6lFCqnt/4Sclki1bOachcXKbRysEilfhZVmud+MniDmv9X'
    'SeuMcOCKXhAnXne6FQ2/iXWP5A9ulk5sow/q3IsJr+gqgA4wh2eDRVJEZtalQL8qJyWnAIgrUhZVRRwGKpZKWN1wGesNxGpM'
    'oG8srk/AEZeGCpjvcDTRFKRrhPTNhhxla9g3jdPuHKFTPtMwY9ptBT6qCa+HVHSyfGBaOUcoBCLAksKjhmD58frK9WFaYQBh'
    'xynXgAMKWQlAAgpZawBfzTcVcAdAr+xxuAtk6YSle/PXKt4SjkRUfZPRvhKu0D6BsSlm1dZXSa5ste7q8BdvVdRo/P0i51yr'
    'J+nAQM0UmaMX7Es4dDLk4w4gJEX2SYARg7yHazrzhI1xpqKPIyxTmEqeSRiVZhDmlM+EBEKCoCcxahcxdqNKlI5dnJ/eEko/'
    'MFGGdYqHOZR8lMirFiYtrLL0OmRdpM7GqsWXqfxTXRkTxYNOj1akZiAQQ7CER5GEm5idMpzZwB5iDLH8oUTbNPlCyW9IFor0'
    'FHk8vM11lETYxdLGT5DDZho/bR1kcD0B6zSUzIJ1tv0tRhcSEzByp3SFsCNrpFfRk4kjHcAFjqkShcRVjrks2IR1jpsRWnpa'
    'ocMPbHc4aWQTmDBw5bP/URrlYRRipxaR67Am8Iz65UWeCWIMayF2NaNKDVdCnHM5ZgWJJZE5MOg0VrlZvbSwBYqTTJ/ADI6l'
    'lOqMGI3fdqBFpOCxgKJg3biNteYqiXST9dI5KOCEZZHHDN/5E2scSXya+1WV6BzLdFaH7ZMO7F+1vrAJZ08E4SnyyYe00qyB'
    'CNdPZEyMEXFYxXFEZ2dZe9ssF4BL4IN5v4z5xs8pCwklH+yaBW4OE/NKQOMxYwupigDqZBFOTUZu8q2mxbYRi/LdpL9aw0sh'
    's3Pg7aNVKqZTPRWBZ2rC/MC6IILT0VYX/Es+xmwxTkV0g6Fm3xCzxZAfyyxmDUHJiVa2vOAKWhxkQWlnBuF7Fbl3Khk9neOG'
    'm4mOxpLLo604/SDLeYRTu+qimXCA6SfMNheO1UYJo84Vl98wFSsuzheQ8c0Z59xs3un8kfHnkEsvvj8KDIW6QKMxxGRzJBBl'
    '2EcYckMM9bOgc28vYq4Ra9HeRBLFOsylsMXuKuY/kmvigKLMabEMxtj6RluEuBGO3Ec6+Q7niXl8iger+rONZN6XsfOUdTLt'
    'GYU7jhmDSCCdfyOSOF9rfAHkxI80CXyGrDHCP25TSyWXEiAZa1yPaYtljg9ZH5Vwkc1NYq9q0Q3JI753MzSHHBIXV5EFyS6W'
    'kgxeQc3TjWHYkaVWM9xNAVYwW7c454I/bGsoyQrzSIJKzyK/YqlHSf5h7UdR4+AvKgQ5PRrrdaZlujzVPxpLMF8ehAjyPFMm'
    'aQ8Vyw0sbDjiT8CAKWScdSBF7FhNxqh8ATp6o4jWVqAeZP46caBKJKvo+s7HrNiBiIbfWok7R4gaKMhSloCktaFH491xbl00'
    'WalhU37kAS6+ONxPLveMB3DTOXkrsQKkC+5vDn3930efQAs708Tj/GYXkiw9Vj+YP3Hu8yucn/I2l1rxM+iWpd/vEgkTZd/f'
    'EySQihtKg1oUdI+8BKWf2zT6sSLYoPZVkwBH6q8s8JIAg/YBrN7hQRpIDyGAEsaGQkAJYLOsebjjdUQlny8yUBv0HnDo+JgE'
    'P6Ac0K0Zt4w5WMqDhph0cdjehMOVahlQM+SZhhh9ccxyPlYTltdtKME6Id1IM+8XTFxdBpMnevBvwQwchURo6CIqLbNTsdqm'
    'QYJ/w0PspM5KhvUSfSQlbnTIUx5VS02XioKhLSyVnd4cr8Sq3Kzd6QE4CBdDvLQcwR840CRcrYwN9rhkVUzqMS6kFk77UhAI'
    'tMywZsXJmGP99RlQtLhTKapDExZBLHO9BUinicV6abTPbLiznwr6JFVU0Qay0NKZA2rQx6nr+MRJ/khYEYZNo0yHvoYK0Nex'
    'POFtSGHwZ1SEHV5SIkU6gKRlSwthTTYxYMVIsfz9kxzLDNJPdsopHHMZ00JaGPowF1awaoewir2imcdq0Q+c9nYaOuEWroHW'
    'NpqdJFXE57ePjka6mF+bp/0udmOqwdEWEBysDY4FVUXkTyPtaWYDOqpFh6he73wAAmmvI+wjORV3gJYcZtIoJ4yIeHB2ek17'
    'IkMlVNVQr6KvWhSIWqwW0wRaCwkeUrby8SARoQoXrcaX+SdpI5t3SOpckop2q6cCjPFAz1hacnnuYhyhAUmR5ciSzIsMvnSC'
    'wmcb9IkVP2cXoLIQ8oULDEj/K9VkUweNqwywbJLV5Y8oqGzVadUBRTo8pLlg6rAPI+TAhWVrHmFKa6y/DSmqJsHfNCFJsczF'
    'rx7daXJkT7td6w3OdAn+x1LTr4IKxs8/iAkLDkjXwLU3ktbcAK3lreUr0oaUyWyebFt0E0lu13BDNGcWwUzSgYkuuhkK9ody'
    '04+c/3lSJebPOazotRFJ4flDsB1q5HGgGKm2AUWn3yeizRHugDlgJkFhm0dxCFxi60OroxHISdTC2tQjgm9jAC276SasvrAK'
    'pQv0xTv8PAxdwhPuArHAD5usit26lIh+aWurMvAR9ehPEuL+nArn92Ltgp0TMnUuiBl9aBqed89kMVWO0Dq5rHhtPMjKx/4c'
    'qtdH3nzaGqPiIRJKCy533vMgeYfYqLppKEAeZTT6gHkMcUHsUilJNhheUrxaWBhynb6ABQTYmaVf2Na+7GTyC0cJ3pG+G5Lj'
    'aD4zUQnWzI7iQ7GylpSgONBxPm5Cu8Kclwz+bw+sFtOwU1dnfKYFwLktolTg6CdhDgAj2FMpVRvhKUqh0FkSI+1KqXCeITVK'
    'k88dVivcvL9Y8XKcyq/xHTElkkqtSiT5pQXOGWa8l+k8o1EV9EV17IuVzl6cCYgtnPKVveSDY1VK18ypoDxlUmz4CfNmYKFt'
    '7lHCm/U0rpee9JaDGiThztSSb7825Vzdoq/otBFJdOgkMWUvKFLVkr11GinvRV9MeMKXbtysDABYO9WWsR3D7SIlSwHmTx/X'
    'Z8Ry0GpYmXLa19O4wLAY4z41EKNcKTF6sbKltN4AeqYoldY3LKR4ypY3/KWSms7lXgkv1WH/Zmkg7Es+nYKa0iloGinr6iSL'
    'QQgYyyUxzSnInTN1LXjwZ5A/k6Xu6or0JO66uWRTg3wJsfSl307uSKx+uU4PjIReLGFyAPAHxcZn63K5OM5wFxS+bJb/ZLb2'
    'zoJKkJVGFHGTAGPUjqqEIf46Hcq1iKu6p1CGpL2gxUws+7I87BDB7ZMuPJsZOXlMbuAL1JJM9vpOEve3HkmdY3rARtNTWyxM'
    'tOFu7BT5y/vsmeVjyNrWxnaHToHubcANN4XoQow4yhCb4/nSNvpPQg8yHcBX9xYce40sOBRAkzRF/JLzIYqJXcMS18Oinha0'
    'MqXcZEm8d66aRErX0Yl8EFXwGQH3845u9LNJh3WwGwySUvAMpjDZuI1AuBipM1cuGBXjsthLcyXR6X9CAthXkTeAM4Q/yqWw'
    'ZSFizUwZXYBYAzLm78K8CKruPlEh2J5xyROmpf8WrnUZIgUsqgEJuCdk00jY68jJn0nR2j2Kn8jb1k6OIUx60aMICyOOVgbE'
    'mTeO2GSVmrsRlgl81qLq32vczio7SlHBEtmvrDwwqKZ01js1QVYwoO6t4/7BhgjayTvEEtmjkX9pMP6vAr7enSpzCl9fB85f'
    'lBmSV9fSQXUon3kON3lVY2deFnpwplX6VXkoKep8lm01z6NvngAwr32avTlJPL3TsSkkQFR4CNreC/oQprDLD2gHxbTHLWT5'
    'CFiOc173fNxRiyoWZd8iVGEpTQpPDz/wa0gwi0D2ngRnteYfCjzssYLwISEIQbmfq2ScZgEMIMh0V7BDOk3oIy05Po6EVbSH'
    'E+88djpwyqTJsJCmuNJJqbpCrQFqHxdUnMAZTOo2ruYQ5CQW2Czg02KF2s8LjuK9htHRpZgcGDRzWe4MijCypuXvJFdqTI9s'
    'mKGKViEc9zvzNAWDwsXch4NS3E+T7dKRViMU47YYCFOCRVjEc5WWtupWy+ZhhdS8HBu8aIAIamrqJimcIf8dKfNSz4pq2twV'
    'tOrCuXLAtKYo26n6A2W4xzrPDIe0KU4h20v+mavcUfJgAarcY47TeZJX7UxDAsYA05lTrrJgukR1mWRI3d7HWHp5agmlukcT'
    '+JJrgfW6TwNW0jY2WNpi06S5rBY58v0c1VOkUlQXyCTbyd4xpHZBDjSTFI4jrQlwb9Wt27KptI5pDNI2uujLA9du9eppCJ48'
    'Kbrgude55FOEx9rM1qWu3J4SD7jXjk8WpE+yuExJabslcdjEvJYkTu/8pA6dTtbic3q0p3HfLYG94lz5cDs3NsrfJJN58B1P'
    'c9h4GYjUpf0HKskzuA6fnLW5gNoYHnPrOVKQpGu8CnZGxOUxUqfY+JnLz/Z6AQHBqlY8VMqV0ZY8vP8oO3xYIY0qfJoK6Zhl'
    'l/DDCmHCF89EWHZz3YSYLEu+jUZNbFCK6dZZugyoGcB43HknPkGRRxHOvVeiPrUlTAYa2+ntI2TyCVqo1ghFnG0Y1XQEdtMB'
    'YmiWIOVvpTjMFgdNGvaafAUWsmaw8SI8pNkzQOYYKHQoQ1Rn26d0CknNXY9JJX+a6KLsD2wZqyLhaXVw4TDIqJDJ+RgDxYSH'
    'deFDJxK/chGhc7+CKwoymNRMxkihTJ3gGfKqbNrVb5SGMCbTeSnAKzllxvMXxeSWqi8Nhz8wh3frFV2IX92owWpNKkLcUoOU'
    'awAy+kBJ3RtUS4NGmFx0bSQzCFdXvTCQ6kiNBceRwAofVfJulROEknyj5WPpBINEysfyXV6FXslcCpWPhIuNB5hedF7Xk4+e'
    'F1i9JSVgMF1qdHTuJ0miy7WcZlBMc7GT7xzPK7FSSTHDv39paw6dfCFBwVATDtJKX36Fu3yWF0SmgsNEt1LSbHQFUjPE1N49'
    'VEzpaHpAqSSg6ArkE6fUqClTIW4Vr4r+flGReOEuFVeDCHqEDZzutdeLhEXyonyyPyOVU5IJ1wpP8q015Qb5SZTj8mooySdB'
    'yZ2itjNIAvLkL7gbYdRHOtKJ8XDfNdlSalUYy0/2bt/aB6tqVIukiQUxxqHAlLEKqUDPJC6GViptOzlzDYWK63S6jY1oMId4'
    'nbEmqXTYkjUNelCA1NWtr0O4Uw7PImV9pKP6E04mYqJRi8gsHWt0ukwZOKclxGiClExvNWlSuWAc6LcLBWrnUTli0gSQKJiO'
    'Y0sm+RJL9PpU2qV8nglCrrIaTVdsHR0Q7Bc0CVLxyveuGMKvWSliKZE3z42JoALXa/P6mGFJpFj0M7WShLpFcqiX5c0PQ5vP'
    '0wTp6Rp30wADsuavkx3Y0aJk08yFudnj3WiryltzlMza3AL8zgAkjmI+YK1Tbm6DxY2Pcp84zVlmbQF0FN+l6goFzfvoJSHo'
    'Yh1TdOCD0zpiqaS45YohCKwJVFpJFUqTW51fgMTVYhA1p+TRsL7MFlrL5n0XTlcSPoReaNqaMiVl1Gi7y6rZIo2el1OByATX'
    'QQ9k2RGXe80ayTarIudZs1sWiQObumryeJK3KtNHs5uLH36LLcmR1j89PlxW3Oki5+e8vbhjtLVT8dc1Icux9qndBpcRBUWS'
    'h9mnmcJ4Mz7YpVi3dOc6ztg5dOLiERV/HSSL9tYHYJkGiQ5icRSPhfWdVj+dDx9KS8qq+hhBWIJ1LFWMTO5c85XSxPa8c40t'
    'Tbl+3sN13hedD5JXUl1scR1t8zOLiyG+gx3mEeJwi2nvn2AV6yKOh7svchSx9M1cud5lKh7UbIpPwgLo77IIgf48r50B8DLF'
    '/Bk471nMrh7vFlXaHh4RnacqobKUw145czeRqyEWtTTL/FoAo9NjCnhQoKUcOkk3nI6rVblWRHRoTJXZfkneH0IO4awFGpOd'
    'YCjRLlUztJ7lUMiCQdJokUhz6Q+HZPJp3fKecNTocCHOJkS5UOZ1qDCHhxqXj0p4MHnOFdPCnPIZlk9Kcxxp125enrS/q8GD'
    'fXV05NjuyH4XOlaqWOgbfq8KsLbSAL1SpdKHf/ysI5XWCx1WH/kl1ypKqnyHsCRQ8ZMAhjhuwlWWB6Va7iusDpqO3VAAZDHh'
    'TsrLJDaivxaYW3U8QJCpqFPgVXQCuuiXiSqtcLKqFPtkBXWRh2WMR/PWT2tdNE1/jpehVoISVeCYtpGex2Zo5WWfUJUMUdhc'
    '6Vrusibyg8kC0+hDfLIr54U2Gilk+rELrmzVroaKl+YtnpSQOPGSwm9IJ2kD66ciqizAb16Wu/esXbFQFjpAqmntJvMjBXWS'
    'H3B+51XWCK1HWt58rrUZUEGpT5ZtSuskkquqsesbrDSRCFB0RXWS+2LAvq4eXdtyuLG+1hqaRyLeclbe6J8hv/wXjnAGGLxy'
    '+TF6b/j2nvv0/ND/p78/1d8+t03P/kIX00X363x1d7Qavirh6VXW3yzW2506Am8XIRzcFx6NQtutMc3m6U3L8FtdsFtqs6Xw'
    'W8ujuk1fKF88tEh/OXwiUqD+3/EN7PFRo/Dn+Hl6zKzWTAL/RvX38myrgfmr76pSMMXQ92/eYdVwaO2yIFh27ZqO+RdeMfa4'
    'O3Yh++y5UaHhvDdbpnd/o3jFb7Tw6ersqyCoZ++vqXBSywN7lr25mXbhG/Mc7BqrMJnrA1utA1f34udUtIua4K/XwRPQHify'
    'uDpN/S+DP58E/z5IvzzBlF/KcIXyuKqzos3CowqWAq1waKl8e0/xWyRGbbgJZjdKnhqq+WBLZWSCV9bXTCQ7T0rJn3bhC0yo'
    'HtVlMsde2fSSu9P6t6iQwz7xyA+n4ONoDfrBMNmt41w2xuaXhzek8FoOxjgRNq8TeWki692qtXRUeMZNbWST71hoTWmpotlv'
    'jUYXYaNadOEW0fKkMpKy+boDIPhQc9lMBDSK7P18VvppdGY7MrMsEeuwYb1eIHC4sv0QvAEnsIXhuZ48dWbGocqWNZfDGuiN'
    'cxzZ5rog28hm/C8anq6ITu8m+Ul2JMwOtEXhdcosFDpGIaw88qjRou6xuKB6SwvL7asuOhLS7vhg3FfFEdqwm/hEKAI1zxZa'
    '5qN6UbM4A4ucq2F4jLQctanievbsuDIumC/qINeFqcvbQ3Q8GBwCJ3DV/wtXKuOt9Yp7efdSwYTy90hXvDb6qXRBgv+rFucw'
    'PG+ApNRomF4Z5JGeWXqZuXZAmeLRHIgklxJuPCTu95gjWnyvTJdbTG5NCJ0SgPQcae3u8dk03u4ts1pES7RguVZHjztebiMX'
    'OzVs9m9fjAAhEYDacYLBvFg0bZZuF4sgw2QNPfJhUIPR+FbRmmr1kbdWto/esb7ZNi7dXULh27P4eLsrOf85BuPPBxXq+6ll'
    'WXkHndGhFpFabA69YKQUoVY6sL2OpXwWv6FljZUu3gpNlMY4JazyUz4t66CvYcnCw/L7x517zrL2E21/MO3WGsSlotTf3VwV'
    'BquDEpLJ70TbnA5ukrRs9WLe7gZfw3f7A4a78IVXkD87hquTN35LsM9aP6VZPB1HbU3+uDVYsdgyfccPt3Xty/RLjX4M/gYd'
    'rDA84prx1lJlebCw/LB0Ho8rr74Mr1gGcLGgQr+edem6bU2uKq9LqdGR/5semZZg90MRuEpHLmo6ekrk5oJN9hSg+XgASzue'
    'rr71pPzA1sXl17+QktESy26qWzD8k86DRI90rINTxxLtYVp0uYWxWjp3ykNX6Y+2aTzcCq/Ce3Ozd2zTC4WL+IhHAhrZ1zpY'
    'Tx8Fs+GfftsCt3XXXDg4RLMrl7KywZxaXA+H8Jtv6MCHufcIDSWA1atCakfLHGl45uViQmzhee5LhtOVw1/rh4u3ixZRnngl'
    'wEHJxTsnxqdUrqc5nNzA82ZYRSXW9aw1+cs0bBwOQu2Mug3UwTbHWs54xzqn6pP3uaLcJPkUJ8M8/4cnqfTBEem3zF0TiZdX'
    '5sMnS7cy14Zom4GEZJ5nLOFNXHpoBQ4Hf01SFVL7CazoccmXNkvR4afg7fic7iOK03IztlUg/T2SOxjra2hZZxk8IHr/WrYK'
    'BYnmi82dnBSEgY5fLR5xnKjlBx1iEdv6CCmBS7klY2Zs9fMdn8xyFmPbHVcFsb2m2W00ZtsTK37jrVlKH0BnGP48j0Fx3pup'
    'pjh0eLeDg/WVeFmkYbBZW1BtpUht3DZg1pa4ttZuLh+McBrnToWLrA92uVdCSXHI0Pnz7Qslhecm/ba+XWNc5Im9cvKVqPxZ'
    'X12fGPKUmZZe9XNk0emg5GZJVBSGEz4NkCXOa6mZS9FYwmVUDWiQlvTpW3+72NJmvBMyfAopm8d6iS05T1/t+h2i7V0DE/bc'
    '6yI4Ay/zJA3a3F2+SVU50hKnxCuLYmurlRoPYrGcAzEORFn2l99ZbJ2W4t6LmwjfvNChVP4Uk3DkxqO4RG1kWkneF94NEj31'
    'vy5urPkECxDN+3xP4efufflCBuCO84hBFM0ahmrOxZ92wR7Fepw92hmMrZtSaakfj2HxsOR2SXc39SHz/XREKY5hs+d66+2v'
    'Ly8Q9w8r+7ieXt8I5iVWrvUbgYVG665PYGJcaWHZ4VZsEb4KLsx6TJcaGW+PfLmQ0tVYYkhLLY7tmUIuh9NKSVHSyq2Mx5Vb'
    'xjq3AuMdcpg2p7Dh9uTVXWzMHK0QLajQQW+08dL4fnFWC8nXB6MBZkcB1nrMaF0ypQli6LuC9PpmsYXZTWcaezeGq5nCZuZ0'
    'o/D3Ta2veZ3MDtOgkHUWqLwpiwGi8pLKxPjZd0ZMq3Djdpl6K3D8LUlXjJuI9/WMRgZRfhquoePxZj+0ujT6baMzrs3zqNl/'
    'aiFllkqnXOA92WO7uEg+Nl0KrlvruELJWt0WYLmmoZncdXhsqE3iBHDym4t4dnls9z6DEj46d7wDGWTlDF5gZbdkE4cJXiz9'
    'uGhpWU/yvXNuNeUau+LkWduOSaDXe1VVo7ALU3CZUQinR89ZTp+ZjisYnHq9OEyOjOYJaYBbPNj+DEwD+6owqWh6YzKyeRoy'
    'wo3e7Mx5jHYFmzdW04LXE2zM2o6j3YrDelZ2nBsWq8SGoezdBgynOYMT8K4mia1DD/jWHscG11wWpF2gB9MDKedT3+WtnOwd'
    'PGq+sDFkthp8Wh5ZOU5WEwVFgeAzU9tcO2ZTmccw524L+GQugiP9t4N0+asCM/LpnKjqZMxVS+DaFvZmYtBmrqHaywee0+d1'
    'Cq4HMM7A3LqW4MDaVHdagPk0lvCmYYodmnY1LkFLI3gz6s/3xFfWbuMa58NFWsM5WadWEpl0fqGs/5VOLz3uNaPThTRFDXrD'
    'LFmi3T2OaNO4WH0W7gLwzVJbLCwWdwsdXg2n061PGXe+SuDK7m8hOeoHN4cbJQi/ss/cDIQ89Irl04mAaJ3Sxoe6/blo+eWw'
    '+dOQv952YuQWyLHR4OKczdMeKC0CwcdnUWm8z3bnh9UlgNUTgJpeCHEwmSYGYKPXbgrrOiX7b0uWNHenDSZm8cl6NZjTMPh9'
    'nLJPe1SWRzkL3lbRfs83G1l8HV2JpDbGlBrQKG71pRx5aSU9wanS/irZfg5wNQmsjw5Wa2lWHxXhacInOvSYKpUllN7h9w9w'
    'm4IpNsCcCaxtfjylwYLzlN46rbr5G7CYWVvEsidyVxb5PmmNc65Dj+cYwm0hhea9qTQVDoen9ui/Qagb1psnjj86PDVR48W0'
    'Yh+u132zV8t7qBLOBbO2pshan8yRcq1D3AAjGcvknIKwBQGuV9UhiLjBjvXsguX5/BMTAarwcZU7MwkaA65w8eyKXYJBkcXS'
    '0lkx+AYVd2yMK20+V8t66zyrWmi3hzNkym76BQOnd+Zma72AMzCKUKXWvzPpWVJ5RaZ0xjAo7cA80Gfy6g8JzS1YXrKw6+Xa'
    'Q35jL7FbSgC5pQ0vyybTLV7RLD0/aBzkX1uW4SDpmq9kWO9l0fj6xRerGoZib+8GYn7QO3Zliao+zjaozdLWkp4SbU8PPl8e'
    'S7zynBzTGU4leso99Hw8MZF6so9eeZBdmeDVG5NuXCOI3JAblfvb5xATbe8626mY8uWzMncSTBb1IHvHFH0R0vdacrD0xiWd'
    'ZVzkLD2mLK9IS8u7yxlrnODJXspMlMqtg7U3CyA2oeOz+FLKgu+I+P01rBH1l3DHYam0ozjwTOfUnvncEhjCYQaas+YfPc+2'
    '/OkZYgvzaEbx9iSd2YRmM/WOxy0zBxglgdavYTXcyktyOpkszHcWwbO3ooNeWcIQJwMh93Phr12CXeg2c5z6FJoA5j2mFGGc'
    '72O5WxYfZ7bHyxp8VW4e/z25sz87hIAoy9v340Bd3gYaq65haZMQMd/LL920sALnxXqGHQjSAkBJtpvTt4U7zmgOjxhoO20k'
    '7QOF27Bmz7czbJsAlwsCV9ni2/7bJB9Rd+5kU9D0peh1GprcVRY8m5rm3YvLLvMt56dpB7vLnMqh2TepMDeULkrzS2OzHADV'
    'PPQeitP1e4e9wD/YZR1qYyuNVzD4PWqnsJTntyb2HoLEPRVnOodz4PhPKDtVoBbbQlntQZ/mSHDvTFUTbDsX1NArTJBbZt33'
    'vS2oeKw8aij4UC2LRbZmHZ5u6gVncO5pUeunh2Nnxu8bl2w9srD4Wp4vMRjERRvPllt8dx3tlpDg4XqFzFOhuel8HtaW8eH7'
    'zOV3W94Ywp9G37+5hju47oZxMLVdD/XxeRQdIbjUPtKn11MBae0Wr9Yjtrm4Y6A0nAx4akuDUU5sjb8HpKAe9neHfDKy9FVr'
    '8C7R3YPHdDRz2NeGExmQ3Fywz1MZW1JqTYAi8qwF3zWgUGZGioLnSxBqfCl59wOY8IJuV8Ot87pg2pxAm9aDB+Wp9CxN8bah'
    'uEpV4ZC42l4oSzPDXgGU/duiBQ6FQA8cMg5j2rL2S0Nt7013lRqJ3Q+QKmb7z45Hcn3FROx3BjaWgRCZXOB9k68vbilJq9p0'
    'Xc+Z8ez9VJSN2uhNaHB5hYeuLGUQDLV3GrCQ9GDdChMjiibJLQg3mXfuutg8KjpF4PP11DZ+hSumBycWJgib83N60BxFoglV'
    'cp2DqaxabO7N7VKy+WzryJZXoXnP13CMUb5Vq1Tm669st3EWNSmVJnellZjsykD8kgsRSQcZ8MhLUt/qEHrtQEHHXzS3nK78'
    'SWc/6vhcnDLvnT3fdZ67Im+MiRNfDasmRstqAFOeiHk5a2J+LlJEnUmTeVx5TpnllNDhfbCULGrCo+BBL9p8KX51sfbs6P68'
    'mw5RpF1JlllS7CwuGzS1rZjxv3grbaUumHj5TViCGfcDYaGm9ZnGZXCOCreEizuFdeVwSSpQmxofVdL47Pvboag4M0SmzRYu'
    'uEHjA0nPMI9htdw/1IbDgGdVWd0flz79u6/CEcvps57A4iDMctlWyt3S+RaYk69pdRMbUtVKW0H88lIqk1lPQxlHFtDNLAwZ'
    'AG2ltXVm1IQcpuQ8hx0GmBQ27wtM8VmrYYfp/Ec6rbcmOhGNgrT0FXebD6nTEHpc4MdTYcwz3+CVbKsmo61cztKZfAxW6x+7'
    '7nwt7vmffjFFBU/po753pne76uDVa7dUqMnMa+WDzTcnTldvkvdUPDYcKdqHlxS5Rruu2nferNsE174oluGI3VjyPRz7pvwN'
    'G3IOC5MaSGm8mqH3mG78jlRr28/2mvLUGlt3tnKMireLauDon6vYWkqe6CdEm1muC8m/ArTtDAkiYTf8GG5l9vijU8ty7ovD'
    'Y6zMuuOy2uvNORsm+4aSd8JULRNbduRox81GKwaHCSe6zRbCwjWt1lbwmreA3J6Zw26zqPf3tm9AfXAnDis73LXyplUQ+x4e'
    'ZG7oczlMS+DqyW6VyG1/gtMHcN29DBevKdkB/TU6e3R+A5YdroIbRWe9Z5Xx3B3eLjnPDP4OHtDGmBj8IMvD7NpZz67CX53b'
    '5ziqG/vanu/kFM/8CTinceJe6Pu8Z2qNBVF6DVqbryI7R3Rcg1xajhZX6UpSHRZht3D5F8N12iGe0DaYLR0f3My9HLXaotOv'
    'hR/gsRpX2bHxeSeN+UMlCYI29oKhOqL4QfF6bnTvnBulKbjYkaJn4U7hgzXnBtezU+GS4Q7QxUqyxqxLBHf6qtMt2o4pQ9bf'
    '+5+asgU65xo6tnT/Mk5AGRJXTHlrRuS96rg5L0+PM2vDD8QakmD8W3x0uLpMpa31zGHAfJe0tZo7PhzS1LnbuTq6EEDlVMhx'
    'FOq3NkOZ88CLLNwf/RNJ06fDD5xQ461AWGm4W+a8hRKyylgS6wps+XqmepK+QqJX4o3FzHtPRLSwXvLNpzhcPtVl8A9eEbEO'
    'QdiGo9lIaUtw2UEfAgeuUO446gy6AmDs8HmfrSUOHFV/vJxAee6l2XB8lw5kahTgH3neDwMGfW14SKccNFluFqpN8RX88pmN'
    'YSHmvNwGGMIW+SWmyYM5UiXJ00b73eTyRIAL91b7i9eE9spsJ2ffD4kHaS5+4zQY+Y4WNsuCw/UGEqzGarBZ+H5CL0h0z7tb'
    'Am712V15aQvtIb6g7bYz+J8uKXKlu8xzw140TWau8brau6clBUT4B29n5X3E7qCnte5caTc6HCXRedAuLPliFpucNcGm1OZI'
    'SnBdDeW6QhHb0kzyAxCMzfKzLbzeoYcl+1gx/gWogMyUk8RR8PGvzs1Hy9ZOOwz3ChvqInVGMCk6Qb1pvGGUvQ9nKajl70lw'
    '6m3hL97i88pb2zpwr78Afp7eHT9uTRcVGm5FfJiCRboUzDV0RKI8KwQB9/aDDWjP9BzxVfl3p/u2w1uIDTvzgGySv+qqssAt'
    'Zw7VfCXa4KWOsupWvb6OE6i3tP02FywoXh6YxiyN9SlNWX4GuMXlcl93Lf+gJiTEOG1IDLn9uDu4PUFvQOBcgOgCEfXfWfJ9'
    'V3kWfvVO1M9td42o6Z4Q2l4OWttimIYkt6zjU2V/4+5UxDG6H6+Za3Hi9s6WRG+4wHHzL3QqDj7TebxGLijxxpDrc7aUGpje'
    'Xu7eUgWL6lPoZaGdDzHlbkcEbdco5Cdwwsu6rVyCfcYhJ+EMx3FrcvMUpy4sBU7XC5KZzp/rU3qqzdlzrk8vG78Dh1theet1'
    '4nlOJmGjenz1I9VP53bjnyzpSHLgDJ8RwyPzt1yHr9s5pxJW57jl3AQ8H7wrnjfICCuBtUZjq/uFsvaIrudHBGb+6o0ZWhb0'
    'j689TlT57Cbxz/Wajx2Ck/gCPeBZ4aTMeGhiNxwz1Hwm3l4bR/P3WjhZtotfGPcLWHcowWcOQqgCc8UOvrO3aVO1QOvd97x/'
    'xeWEn0nf15U5hy/zIuzIau+NiQrNoZaO+Gys+5M4XuLfzT8KIwttGY6DGY7otwZhGdueHdZhp+02Cy8uTFZ4frI/KdK+sp0Z'
    'qV07r8q/aZ15RQLrJZxbdZ2bzw9lrWGxK8qPGxmqjtusalNuSlF+E3mXpSpF8rdE1jQM+irNGA4oXkMH41z+Oa9WLzQjrlzy'
    'UznsA23Ut2MR+pM51s88ik8hatvwt99xyY6ZT4vvjKx05MvK99ZpoYjp4ZZzAypL37HoxNF7/wGnCPjc5uFeMz9fu3acc/3y'
    'zcj6IPEHnV21uZkG16IujZIkfBcxmV9dw1v9Rb+6j1c9t5NDpM3133yeWsb072EmQvFl2P32ji8+D2qbu2gAHitoylHbwTBD'
    'Rd772V2k9DTYhm1uBHEymODDPu8CkeCL+G+sMPbjGLDIfnUUEW8MrzbhBulNqU+BtPS1uLIrEzpaaYKr4Z3fbrjagoTaNOqT'
    'atT5r2B6BZepe7d9wcskS6XCXErWIVnt9eGA5ThQc4+/PoOw/VcteUItCV52BDxN2HP1BJW8TmIWoO3QoMt7xHsXPtwKr+Bn'
    'Dt4tQxQNU447ujxQD+75+rvmc2H3+S+sr7OdWu+je+Usxz6s/yTu5MH0Xp1pSVl88UQOjuFG8BtuMV+C8eLToC/sPhCz6YLz'
    'U3ZFV1lCsZb4uv+w8bamsjazrvrtOYp/Se2tPP0mPr9uU4xydTiCQpPRA33UPSGag15YSi6XBiuBejC3w3XkXk4UMzDTSFD7'
    'oz36MnJdHjg/PZ6uaYyhqZIYG1yFRUGmJhbXvZm/vVOgq837p47NYmMytdjJDTaN9J2nuozuSGn5WiQkqdw34Hl6PI5HHfdD'
    'FXVdKQqs5zwTS3v+qS+c9WWN+XDycTKinvqXU06kzT8EuhwQ9pSPz1cR1hyDiqLLC3Dr4MxHAazHYozZYr78HplS3voLJLUW'
    'aKjD8db5zpzr+S+Bbh4nStbymUvbFs7hUV9vT45pefq1md8X/vScn2PU2rac6BTOwxvhhNtueW+CsuNSodwv1VnKXBmuXbUF'
    'Pw22fc+NW2IeWT6qpHUtIFqW+a/OThSjCl3fseYexvLsheoby3VSZpxLQX7WQ2Vry/hGUWWbPsy3HPl+llt1Xhzi5Mpt2Rr+'
    'Cb8atk4phT/LryaT9Ydg/dNaxIM2ngeN01nqA6Rmgzte23yPR0999S6+SueE6VOzUbPsDheMENyah786jJ4PobDYaeGmaEus'
    'eGS196yvbPwkyWeu+ZLnardGC4/9RddC2e5Mwj9d2BlYYmvmi67P6WtJ2TaZDpgunz5URdebsp9t/OOiqs7T547gfSePXl05'
    'yUcZxnyqMMFeh8uBRw10SxDpmCryk2dLE0orzEozcxiVi27VZxCsN4Ai17/V48BXejghD/yr4urL6/oQpsijTd0414Vtqz0r'
    '7XhECjxftPsn1LLTe8WUBh+gYbHV9yFo1196PKyPHY6s6prTOdRM1sBBxOQTU1XaZ1MhzYaU2VPi2u3tnnjxhrLpekXbV7UN'
    'vdxYT0I7CuEkjWmTNDavVphWSaeHd1XpJ4LNHqdDmo4W75s0Qzr1bF/Dv4zo056gOFaHkNwtwtP2AwvB5Nbil2FY2GDVMsMJ'
    'dNvyzrbveHTeB3FsmWXNwag4WT5dX0bcIpYs1+m7c1bPDY31kLRKRuDgvYo5efGNX/9/h/nsvHKFzh6dquZFZ3vRt7GUh5BT'
    '8XoQlpWpLVz0fOyaalbvy7v6GenFPlyJSnDVWKGwl1teGVMg5P6Fu5ru4c7ru6W4s+d5cTV2XBjuWuvWs4veU/86U1fePx+m'
    'VNowBgG7H2nrLMy3CHlasq8sYmGti6DgivOhcOLWlA7OE5+i0Nf29V5MIcTGfJU0nZS/5evJdbGzDENPxm+zIahmpqhTtHVE'
    'BdsDCj8nQiPoV5Lbiv/Wl5zS+rLYIebTph5boJRY22pGuYNDJSmBLTSYv63lii6reCRwbg46ws9cpOAPeWmU1XXvvSXLtJB6'
    'THh05fkmbmoyicEGydK1vlskpMTNO7S3OvUP7mpqh4HjHO2NLdXyWm8hdZ6w8IYr4nXWC81lDGwVIktDRcOtYZShlV4iY3Gc'
    'NopaxvLFQaWs1Gp924v5xb2rklNJ4BNQneEJAEG++XNbmBTYMPrQ2os6YGGAxOjf8k5u+4vYaUDnZ48haY1LUanpKZ3YDInL'
    'tovO3jG74ebwYNYc8Sc9w4kB4SOLQT8SkvgrLn4XGxOiYKTN1Sp9cJlGe52zjD5FlzWOiV+i9SzJpwP1OEe89KQ4B2eeeSrQ'
    'h6eadi+8Sby2nJ3jCk/pLBUM61MEt2SEH4yaYsxBGOqk9iFg+i7qVR0aoHc4ZHvyidnTZeYVKb4xdXSdGdJCOrCb52/64SE0'
    'qu/nZpoo5s0AA876i1vrWeW084f9HKPLZ+WkUtTOwGY8OwVw8V+vaWEVD8AaF/egZNIZriI+2gLBFYG93rhXTeF5fBIYfFTl'
    'ZZ4ZGlho7W83FiEsskpaLtwwnQzgSNYUsvLvgG5WRJIHBzQFAFHU3WlhbrzOeGc5KtssD18YveUO+ECb4XJk1sYue6MP/DdC'
    'fni3CbhT/F1wHnp9YRqr+yym7VUPtmD515njZhvPkZyQ0lyg9Co3lp7wVZQyXKTktfGcu7rvJmumGOwX5tO4Znu27K8bCow0'
    'VsseFMel0lGe8WRk/pTWeBcYxCkmc0xUPjwR+aEazpLwMkLyU7uRQS29y95ExClUvKnb7xRpFOqD8L5BtRJQitvXp6cmz09B'
    't1L6tS0MpYcyAbNtxjrdfKIz8vsvB+ONg6GsNIxOI59fOMtNFn4NYW95ZRgZbumsFxeHtoKvmaWK5AslQ8yi7HqA36mm5qvl'
    'gTYq+m8+tVkYb+DKi3wsDFKztTytv/iXsfO9gHVzIk4tZbXx7CNb+RPjkF+zr2RPGc8M0+y/nNnMN6fOzfy5eM/d6w5b7rZy'
    'cHZTV0WnpNKzi88blJHEvSGMznL101qkyX8kMEyBL0Y8FBnCIHfwhGca9sa6lxWFnidtV1uuXrxUltcmbZyVJbyFia3YGU6T'
    'dr60yF7nctT+JLrGqewoj/OdHIKYhQeJ3LpIJ9LbshsvPr8cO7p3/DKT304AFuepi8ITks5hEdEDm8tUtWH1wWpw8vBZ5Ya7'
    '+GRfkMxoTz81bQ1XA1kuIy4N/iEl9WOpWSt1pk3SzpVa3HatqYovcUhYKnPl5pyniy5ArWlZZ8/z3Ch/TsnuD0DfbdATsdNO'
    'CYxBCQuaOO7HX8V4Ow9aeXiu07aiU4c/RFV5xdt2nii8we9Nzx5ruFW3CHc2XN+Y+WdZcuwfXOR5jFZKLPkfPeGlzNDZN5ju'
    'l0sp/86S4aCY0JWvSV4vuxq0Te6Wu6Jy03ZqqZDtqZkVVMqlqVqY20R8r3lMhOLFzc1iFafB+UWLOHdAwZew1/FgvKyDCkB6'
    '0TV82vqzUzVRfd7T1jo5Z1TA4P49d0T6WTM+cz/0jng6ImGZ40Dg0vPbj6lheWwcl8Uruz0zh3L12ChfwyHIMf/z376nOnfz'
    '3zOZ/4fNFZCjQ=="}}'
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
