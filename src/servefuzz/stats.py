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
