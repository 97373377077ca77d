"""Observed outputs and how oracles group them into variants.

An `Output` is one choice of one request record, remembered with where it came from. Oracles
group outputs that should be equal into variants: same token ids (or, for text-only targets,
same text) means same variant.

    >>> from servefuzz.history import ChoiceRecord
    >>> outs = [Output(r, "load", ChoiceRecord(0, ids)) for r, ids in enumerate([(1, 2), (1, 3), (1, 2)])]
    >>> [(g.variant.token_ids, g.variant.count, g.variant.runs) for g in group_variants(outs)]
    [((1, 2), 2, (0, 2)), ((1, 3), 1, (1,))]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from servefuzz.anomaly import Variant
from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory

__all__ = ["Output", "Outputs", "VariantGroup", "output_key", "group_variants", "determinate_outputs", "observed_runs"]


@dataclass(frozen=True)
class Output:
    """One choice as one run returned it."""

    run: int
    label: str
    choice: ChoiceRecord
    cached: bool = False  # served (in part) from the prefix cache: the noise model buckets by it

    @classmethod
    def of(cls, record: RequestRecord, choice: ChoiceRecord) -> Output:
        return cls(record.run, record.label, choice, bool(record.cached_tokens))


@dataclass(frozen=True)
class VariantGroup:
    """A variant and the outputs that make it up (first seen first). `variant.count` counts
    outputs; `variant.runs` lists each run once, even when several of its choices gave it."""

    variant: Variant
    outputs: tuple[Output, ...]


def output_key(choice: ChoiceRecord) -> tuple[str, tuple[int, ...] | str]:
    """What makes two outputs the same: token ids, or the text when a target gives no ids.

    Logprobs are deliberately not part of it: equal tokens with jittered logprobs are the
    noise the verdict measures, not a divergence.
    """
    return ("tokens", choice.token_ids) if choice.token_ids else ("text", choice.text)


def group_variants(outputs: Iterable[Output]) -> list[VariantGroup]:
    """Distinct outputs, most frequent first; ties keep first-seen order (stable sort)."""
    groups: dict[tuple[str, tuple[int, ...] | str], list[Output]] = {}
    for out in outputs:
        groups.setdefault(output_key(out.choice), []).append(out)
    ordered = sorted(groups.values(), key=len, reverse=True)
    return [_group(outs) for outs in ordered]


# Determinate outputs of some histories: request id -> choice index -> outputs (`determinate_outputs`).
Outputs = dict[str, dict[int, list[Output]]]


def observed_runs(loaded: Sequence[RunHistory], cache: Sequence[RequestRecord] = ()) -> tuple[RunHistory, ...]:
    """Loaded runs and, as one more history labelled "cache", their cache-state probes (warm,
    primed), whose records keep their run's index: what a request's deviations are counted over,
    since a cache-state anomaly shows in the probes, not under load."""
    return (*loaded, RunHistory(0, "cache", tuple(cache))) if cache else tuple(loaded)


def determinate_outputs(histories: Sequence[RunHistory]) -> Outputs:
    """request id -> choice index -> outputs, from determinate OK records only.

    Timed-out, cut and cancelled records are indeterminate and never evidence of a divergence;
    HTTP errors and malformed bodies carry no output at all (liveness reports those).
    """
    table: dict[str, dict[int, list[Output]]] = {}
    for h in histories:
        for rec in h.records:
            if not rec.ok:
                continue
            per_choice = table.setdefault(rec.request_id, {})
            for c in rec.choices:
                per_choice.setdefault(c.index, []).append(Output.of(rec, c))
    return table


def _group(outs: Sequence[Output]) -> VariantGroup:
    first = outs[0]
    variant = Variant(
        choice=first.choice.index,
        token_ids=first.choice.token_ids,
        text=first.choice.text,
        count=len(outs),
        runs=tuple(dict.fromkeys(o.run for o in outs)),  # choices of one run share it
        label=first.label,
    )
    return VariantGroup(variant, tuple(outs))
