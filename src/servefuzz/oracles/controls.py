"""Controls: experiments whose outcome can back a suspected corruption, and the rule that reads them.

A confident flip between two runs says the engine was sure of two different answers; it does
not say why. A control changes one thing and watches whether the flip follows:

- *content swap*: every neighbour of the victims keeps its length, offset, max_tokens, n and
  the prefix it shares with a victim, token for token; only its own tail past that prefix is
  replaced (a bijection on the vocabulary, so neighbours that shared a tail still share it, and
  the first replaced token is never the victim's own there: the shared prefix ends where it did).
  Batch sizes, arrival times, and the prefix cache's hits and prefill splits at the shared
  prefix stay as they were, so an engine whose only excuse is numerics (batch shapes, or where a
  shared prefix splits the victim's prefill) gives the victim the same answers; a deviation that
  goes away with the neighbours' own content depended on that content: cross-request
  dependency, with no rounding excuse. A neighbour whose whole prompt is a prefix of the
  victim's has no content of its own to swap (`SwapPlan.whole`); when no neighbour has any, the
  control is skipped and says so. (Replacing the shared prefix too, as this control once did,
  moves where the victim's prefill is split and calls the rounding that follows content: vLLM
  CPU's bfloat16 qwen3-next, docs/engines.md.)
- *deterministic control*: the same scenario on the engine's batch-invariant mode
  (`--enable-deterministic-inference` on the reference engine and SGLang). A deviation that
  survives it is not batch numerics; one it removes is.
- *fresh server*: the same scenario on a server started for it. It backs nothing (a bug that
  needs earlier traffic is a bug all the same) but says whether the deviation needs the traffic
  that came before it.
- *leak forensics* (`leak_forensics`, no replay: it reads the runs already made): does the
  deviant output, from the flip on, repeat another request's solo continuation or its prompt?
  A run of `leak_tokens` tokens (twice the longest run unrelated requests of this campaign
  shared by chance, `chance_run`, and never fewer than LEAK_MIN_TOKENS) that is another
  request's and nowhere in the victim's own prompt or reference is a *candidate* leak. A small
  model has attractor runs: once a tie flip lands on one token, the same dozen tokens follow
  whatever came before, in any request that reaches them. So a candidate is a leak only when the
  victim's own context could not have written it (`OwnContinuation`, the *forced check*: the
  victim's prompt with its deviant output forced up to each matched token, on the exact truth
  where servefuzz built the model, else on the engine alone): some matched token is one the
  victim's own context would not give. Without a forced check a candidate backs only a flip
  already above the noise threshold (`back`). Finding nothing says nothing (most corruption
  computes on wrong state without copying anyone's text).

The rule is one test for every control (`read_control`): the victim's deviation (an answer
other than its reference alone) is counted in the original replays and in the control's; the
control *backs* the flip when it changes the deviation's rate significantly (one-sided Fisher,
`CONTROL_ALPHA`), in the direction that rules numerics out: gone with the neighbours' content,
or still there under batch invariance. Under the content swap only *the same* wrong answers
count: batch numerics give the same wrong answer for the same shapes, while a victim that reads
a neighbour's state gives another one when that state changes (overlap-war), or the right one
when the sharing is gone (page-boundary-prefix). A bug the victim's own shape triggers
(chunk-boundary, stale-padding) gives the same wrong answer too: the swap cannot tell it from
numerics, and the deterministic control or the truth must. `back` then turns `suspected-corruption` into
`corruption` and names the control in the anomaly's evidence; a control that backs nothing is
kept in the evidence too, because a quiet control is information.

    >>> r = read_control("content-swap", "r02", original=(5, 5), control=(0, 5))
    >>> r.backs, round(r.p_value, 4)
    (True, 0.004)
    >>> read_control("content-swap", "r02", original=(5, 5), control=(5, 5)).backs
    False
    >>> read_control("content-swap", "r02", original=(1, 5), control=(0, 1)).summary.rsplit("; ", 1)[1]
    'none of the same wrong answers in 1 run, too few against 1/5 originals to say the swap removed it: inconclusive'
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from servefuzz.anomaly import Anomaly, Verdict
from servefuzz.evidence import ControlResult, LeakMatch, OwnContinuation, SwapPlan
from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory
from servefuzz.oracles.outputs import Output, determinate_outputs, group_variants, output_key
from servefuzz.stats import fisher_less, wilson
from servefuzz.terms import common_prefix
from servefuzz.truth import Truth
from servefuzz.workload import RequestSpec, Scenario

__all__ = [
    "CONTROL_ALPHA",
    "CONTROL_POWER",
    "MAX_CONTROL_RUNS",
    "MIN_CONTROL_RUNS",
    "CONSTRAINT",
    "CONTENT_SWAP",
    "DETERMINISTIC",
    "FRESH_SERVER",
    "LEAK",
    "LEAK_MIN_TOKENS",
    "TRUTH",
    "TRUTH_NEAR",
    "ControlResult",
    "OwnContinuation",
    "back",
    "chance_run",
    "leak_span",
    "leak_tokens",
    "own_by_truth",
    "proves_leak",
    "with_own_check",
    "deviant_outputs",
    "deviating_runs",
    "leak_forensics",
    "read_control",
    "rate_floor",
    "runs_to_refute",
    "runs_to_see",
    "swap_can_back",
    "swap_content",
    "swap_plan",
    "truth_control",
    "truth_distance",
]

# A structured-output answer outside its own constraint under load, inside it alone
# (`oracles.constraint`): proof by the answer itself, as a leak is.
CONSTRAINT = "constraint"
CONTENT_SWAP = "content-swap"
DETERMINISTIC = "deterministic"
FRESH_SERVER = "fresh-server"
LEAK = "leak-forensics"
TRUTH = "truth"
# A deviant output repeats another request's content when at least this many of its tokens in a
# row, from the flip on, are a run of that request's solo continuation or prompt and appear
# nowhere in the victim's own prompt or reference. Eight is the floor: in the clean reference
# engine campaigns of seeds 12 and 13 (6,244 distinct outputs, bench/leak_chance.py) unrelated
# requests shared at most 4 tokens in a row by chance, never 5. That was one model; a campaign
# measures its own (`chance_run`) and asks twice what it saw (`leak_tokens`): the bf16 tiny
# model on vLLM shares 13-token attractor runs between unrelated requests.
LEAK_MIN_TOKENS = 8
# Chance runs are looked up by grams of this length: shorter runs never move `leak_tokens` off
# its floor, and longer grams would miss the 3- and 4-token runs the floor was measured on.
_CHANCE_GRAM = 3
# A run this close to the exact float64 forward pass (largest |observed - true| logprob over its
# top-k, at every position up to the flip) computed what the model computes: float32 engines on a
# CPU land within ~1e-5, TF32 on a GPU within ~1e-3.
TRUTH_NEAR = 1e-3
# A control backs a flip only when its change is this unlikely by chance: 5/5 against 0/5 is
# p = 0.004; 3/5 against 0/5 (p = 0.08) is not enough, and the verdict stays suspected.
CONTROL_ALPHA = 0.05
# A control runs at least this often: against 2/2 original deviations, 0/5 under the control is
# p = 0.048, so even the shortest confirmation can be backed; fewer control runs never could.
MIN_CONTROL_RUNS = 5
# A control that backs on any deviation (the deterministic mode) runs until a deviation as
# frequent as the original one would show with this probability (`runs_to_see`), up to the cap:
# a timing bug confirmed in 2 of 5 replays needs 20 runs, not 5, before its absence says anything.
CONTROL_POWER = 0.95
MAX_CONTROL_RUNS = 30
# "As frequent as the original one" is the rate the original k of n falls below only 5% of the
# time (the lower end of a 90% Wilson interval), not k/n: five replays put k/n too high as often
# as too low, and a control sized on a rate that came out high misses the deviation it looks for
# (overlap-war confirmed 2/5 was absent from 6 runs sized on 0.4, 2026-11-30).
RATE_CONFIDENCE = 0.90
_FIRST_TOKEN = 3  # PromptBuilder's vocabulary starts here: ids below are special tokens

_WHAT = {
    CONTENT_SWAP: ("the neighbours' own tails, past the prefix they share with the victim, replaced by other tokens "
                   "of the same lengths, offsets and max_tokens",
                   "the deviation follows the neighbours' own content: cross-request dependency, no rounding excuse",
                   "the deviation stays with the neighbours' own content changed: consistent with numerics"),
    DETERMINISTIC: ("the engine's deterministic (batch-invariant) mode",
                    "the deviation survives batch invariance: not batch numerics",
                    "batch invariance removes the deviation: batch numerics"),
    FRESH_SERVER: ("a freshly started server that has served nothing but this scenario",
                   "the deviation needs the traffic that came before it on the warm server",
                   "the deviation does not need earlier traffic"),
}


def runs_to_see(k: int, n: int, *, power: float = CONTROL_POWER, least: int = MIN_CONTROL_RUNS,
                most: int = MAX_CONTROL_RUNS) -> int:
    """How many runs a control that backs on any deviation needs, so that a deviation at the rate
    it had (k in n, taken at `rate_floor`) shows at least once with probability `power`; between
    `least` and `most`.

    >>> runs_to_see(5, 5), runs_to_see(3, 5), runs_to_see(2, 5), runs_to_see(1, 5), runs_to_see(20, 40)
    (5, 10, 20, 30, 7)
    """
    floor = rate_floor(k, n)
    if not 0.0 < floor < 1.0:
        return least
    need = math.ceil(math.log(1 - power) / math.log(1 - floor))
    return max(least, min(most, need))


def runs_to_refute(k: int, n: int, *, alpha: float = CONTROL_ALPHA, least: int = MIN_CONTROL_RUNS,
                   most: int = MAX_CONTROL_RUNS) -> int:
    """How many runs a control that backs on a deviation's absence (the content swap) needs, so
    that none of the original deviations (k in n) coming back there is significant at `alpha`;
    between `least` and `most`, and `least` when even `most` could not (one deviation in five:
    more runs would not back it either).

    Five runs refute 5/5 but not 2/5 (p = 0.22): a timing bug that reproduced 2 of 5 times on a
    loaded machine stays suspected after a five-run swap, however real it is (overlap-war in CI,
    2026-12-02).

    >>> runs_to_refute(5, 5), runs_to_refute(3, 5), runs_to_refute(2, 5), runs_to_refute(1, 5)
    (5, 7, 16, 5)
    """
    if k <= 0 or n <= 0:
        return least
    for runs in range(least, most + 1):
        if fisher_less(0, runs, min(k, n), n) <= alpha:
            return runs
    return least


def swap_can_back(control: tuple[int, int], runs: int, original: tuple[int, int], *,
                  alpha: float = CONTROL_ALPHA) -> bool:
    """Whether a content swap that has shown `control` (k of its runs so far gave one of the same
    wrong answers) can still back the flip by the end of its `runs`: at best every run left shows
    none of them, and k in `runs` must still be significantly below the original rate. Once it
    cannot, the runs left would only be spent on an outcome already decided.

    Against 5/5 originals, one same wrong answer can still be outweighed (1/5 is p = 0.024), two
    cannot (2/5, p = 0.083):

    >>> swap_can_back((1, 1), 5, (5, 5)), swap_can_back((2, 2), 5, (5, 5))
    (True, False)
    """
    (kc, nc), (ko, no) = control, original
    return ko > 0 and no > 0 and fisher_less(kc, max(runs, nc, 1), ko, no) <= alpha


def rate_floor(k: int, n: int) -> float:
    """The deviation rate that k deviations in n runs vouch for: the lower end of the Wilson
    interval at RATE_CONFIDENCE (0 for no runs or no deviation).

    >>> round(rate_floor(2, 5), 3), round(rate_floor(5, 5), 3), rate_floor(0, 5)
    (0.143, 0.649, 0.0)
    """
    if n <= 0 or k <= 0:
        return 0.0
    return wilson(min(k, n), n, RATE_CONFIDENCE)[0]


def read_control(
    name: str, request_id: str, *, original: tuple[int, int], control: tuple[int, int], alpha: float = CONTROL_ALPHA,
    swap: SwapPlan | None = None,
) -> ControlResult:
    """The one rule for every control (see the module docstring). `swap`: what the content swap
    changed; with nothing to swap it backs nothing and says it was skipped.

        >>> plan = SwapPlan((("r03", 40),), (), ("r03",))
        >>> r = read_control("content-swap", "r02", original=(5, 5), control=(0, 0), swap=plan)
        >>> r.backs, r.summary.split(": ", 1)[1].split(",")[0]
        (False, 'skipped: every neighbour sharing a prefix with r02 is wholly a prefix of it (r03)')
    """
    if swap is not None and swap.nothing_to_swap:
        summary = (f"{name} control: skipped: every neighbour sharing a prefix with {request_id} is wholly a prefix of "
                   f"it ({', '.join(swap.whole) or 'none'}), so none has content of its own to swap; inconclusive")
        return ControlResult(name, request_id, original, (0, 0), 1.0, False, summary, swap=swap)
    (ko, no), (kc, nc) = original, control
    what, yes, no_ = _WHAT[name]
    if name in (CONTENT_SWAP, FRESH_SERVER):
        # gone (or rarer) with the content swapped, or on a server with no history
        p = fisher_less(kc, nc, ko, no) if no and nc else 1.0
    else:
        # Survives the control: the deviation shows there at all, and it was not rarer by chance
        # of a control that should have removed it (any k > 0 of a deterministic engine is telling).
        p = 0.0 if kc > 0 else 1.0
    changed = p <= alpha and ko > 0
    verdict = yes if changed else no_
    if name == DETERMINISTIC and not changed and ko > 0 and no:
        # Absence under the control says "batch numerics" only if the deviation, at the rate
        # its original runs vouch for, would have shown in that many runs.
        miss = (1 - rate_floor(ko, no)) ** nc
        if miss > alpha:
            verdict = (f"not seen in {nc} runs, which a deviation at the original rate misses {miss:.0%} of the "
                       "time: inconclusive")
    if name == CONTENT_SWAP and not changed and ko > 0 and no and kc == 0:
        # None came back, and still no significance: the original rate is too low for this many
        # runs (or any: 1/5 against 0/30 is p = 0.14) to say the swap took it away.
        verdict = (f"none of the same wrong answers in {nc} run{'s' if nc != 1 else ''}, too few against {ko}/{no} "
                   "originals to say the swap removed it: inconclusive")
    if ko == 0:
        # The deviation never came back in the original replays: a control has nothing to take
        # away, and its own runs, deviating or not, say nothing about the first execution's flip.
        verdict = "the deviation did not recur in the original runs: nothing to control, inconclusive"
    # A fresh server says where the bug lives (does it need history?), not whether it is one.
    backs = changed and name != FRESH_SERVER
    under = ("gave one of the same wrong answers in" if name == CONTENT_SWAP else "deviated in")
    whole = (f" ({', '.join(swap.whole)} wholly a prefix of {request_id}: nothing of their own to swap, kept as they were)"
             if swap is not None and swap.whole else "")
    summary = (f"{name} control ({what}{whole}): {request_id} deviated in {ko}/{no} original runs and {under} {kc}/{nc} "
               f"under the control (one-sided p = {p:.3g}); {verdict}")
    return ControlResult(name, request_id, original, control, p, backs, summary, swap=swap)


def deviating_runs(
    request_id: str,
    histories: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    *,
    among: Collection[object] | None = None,
) -> tuple[int, int]:
    """(runs in which `request_id` answered other than its reference alone, runs with a
    determinate answer). The reference is the most frequent alone answer (choice by choice).
    `among`: count only deviations that are one of these outputs (`output_key`s): the content
    swap asks whether *the same* wrong answer comes back, not whether some wrong answer does."""
    refs = _references(request_id, alone)
    table = determinate_outputs(histories)
    runs: set[int] = set()
    bad: set[int] = set()
    for index, outs in table.get(request_id, {}).items():
        ref = refs.get(index, refs.get(0))
        for o in outs:
            runs.add(o.run)
            key = output_key(o.choice)
            if ref is not None and key != ref and (among is None or key in among):
                bad.add(o.run)
    return len(bad), len(runs)


def deviant_outputs(
    request_id: str, histories: Sequence[RunHistory], alone: Mapping[str, Sequence[RequestRecord]]
) -> frozenset[object]:
    """The distinct wrong answers (`output_key`s) `request_id` gave in `histories`."""
    refs = _references(request_id, alone)
    out = set()
    for index, outs in determinate_outputs(histories).get(request_id, {}).items():
        ref = refs.get(index, refs.get(0))
        out |= {output_key(o.choice) for o in outs if ref is not None and output_key(o.choice) != ref}
    return frozenset(out)


def _references(request_id: str, alone: Mapping[str, Sequence[RequestRecord]]) -> dict[int, object]:
    by_choice: dict[int, list[Any]] = {}
    for r in alone.get(request_id, ()):
        if r.ok:
            for c in r.choices:
                by_choice.setdefault(c.index, []).append(c)
    return {index: output_key(group_variants(Output(0, "alone", c) for c in choices)[0].outputs[0].choice)
            for index, choices in by_choice.items()}


def swap_plan(scenario: Scenario, victims: Iterable[str]) -> SwapPlan:
    """What the content swap does to `scenario`'s neighbours of the `victims`: each keeps the
    longest prefix it shares with a victim (`terms.common_prefix`) and swaps the rest.

        >>> from servefuzz.workload import RequestSpec, Scenario
        >>> v = RequestSpec("r02", 1.0, (3, 4, 5, 6), 2)
        >>> sc = Scenario(1, (RequestSpec("r01", 0.0, (3, 4), 2), v, RequestSpec("r03", 0.0, (3, 4, 9), 2),
        ...                   RequestSpec("r04", 0.0, (7, 8), 2)))
        >>> swap_plan(sc, ["r02"])
        SwapPlan(kept=(('r01', 2), ('r03', 2)), swapped=('r03', 'r04'), whole=('r01',))
    """
    keep = set(victims)
    theirs = [r.prompt_ids for r in scenario.requests if r.id in keep]
    kept: list[tuple[str, int]] = []
    swapped: list[str] = []
    whole: list[str] = []
    for r in scenario.requests:
        if r.id in keep:
            continue
        shared = max((common_prefix(r.prompt_ids, v) for v in theirs), default=0)
        if shared:
            kept.append((r.id, shared))
        (whole if shared == len(r.prompt_ids) else swapped).append(r.id)
    return SwapPlan(tuple(kept), tuple(swapped), tuple(whole))


def swap_content(scenario: Scenario, victims: Iterable[str], vocab_size: int | None = None) -> Scenario:
    """`scenario` with every request but the `victims` given other tokens past the prefix it
    shares with a victim (`swap_plan`), of the same length.

    One bijection of the vocabulary (a rotation by half of it) maps every replaced token, so
    neighbours that shared a tail still share one; the first replaced token is moved on further
    where the rotation would land on a victim's own token there, so a shared prefix ends where it
    did. Offsets, max_tokens, n, streaming and cancellation are kept: the batch shapes and the
    prefix sharing the engine sees are the original's.

        >>> from servefuzz.workload import RequestSpec, Scenario
        >>> sc = Scenario(1, (RequestSpec("r01", 0.0, (3, 4, 4), 2), RequestSpec("r02", 1.0, (3, 4, 9, 6), 2),
        ...                   RequestSpec("r03", 2.0, (7, 8), 2), RequestSpec("r04", 3.0, (3, 4), 2)))
        >>> [r.prompt_ids for r in swap_content(sc, ["r02"], vocab_size=13).requests]  # 4 -> 9 is r02's: 10
        [(3, 4, 10), (3, 4, 9, 6), (12, 3), (3, 4)]
    """
    keep = set(victims)
    plan = dict(swap_plan(scenario, keep).kept)
    theirs = [r.prompt_ids for r in scenario.requests if r.id in keep]
    top = max((t for r in scenario.requests for t in r.prompt_ids), default=_FIRST_TOKEN) + 1
    span = max((vocab_size or top), top) - _FIRST_TOKEN

    def other(t: int, by: int = max(1, span // 2)) -> int:
        return t if t < _FIRST_TOKEN else _FIRST_TOKEN + (t - _FIRST_TOKEN + by) % span

    def swapped(r: RequestSpec) -> RequestSpec:
        shared = plan.get(r.id, 0)
        if r.id in keep or shared == len(r.prompt_ids):
            return r
        head = r.prompt_ids[:shared]
        tail = [other(t) for t in r.prompt_ids[shared:]]
        # The victims' tokens right after this shared prefix: the replaced tail must not start
        # with one, or it would share one token more than the original did.
        taken = {v[shared] for v in theirs if len(v) > shared and tuple(v[:shared]) == tuple(head)}
        by = max(1, span // 2)
        while tail[0] in taken and by < span + span // 2:
            by += 1
            tail[0] = other(r.prompt_ids[shared], by)
        name = r.prefix_name if r.prefix_name is None or shared >= r.prefix_len else f"{r.prefix_name}~swapped"
        return dataclasses.replace(r, prompt_ids=(*head, *tail), prefix_name=name)

    meta = {**scenario.meta, "control": CONTENT_SWAP, "victims": sorted(keep)}
    return dataclasses.replace(scenario, requests=tuple(swapped(r) for r in scenario.requests), meta=meta)


def back(anomalies: Sequence[Anomaly], results: Sequence[ControlResult]) -> tuple[Anomaly, ...]:
    """The anomalies with the controls' results as evidence: a suspected corruption that a
    control backs becomes a corruption, its reasons saying which control and why."""
    by_request: dict[str, list[ControlResult]] = {}
    for r in results:
        by_request.setdefault(r.request_id, []).append(r)
    out = []
    for a in anomalies:
        mine = by_request.get(a.request_id, [])
        if not mine or not a.verdict.is_divergence:
            out.append(a)
            continue
        backing = [r for r in mine if r.backs]
        # Controls add up: a second control's results join the first's, never replace them.
        controls = (*a.controls, *mine)
        # An answer outside its own constraint (`oracles.constraint`) backs any divergence,
        # whatever its margin: no rounding unmasks a token. A leak does so only when the forced
        # check showed tokens the victim's own context would not write (`proves_leak`): at a
        # near-tie, a tiny model's attractor run after the flip repeats other requests' text by
        # itself, so an unchecked leak backs only a flip already above the noise.
        if not backing or (a.verdict is not Verdict.SUSPECTED_CORRUPTION
                           and not any(r.name == CONSTRAINT or proves_leak(r) for r in backing)):
            out.append(dataclasses.replace(a, controls=controls))
            continue
        names = ", ".join(r.name for r in backing)
        clause = f"backed by the {names} control: " + "; ".join(r.summary for r in backing)
        divergences = tuple(
            dataclasses.replace(d, verdict=Verdict.CORRUPTION, reason=f"{d.reason.removesuffix(f' -> {a.verdict.value}')}"
                                f" -> corruption ({clause})")
            if d.verdict is a.verdict else d
            for d in a.divergences
        )
        summary = a.summary.replace(a.verdict.value, Verdict.CORRUPTION.value, 1)
        out.append(dataclasses.replace(a, verdict=Verdict.CORRUPTION, summary=f"{summary} (backed by {names})",
                                       divergences=divergences, controls=controls,
                                       backed_by=(*a.backed_by, *(r.name for r in backing))))
    return tuple(out)


def truth_control(
    request_id: str,
    prompt_ids: Sequence[int],
    reference: tuple[str, ChoiceRecord],
    deviant: tuple[str, ChoiceRecord],
    position: int,
    threshold: float,
    truth: Truth,
    *,
    calibration: Callable[[], tuple[str, float] | None] | None = None,
) -> ControlResult:
    """Distance from the exact truth (`servefuzz.truth`), for servefuzz's own models: each run's
    top-k logprobs against the float64 forward pass, teacher-forced on that run's own tokens, at
    every position up to and including the flip. Backs the flip when the deviant run is farther
    from the truth than the flip's threshold while the reference sits within TRUTH_NEAR: the
    model itself says which run is wrong, and it is not a near-tie either way.

    `calibration`: asked only where both answers are off the model, another answer of the same
    engine in the same scenario and its distance from the truth (`truth_distance`). Within
    TRUTH_NEAR it shows the engine computes the model's own numbers, so a deviant far off them is
    wrong state even where the reference is off them too: a request served every time from a
    poisoned cache entry has no right answer to stand in."""
    dist = {}
    for name, c in (reference, deviant):
        dist[name] = truth_distance(truth, prompt_ids, c, position)
    near, far = dist[reference[0]], dist[deviant[0]]
    off = far > max(threshold, TRUTH_NEAR)
    on = calibration() if off and near > TRUTH_NEAR and calibration is not None else None
    backs = off and (near <= TRUTH_NEAR or (on is not None and on[1] <= TRUTH_NEAR))
    if backs and near <= TRUTH_NEAR:
        verdict = "the deviant run is off the model's own numbers while the reference is on them: it computed on wrong state"
    elif backs and on is not None:
        dist[on[0]] = on[1]
        verdict = (f"both are off the model's own numbers, while {on[0]} of this engine is "
                   f"{on[1]:.2e} from them: {request_id} computed on wrong state, in the deviant run at least")
    else:
        verdict = "the truth does not single out the deviant run"
    summary = (f"truth control ({truth.how}): {request_id} {reference[0]} is "
               f"{near:.2e} from the truth, {deviant[0]} {far:.2e} (up to token {position}; threshold "
               f"{threshold:.4f}); {verdict}")
    return ControlResult(TRUTH, request_id, (0, 0), (0, 0), 0.0 if backs else 1.0, backs, summary, dist)


def truth_distance(truth: Truth, prompt_ids: Sequence[int], choice: ChoiceRecord, position: int) -> float:
    """How far one answer's top-k logprobs are from the exact truth, teacher-forced on its own
    tokens, at every position up to and including `position` (the largest |difference|)."""
    tops = [list(t) for t in choice.top_logprobs[: position + 1]]
    return max(truth.deviation(prompt_ids, choice.token_ids[: len(tops)], tops), default=0.0)


def leak_forensics(
    request_id: str,
    scenario: Scenario | Mapping[str, Sequence[int]],
    histories: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    *,
    min_tokens: int = LEAK_MIN_TOKENS,
) -> ControlResult:
    """Leak forensics for one suspect: does any of its deviant outputs in `histories` (an answer
    other than its reference alone, the most frequent of `alone[request_id]`), from the flip on,
    repeat `min_tokens` (`leak_tokens` of the campaign's chance runs) or more tokens in a row of
    another request's context: its prompt
    followed by its solo continuation (`alone`), so that a run from a prompt's tail into its
    continuation counts, with tokens that appear nowhere in the suspect's own prompt or
    reference? The longest such run is the evidence: which run, whose content, where. Pure: it
    reads runs already made. `scenario`: the scenario, or its prompts by request id (the judge
    may know only the records: then the other requests' solo continuations are the sources).
    `original` counts deviant outputs that repeat another's content among the deviant outputs seen.
    What it finds is a candidate: `with_own_check` says whether the victim's own context could
    have written it, and `back` decides by both.

        >>> from servefuzz.history import RequestRecord, RunHistory, Status
        >>> from servefuzz.workload import RequestSpec, Scenario
        >>> def rec(rid, label, ids):
        ...     return RequestRecord(rid, 0, label, Status.OK, 0.0, choices=(ChoiceRecord(0, tuple(ids)),))
        >>> sc = Scenario(1, (RequestSpec("r01", 0.0, (3, 4, 5), 12), RequestSpec("r02", 1.0, (6, 7, 8), 12)))
        >>> alone = {"r01": [rec("r01", "alone", [9] * 12)], "r02": [rec("r02", "alone", range(20, 32))]}
        >>> leaked = RunHistory(0, "load", (rec("r01", "load", [9, 9, *range(20, 30)]),))
        >>> r = leak_forensics("r01", sc, [leaked], alone)
        >>> r.backs, r.leak.source, r.leak.tokens
        (True, 'r02 continuation', 10)
        >>> r.summary.split(";")[0]
        'leak: r01 load#0 output = request r02 continuation from its token 0 (output tokens 2-11)'
        >>> leak_forensics("r01", sc, [RunHistory(0, "load", (rec("r01", "load", [9, 9, *range(40, 50)]),))], alone).backs
        False
        >>> leak_forensics("r01", sc, [RunHistory(0, "load", (rec("r01", "load", [9, 9, 8, *range(20, 29)]),))],
        ...                alone).leak.source   # the prompt's tail runs on into its continuation
        'r02 prompt'
    """
    k = max(min_tokens, LEAK_MIN_TOKENS)
    prompts: Mapping[str, Sequence[int]] = (
        {spec.id: spec.prompt_ids for spec in scenario.requests} if isinstance(scenario, Scenario) else scenario)
    mine = [Output.of(r, c) for r in alone.get(request_id, ()) if r.ok for c in r.choices if c.index == 0]
    reference = group_variants(mine)[0].outputs[0].choice.token_ids if mine else None
    own = (*prompts.get(request_id, ()), -1, *(reference or ()))
    own_grams = {own[i:i + k] for i in range(len(own) - k + 1)}
    # Every k-gram of every other request's context (prompt, then each solo continuation of it),
    # first place kept; `split` is where the prompt ends in it.
    sources: list[tuple[str, tuple[int, ...], int]] = []
    for rid in dict.fromkeys([*prompts, *alone]):
        if rid == request_id:
            continue
        prompt = tuple(prompts.get(rid, ()))
        conts = {c.token_ids for r in alone.get(rid, ()) if r.ok for c in r.choices}
        sources += [(rid, (*prompt, *cont), len(prompt)) for cont in conts] or [(rid, prompt, len(prompt))]
    index: dict[tuple[int, ...], tuple[int, int]] = {}
    for s, (_, tokens, _) in enumerate(sources):
        for i in range(len(tokens) - k + 1):
            index.setdefault(tokens[i:i + k], (s, i))
    deviants = [o for h in histories for r in h.records if r.request_id == request_id and r.ok
                for c in r.choices if (o := Output.of(r, c)).choice.token_ids != reference]
    best: LeakMatch | None = None
    matched = 0
    for o in deviants if reference is not None else ():
        dev = o.choice.token_ids
        flip = common_prefix(reference or (), dev)  # a deviant differs from its reference: their first difference
        tail = dev[flip:]
        longest: LeakMatch | None = None
        for i in range(len(tail) - k + 1):
            gram = tail[i:i + k]
            if gram in own_grams or len(set(gram)) == 1 or gram not in index:
                continue  # the victim's own text, one token repeated, or no one else's
            s, at = index[gram]
            rid, source, split = sources[s]
            n = k
            while i + n < len(tail) and at + n < len(source) and tail[i + n] == source[at + n]:
                n += 1
            if longest is None or n > longest.tokens:
                where = "continuation" if at >= split else "prompt"
                longest = LeakMatch(f"{o.label}#{o.run}", f"{rid} {where}", rid, at - split if at >= split else at,
                                    n, flip + i, flip, tuple(tail[i:i + n]), min_tokens=k, output=tuple(dev))
        if longest is not None:
            matched += 1
            if best is None or longest.tokens > best.tokens:
                best = longest
    what = "the deviant output repeat another request's content from the flip on"
    if best is not None:
        verdict = (f"leak: {request_id} {best.run} output = request {best.source} from its token {best.at} "
                   f"(output tokens {best.from_token}-{best.from_token + best.tokens - 1}); flip at "
                   f"{best.flip}; {best.tokens} tokens in a row (a leak needs {k}) of another request's "
                   "content, none of it in the request's own prompt or reference")
        summary = f"{verdict}; {matched}/{len(deviants)} deviant outputs repeat another request's content"
    else:
        verdict = (f"no deviant output repeats {k} or more tokens of another request's solo continuation or prompt: "
                   "no leak of content seen (which rules nothing out)")
        summary = f"leak forensics (does {what}?): {request_id}: {matched}/{len(deviants)} deviant outputs do; {verdict}"
    return ControlResult(LEAK, request_id, (matched, len(deviants)), (0, 0), 1.0 if best is None else 0.0,
                         best is not None, summary, leak=best)


# -- is a candidate leak the victim's own continuation? ------------------------------------------


def leak_tokens(chance: int) -> int:
    """How many tokens in a row a leak needs on a target whose unrelated requests shared `chance`
    in a row by chance (`chance_run`): twice that, never fewer than LEAK_MIN_TOKENS. Twice, as the
    floor is twice the longest chance run of the reference engine's clean campaigns.

    >>> leak_tokens(0), leak_tokens(4), leak_tokens(13)
    (8, 8, 26)
    """
    return max(LEAK_MIN_TOKENS, 2 * chance)


def chance_run(
    prompts: Mapping[str, Sequence[int]],
    alone: Mapping[str, Sequence[RequestRecord]],
    *,
    skip: Collection[str] = (),
) -> int:
    """The longest run of tokens (at least `_CHANCE_GRAM`, else 0) that one request's answer
    alone shares with another request's context (its prompt, then its answer alone) in one
    scenario, where neither can have caused the other: what chance (a model's attractor runs,
    a template both continue alike) writes on this target. `skip`: requests an oracle flagged
    (their answers may hold real leaks). Two requests whose prompts end alike (the last
    LEAK_MIN_TOKENS tokens) may rightly answer alike and are not compared, and a run of one
    token repeated is no evidence of anything, as in `leak_forensics`.

        >>> from servefuzz.history import RequestRecord, Status
        >>> def alone_(rid, ids):
        ...     return [RequestRecord(rid, 0, "alone", Status.OK, 0.0, choices=(ChoiceRecord(0, tuple(ids)),))]
        >>> attractor = [672, 845, 1037, 987, 1018, 31]
        >>> answers = {"r1": alone_("r1", [5, 9, *attractor]), "r2": alone_("r2", [7, *attractor, 44])}
        >>> chance_run({"r1": (3, 4), "r2": (6, 8)}, answers)
        6
        >>> chance_run({"r1": (3, 4), "r2": (3, 4)}, answers)   # one context: alike by right
        0
        >>> chance_run({"r1": (3, 4), "r2": (6, 8)}, answers, skip={"r1", "r2"})
        0
    """
    g = _CHANCE_GRAM
    answers = {rid: group_variants(Output(0, "alone", c) for r in recs if r.ok for c in r.choices if c.index == 0)
               for rid, recs in alone.items()}
    refs = {rid: groups[0].outputs[0].choice.token_ids for rid, groups in answers.items() if groups}
    contexts = {rid: (*prompts.get(rid, ()), -1, *refs.get(rid, ())) for rid in dict.fromkeys([*prompts, *refs])}
    tail = {rid: tuple(prompts.get(rid, ()))[-LEAK_MIN_TOKENS:] for rid in contexts}
    index: dict[tuple[int, ...], list[tuple[str, int]]] = {}
    for rid, ctx in contexts.items():
        for i in range(len(ctx) - g + 1):
            index.setdefault(ctx[i:i + g], []).append((rid, i))
    longest = 0
    for rid, ref in refs.items():
        if rid in skip:
            continue
        for i in range(len(ref) - g + 1):
            for other, at in index.get(ref[i:i + g], ()):
                if other == rid or (tail[rid] and tail[other] == tail[rid]):
                    continue
                ctx = contexts[other]
                n = g
                while i + n < len(ref) and at + n < len(ctx) and ref[i + n] == ctx[at + n]:
                    n += 1
                if n > longest and len(set(ref[i:i + n])) > 1:
                    longest = n
    return longest


def leak_span(result: ControlResult) -> tuple[int, int] | None:
    """The output positions [start, end) a candidate leak's forced check looks at: its matched
    tokens after the flip (the flipped token itself is forced, as the victim's own draw; it is
    the flip's margin, not the leak, that says whether that draw was benign)."""
    m = result.leak
    if result.name != LEAK or m is None or m.output is None:
        return None
    start = max(m.from_token, m.flip + 1)
    end = m.from_token + m.tokens
    return (start, end) if start < end else None


def with_own_check(result: ControlResult, check: OwnContinuation | None) -> ControlResult:
    """A candidate leak with its forced check: struck (backs nothing) when the victim's own
    context explains the run; a proven leak (`proves_leak`) when it does not. No check: as found.

        >>> r = ControlResult(LEAK, "r1", (1, 1), (0, 0), 0.0, True, "leak: ...")
        >>> with_own_check(r, OwnContinuation("truth", 12, 12, 0.25)).backs
        False
        >>> proves_leak(with_own_check(r, OwnContinuation("truth", 12, 3, 0.25, first_other=9, gap=4.1)))
        True
        >>> proves_leak(r)      # unchecked: backs only a flip already above the noise (`back`)
        False
    """
    if check is None or result.name != LEAK or not result.backs:
        return result
    if check.explains:
        return dataclasses.replace(result, backs=False, p_value=1.0, own_check=check,
                                   summary=f"no leak: {result.summary.removeprefix('leak: ')}; {check.summary}")
    return dataclasses.replace(result, own_check=check, summary=f"{result.summary}; {check.summary}")


def proves_leak(result: ControlResult) -> bool:
    """Whether a leak result backs whatever the flip's margin: a forced check ran and found a
    matched token the victim's own context would not give."""
    check = result.own_check if result.name == LEAK and result.backs else None
    return check is not None and check.first_other is not None


def own_by_truth(
    truth: Truth, prompt_ids: Sequence[int], output: Sequence[int], span: tuple[int, int], tolerance: float
) -> OwnContinuation:
    """The forced check on the exact truth: one teacher-forced float64 pass over the victim's
    prompt and its deviant `output`, each token of `span` held against the best token there."""
    start, end = span
    positions = truth.logprobs(prompt_ids, output[:end], top_k=1)
    own = 0
    for t in range(start, end):
        gap = positions[t].top[0][1] - positions[t].logprob
        if gap > tolerance:
            return OwnContinuation("truth", end - start, own, tolerance, first_other=t, gap=gap)
        own += 1
    return OwnContinuation("truth", end - start, own, tolerance)
