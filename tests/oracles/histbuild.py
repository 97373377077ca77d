"""Builders for recorded histories in oracle tests: real data objects, written by hand."""

from __future__ import annotations

from collections.abc import Sequence

from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status

__all__ = ["scored", "flip", "rec", "run", "ALT"]

ALT = 1000  # runner-up token ids are the chosen id + ALT, so they never collide with outputs


def scored(
    tokens: Sequence[int],
    *,
    gap: float = 3.0,
    jitter: Sequence[float] = (),
    index: int = 0,
    text: str = "",
) -> ChoiceRecord:
    """A greedy output with top-2 logprobs: each chosen token at -0.05 (+ jitter[i]), its
    runner-up (token + ALT) `gap` nats below."""
    lps = [-0.05 + (jitter[i] if i < len(jitter) else 0.0) for i in range(len(tokens))]
    top = tuple(((t, lp), (t + ALT, lp - gap)) for t, lp in zip(tokens, lps))
    return ChoiceRecord(index, tuple(tokens), tuple(lps), top, text=text, finish_reason="length")


def flip(
    base: ChoiceRecord, pos: int, *, chosen: int, lp_chosen: float, other: int, lp_other: float, tail: Sequence[int] = ()
) -> ChoiceRecord:
    """`base` up to `pos`, then `chosen` over `other` at `pos`, then `tail` (confident)."""
    tokens = (*base.token_ids[:pos], chosen, *tail)
    rest = scored(tail)
    return ChoiceRecord(
        base.index,
        tokens,
        (*base.logprobs[:pos], lp_chosen, *rest.logprobs),
        (*base.top_logprobs[:pos], ((chosen, lp_chosen), (other, lp_other)), *rest.top_logprobs),
        finish_reason="length",
    )


def rec(rid: str, run: int, *choices: ChoiceRecord, status: Status = Status.OK, label: str = "load", **kw: object) -> RequestRecord:
    return RequestRecord(rid, run, label, status, 0.0, choices=choices, **kw)  # type: ignore[arg-type]


def run(i: int, *records: RequestRecord, label: str = "load") -> RunHistory:
    return RunHistory(i, label, records)
