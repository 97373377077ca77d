#!/usr/bin/env python3
"""Standalone reproduction of servefuzz finding finding_00007_830225997.json (standard library only).

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
    '{"name":"finding_00007_830225997.json","bug":"contract-violation (sglang:isolation:contract-viol'
    'ation:prefix=shared,stream)","expected":["r07"],"expect_failure":null,"promise":{"mode":"--enabl'
    'e-deterministic-inference","words":"\\"SGLang achieves fully deterministic inference while mainta'
    'ining compatibility with chunked prefill, CUDA graphs, radix cache, and non-greedy sampling\\"; f'
    'or every cache-reuse path, \\"Any nonzero KL is a KV/state reuse bug.\\"","source":"https://docs.s'
    'glang.io/advanced_features/deterministic_inference.html; https://github.com/sgl-project/sglang/i'
    'ssues/34899"},"expect_cached":{},"choices":{},"base_url":"http://127.0.0.1:47519","dialect":"sgl'
    'ang","path":"/generate","flush":"sglang","model":null,"requests":[{"id":"r01","offset_ms":0.0,"c'
    'ancel_after_ms":null,"copies":1,"body":{"extra_key":"tenant-a-a382326f","input_ids":[486,657,116'
    ',93,231,173,745,623,937,692,881,602,695,433,225,1005,167,935,176,128,639,877,234,395,210,660,227'
    ',669,180,81,629,1001,550,76,190,451,735,502,100,153,10,536,353,330,562,305,377,864,211,203,594,6'
    '28,529,575,273,270,166,989,284,225,853,514,643,143,183,583,317,112,756,183,288,813,695,590,590,8'
    '25,593,154,300,232,694,716,913,1011,664,156,280,401,419,334,392,310,1013,956,4,485,978,974,539,8'
    '89,718,475,705,421,164,209,736,321,400,579,458,895,598,149,598,117,694,669,598,20,830,147,518,40'
    '5,703,806,930,681,608,229,39,795,376,531,511,123,781,819,590,842,336,861,966,763,587,752,316,398'
    ',904,810,208,357,770,655,235,771,949,155,767,589,394,714,45,509,853,722,422,469,996,690,106,213,'
    '442,90,306,918,719,745,583,179,475,419,65,228,710,977,450,783,851,834,152,578,952,422,724,915,92'
    '7,88,742,199,906,880,843,1015,84,980,675,663,165,849,162,160,513,469,705,961,977,387,629,736,864'
    ',166,767,681,741,251,500,657,264,630,214,853,526,308,251,780,368,190,467,928,889,581,65,970,306,'
    '778,752,472,739,841,32,336,824,779,14,554,695,509,942,377,205,749,185,487,446],"sampling_params"'
    ':{"temperature":0.0,"max_new_tokens":4,"ignore_eos":true,"n":1},"return_logprob":true,"top_logpr'
    'obs_num":5,"logprob_start_len":-1,"stream":true}},{"id":"r02","offset_ms":86.9,"cancel_after_ms"'
    ':null,"copies":1,"body":{"input_ids":[721,643,637,402,131,169,730,772,1011,182,140,978,778,493,2'
    '27,80,908,601,846,172,680,1020,789,971,780,323,825,408,198,753,792,898,28,399,616,869,79,987,239'
    ',279,632,928,272,442,584,233,648,155,323,469,9,439,390,132,762,853,817,258,885,1011,706,578,216,'
    '229,564,79,781,465,439,810,893,793,92,235,349,763,858,50,550,984,768,408,507,769,405,556,595,128'
    ',883,648,686,179,259,235,175,87,981,136,957,117,468,102,157,878,986,341,529,863,153,27,37,866,62'
    ',578,71,879,245,980,931,94,949,250,597,103,905,44,249,306,671,981,111,507,672,66,438,55,181,621,'
    '352,704,518,888,876,504,994,281,598,383,176,340,585,715,148,190,314,310,397,533,313,74,560,551,5'
    '80,959,714,17,463,503,674,855,647,864],"sampling_params":{"temperature":0.0,"max_new_tokens":11,'
    '"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,"stre'
    'am":false}},{"id":"r07","offset_ms":150.7,"cancel_after_ms":null,"copies":1,"body":{"extra_key":'
    '"tenant-a-a382326f","input_ids":[486,657,116,93,231,173,745,623,937,692,881,602,695,433,225,1005'
    ',167,935,176,128,639,877,234,395,210,660,227,669,180,81,629,1001,550,76,190,451,735,502,100,153,'
    '10,536,353,330,562,305,377,864,211,203,594,628,529,575,273,270,166,989,284,225,853,514,643,143,1'
    '83,583,317,112,756,183,288,813,695,590,590,825,593,154,300,232,694,716,913,1011,664,156,280,401,'
    '419,334,392,310,1013,956,4,485,978,974,539,889,718,475,705,421,164,209,736,321,400,579,458,895,5'
    '98,149,598,117,694,669,598,20,830,147,518,405,703,806,930,681,608,229,39,795,376,531,511,123,781'
    ',819,590,842,336,861,966,763,587,752,316,398,904,810,208,357,770,655,235,771,949,155,767,589,394'
    ',714,45,509,853,722,422,469,996,690,106,213,442,90,306,918,719,745,583,179,475,419,65,228,710,97'
    '7,450,783,851,834,152,578,952,422,724,915,927,88,742,199,906,880,843,1015,84,980,675,663,165,849'
    ',162,160,513,469,705,961,977,387,629,736,864,166,767,681,741,251,500,657,264,630,214,853,526,308'
    ',251,780,368,190,467,928,889,581,65,970,306,778,752,472,739,841,32,336,824,779,14,554,296,636,18'
    '4,721,266,446,887,561,77],"sampling_params":{"temperature":0.0,"max_new_tokens":4,"ignore_eos":t'
    'rue,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,"stream":true}},{"i'
    'd":"r06","offset_ms":175.1,"cancel_after_ms":null,"copies":1,"body":{"input_ids":[102,301,929,68'
    '8,212,179,691,730,884,967,538,832,882,879,111,938,188,1000,946,719,850,248,389,200,574,984,793,7'
    '63,566,146,677,92,844,102,61,802,886,243,536,803,382,538,689,107,19,903,200,197,300,95,549,321,7'
    ',897,505,877,936,289,811,614,631,1001,932,148,748,607,18,296,853,867,618,148,297,457,521,590,665'
    ',160,414,278,296,847,436,102,595,928,545,254,387,392,972,500,212,584,577,528,261,254,178,890,96,'
    '124,97,280,109,309,914,992,63,106,97,362,555,854,460,984,420,485,889,164,74,971,235,278,17,397,9'
    '44,314,414,403,294,795,377,818,905,263,717,271,607,401,452,227,803,155,618,339,800,562,1022,730,'
    '778,130,753,517,478,497,577,303,602,800,398,298,345,400,382,824,902,843,293,518,573,208,188,727,'
    '164,750,589,439,129,40,550,229,883,1013,775,275,398,930,759,257,509,456,456,701,625,969,186,226,'
    '886,957,1008,92,686,738,424,246,392,228,1006,714,293,458,928,290,601,497,46,374,737,671,4,380,61'
    '2,307,800,581,389,481,718,450,656,30,566,370,520,287,580,773,108,935,869,240,339,683,704,729,240'
    ',341,577,899,589,30,621,850,541,293,327,245,230,520,960,520,446,726,657,249,714,752,539,90,615,9'
    '91,1012,479,94,814,381,734,984,381,422],"sampling_params":{"temperature":0.0,"max_new_tokens":12'
    ',"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,"str'
    'eam":false}},{"id":"r08","offset_ms":204.4,"cancel_after_ms":null,"copies":1,"body":{"extra_key"'
    ':"tenant-c-168ac1dc","input_ids":[899,278,322,841,572,645,490,352,877,230,149,148,371,631,162,78'
    '8,669,140,449,505,741,851,306,621,853,369,392,438,801,915,441,406,907,445,812,543,219,735,941,49'
    '0,441,471,748,512,902,158,393,427,838,369,482,559,794,332,299,911,994,662,862,364,957,538,652,85'
    '5,772,5,567,329,153,835,923,35,149,527,753,746,728,58,115,387,838,347,117,753,352,360,471,82,735'
    ',48,598,241,458,1019,455,651,362,118,13,340,222,665,24,141,115,390,498,640,735,149,460,397,959,2'
    '25,421,183,887,295,197,145,426,96,868,484,868,538,919,503,334,935,131,60,578,688,516,497,240,717'
    ',316,931,155,416,331,938,185,478,688,250,605,146,242,282,7,285,12,885,283,583,253,205,532,818,26'
    '8,941,33,825,732,832,387,24,886,407,985,423,227,88,545,267,418,821,299,955,784,504,968,1023,885,'
    '161,691,1021,894,665,607,706,779,390,614,357,1022,377,391,57,143,359,339,895,526,706,568,49,51,8'
    '39,502,723,525,398,794,444,322,704,126,273,325,857,956,360,629,59,754,394,519,555,975,32,96,96,4'
    '64,239,348,196,132,531,428,348,606,28,728,741,305,713,520,130,350,286,939,750,481,606,247,246,38'
    '0,347,154,720,806],"sampling_params":{"temperature":0.0,"max_new_tokens":4,"ignore_eos":true,"n"'
    ':1},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,"stream":true}},{"id":"r05'
    '","offset_ms":244.8,"cancel_after_ms":null,"copies":1,"body":{"input_ids":[212,852,880,250,460,7'
    '75,310,134,890,944,920,28,470,94,84,659,602,418,692,800,501,776,609,822,393,301,703,620,333,481,'
    '712,851,920,263,462,540,97,760,614,596,460,1015,506,64,877,584,573,951,6,57,875,522,835,316,947,'
    '954,6,566,581,930,226,205,352,505,270,1002,682,975,640,661,620,444,840,103,1014,817,847,10,405,8'
    '19,312,516,714,975,651,707,712,843,728,575,900,290,654,764,976,848,125,998,802,86,704,522,892,92'
    '2,84,387,988,877,736,794,762,324,499,44,859,46,1008,175,291,962,595,299,188,658,816,662,767,258,'
    '456,594,781,513,131,143,492,321,483,647,196,603,389,423,773,879,986,893,920,707,500,630,616,151,'
    '241,367,624,957,576,490,242,530,889,355,833,1013,963,952,22,116,515,464,767,995,155,625,851,74,5'
    '88,909,453,623,481,669,723,5,549,320,202,258,331,557,83,931,983,895,672,630,537,938,867,661,777,'
    '752,88,134,454,598,514,690,282,869,1015,468,853,268,86,553,236,600,250,667,622,90,985,741,449,52'
    ',911,518,251,684,199,159,924,256,319,82,74,987,417,824,555,117,718,229,899,168,181,648,1010,250,'
    '204,455,880,589,329,999,566,689,980,599,910,786,891,203,610,1020,467,412,381,313,831,457,849,226'
    ',358,299,610,20,596,803,683,999,132,31,343,89,690,163,965,297,570,758,51,483,544,566,993,216,595'
    ',396,452,440,527,628,52,500,354,758,834,162,895,328,493,1009,97,1005,521,56,978,785,351,407,610,'
    '180,118,277,417,326,994,396,287,113,754,701,570,845,170,771,279,15,499,433,322,573,605,1011,484,'
    '557,441,375,1005,899,39,836,656,183,322,15,201,623,127,454,672,278,155,724,410,516,870,669,441,4'
    '41,834,429,533,330,424,60,47,134,391,495,257,992,248,700,178,928,563,613,166,170,452,850,118,435'
    ',263,411,159,666,556,48,915,322,787,892,595,720,1015,217,707,60,622,162,175,845,907,643,26,389,2'
    '29,866,243,37,951,557,984,364,277,437,336,429,973,866,731,720,888,10,158,483,606,693,538,108,75,'
    '357,793,50,623,520,771,610,924,1006,738,705,413,127,819,813,674,142,812,566,686,753,910,361,132,'
    '723,347,654,640,18,389,207,288,1000,648,290,1010,911,83,495,791,722,90,825,583,613,768,119,741,3'
    '71,892,617,950,818,229,322,771,1021,561,324,68,74,973,246,144,336,266,901,290,730,351,158,316,43'
    ',453,177,902,567,987,986,564,983,502,826,371,328,949],"sampling_params":{"temperature":0.0,"max_'
    'new_tokens":13,"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_star'
    't_len":-1,"stream":false}},{"id":"r03","offset_ms":248.6,"cancel_after_ms":null,"copies":1,"body'
    '":{"input_ids":[903,973,986,442,66,100,847,914,568,472,915,634,4,416,227,392,368,298,219,18,53,1'
    '09,878,688,713,247,866,45,114,551,812,669,264,294,324,356,822,219,393,444,867,926,335,618,508,77'
    '8,730,461,382,447,693,734,273,888,353,211,342,945,834,428,845,999,262,699,8,35,20,167,112,613,43'
    ',137,976,757,559,941,142,147,106,458,620,836,267,1013,655,298,327,760,955,136,790,43,274,37,1015'
    ',443,761,247,826,986,246,408,653,857,333,391,899,389,996,494,234,609,452,809,468,559,896,637,659'
    ',464,997,547,408,879,741,141,744,828,261,553,962,660,433,625,227,18,745,472,598,772,339,293,457,'
    '704,486,691,540,282,768,217,77,718,971,226,283,411,656,338,707,915,625,418,139,114,39,756,799,42'
    '7,700,286,595,826,449,304,118,865,649,5,305,934,245,215,857,91,810,273,444,384,479,404,244,929,9'
    '96,571,208,691,475,141,69,753,57,23,271,799,818,871,656,565,988,317,206,685,171,818,980,359,706,'
    '419,385,62,671,824,159,908,719,360,380],"sampling_params":{"temperature":0.0,"max_new_tokens":14'
    ',"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_start_len":-1,"str'
    'eam":false}},{"id":"r04","offset_ms":256.8,"cancel_after_ms":null,"copies":1,"body":{"input_ids"'
    ':[281,44,325,895,153,702,810,591,993,242,736,609,813,116,424,94,127,709,254,627,505,259,699,351,'
    '766,422,761,292,78,593,747,791,454,58,972,840,765,826,553,120,278,693,488,385,45,120,401,646,795'
    ',116,49,827,59,623,656,178,834,990,784,1016,1020,281,537,832,444,152,753,96,334,812,222,936,986,'
    '89,518,883,1008,482,326,249,381,83,485,273,941,330,99,185,225,840,1013,514,18,352,196,579,289,39'
    '0,604,668,708,61,184,134,126,119,780,668,369,147,798,969,818,792,895,831,778,89,706,46,467,597,9'
    '5,450,805,175,569,139,301,623,196,435,345,766,46,207,352,184,277,663,906,53,23,940,201,259,322,6'
    '59,309,708,322,778,96,779,784,99,540,377,250,812,138,311,629,229,239,782,23,874,562,484,208,392,'
    '290,813,127,531,152,938,1022,909,418,869,886,919,222,168,326,626,233,186,955,255,776,666,925,218'
    ',165,708,44,907,847,689,669,674,650,537,310,130,834,864,592,71,828,644,1004,343,297,231,224,652,'
    '464,150,95,683,303,81,485,1014,389,818,693,974,708,201,759,61,369,505,628,125,766,839,196,647,92'
    '4,766,247,1003,875,442,811,368,848,103,52,935,538,581,142,756,343,132,758,71,34,409,373,108,63,9'
    '1,942,954,99,874,508,1012,300,70,851,228,216,402,930,626,708,688,327,778,971,796,98,846,351,158,'
    '177,839,87,637,777,696,905,700,155,159,277,173,38,725,853,1013,519,331,660,983,998,101,247,256,6'
    '44,26,803,623,373,701,14,238,648,822,149,306,996,576,109,856,374,607,986,687,327,928,823,417,772'
    ',911,906,504,735,704,86,484,544,474,561,924,272,23,481,593,422,968,824,422,265,373,915,890,22,97'
    '7,525,56,835,149,783,412,780,78,825,212,855,982,509,833,236,267,419,746,172,527,78,370,195,196,3'
    '65,538,893,97,900,869,386,68,497,730,664,173,436,5,14,939,948,882,396,476,238,20,1015,810,518,80'
    '0,354,953,715,884,582,396,1000,427,683,343,584,621,615,408,552,209,821,648,874,29,331,88,987,676'
    ',934,349,904,34,69,126,291,696,922,944,616,999,370,260,68,493,550,651,148,425,406,96,591,89,378,'
    '993,494,605,223,781,122,529,354,831,958,839,399,499,509,80,768,930,658,560,892,967,1015,497,537,'
    '48,929,595,827,217,234,188,105,239,355,911,703,183,1018,443,450,515,38,810,223,498,399,601,615,1'
    '29,902,219,454,466,944,977,623,354,242,53,100,56,821,321,209,525,399,104,558,472,660,409,143,100'
    '7,866,139,694,862,638,3,1013,567,14,467,481,413,276,833,373,635,346],"sampling_params":{"tempera'
    'ture":0.0,"max_new_tokens":10,"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":'
    '5,"logprob_start_len":-1,"stream":false}},{"id":"r09","offset_ms":258.1,"cancel_after_ms":null,"'
    'copies":1,"body":{"extra_key":"tenant-b-1c603fed","input_ids":[486,657,116,93,231,173,745,623,93'
    '7,692,881,602,695,433,225,1005,167,935,176,128,639,877,234,395,210,660,227,669,180,81,629,1001,5'
    '50,76,190,451,735,502,100,153,10,536,353,330,562,305,377,864,211,203,594,628,529,575,273,270,166'
    ',989,284,225,853,514,643,143,183,583,317,112,756,183,288,813,695,590,590,825,593,154,300,232,694'
    ',716,913,1011,664,156,280,401,419,334,392,310,1013,956,4,485,978,974,539,889,718,475,705,421,164'
    ',209,736,321,400,579,458,895,598,149,598,117,694,669,598,20,830,147,518,405,703,806,930,681,608,'
    '229,39,795,376,531,511,123,781,819,590,842,336,861,966,763,587,752,316,398,904,810,208,357,770,6'
    '55,235,771,949,155,767,589,394,714,45,509,853,722,422,469,996,690,106,213,442,90,306,918,719,745'
    ',583,179,475,419,65,228,710,977,450,783,851,834,152,578,952,422,724,915,927,88,742,199,906,880,8'
    '43,1015,84,980,675,663,165,849,162,160,513,469,705,961,977,387,629,736,864,166,767,681,741,251,5'
    '00,657,264,630,214,853,526,308,251,780,368,190,467,928,889,581,65,970,306,778,752,472,739,841,32'
    ',336,824,779,14,554,738,650,91,663,802,635,414,725,170],"sampling_params":{"temperature":0.0,"ma'
    'x_new_tokens":4,"ignore_eos":true,"n":1},"return_logprob":true,"top_logprobs_num":5,"logprob_sta'
    'rt_len":-1,"stream":true}}],"probes":[],"health":"/health","others":8,"model_files":null}'
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
