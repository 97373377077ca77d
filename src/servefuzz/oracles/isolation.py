"""Isolation: a request's output under load must equal its output alone on a flushed cache.

The runner re-runs each diverging request alone after flushing the engine's cache; that alone
output is the reference. Every loaded output that differs from it is classified against it.

    >>> from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
    >>> rec = lambda run, label, toks: RequestRecord("r02", run, label, Status.OK, 0.0, choices=(ChoiceRecord(0, toks),))
    >>> loaded = [RunHistory(i, "load", (rec(i, "load", t),)) for i, t in enumerate([(4, 5), (4, 6)])]
    >>> [a.summary for a in isolation(loaded, {"r02": [rec(0, "alone", (4, 5))]})]
    ['r02: 1/2 loaded runs differ from the output alone; unclassified: flip at token 1, margin unknown']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from servefuzz.anomaly import Anomaly, Divergence, Oracle, Variant, deciding
from servefuzz.history import RequestRecord, RunHistory
from servefuzz.oracles.outputs import Output, Outputs, determinate_outputs, group_variants, output_key
from servefuzz.oracles.verdict import NoiseModel, brief, classify, measure_noise

__all__ = ["isolation"]


def isolation(
    loaded: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]],
    noise: NoiseModel | None = None,
    *,
    outputs: Outputs | None = None,
) -> list[Anomaly]:
    """Compare each request in `alone` (request id -> its alone record(s)) with its loaded outputs.

    The reference for a choice is the most frequent alone output of that choice index (choice 0
    when the alone run had fewer choices: at temperature 0 they must all agree anyway). A request
    whose alone records are all indeterminate is not judged. `noise` defaults to the jitter
    between alone and loaded outputs of the requests that agree. `outputs`:
    `determinate_outputs(loaded)`, where the caller has it.
    """
    table = determinate_outputs(loaded) if outputs is None else outputs
    found: list[tuple[str, list[tuple[Output, list[Output]]], list[Variant]]] = []
    agreeing: list[list[Output]] = []
    for rid in sorted(alone):
        refs = _references(alone[rid])
        if not refs:
            continue
        pairs: list[tuple[Output, list[Output]]] = []
        for index, outs in sorted(table.get(rid, {}).items()):
            ref = refs.get(index, refs.get(0))
            if ref is None:
                continue
            differing = [o for o in outs if output_key(o.choice) != output_key(ref.choice)]
            if differing:
                pairs.append((ref, differing))
            else:
                agreeing.append([ref, *outs])
        if pairs:
            alone_variants = [
                g.variant for g in group_variants(Output.of(r, c) for r in alone[rid] if r.ok for c in r.choices)
            ]
            found.append((rid, pairs, alone_variants))
    if noise is None:
        noise = measure_noise([o.choice for o in group] for group in agreeing)
    return [_anomaly(rid, pairs, alone_variants, table[rid], noise) for rid, pairs, alone_variants in found]


def _references(records: Sequence[RequestRecord]) -> dict[int, Output]:
    """choice index -> the most frequent determinate alone output of it."""
    by_choice: dict[int, list[Output]] = {}
    for r in records:
        if r.ok:
            for c in r.choices:
                by_choice.setdefault(c.index, []).append(Output.of(r, c))
    return {index: group_variants(outs)[0].outputs[0] for index, outs in by_choice.items()}


def _anomaly(
    rid: str,
    pairs: list[tuple[Output, list[Output]]],
    alone_variants: list[Variant],
    loaded: Mapping[int, list[Output]],
    noise: NoiseModel,
) -> Anomaly:
    divergences: list[Divergence] = []
    loaded_variants: list[Variant] = []
    for ref, differing in pairs:
        groups = group_variants(differing)
        loaded_variants.extend(g.variant for g in groups)
        divergences.extend(classify(rid, ref, g.outputs[0], noise) for g in groups)
    head = deciding(divergences)
    assert head is not None  # every pair holds at least one differing output
    verdict = head.verdict  # the deciding divergence carries the worst verdict
    loaded_runs = {o.run for outs in loaded.values() for o in outs}
    bad_runs = {o.run for _, differing in pairs for o in differing}
    summary = (
        f"{rid}: {len(bad_runs)}/{len(loaded_runs)} loaded runs differ from the output alone; "
        f"{verdict.value}: {brief(head)}"
    )
    return Anomaly(
        Oracle.ISOLATION,
        verdict,
        rid,
        summary,
        variants=(*alone_variants, *loaded_variants),
        divergences=tuple(divergences),
        evidence={
            "loaded_runs": len(loaded_runs),
            "differing_runs": sorted(bad_runs),
            # Alone outputs that disagree among themselves weaken the reference; say so.
            "alone_variants": len(alone_variants),
        },
    )
