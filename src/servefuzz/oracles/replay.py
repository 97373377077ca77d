"""Replay consistency: the same scenario run R times must give one output per temperature-0 choice.

    >>> from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
    >>> def run(i, toks):
    ...     rec = RequestRecord("r01", i, "load", Status.OK, 0.0, choices=(ChoiceRecord(0, toks),))
    ...     return RunHistory(i, "load", (rec,))
    >>> out = replay_consistency([run(0, (1, 2)), run(1, (1, 2)), run(2, (1, 3))])
    >>> [(a.request_id, a.verdict.value, [v.count for v in a.variants]) for a in out.anomalies]
    [('r01', 'unclassified', [2, 1])]

(Unclassified: the records carry no logprobs, so numerics cannot be told from corruption.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servefuzz.anomaly import Anomaly, Oracle, deciding
from servefuzz.history import RunHistory
from servefuzz.oracles.outputs import Outputs, VariantGroup, determinate_outputs, group_variants
from servefuzz.oracles.verdict import NoiseModel, brief, classify_splits, measure_noise

__all__ = ["ReplayOutcome", "replay_consistency"]


@dataclass(frozen=True)
class ReplayOutcome:
    """What R runs of one scenario showed.

    `stable`: every choice gave one output over at least two determinate runs.
    `undetermined`: fewer than two determinate runs, so no judgement either way.
    `noise`: the jitter measured on the stable outputs (hand it to `isolation`).
    """

    anomalies: tuple[Anomaly, ...]
    stable: tuple[str, ...]
    undetermined: tuple[str, ...]
    noise: NoiseModel

    @property
    def diverged(self) -> tuple[str, ...]:
        return tuple(a.request_id for a in self.anomalies)


def replay_consistency(
    histories: Sequence[RunHistory], noise: NoiseModel | None = None, *, outputs: Outputs | None = None
) -> ReplayOutcome:
    """Compare R runs of one scenario, request by request and choice by choice.

    Indeterminate records are ignored. Each minority variant is classified against the most
    frequent one, at its first differing token, with `noise` (default: measured here on the
    stable outputs). `outputs`: `determinate_outputs(histories)`, where the caller has it.
    """
    table = determinate_outputs(histories) if outputs is None else outputs
    stable: list[str] = []
    undetermined: list[str] = []
    diverging: dict[str, list[list[VariantGroup]]] = {}
    stable_groups: list[list[VariantGroup]] = []
    for rid in sorted({rec.request_id for h in histories for rec in h.records}):
        per_choice = [group_variants(outs) for _, outs in sorted(table.get(rid, {}).items())]
        if not per_choice or min(sum(g.variant.count for g in groups) for groups in per_choice) < 2:
            undetermined.append(rid)
        elif all(len(groups) == 1 for groups in per_choice):
            stable.append(rid)
            stable_groups.extend(per_choice)
        else:
            diverging[rid] = [groups for groups in per_choice if len(groups) > 1]
    if noise is None:
        noise = measure_noise([o.choice for o in groups[0].outputs] for groups in stable_groups)
    anomalies = tuple(_anomaly(rid, per_choice, noise) for rid, per_choice in diverging.items())
    return ReplayOutcome(anomalies, tuple(stable), tuple(undetermined), noise)


def _anomaly(rid: str, per_choice: list[list[VariantGroup]], noise: NoiseModel) -> Anomaly:
    variants, divergences = classify_splits(rid, per_choice, noise)
    head = deciding(divergences)
    assert head is not None  # every diverging choice has at least two variants
    verdict = head.verdict  # the deciding divergence carries the worst verdict
    runs = sum(g.variant.count for g in per_choice[0])
    shape = "; ".join(
        f"choice {groups[0].variant.choice}: {len(groups)} variants ({'/'.join(str(g.variant.count) for g in groups)})"
        for groups in per_choice
    )
    summary = f"{rid}: {shape} over {runs} runs; {verdict.value}: {brief(head)}"
    return Anomaly(
        Oracle.REPLAY,
        verdict,
        rid,
        summary,
        variants=tuple(variants),
        divergences=tuple(divergences),
        evidence={"runs": runs},
    )
