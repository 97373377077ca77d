"""n-consistency: the n choices of one temperature-0 request must agree with each other.

Engines fork n choices from one prefill; a choice that reads another slot's KV shows up here
within a single run, without any replay.

    >>> from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
    >>> cs = (ChoiceRecord(0, (1, 2)), ChoiceRecord(1, (1, 2)), ChoiceRecord(2, (1, 9)))
    >>> h = RunHistory(0, "load", (RequestRecord("r01", 0, "load", Status.OK, 0.0, choices=cs),))
    >>> [(a.request_id, [(v.choice, v.count) for v in a.variants]) for a in n_consistency([h])]
    [('r01', [(0, 2), (2, 1)])]
"""

from __future__ import annotations

from collections.abc import Sequence

from servefuzz.anomaly import Anomaly, Oracle, deciding
from servefuzz.history import RunHistory
from servefuzz.oracles.outputs import Output, VariantGroup, group_variants
from servefuzz.oracles.verdict import NoiseModel, brief, classify_splits, measure_noise

__all__ = ["n_consistency"]


def n_consistency(histories: Sequence[RunHistory], noise: NoiseModel | None = None) -> list[Anomaly]:
    """One anomaly per request whose choices disagreed in at least one run.

    Variants are per run (their `runs` holds that one run; `count` is how many choices gave
    it); each minority variant is classified against the run's most frequent one. `noise`
    defaults to the jitter between the choices of requests whose choices agree.
    """
    split: dict[str, list[list[VariantGroup]]] = {}
    checked: dict[str, int] = {}
    agreeing: list[list[Output]] = []
    for h in histories:
        for rec in h.records:
            if not rec.ok or len(rec.choices) < 2:
                continue
            checked[rec.request_id] = checked.get(rec.request_id, 0) + 1
            groups = group_variants(Output.of(rec, c) for c in rec.choices)
            if len(groups) > 1:
                split.setdefault(rec.request_id, []).append(groups)
            else:
                agreeing.append(list(groups[0].outputs))
    if noise is None:
        noise = measure_noise([o.choice for o in group] for group in agreeing)
    return [_anomaly(rid, split[rid], checked[rid], noise) for rid in sorted(split)]


def _anomaly(rid: str, per_run: list[list[VariantGroup]], checked: int, noise: NoiseModel) -> Anomaly:
    variants, divergences = classify_splits(rid, per_run, noise)
    head = deciding(divergences)
    assert head is not None  # every split run has at least two variants
    verdict = head.verdict  # the deciding divergence carries the worst verdict
    runs = sorted(groups[0].outputs[0].run for groups in per_run)
    summary = f"{rid}: its choices disagree in {len(runs)}/{checked} runs; {verdict.value}: {brief(head)}"
    return Anomaly(
        Oracle.N_CONSISTENCY,
        verdict,
        rid,
        summary,
        variants=tuple(variants),
        divergences=tuple(divergences),
        evidence={"runs_checked": checked, "runs_disagreeing": runs},
    )
