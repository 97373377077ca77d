"""The taxonomy of anomalies, as data: what an oracle saw, how it is classified, and why.

An oracle never answers with a bare boolean. It returns `Anomaly` records that carry their
evidence: the distinct output `Variant`s it saw with counts, and for every pair of outputs that
disagree a `Divergence` that pins the first differing token, both runs' logprobs of both tokens
there, the margin, the noise threshold it was held against and the resulting `Verdict`.

    >>> v = Variant(choice=0, token_ids=(812, 17), text=" u7892_1146 u7892_1086", count=7, runs=(0, 1))
    >>> a = Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r02", "r02: 2 variants", variants=(v,))
    >>> Anomaly.from_json(a.to_json()) == a
    True
    >>> worst([Verdict.NUMERIC_DRIFT, Verdict.CORRUPTION])
    <Verdict.CORRUPTION: 'corruption'>

`unclassified` is a verdict of its own: a divergence seen where the engine gave no (or too few)
logprobs to tell numeric drift from corruption. Calling it corruption would be a guess, and the
product's verdicts are only worth anything if they never guess.

`contract-violation` is what a near-tie flip is on a server whose mode promises outputs that do
not depend on the batch or the cache (`Promise`, the words of the engine's own promise): the
numbers say drift, the engine said there would be none (`held_to`).

    >>> p = Promise("--enable-deterministic-inference", "outputs independent of the batch", "the docs")
    >>> drift = Anomaly(Oracle.ISOLATION, Verdict.NUMERIC_DRIFT, "r01", "r01: numeric-drift")
    >>> [(a.verdict.value, a.promise.mode) for a in held_to([drift], p)]
    [('contract-violation', '--enable-deterministic-inference')]
    >>> held_to([drift], None)[0] is drift
    True
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from servefuzz.evidence import ControlResult, Picture, Vote
from servefuzz.terms import first_difference

__all__ = [
    "Verdict",
    "Oracle",
    "Variant",
    "previews",
    "FlipSide",
    "Divergence",
    "Promise",
    "Anomaly",
    "held_to",
    "worst",
    "deciding",
]


class Verdict(str, enum.Enum):
    """What an anomaly is. Members are listed from most to least severe (see `rank`)."""

    CORRUPTION = "corruption"  # a confident flip that a control (or the exact truth) backs
    # A tenant read another tenant's cache: the server itself reported cached tokens that no
    # request of its own salt could have left (oracles/tenancy.py). Its answer may be right.
    ISOLATION_BREACH = "isolation-breach"
    CRASH = "crash"  # the server went away mid-run
    HANG = "hang"  # a request got no answer in time
    SERVER_ERROR = "server-error"  # HTTP 5xx
    MALFORMED = "malformed"  # 2xx with a body that could not be understood
    SUSPECTED_CORRUPTION = "suspected-corruption"  # a confident flip that no control has backed yet
    # A cross-tenant probe got its first token sooner than its cold twin by more than the
    # measured timing noise, with no cached tokens reported: timing alone proves no read.
    SUSPECTED_ISOLATION_BREACH = "suspected-isolation-breach"
    # A flip within the measured numeric noise on a server whose mode promises batch- and
    # cache-invariant outputs (`Promise`): benign numerics elsewhere, a broken contract here.
    CONTRACT_VIOLATION = "contract-violation"
    UNCLASSIFIED = "unclassified"  # a divergence without the logprobs to classify it
    ANOMALOUS_SHIFT = "anomalous-shift"  # logprobs moved beyond the campaign's noise, no token flipped
    NUMERIC_DRIFT = "numeric-drift"  # a flip at a near-tie, within measured numeric noise
    SLOWDOWN = "slowdown"  # a request's latency inflated by its neighbours past the measured spread
    INDETERMINATE = "indeterminate"  # a connection cut while the server kept serving

    @property
    def rank(self) -> int:
        """0 is the most severe. Corruption (backed by a control) leads because silent wrong
        answers are the product's whole point; an isolation breach (one tenant served from
        another's cache, on the server's own count) is as silent and as certain; loud failures
        follow because they are certain; a
        confident flip no control has backed comes next (a strong claim, not yet proven); then a
        contract violation: certain (the engine's own promise is the control: under its mode no
        flip may happen at all, so none needs backing) but a near-tie, whose two answers the model
        all but equally prefers, so it ranks below anything that may be a wrong answer and above
        what is unknown or benign; then a flip of unknown cause, then logprobs that moved past the campaign's noise without a flip
        (something moved, nothing visible broke), then a flip shown to be benign."""
        return list(Verdict).index(self)

    @property
    def is_failure(self) -> bool:
        """Whether this verdict is the server failing requests (the liveness oracle's verdicts)
        rather than anything about the outputs it gave."""
        return self in (Verdict.CRASH, Verdict.HANG, Verdict.SERVER_ERROR, Verdict.MALFORMED, Verdict.INDETERMINATE)

    @property
    def is_divergence(self) -> bool:
        """Whether this verdict classifies two outputs that disagree (rather than a failure).
        An anomalous shift is not one: its outputs agree token for token."""
        return self in (Verdict.CORRUPTION, Verdict.SUSPECTED_CORRUPTION, Verdict.CONTRACT_VIOLATION,
                        Verdict.UNCLASSIFIED, Verdict.NUMERIC_DRIFT)

    @property
    def unbacked(self) -> Verdict:
        """What runs alone can say of this verdict: a corruption without its control is a
        suspected corruption. A replay's judgement is compared with a finding's verdict this way.
        A contract violation is a numeric drift that the server's promise forbids: the oracles
        judge runs without the server's mode (`held_to` reads it from the target), so runs alone
        say drift.

        >>> Verdict.CORRUPTION.unbacked.value, Verdict.HANG.unbacked.value, Verdict.CONTRACT_VIOLATION.unbacked.value
        ('suspected-corruption', 'hang', 'numeric-drift')
        """
        if self is Verdict.CORRUPTION:
            return Verdict.SUSPECTED_CORRUPTION
        return Verdict.NUMERIC_DRIFT if self is Verdict.CONTRACT_VIOLATION else self

    @property
    def backed(self) -> Verdict:
        """This verdict once a control has backed it: a suspected corruption becomes a corruption."""
        return Verdict.CORRUPTION if self is Verdict.SUSPECTED_CORRUPTION else self


class Oracle(str, enum.Enum):
    """Which oracle raised an anomaly (each is a pure function in `servefuzz.oracles`)."""

    REPLAY = "replay"  # the same scenario run R times must give one output per request
    ISOLATION = "isolation"  # output under load vs. the same request alone on a flushed cache
    N_CONSISTENCY = "n-consistency"  # the n choices of a temperature-0 request must agree
    LIVENESS = "liveness"  # crash, hang, 5xx, malformed
    CACHE_STATE = "cache-state"  # cold vs. self-warmed vs. primed-by-prefix must give one output
    NOISY_NEIGHBOUR = "noisy-neighbour"  # a victim's first-token time against its solo baseline
    TENANT_ISOLATION = "tenant-isolation"  # a salt must never reuse another salt's cached prefix


def worst(verdicts: Iterable[Verdict]) -> Verdict | None:
    """The most severe verdict, or None for none at all."""
    return min(verdicts, key=lambda v: v.rank, default=None)


def deciding(divergences: Iterable[Divergence]) -> Divergence | None:
    """The divergence that decides: the most severe verdict, then the earliest token."""
    return min(divergences, key=lambda d: (d.verdict.rank, d.position), default=None)


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


@dataclass(frozen=True)
class Variant:
    """One distinct output of one choice of a request, and how often it was seen.

    `runs` are the run numbers that produced it; `label` names the condition ("load", "alone")
    when an oracle compares conditions, and is empty otherwise.
    """

    choice: int
    token_ids: tuple[int, ...]
    text: str
    count: int
    runs: tuple[int, ...]
    label: str = ""

    def preview(self, width: int = 36) -> str:
        """A short quoted rendering: the text's start, or the token ids when there is no text.

        >>> Variant(0, (5, 6), "", 1, (0,)).preview()
        '[5, 6]'
        >>> Variant(0, (5,), " u7892_1146 u7892_1086 u7892_108 u78921", 1, (0,)).preview()
        "' u7892_1146 u7892_1086 u7892_108 u78...'"
        """
        if self.text:
            return _quote(self.text[:width] + ("..." if len(self.text) > width else ""))
        shown = ", ".join(str(t) for t in self.token_ids[:8])
        return f"[{shown}{', ...' if len(self.token_ids) > 8 else ''}]"

    def preview_against(self, other: Variant, width: int = 36) -> str:
        """This output's text where it parts from `other`'s: a few characters of what they share,
        then this one's own (a preview of the start would show two different answers as the same
        text when they part late, or when the text echoes the prompt). The token ids instead
        when there is no text to tell them apart.

        >>> a = Variant(0, (1, 2), "the same long opening, then yes", 1, (0,))
        >>> b = Variant(0, (1, 3), "the same long opening, then no", 1, (1,))
        >>> a.preview_against(b), b.preview_against(a)
        ("'...ening, then yes'", "'...ening, then no'")
        >>> Variant(0, (1, 2), "", 1, (0,)).preview_against(Variant(0, (1, 3), "", 1, (1,)))
        '[1, 2]'
        """
        at = first_difference(self.text, other.text)
        if at is None or not self.text:
            return self.preview(width)
        start = max(0, at - min(12, width // 3))  # a little of what they share, the rest this one's own
        return _quote(("..." if start else "") + self.text[start:start + width]
                      + ("..." if len(self.text) > start + width else ""))

    def to_json(self) -> dict[str, Any]:
        return {
            "choice": self.choice,
            "token_ids": list(self.token_ids),
            "text": self.text,
            "count": self.count,
            "runs": list(self.runs),
            "label": self.label,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Variant:
        return cls(
            choice=int(d["choice"]),
            token_ids=tuple(int(t) for t in d["token_ids"]),
            text=str(d["text"]),
            count=int(d["count"]),
            runs=tuple(int(r) for r in d["runs"]),
            label=str(d.get("label", "")),
        )


def previews(variants: Sequence[Variant], width: int = 36) -> list[str]:
    """Each variant's preview, one per variant in order: their openings, or, where two of those
    would read the same, each one from where it parts from the first (the first from where it
    parts from the second).

    >>> a = Variant(0, (1, 2), "one long shared opening, then a", 3, (0,))
    >>> b = Variant(0, (1, 3), "one long shared opening, then b", 1, (1,))
    >>> previews([a, b], width=18)
    ["'... then a'", "'... then b'"]
    >>> previews([Variant(0, (1,), "yes", 1, (0,)), Variant(0, (2,), "no", 1, (1,))])
    ["'yes'", "'no'"]
    """
    plain = [v.preview(width) for v in variants]
    if len(set(plain)) == len(plain) or len(variants) < 2:
        return plain
    return [v.preview_against(variants[1 if i == 0 else 0], width) for i, v in enumerate(variants)]


@dataclass(frozen=True)
class FlipSide:
    """One of the two outputs at the first position where they differ.

    `token` is what this output chose there (None: it had already ended). `lp_own` is its
    logprob of its own token, `lp_other` its logprob of the *other* output's token. When the
    other token is not in this output's top-k, `lp_other` is the smallest top-k logprob, an upper
    bound on the true value, and `other_is_bound` says so.
    """

    run: int
    label: str
    choice: int
    token: int | None
    lp_own: float | None = None
    lp_other: float | None = None
    other_is_bound: bool = False
    finish_reason: str | None = None

    @property
    def name(self) -> str:
        """How reasons refer to this side: `load#3` or `load#3/c1` for choice 1."""
        return f"{self.label}#{self.run}" + (f"/c{self.choice}" if self.choice else "")

    @property
    def confidence(self) -> float | None:
        """lp_own - lp_other: this output's preference for its own token (a lower bound when
        lp_other is a bound); None when either logprob is unknown."""
        if self.lp_own is None or self.lp_other is None:
            return None
        return self.lp_own - self.lp_other

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "label": self.label,
            "choice": self.choice,
            "token": self.token,
            "lp_own": self.lp_own,
            "lp_other": self.lp_other,
            "other_is_bound": self.other_is_bound,
            "finish_reason": self.finish_reason,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> FlipSide:
        return cls(
            run=int(d["run"]),
            label=str(d["label"]),
            choice=int(d["choice"]),
            token=None if d["token"] is None else int(d["token"]),
            lp_own=_opt_float(d.get("lp_own")),
            lp_other=_opt_float(d.get("lp_other")),
            other_is_bound=bool(d.get("other_is_bound", False)),
            finish_reason=d.get("finish_reason"),
        )


@dataclass(frozen=True)
class Divergence:
    """Two outputs of one request that should be equal, classified at their first difference.

    `position` counts tokens (`unit == "token"`), or characters for text-only outputs.
    `margin` = max(a.confidence, b.confidence): how sure the more confident output was of its own
    token. `margin_is_bound`: some term used a below-top-k bound, so the true margin is at least
    `margin`. `prefix_delta` is the largest logprob difference over the agreeing tokens before
    the flip. `threshold` and the noise numbers are what the margin was held against.
    """

    request_id: str
    position: int
    a: FlipSide
    b: FlipSide
    verdict: Verdict
    reason: str
    margin: float | None = None
    margin_is_bound: bool = False
    threshold: float | None = None
    noise_p99: float | None = None
    noise_tokens: int = 0
    noise_outputs: int = 0
    prefix_delta: float | None = None
    unit: str = "token"

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "position": self.position,
            "unit": self.unit,
            "a": self.a.to_json(),
            "b": self.b.to_json(),
            "verdict": self.verdict.value,
            "reason": self.reason,
            "margin": self.margin,
            "margin_is_bound": self.margin_is_bound,
            "threshold": self.threshold,
            "noise_p99": self.noise_p99,
            "noise_tokens": self.noise_tokens,
            "noise_outputs": self.noise_outputs,
            "prefix_delta": self.prefix_delta,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Divergence:
        return cls(
            request_id=str(d["request_id"]),
            position=int(d["position"]),
            unit=str(d.get("unit", "token")),
            a=FlipSide.from_json(d["a"]),
            b=FlipSide.from_json(d["b"]),
            verdict=Verdict(d["verdict"]),
            reason=str(d["reason"]),
            margin=_opt_float(d.get("margin")),
            margin_is_bound=bool(d.get("margin_is_bound", False)),
            threshold=_opt_float(d.get("threshold")),
            noise_p99=_opt_float(d.get("noise_p99")),
            noise_tokens=int(d.get("noise_tokens", 0)),
            noise_outputs=int(d.get("noise_outputs", 0)),
            prefix_delta=_opt_float(d.get("prefix_delta")),
        )


@dataclass(frozen=True)
class Promise:
    """An engine's documented promise that a mode keeps every answer independent of the batch,
    of the cache's state and of what ran before: the mode as a finding names it (`mode`: the
    flag or the variable, `--enable-deterministic-inference`, `VLLM_BATCH_INVARIANT=1`), the
    promise in the engine's own `words`, and where they are said (`source`). Held by the engine
    spec (`engines.spec.Deterministic`); a contract violation carries it as its evidence."""

    mode: str
    words: str
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "words": self.words, "source": self.source}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Promise:
        return cls(mode=str(d["mode"]), words=str(d["words"]), source=str(d["source"]))


# The keys of a finding file's `evidence` object that hold the typed evidence below, not an
# oracle's measurements: written there as they always were, read back into the fields.
_TYPED = ("vote", "controls", "backed_by", "picture")


@dataclass(frozen=True)
class Anomaly:
    """One thing an oracle found, with its evidence.

    `request_id` is the request it concerns (for a crash: the first request that failed).
    `variants` and `divergences` are the typed evidence of divergence oracles; `evidence` holds
    whatever else the oracle measured (runs, statuses, errors), JSON-ready. What the controls and
    the confirmation add is typed (`servefuzz.evidence`): `controls`, every control's result for
    this request, in the order they ran; `backed_by`, the names of those that backed it; `vote`,
    the fresh alone references' vote; `picture`, what the report draws. `promise`: for a
    contract violation, the promise it breaks (`held_to`); None for every other verdict.
    """

    oracle: Oracle
    verdict: Verdict
    request_id: str
    summary: str
    variants: tuple[Variant, ...] = ()
    divergences: tuple[Divergence, ...] = ()
    evidence: Mapping[str, Any] = field(default_factory=dict)
    promise: Promise | None = None
    controls: tuple[ControlResult, ...] = ()
    backed_by: tuple[str, ...] = ()
    vote: Vote | None = None
    picture: Picture | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "evidence", dict(self.evidence))
        typed = [k for k in _TYPED if k in self.evidence]
        if typed:
            raise ValueError(f"{', '.join(typed)}: typed evidence of the anomaly, not a key of its measurements")

    def __hash__(self) -> int:  # evidence is a dict; identity is the rest
        return hash((self.oracle, self.verdict, self.request_id, self.summary, self.variants, self.divergences,
                     self.promise, self.controls, self.backed_by, self.vote, self.picture))

    def to_json(self) -> dict[str, Any]:
        # The typed evidence goes where the files have always had it, in the `evidence` object,
        # and only where there is some: a file reads as it did before these fields.
        evidence = dict(self.evidence)
        if self.vote is not None:
            evidence["vote"] = self.vote.to_json()
        if self.controls:
            evidence["controls"] = [c.to_json() for c in self.controls]
        if self.backed_by:
            evidence["backed_by"] = list(self.backed_by)
        if self.picture is not None:
            evidence["picture"] = self.picture.to_json()
        return {
            "oracle": self.oracle.value,
            "verdict": self.verdict.value,
            "request_id": self.request_id,
            "summary": self.summary,
            "variants": [v.to_json() for v in self.variants],
            "divergences": [d.to_json() for d in self.divergences],
            "evidence": evidence,
            # Only on a contract violation: every other anomaly's JSON is what it always was.
            **({"promise": self.promise.to_json()} if self.promise is not None else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Anomaly:
        evidence = dict(d.get("evidence", {}))
        vote, controls = evidence.pop("vote", None), evidence.pop("controls", None) or ()
        backed_by, picture = evidence.pop("backed_by", None) or (), evidence.pop("picture", None)
        request_id = str(d["request_id"])
        return cls(
            oracle=Oracle(d["oracle"]),
            verdict=Verdict(d["verdict"]),
            request_id=request_id,
            summary=str(d["summary"]),
            variants=tuple(Variant.from_json(v) for v in d.get("variants", ())),
            divergences=tuple(Divergence.from_json(x) for x in d.get("divergences", ())),
            evidence=evidence,
            promise=None if d.get("promise") is None else Promise.from_json(d["promise"]),
            controls=tuple(ControlResult.from_json(c) for c in controls),
            backed_by=tuple(str(b) for b in backed_by),
            vote=None if vote is None else Vote.from_json(vote, request_id),
            picture=None if picture is None else Picture.from_json(picture),
        )


def held_to(anomalies: Iterable[Anomaly], promise: Promise | None) -> tuple[Anomaly, ...]:
    """The anomalies of a server that ran under `promise` (None: a mode that promises nothing,
    and the anomalies as they are): every numeric drift becomes a contract violation citing it,
    its divergences and summary saying so. However small its margin, a flip under the promise
    is an answer that depended on the batch or the cache, which the mode said it would not.

    Everything else stays: a corruption (or a suspected one) claims more than a broken promise,
    a wrong answer rather than a batch-dependent one, and keeps its controls; an unclassified
    flip keeps saying what it is, one whose cause no logprobs can tell; an anomalous shift
    flipped no token; failures and slowdowns are about something else. Idempotent."""
    if promise is None:
        return tuple(anomalies)
    return tuple(_breaking(a, promise) if a.verdict is Verdict.NUMERIC_DRIFT else a for a in anomalies)


def _breaking(a: Anomaly, promise: Promise) -> Anomaly:
    drift, broken = Verdict.NUMERIC_DRIFT.value, Verdict.CONTRACT_VIOLATION.value
    clause = f"within the noise, but the server ran with {promise.mode}, which promises: {promise.words} ({promise.source})"
    divergences = tuple(
        replace(d, verdict=Verdict.CONTRACT_VIOLATION, reason=f"{d.reason.removesuffix(f' -> {drift}')}; {clause} -> {broken}")
        if d.verdict is Verdict.NUMERIC_DRIFT else d
        for d in a.divergences
    )
    summary = a.summary.replace(drift, broken, 1) if drift in a.summary else f"{a.summary} ({broken}: {promise.mode})"
    return replace(a, verdict=Verdict.CONTRACT_VIOLATION, summary=summary, divergences=divergences, promise=promise)


def _opt_float(x: Any) -> float | None:
    return None if x is None else float(x)
