"""How fast the target is, measured, and the request timeout it implies.

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

The costs come from `calibration` (two lone requests when the runner starts: one that is mostly
decode, one that is mostly prefill; each one's whole time charged to its own kind of token, which
over-counts both) and are kept honest by every lone or loaded run afterwards: `slowdown` is the
largest ratio of measured to predicted time over the recent ones, so a machine that becomes busy
(other jobs, a server under its own load) stretches the timeout with it.

    >>> p = Pace(prefill_s=0.002, decode_s=0.08)    # SmolLM2 on SGLang CPU, about 12 tokens/s
    >>> r = RequestSpec("r", 0.0, tuple(range(500)), max_tokens=64)
    >>> round(p.expected_s([r]), 2), p.timeout_s([r], floor_s=120.0)
    (6.12, 120.0)
    >>> round(p.timeout_s([r] * 40, floor_s=120.0))   # forty of them in one run
    979
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from servefuzz.history import RequestRecord
from servefuzz.workload import RequestSpec

__all__ = ["CALIBRATION_DECODE", "CALIBRATION_PREFILL", "CALIBRATION_TIMEOUT_S", "PACE_MULTIPLE", "Pace", "PaceMeter", "calibration"]

# The timeout is this many times the expected time: the bound is already serial, so this is
# room for a machine busier than when it was measured (the campaigns ran at load 2-5 here).
PACE_MULTIPLE = 4.0
# The calibration requests' shapes: (prompt tokens, output tokens).
CALIBRATION_DECODE = (8, 32)
CALIBRATION_PREFILL = (256, 1)
# The calibration requests' own timeout (above a lower floor): a server that cannot write 32
# tokens in this long cannot be fuzzed at all.
CALIBRATION_TIMEOUT_S = 120.0
# How many recent runs `slowdown` is the largest over.
_WINDOW = 32
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

    def describe(self) -> str:
        rate = f"{1 / self.decode_s:.0f}" if self.decode_s > 0 else "unbounded"
        return f"measured {rate} output tokens/s alone, x{self.slowdown:.2f} in recent runs"


def calibration(vocab_start: int = 100) -> tuple[RequestSpec, RequestSpec]:
    """The two lone requests that measure a target: mostly decode (ignoring eos, so it writes
    all its tokens), then mostly prefill. Ids from `vocab_start` on, clear of the special ids at
    the start of a real vocabulary and inside any vocabulary of a few hundred tokens."""
    (dp, do), (pp, po) = CALIBRATION_DECODE, CALIBRATION_PREFILL
    return (
        RequestSpec("~pace-decode", 0.0, tuple(range(vocab_start, vocab_start + dp)), max_tokens=do, ignore_eos=True),
        RequestSpec("~pace-prefill", 0.0, tuple(range(vocab_start, vocab_start + pp)), max_tokens=po, ignore_eos=True),
    )


class PaceMeter:
    """The measurements so far (mutable, owned by one runner); `pace` is None until calibrated."""

    def __init__(self) -> None:
        self._base: Pace | None = None
        self._ratios: deque[float] = deque(maxlen=_WINDOW)

    @property
    def pace(self) -> Pace | None:
        if self._base is None:
            return None
        return Pace(self._base.prefill_s, self._base.decode_s, max(self._ratios, default=1.0))

    def calibrate(self, decode: RequestRecord, prefill: RequestRecord) -> bool:
        """Set the costs from the two calibration records (`calibration`); False (nothing set)
        where either did not answer in full."""
        if not (decode.ok and prefill.ok):
            return False
        d_out = max(1, sum(len(c.token_ids) for c in decode.choices))
        p_in = max(1, prefill.prompt_tokens or CALIBRATION_PREFILL[0])
        self._base = Pace(prefill_s=_seconds(prefill) / p_in, decode_s=_seconds(decode) / d_out)
        self._ratios.append(1.0)
        return True

    def observe(self, records: Sequence[RequestRecord]) -> None:
        """Fold in one run: its wall time (first send to last end) against the serial bound of
        what it actually did. Runs with a failed request, and short ones, say nothing about speed."""
        if self._base is None or not records or not all(r.ok and r.end_ms is not None for r in records):
            return
        predicted = sum(self._base.work_s(r.prompt_tokens or 0, sum(len(c.token_ids) for c in r.choices))
                        for r in records)
        sent = min((r.sent_ms for r in records if r.sent_ms is not None), default=None)
        if sent is None or predicted < _MIN_PREDICTED_S:
            return
        wall = (max(r.end_ms or 0.0 for r in records) - sent) / 1000.0
        self._ratios.append(wall / predicted)


def _seconds(record: RequestRecord) -> float:
    return max(1e-6, ((record.end_ms or 0.0) - (record.sent_ms or 0.0)) / 1000.0)
