"""Cache state: a request must answer the same whatever its prefix cache held before it.

Three states, as in the seed report's comment thread (the method that tells a reuse bug from a
batching one): **cold**, alone on a flushed cache; **warm**, sent again right after, so it hits
its own cached prompt; **primed**, on a flushed cache after its bare shared prefix was sent
alone, so exactly that prefix (page-floored) is cached. The runner labels the records with the
state; the cold output is the reference, and every warm or primed output that differs from it
is classified against it.

    >>> from servefuzz.history import ChoiceRecord, RequestRecord, Status
    >>> rec = lambda label, toks: RequestRecord("r02", 0, label, Status.OK, 0.0, choices=(ChoiceRecord(0, toks),))
    >>> [a.summary for a in cache_state([rec("cold", (4, 5)), rec("warm", (4, 5)), rec("primed", (4, 6))])]
    ['r02: primed by its bare prefix it differs from cold; unclassified: flip at token 1, margin unknown']
"""

from __future__ import annotations

from collections.abc import Iterable

from servefuzz.anomaly import Anomaly, Oracle, deciding
from servefuzz.history import RequestRecord
from servefuzz.oracles.outputs import Output, group_variants, output_key
from servefuzz.oracles.verdict import NoiseModel, brief, classify, measure_noise

__all__ = ["CACHE_STATES", "cache_state"]

CACHE_STATES = ("cold", "warm", "primed")
_PHRASE = {"warm": "warm from its own earlier run", "primed": "primed by its bare prefix"}


def cache_state(records: Iterable[RequestRecord], noise: NoiseModel | None = None) -> list[Anomaly]:
    """One anomaly per request whose warm or primed output differs from its cold one.

    Records with other labels, and indeterminate ones, are ignored; a request without a
    determinate cold record is not judged. `noise` defaults to the jitter between cold and
    warm/primed outputs that agree.
    """
    by_request: dict[str, dict[str, list[Output]]] = {}
    for r in records:
        if r.ok and r.label in CACHE_STATES:
            for c in r.choices:
                by_request.setdefault(r.request_id, {}).setdefault(r.label, []).append(Output.of(r, c))
    differing: dict[str, list[tuple[Output, Output]]] = {}
    agreeing = []
    for rid, states in sorted(by_request.items()):
        if not states.get("cold"):
            continue
        # Each choice against the cold run's same choice (at temperature 0 they all agree; the
        # choices of a seeded draw each draw their own), the first where cold has fewer.
        cold = {o.choice.index: o for o in reversed(states["cold"])}
        for label in CACHE_STATES[1:]:
            for out in states.get(label, []):
                ref = cold.get(out.choice.index, states["cold"][0])
                if output_key(out.choice) == output_key(ref.choice):
                    agreeing.append([ref.choice, out.choice])
                else:
                    differing.setdefault(rid, []).append((ref, out))
    if noise is None:
        noise = measure_noise(agreeing)
    return [_anomaly(rid, pairs, noise) for rid, pairs in differing.items()]


def _anomaly(rid: str, pairs: list[tuple[Output, Output]], noise: NoiseModel) -> Anomaly:
    divergences = tuple(classify(rid, ref, out, noise) for ref, out in pairs)
    head = deciding(divergences)
    assert head is not None  # one divergence per differing pair, and there is one
    verdict = head.verdict  # the deciding divergence carries the worst verdict
    states = sorted({out.label for _, out in pairs}, key=CACHE_STATES.index)
    how = " and ".join(_PHRASE[s] for s in states)
    return Anomaly(
        Oracle.CACHE_STATE,
        verdict,
        rid,
        f"{rid}: {how} it differs from cold; {verdict.value}: {brief(head)}",
        variants=tuple(g.variant for g in group_variants([pairs[0][0], *(out for _, out in pairs)])),
        divergences=divergences,
        evidence={"states": states},
    )
