"""The evidence the confirmation attaches to an anomaly, as typed records.

An oracle's own measurements (runs, statuses, cached tokens) stay in `Anomaly.evidence`; what
the controls and the confirmation ladder add is typed and lives in fields of the anomaly: the
controls' results (`ControlResult`: a leak's match `LeakMatch` and its forced check
`OwnContinuation`, a broken constraint `ConstraintBreak`, what the content swap changed
`SwapPlan`), the names of those that backed it,
the fresh references' `Vote`, and the `Picture` the report draws. Each reads and writes the JSON
finding files have always held (inside the anomaly's `evidence` object), so files written before
these records existed load into them unchanged.

    >>> m = LeakMatch("load#1", "r02 continuation", "r02", 0, 10, 2, 2, tuple(range(20, 30)))
    >>> r = ControlResult("leak-forensics", "r01", (1, 1), (0, 0), 0.0, True, "leak: ...", leak=m)
    >>> ControlResult.from_json(r.to_json()) == r, r.to_json()["evidence"]["source"]
    (True, 'r02 continuation')
    >>> v = Vote("r01", (5, 6), "3/3", ("first alone#0",), (OddRun("alone#0", 0, None),), 0, 0, 5, (5, 7))
    >>> Vote.from_json(v.to_json(), "r01") == v
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ConstraintBreak",
    "ControlResult",
    "LeakMatch",
    "OddRun",
    "OwnContinuation",
    "Picture",
    "SwapPlan",
    "Vote",
]


# Decades a picture's bin may lie from its lowest edge: 10 to a larger power is past a float's range.
_MOST_DECADES = 300


def _ints(xs: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in xs)


def _opt_int(x: Any) -> int | None:
    return None if x is None else int(x)


@dataclass(frozen=True)
class LeakMatch:
    """What leak forensics matched (`oracles.controls.leak_forensics`): in `run`'s deviant output,
    `tokens` tokens in a row from output token `from_token` (the flip at `flip`) are `request`'s
    content (`source`: '<id> prompt' or '<id> continuation', from its token `at`). `output`: the
    whole deviant output (None in files from before it was kept); `min_tokens`: how many a leak
    needed there (None in those files too)."""

    run: str
    source: str
    request: str
    at: int
    tokens: int
    from_token: int
    flip: int
    match: tuple[int, ...]
    min_tokens: int | None = None
    output: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"run": self.run, "source": self.source, "request": self.request, "at": self.at,
                             "tokens": self.tokens, "from_token": self.from_token, "flip": self.flip,
                             "match": list(self.match)}
        if self.min_tokens is not None:
            d["min_tokens"] = self.min_tokens
        if self.output is not None:
            d["output"] = list(self.output)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LeakMatch:
        return cls(str(d["run"]), str(d["source"]), str(d["request"]), int(d["at"]), int(d["tokens"]),
                   int(d["from_token"]), int(d["flip"]), _ints(d["match"]), _opt_int(d.get("min_tokens")),
                   None if d.get("output") is None else _ints(d["output"]))


@dataclass(frozen=True)
class OwnContinuation:
    """The forced check of a candidate leak: at each matched token, teacher-forced on the
    victim's own prompt and its deviant output up to there, is that token what the victim's own
    context gives (its logprob within `tolerance` of the best there)? `how`: the exact truth
    ('truth') or the engine alone ('engine'). `first_other`: the first matched position where
    it is not, and `gap`, how far below the best it sat; None when every checked token was the
    context's own, which explains the run without any other request."""

    how: str
    checked: int
    own: int
    tolerance: float
    first_other: int | None = None
    gap: float | None = None

    @property
    def explains(self) -> bool:
        """Whether the victim's own context writes every checked token: then nothing leaked."""
        return self.first_other is None

    @property
    def summary(self) -> str:
        source = "the exact truth" if self.how == "truth" else "the engine alone"
        if self.explains:
            return (f"forced check ({source}): all {self.checked} matched tokens are what the victim's own context "
                    f"gives with its deviant output forced (within {self.tolerance:.4f}): its own continuation, "
                    "not a leak")
        gap = "outside the top-k" if self.gap is None else f"{self.gap:.4f} below the best"
        return (f"forced check ({source}): output token {self.first_other} is not what the victim's own context "
                f"gives ({gap}, tolerance {self.tolerance:.4f}; {self.own} of {self.checked} checked were): "
                "written from another request's state")

    def to_json(self) -> dict[str, Any]:
        return {"how": self.how, "checked": self.checked, "own": self.own, "tolerance": self.tolerance,
                "first_other": self.first_other, "gap": self.gap}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OwnContinuation:
        return cls(str(d["how"]), int(d["checked"]), int(d["own"]), float(d["tolerance"]),
                   _opt_int(d.get("first_other")), None if d.get("gap") is None else float(d["gap"]))


@dataclass(frozen=True)
class ConstraintBreak:
    """A constrained request's answers outside its own `choices` under load (`violations`: where,
    the text, its token ids; the first eight) while `alone` it kept them (`oracles.constraint`)."""

    choices: tuple[str, ...]
    violations: tuple[tuple[str, str, tuple[int, ...]], ...]
    alone: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"choices": list(self.choices),
                "violations": [{"where": w, "text": t, "token_ids": list(ids)} for w, t, ids in self.violations],
                "alone": list(self.alone)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ConstraintBreak:
        return cls(tuple(str(c) for c in d["choices"]),
                   tuple((str(v["where"]), str(v["text"]), _ints(v["token_ids"])) for v in d["violations"]),
                   tuple(str(a) for a in d.get("alone", ())))


@dataclass(frozen=True)
class ControlResult:
    """What one control showed for one victim: deviations in `original` (k, n) runs and in the
    control's (k, n) runs, the one-sided p-value of the change, and whether it backs the flip.
    `distances`: the truth control's, run -> distance from the truth; `leak`: leak forensics'
    match and `own_check` its forced check; `broken`: the constraint control's violations;
    `swap`: what the content swap replaced and what it kept."""

    name: str
    request_id: str
    original: tuple[int, int]
    control: tuple[int, int]
    p_value: float
    backs: bool
    summary: str
    distances: Mapping[str, float] = dataclasses.field(default_factory=dict)
    leak: LeakMatch | None = None
    own_check: OwnContinuation | None = None
    broken: ConstraintBreak | None = None
    swap: SwapPlan | None = None

    def __hash__(self) -> int:
        return hash((self.name, self.request_id, self.original, self.control, self.backs))

    def to_json(self) -> dict[str, Any]:
        # One `evidence` object, as the files have always had it: the leak's match with its
        # forced check, or the constraint's violations.
        evidence: dict[str, Any] = {}
        if self.leak is not None:
            evidence.update(self.leak.to_json())
        if self.own_check is not None:
            evidence["own_check"] = self.own_check.to_json()
        if self.broken is not None:
            evidence.update(self.broken.to_json())
        if self.swap is not None:
            evidence["swap"] = self.swap.to_json()
        return {
            "name": self.name,
            "request_id": self.request_id,
            "original": list(self.original),
            "control": list(self.control),
            "p_value": self.p_value,
            "backs": self.backs,
            "summary": self.summary,
            "distances": dict(self.distances),
            "evidence": evidence,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ControlResult:
        o, c = d["original"], d["control"]
        e = dict(d.get("evidence") or {})
        return cls(str(d["name"]), str(d["request_id"]), (int(o[0]), int(o[1])), (int(c[0]), int(c[1])),
                   float(d["p_value"]), bool(d["backs"]), str(d["summary"]),
                   {str(k): float(v) for k, v in dict(d.get("distances", {})).items()},
                   leak=LeakMatch.from_json(e) if "match" in e else None,
                   own_check=OwnContinuation.from_json(e["own_check"]) if e.get("own_check") is not None else None,
                   broken=ConstraintBreak.from_json(e) if "violations" in e else None,
                   swap=SwapPlan.from_json(e["swap"]) if e.get("swap") is not None else None)


@dataclass(frozen=True)
class SwapPlan:
    """What the content swap (`oracles.controls.swap_content`) did to the victim's neighbours:
    `kept`, for each neighbour that shares a prefix with the victim, how many leading tokens of
    its prompt it kept (the shared prefix, and with it whatever the engine's cache and prefill
    split do with it, is the same in both arms); `swapped`, the neighbours whose own tail was
    replaced; `whole`, the neighbours whose whole prompt is a prefix of the victim's, with no
    content of their own to swap.

        >>> p = SwapPlan((("r01", 64), ("r03", 64)), ("r03", "r04"), ("r01",))
        >>> SwapPlan.from_json(p.to_json()) == p, p.nothing_to_swap
        (True, False)
    """

    kept: tuple[tuple[str, int], ...]
    swapped: tuple[str, ...]
    whole: tuple[str, ...]

    @property
    def nothing_to_swap(self) -> bool:
        """No neighbour has content of its own: the control would replay the original scenario."""
        return not self.swapped

    def to_json(self) -> dict[str, Any]:
        return {"kept": {rid: n for rid, n in self.kept}, "swapped": list(self.swapped), "whole": list(self.whole)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SwapPlan:
        return cls(tuple((str(k), int(v)) for k, v in dict(d.get("kept") or {}).items()),
                   tuple(str(x) for x in d.get("swapped") or ()), tuple(str(x) for x in d.get("whole") or ()))


@dataclass(frozen=True)
class OddRun:
    """A run the vote names as odd: which (`label#run`), the cached tokens it reported, and, for
    an alone run, the request that ran just before it."""

    run: str
    cached_tokens: int | None
    ran_before: str | None

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "cached_tokens": self.cached_tokens, "ran_before": self.ran_before}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OddRun:
        before = d.get("ran_before")
        return cls(str(d["run"]), _opt_int(d.get("cached_tokens")), None if before is None else str(before))


@dataclass(frozen=True)
class Vote:
    """The vote for one request (choice 0, `oracles.vote`). `reference`: the majority of the fresh
    alone runs (None without a strict majority); `agree`: how many of them gave it ('3/3'); `odd`:
    every run that answered otherwise ('first alone#0', 'replay load#4', 'fresh alone#1'), with
    `odd_context` saying what was cached for each and what ran just before it; `recurrences`:
    replays that showed the first execution's deviant variant, `rejudged`: those whose flip is
    still above the threshold when judged again, of `replays`."""

    request_id: str
    reference: tuple[int, ...] | None
    agree: str
    odd: tuple[str, ...]
    odd_context: tuple[OddRun, ...]
    recurrences: int
    rejudged: int
    replays: int
    deviant: tuple[int, ...] | None

    @property
    def summary(self) -> str:
        ref = ("no strict majority among the fresh alone references" if self.reference is None
               else f"{self.agree} fresh alone references agree")
        odd = f"odd: {', '.join(self.odd)}" if self.odd else "no odd run"
        if self.deviant is None:
            return f"{self.request_id}: {ref}; {odd}"
        return (f"{self.request_id}: {ref}; {odd}; {self.recurrences}/{self.replays} recurrences of the deviant "
                f"variant, {self.rejudged} re-judged above the threshold")

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": None if self.reference is None else list(self.reference),
            "agree": self.agree,
            "odd": list(self.odd),
            "odd_context": [c.to_json() for c in self.odd_context],
            "recurrences": self.recurrences,
            "rejudged": self.rejudged,
            "replays": self.replays,
            "deviant": None if self.deviant is None else list(self.deviant),
            "summary": self.summary,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any], request_id: str) -> Vote:
        """The vote as a finding file holds it, inside the anomaly of `request_id`. The file names
        the vote's own request only at the head of its `summary` (otherwise derived), and that is
        the one read where it is there: a shrink renames the anomaly's request, not its vote's."""
        said, sep, _ = str(d.get("summary", "")).partition(": ")
        return cls(said if sep and said else request_id, None if d.get("reference") is None else _ints(d["reference"]), str(d["agree"]),
                   tuple(str(o) for o in d.get("odd", ())), tuple(OddRun.from_json(c) for c in d.get("odd_context", ())),
                   int(d.get("recurrences", 0)), int(d.get("rejudged", 0)), int(d.get("replays", 0)),
                   None if d.get("deviant") is None else _ints(d["deviant"]))


@dataclass(frozen=True)
class Picture:
    """What the report draws of a divergence (`oracles.noise.picture`): the deviant run's top-k
    L-inf shift from the reference (`linf`) at each agreeing position (`positions`) before the
    flip, against the campaign's band there (`band`); the flip's position, margin and threshold;
    and the campaign's gap-shift histogram at the flip's bucket (`where`; `histogram` as
    `oracles.noise.ShiftHistogram.to_json` writes it: count, max, zeros, sparse bins, quantiles),
    whose bin i spans edges[0] * 10**((i-1)/edges[1]) .. edges[0] * 10**(i/edges[1]) (`edges`: the
    lowest edge and the bins per decade)."""

    positions: tuple[int, ...]
    linf: tuple[float, ...]
    band: tuple[float, ...]
    flip: int
    margin: float | None
    threshold: float
    where: str
    histogram: Mapping[str, Any]
    edges: tuple[float, int]

    def __post_init__(self) -> None:
        # A finding file is untrusted, and the report divides by the bins per decade, raises 10 to
        # each bin's power over them and takes the log of each count: a picture it could not draw
        # is refused here, where the file loads (one line, exit 2), never a crash of the report.
        lo, per = self.edges
        bins = self.bins  # raises for bins that are no mapping of numbers
        if not (lo > 0 and per > 0):
            raise ValueError(f"picture edges {list(self.edges)}: the lowest edge and the bins per decade must be positive")
        if self.count < 0 or self.zeros < 0 or any(n < 0 or abs(i) / per > _MOST_DECADES for i, n in bins.items()):
            raise ValueError("picture histogram: a negative count, or a bin past any float")

    def __hash__(self) -> int:  # the histogram is a mapping; the rest identifies the picture
        return hash((self.positions, self.linf, self.band, self.flip, self.margin, self.threshold, self.where))

    @property
    def count(self) -> int:
        """How many benign gap shifts the histogram holds."""
        return int(self.histogram.get("count", 0))

    @property
    def zeros(self) -> int:
        return int(self.histogram.get("zeros", 0))

    @property
    def bins(self) -> dict[int, int]:
        """The histogram's non-empty bins, bin -> count."""
        return {int(i): int(n) for i, n in dict(self.histogram.get("bins", {})).items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "positions": list(self.positions),
            "linf": list(self.linf),
            "band": list(self.band),
            "flip": self.flip,
            "margin": self.margin,
            "threshold": self.threshold,
            "noise": {"where": self.where, **self.histogram},
            "edges": list(self.edges),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Picture:
        noise = dict(d.get("noise") or {})
        where = str(noise.pop("where", "?"))
        lo, per = (list(d.get("edges") or []) + [1e-7, 12])[:2]
        margin = d.get("margin")
        return cls(_ints(d.get("positions", ())), tuple(float(x) for x in d.get("linf", ())),
                   tuple(float(x) for x in d.get("band", ())), int(d.get("flip", len(d.get("positions", ())))),
                   None if margin is None else float(margin), float(d.get("threshold") or 0.0), where, noise,
                   (float(lo), int(per)))
