"""Numeric drift or corruption? The noise model and the classification of one divergence.

At the first position where two outputs that should be equal differ (A chose a, B chose b), each
output's *confidence* in its own token is read from its top-k logprobs: lpA(a) - lpA(b) and
lpB(b) - lpB(a). If b is not in A's top-k, lpA(b) is at most A's smallest top-k logprob; that
bound is used and marked. The margin is the larger of the two confidences: a benign flip needs
*both* runs to have been at a near-tie, so one confident run is enough to rule numerics out.

The threshold for "near" is measured, not assumed: the engine's jitter is the absolute difference
of chosen-token logprobs at agreeing positions of outputs that agree across runs (the stable
ones; a corrupted output's agreeing prefix may already carry corrupted logprobs, so it is not a
noise sample). threshold = max(NOISE_FLOOR, NOISE_K x p99 of that jitter). NOISE_FLOOR is GRIEF's
logprob gap, 0.001; NOISE_K = 4 leaves room for the p99 of a few hundred samples to understate
the tail without letting a real corruption (margins of whole nats) pass as drift.

Some engines compute logits on a coarse grid (bfloat16 logits near 8 are whole multiples of
1/16), so two runs that round one logit differently flip a tie by a whole step, far above any
measured p99. Where every gap between the top-k logprobs at the flip, in both runs, is a whole
multiple of one power of two of at least GRID_MIN (`logit_step`), the threshold there is at least
two such steps: a flip within two steps of the engine's own resolution is a tie it cannot
represent more finely. Float32 engines show no such grid (their gaps are arbitrary), so the rule
never applies to them; the same per-position rule holds for the agreeing tokens before the flip.

Verdicts, in the order they are decided:
- `unclassified`: no token-level evidence (text-only target, one output ended early, or no
  top-k logprobs at the flip), or the margin is within the threshold only because a term is
  unknown or a below-top-k bound. We do not guess.
- `suspected-corruption`: margin > threshold (a lower bound on the margin is enough), or the
  margin is small but the agreeing tokens before the flip already differ by more than the
  threshold (the state was off before the tokens showed it). One pair of runs cannot say more:
  `corruption` is only ever given by a control that backs the flip (`oracles.controls`), never
  here.
- `numeric-drift`: margin <= threshold, with both confidences known exactly.

A request sampled under a seed (`NoiseModel.sampled`) is judged by the sampled rule. Both runs
drew with the same generator state (same seed, same tokens before the flip), so the draw can
only change where the distribution moved, and only toward the other run's token. For the
Gumbel-max samplers of vLLM and the reference engine (token = argmax of logprob + a noise the
seed fixes) run A drawing a and run B drawing b needs g_b - g_a to lie in a window of width
`shift` = (lpA(a) - lpA(b)) - (lpB(a) - lpB(b)) (the sum of the two confidences; in raw logprobs,
the temperature scales window and noise alike): how far the odds of a over b moved toward b.
`shift` takes the margin's place: numeric drift only when 0 < shift <= threshold (a draw that sat
within the noise of the a|b boundary, and the smaller the shift the rarer such a flip); a shift
above the threshold is a distribution that moved beyond noise, and a shift <= 0 (the odds did not
move toward b, as when the distributions agree bit for bit) means the randomness itself differed:
both `suspected-corruption`.

    >>> from servefuzz.history import ChoiceRecord, TopLogprobs
    >>> tie = ((7, -0.6931), (9, -0.6934))
    >>> a = Output(0, "load", ChoiceRecord(0, (5, 7), (-0.1, -0.6931), (((5, -0.1),), tie)))
    >>> b = Output(1, "load", ChoiceRecord(0, (5, 9), (-0.1, -0.6930), (((5, -0.1),), ((9, -0.6930), (7, -0.6933)))))
    >>> d = classify("r01", a, b, NoiseModel(p99=0.0, tokens=100, outputs=4))
    >>> d.verdict.value, d.position, round(d.margin, 4)
    ('numeric-drift', 1, 0.0003)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from servefuzz.anomaly import Divergence, FlipSide, Variant, Verdict
from servefuzz.history import ChoiceRecord
from servefuzz.oracles.noise import (
    CAMPAIGN_K,
    GRID_MIN,
    IMPLICATED_K,
    NOISE_FLOOR,
    CampaignNoise,
    fmt_lp,
    logit_step,
    step_at,
)
from servefuzz.oracles.outputs import Output, VariantGroup
from servefuzz.terms import first_difference

__all__ = [
    "GRID_MIN",
    "NOISE_FLOOR",
    "NOISE_K",
    "NOISE_MAX_K",
    "NoiseModel",
    "brief",
    "classify",
    "classify_splits",
    "fmt_lp",
    "logit_step",
    "measure_noise",
    "step_at",
]

NOISE_K = 4.0
# Numeric noise is heavy-tailed (a rare reduction-order change moves a logprob ten times its
# p99, as measured on llama.cpp CUDA, docs/gpu/): the threshold also covers twice the largest
# jitter seen, so the tail of benign noise is never called corruption.
NOISE_MAX_K = 2.0


@dataclass(frozen=True)
class NoiseModel:
    """The engine's logprob jitter on agreeing tokens, and the threshold it implies.

    `p99` is None when nothing could be measured (no stable outputs with logprobs); the
    threshold is then the floor alone, and `describe()` says so. `campaign`: the benign shifts
    the whole campaign has seen (`oracles.noise`); a flip is held against the larger of this
    scenario's threshold and the campaign's at its position, and its reason says where the
    margin sits among the campaign's shifts.
    """

    p99: float | None
    tokens: int
    outputs: int
    k: float = NOISE_K
    max: float | None = None
    campaign: CampaignNoise | None = None
    # The requests sampled under a seed (`Scenario.seeded`): their flips are draws, judged by
    # `classify`'s sampled rule. It rides here because every oracle hands this model to classify.
    sampled: frozenset[str] = frozenset()
    # The requests whose agreeing tokens moved too far to be noise (`noise.implicated`), with how
    # far: left out of `p99` and `max`, and named in `describe()`, so a verdict says what its bar
    # did not stand on.
    set_aside: tuple[tuple[str, float], ...] = ()

    @property
    def threshold(self) -> float:
        return max(NOISE_FLOOR, self.k * (self.p99 or 0.0), NOISE_MAX_K * (self.max or 0.0))

    def describe(self) -> str:
        """Where the threshold comes from, for reason strings."""
        return self._measured() + self._aside()

    def _aside(self) -> str:
        if not self.set_aside:
            return ""
        moved = ", ".join(f"{rid} {fmt_lp(m)}" for rid, m in self.set_aside[:3])
        more = f" and {len(self.set_aside) - 3} more" if len(self.set_aside) > 3 else ""
        return (f"; not counted as noise: {moved}{more} (agreeing tokens moved over {IMPLICATED_K:g} x the "
                "typical request's move and the campaign's largest benign one)")

    def _measured(self) -> str:
        if self.p99 is None:
            return f"floor {fmt_lp(NOISE_FLOOR)}: no agreeing tokens with logprobs to measure noise on"
        measured = (
            f"p99 noise {fmt_lp(self.p99)} over {self.tokens:,} agreeing tokens of {self.outputs:,} stable outputs"
        )
        if self.threshold == NOISE_FLOOR:
            return f"floor {fmt_lp(NOISE_FLOOR)}; {measured}"
        if self.max is not None and self.threshold == NOISE_MAX_K * self.max:
            return f"{NOISE_MAX_K:g} x the largest jitter {fmt_lp(self.max)}; {measured}"
        return f"{self.k:g} x {measured}"


def measure_noise(stable: Iterable[Sequence[ChoiceRecord]]) -> NoiseModel:
    """Measure jitter over groups of outputs that agree (each group: one stable output as every
    run returned it). Each later member is compared with the first, position by position.

    >>> c = lambda *lps: ChoiceRecord(0, (1, 2), lps)
    >>> m = measure_noise([[c(-1.0, -2.0), c(-1.0, -2.002)]])
    >>> (round(m.p99, 6), m.tokens, m.outputs, round(m.threshold, 6))
    (0.00198, 2, 1, 0.00792)
    >>> m = measure_noise([[c(-1.0, -2.0), c(-1.0, -2.0)]] * 200 + [[c(-1.0, -2.0), c(-1.0, -2.05)]])
    >>> round(m.p99, 6), round(m.threshold, 6)  # one rare large jitter still sets the bar
    (0.0, 0.1)
    """
    samples: list[float] = []
    outputs = 0
    for group in stable:
        before = len(samples)
        first = group[0]
        for other in group[1:]:
            samples.extend(_agreeing_deltas(first, other, len(first.token_ids)))
        outputs += len(samples) > before
    if not samples:
        return NoiseModel(p99=None, tokens=0, outputs=0)
    return NoiseModel(
        p99=float(np.percentile(samples, 99)), tokens=len(samples), outputs=outputs, max=float(max(samples))
    )


def classify_splits(
    request_id: str, splits: Iterable[Sequence[VariantGroup]], noise: NoiseModel
) -> tuple[list[Variant], list[Divergence]]:
    """The variants of every split (a run's or a choice's outputs grouped, the first group its
    reference) and each other group's divergence from that reference."""
    variants: list[Variant] = []
    divergences: list[Divergence] = []
    for groups in splits:
        ref = groups[0].outputs[0]
        variants.extend(g.variant for g in groups)
        divergences.extend(classify(request_id, ref, g.outputs[0], noise) for g in groups[1:])
    return variants, divergences


def classify(request_id: str, a: Output, b: Output, noise: NoiseModel) -> Divergence:
    """Classify two differing outputs of one request at their first difference.

    Symmetric: swapping `a` and `b` gives the same verdict, margin and threshold.
    Raises ValueError when the outputs do not differ (callers compare variants, never equals).
    """
    ca, cb = a.choice, b.choice
    if not ca.token_ids and not cb.token_ids:
        return _text_only(request_id, a, b)
    pos = first_difference(ca.token_ids, cb.token_ids)
    if pos is None:
        raise ValueError(f"{request_id}: outputs are equal; nothing to classify")
    ta, tb = _token_at(ca, pos), _token_at(cb, pos)
    sa, sb = _side(a, pos, ta, tb), _side(b, pos, tb, ta)
    prefix_delta = max(_agreeing_deltas(ca, cb, pos), default=None)
    step = step_at(ca, cb, pos)
    cached = a.cached or b.cached
    campaign = noise.campaign
    wide = campaign.threshold(pos, cached) if campaign is not None else 0.0
    threshold = max(noise.threshold, 2 * step, wide)

    def shift_bar(i: int) -> float:
        return max(noise.threshold, campaign.threshold(i, cached, "linf") if campaign is not None else 0.0)

    # The agreeing tokens are held to their own positions' grids and the campaign's noise there:
    # the worst excess over them.
    excess = max((d for i, d in _agreeing_deltas_at(ca, cb, pos)
                  if d > shift_bar(i) and d > 2 * step_at(ca, cb, i)), default=None)
    if ta is None or tb is None:
        ended, going = (sa, sb) if ta is None else (sb, sa)
        verdict = Verdict.UNCLASSIFIED
        margin, is_bound = None, False
        reason = (
            f"{ended.name} ended at token {pos} (finish_reason {ended.finish_reason!r}) while "
            f"{going.name} went on with {going.token}; an early end carries no logprobs to classify"
        )
    else:
        terms = [sa.confidence, sb.confidence]
        known = [t for t in terms if t is not None]
        drawn = request_id in noise.sampled
        # Unknown or bounded terms make the margin a lower bound: enough to prove corruption,
        # never enough to prove a near-tie.
        is_bound = bool(known) and (None in terms or sa.other_is_bound or sb.other_is_bound)
        if drawn and (len(known) < 2 or is_bound):
            # A draw below the other run's top-k: the odds shift is unknown (a bound on one side
            # of a sum bounds nothing), so the visible distribution speaks instead.
            margin, is_bound = None, False
            verdict, why = _unseen_draw(_visible_shift(ca, cb, pos), pos, excess, threshold, noise)
        else:
            margin = (sum(known) if drawn else max(known)) if known else None
            verdict, why = _decide(margin, is_bound, excess, prefix_delta, pos, noise, threshold, step, wide, drawn)
        if campaign is not None and margin is not None:
            why += f"; {campaign.where(margin, pos, cached)}"
        reason = f"flip at token {pos}: {_describe(sa, tb)}; {_describe(sb, ta)}; {why} -> {verdict.value}"
    return Divergence(
        request_id=request_id,
        position=pos,
        a=sa,
        b=sb,
        verdict=verdict,
        reason=reason,
        margin=margin,
        margin_is_bound=is_bound,
        threshold=threshold,
        noise_p99=noise.p99,
        noise_tokens=noise.tokens,
        noise_outputs=noise.outputs,
        prefix_delta=prefix_delta,
    )


def brief(d: Divergence) -> str:
    """A short clause for one-line summaries: 'flip at token 1, margin 4.1200 > threshold 0.0040'."""
    where = f"flip at {d.unit} {d.position}"
    if d.margin is None or d.threshold is None:
        return f"{where}, margin unknown"
    cmp = ">" if d.margin > d.threshold else "<="
    at_least = "at least " if d.margin_is_bound else ""
    return f"{where}, margin {at_least}{fmt_lp(d.margin)} {cmp} threshold {fmt_lp(d.threshold)}"


def _decide(
    margin: float | None,
    is_bound: bool,
    excess: float | None,
    prefix_delta: float | None,
    pos: int,
    noise: NoiseModel,
    threshold: float,
    step: float,
    wide: float = 0.0,
    drawn: bool = False,
) -> tuple[Verdict, str]:
    if margin is None:
        return Verdict.UNCLASSIFIED, "no top-k logprobs at the flip; cannot tell numerics from corruption"
    name = "odds shift" if drawn else "margin"
    if wide >= threshold and wide > noise.threshold:
        against = (f"threshold {fmt_lp(threshold)} ({CAMPAIGN_K:g} x the largest benign top-1/top-2 gap shift the "
                   f"campaign has seen at this position; this scenario's own: {noise.describe()})")
    elif threshold > noise.threshold:
        against = (f"threshold {fmt_lp(threshold)} (2 x the logits' step {fmt_lp(step)} at this token: every "
                   f"top-k gap in both runs is a whole multiple of it, as with bfloat16 logits; {noise.describe()})")
    else:
        against = f"threshold {fmt_lp(threshold)} ({noise.describe()})"
    if margin > threshold:
        at_least = "at least " if is_bound else ""
        return Verdict.SUSPECTED_CORRUPTION, f"{name} {at_least}{fmt_lp(margin)} > {against}"
    if is_bound:
        return Verdict.UNCLASSIFIED, (
            f"{name} at least {fmt_lp(margin)} <= {against}, but a run's top-k does not reach the "
            f"other token (or gives no logprobs), so the true {name} is unknown"
        )
    if drawn and margin <= 0:
        return Verdict.SUSPECTED_CORRUPTION, (
            f"a seeded draw: the odds of one token over the other moved by {fmt_lp(margin)}, not toward the other "
            "run's token, so no change of the distribution can move the draw: the randomness itself differed"
        )
    if excess is not None:
        return Verdict.SUSPECTED_CORRUPTION, (
            f"{name} {fmt_lp(margin)} <= {against}, but the {pos} agreeing tokens before the flip "
            f"already differ in logprob by up to {fmt_lp(excess)}: the state was off before the tokens showed it"
        )
    prefix = (
        f"; the {pos} agreeing tokens before it agree within {fmt_lp(prefix_delta)}" if prefix_delta is not None else ""
    )
    drew = "; a seeded draw that sat within the noise of the boundary between the two tokens" if drawn else ""
    return Verdict.NUMERIC_DRIFT, f"{name} {fmt_lp(margin)} <= {against}{prefix}{drew}"


def _visible_shift(a: ChoiceRecord, b: ChoiceRecord, pos: int) -> tuple[float, int] | None:
    """The largest |lpA - lpB| over the tokens both runs' top-k report at `pos`, and how many
    there are; None when they share none."""
    ta = dict(a.top_logprobs[pos]) if pos < len(a.top_logprobs) else {}
    tb = dict(b.top_logprobs[pos]) if pos < len(b.top_logprobs) else {}
    common = ta.keys() & tb.keys()
    return (max(abs(ta[t] - tb[t]) for t in common), len(common)) if common else None


def _unseen_draw(
    visible: tuple[float, int] | None, pos: int, excess: float | None, threshold: float, noise: NoiseModel
) -> tuple[Verdict, str]:
    """A seeded flip whose odds shift is unknown (a drawn token below the other run's top-k):
    only the two clear cases are decided from the tokens both runs report there."""
    if visible is None:
        return Verdict.UNCLASSIFIED, "a seeded draw below top-k, and the runs share no top-k token to compare"
    shift, count = visible
    if shift == 0:
        return Verdict.SUSPECTED_CORRUPTION, (
            f"a seeded draw: the {count} top-k tokens both runs report agree bit for bit, so the distribution did "
            "not move, yet the draw did: the randomness itself differed"
        )
    if shift > threshold:
        return Verdict.SUSPECTED_CORRUPTION, (
            f"a seeded draw: the distribution moved by up to {fmt_lp(shift)} over {count} shared top-k tokens "
            f"> threshold {fmt_lp(threshold)} ({noise.describe()})"
        )
    if excess is not None:
        return Verdict.SUSPECTED_CORRUPTION, (
            f"a seeded draw, but the {pos} agreeing tokens before the flip already differ in logprob by up to "
            f"{fmt_lp(excess)}: the state was off before the tokens showed it"
        )
    return Verdict.UNCLASSIFIED, (
        f"a seeded draw below top-k: the distribution moved by up to {fmt_lp(shift)} <= threshold "
        f"{fmt_lp(threshold)}, but the odds of the two drawn tokens are not both known, so whether noise can "
        "explain the flip is unknown"
    )


def _describe(s: FlipSide, other: int | None) -> str:
    own = "no logprob" if s.lp_own is None else fmt_lp(s.lp_own)
    if s.lp_other is None:
        alt = "no logprob"
    elif s.other_is_bound:
        alt = f"<= {fmt_lp(s.lp_other)}, below top-k"
    else:
        alt = fmt_lp(s.lp_other)
    return f"{s.name} chose {s.token} ({own}) over {other} ({alt})"


def _side(out: Output, pos: int, own: int | None, other: int | None) -> FlipSide:
    c = out.choice
    side = FlipSide(out.run, out.label, c.index, own, finish_reason=c.finish_reason)
    if own is None:
        return side
    top = dict(c.top_logprobs[pos]) if pos < len(c.top_logprobs) else {}
    # Greedy picks the top-1, so the own token is normally in the top-k; the chosen-token
    # logprob is the fallback for engines that give top-k without it.
    lp_own = top.get(own, c.logprobs[pos] if pos < len(c.logprobs) else None)
    if not top or other is None:
        return replace(side, lp_own=lp_own)
    if other in top:
        return replace(side, lp_own=lp_own, lp_other=top[other])
    return replace(side, lp_own=lp_own, lp_other=min(top.values()), other_is_bound=True)


def _token_at(c: ChoiceRecord, pos: int) -> int | None:
    return c.token_ids[pos] if pos < len(c.token_ids) else None


def _agreeing_deltas(a: ChoiceRecord, b: ChoiceRecord, upto: int) -> list[float]:
    """|lpA - lpB| at positions < upto where the tokens agree and both logprobs are known."""
    return [d for _, d in _agreeing_deltas_at(a, b, upto)]


def _agreeing_deltas_at(a: ChoiceRecord, b: ChoiceRecord, upto: int) -> list[tuple[int, float]]:
    """(position, |lpA - lpB|) at positions < upto where the tokens agree and both are known."""
    n = min(upto, len(a.token_ids), len(b.token_ids), len(a.logprobs), len(b.logprobs))
    out: list[tuple[int, float]] = []
    for i in range(n):
        la, lb = a.logprobs[i], b.logprobs[i]
        if a.token_ids[i] == b.token_ids[i] and la is not None and lb is not None:
            out.append((i, abs(la - lb)))
    return out


def _text_only(request_id: str, a: Output, b: Output) -> Divergence:
    pos = first_difference(a.choice.text, b.choice.text)
    if pos is None:
        raise ValueError(f"{request_id}: outputs are equal; nothing to classify")
    sa = FlipSide(a.run, a.label, a.choice.index, None, finish_reason=a.choice.finish_reason)
    sb = FlipSide(b.run, b.label, b.choice.index, None, finish_reason=b.choice.finish_reason)
    reason = f"text-only outputs differ at character {pos}; no token ids or logprobs to tell numerics from corruption"
    return Divergence(request_id, pos, sa, sb, Verdict.UNCLASSIFIED, reason, unit="char")
