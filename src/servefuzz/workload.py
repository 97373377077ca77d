"""Workloads: timed multi-request scenarios with exact prompt token ids.

A `Scenario` is what servefuzz sends: a seed and a tuple of `RequestSpec`s, each fired at its
`offset_ms` from the start of a run. Prompts are built at the token level from named shared
prefixes plus unique suffixes, because a prompt joined as a string shifts token boundaries and a
replay would no longer be bit-exact.

    >>> b = PromptBuilder(seed=7, vocab=range(3, 1000))
    >>> a = b.prompt("p0", prefix_len=64, prompt_len=100)
    >>> c = b.prompt("p0", prefix_len=64, prompt_len=80)
    >>> a[:64] == c[:64] and a[64] != c[64]
    True

Natural text: given a `TextSource` (a corpus in the target model's own tokens, and the tokens its
chat template puts after a user's text), the builder takes prefixes and suffixes as runs of that
text instead of random ids, and ends a suffix with the template's tail (the assistant's turn
opening), so that a trained model answers text as it was trained to rather than looping on
noise. The property above holds all the same: the first suffix token is chosen among the text's
runs by the same rule. No head is put before a prompt: every prompt would then share it.

    >>> t = TextSource(tokens=tuple(range(100, 400)), tail=(7, 8))
    >>> b = PromptBuilder(seed=7, vocab=range(3, 1000), text=t)
    >>> a, c = b.prompt("p0", prefix_len=16, prompt_len=24), b.prompt("p0", prefix_len=16, prompt_len=20)
    >>> a[:16] == c[:16] and a[16] != c[16], a[-2:], a[1] - a[0]
    (True, (7, 8), 1)

Vocabulary: `prompt_len` is the whole prompt (shared prefix included); `prefix_len` is how many
leading tokens come from the named shared prefix; the rest is a suffix unique to the request.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "TextSource",
    "CHOICE_TEXT",
    "MAX_CHOICES",
    "MAX_SEED",
    "MAX_TEMPERATURE",
    "RequestSpec",
    "Scenario",
    "PromptBuilder",
    "TokenIds",
    "accepts",
    "choice_text",
    "ADAPTER_NAME",
]

TokenIds = tuple[int, ...]

# Sane sampling ranges every adapter can send as they are: llama.cpp reads a seed as uint32 and
# takes 0xFFFFFFFF for "random", so seeds stay below 2**31; temperatures past 10 are uniform noise.
MAX_SEED = 2**31 - 1
MAX_TEMPERATURE = 10.0
# A LoRA adapter's name as a request carries it: a bounded charset, so that a name read from a
# finding can never be a path, a URL or markup (finding.schema.json holds the same pattern).
ADAPTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

# A choice constraint (`RequestSpec.choices`) is what every engine here can express identically:
# vLLM's `structured_outputs.choice`, a llama.cpp GBNF alternation of string literals, an SGLang
# regex alternation. Its strings are held to letters, digits and spaces (1-64 of them, at most 16
# choices) so that no engine's grammar language needs an escape and no finding can smuggle one
# in; the reference engine reads each choice in its own spelling, ' w<t>' per token
# (`choice_text`), so one constraint means the same text on every engine.
MAX_CHOICES = 16
CHOICE_TEXT = re.compile(r"[A-Za-z0-9 ]{1,64}")


def choice_text(token_ids: Iterable[int]) -> str:
    """A choice spelt as the reference engine writes these tokens: ' w<t>' per token.

    >>> choice_text([17, 903])
    ' w17 w903'
    """
    return "".join(f" w{t}" for t in token_ids)


def accepts(choices: Sequence[str], text: str, *, finished: bool) -> bool:
    """Whether an output `text` satisfies its choice constraint: exactly one of the choices when
    the engine ended it (`finished`: a stop, EOS or grammar end), a prefix of one when it was cut
    at max_tokens (the constraint had no room to finish; nothing it produced broke it).

    >>> accepts((" w5 w7", " w9"), " w5 w7", finished=True), accepts((" w5 w7", " w9"), " w5", finished=True)
    (True, False)
    >>> accepts((" w5 w7", " w9"), " w5", finished=False), accepts((" w5 w7", " w9"), " w8", finished=False)
    (True, False)
    """
    return text in choices if finished else any(c.startswith(text) for c in choices)


@dataclass(frozen=True)
class RequestSpec:
    """One request of a scenario.

    `id` carries mutation lineage (`r02_b_s`: request r02, burst-mutated, then shifted); the
    suffixes are documented in `servefuzz.mutators`. `prompt_ids` are exact token ids.
    """

    id: str
    offset_ms: float
    prompt_ids: TokenIds
    max_tokens: int
    prefix_name: str | None = None
    prefix_len: int = 0
    n: int = 1
    stream: bool = False
    cancel_after_ms: float | None = None
    # A cut placed in the prefill rather than on the clock, for a stream with `cancel_after_ms`
    # (inert otherwise): where the engine reports its prefill's progress on a stream (llama-server's
    # `return_progress`), the request is cut once it reports at least this many of the prompt's
    # tokens in its cache (at most the whole prompt: the prefill's end), and `cancel_after_ms` is
    # not used; elsewhere the clock cuts it. A clock lands anywhere (before the prefill began,
    # after it ended) as the machine's load has it; this lands inside the prefill. None: the clock.
    cancel_at_prefill: int | None = None
    ignore_eos: bool = True
    # The tenant's prefix-cache salt (vLLM's and SGLang's `cache_salt`): requests with different
    # salts must never share a cached page. None: unsalted, as every request before salts was.
    cache_salt: str | None = None
    # Sampling. At temperature 0 (the default) the request is greedy and every oracle compares
    # its tokens. Above 0 its tokens are comparable across runs only with a `seed`, on an engine
    # that promises per-request reproducibility (`Scenario.seeded`, docs/verdicts.md); an unseeded
    # sampled request is judged for liveness only.
    temperature: float = 0.0
    seed: int | None = None
    # Structured output: the answer must be exactly one of these strings (`accepts`). None:
    # unconstrained. A constrained request stops at its end of sequence (ignore_eos False): the
    # engines end a finished grammar with EOS, which ignore_eos would refuse or step past.
    choices: tuple[str, ...] | None = None
    # The LoRA adapter the request runs under, by the name the server registered it under
    # (vLLM's `--lora-modules NAME=PATH`, the reference engine's `--lora NAME=SEED`, llama-server's
    # adapter file stem); None: the base model, as every request before adapters was.
    adapter: str | None = None

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("request id must not be empty")
        if self.offset_ms < 0:
            raise ValueError(f"{self.id}: offset_ms must be >= 0, got {self.offset_ms}")
        if not self.prompt_ids:
            raise ValueError(f"{self.id}: prompt must have at least one token")
        if not 0 <= self.prefix_len <= len(self.prompt_ids):
            raise ValueError(f"{self.id}: prefix_len {self.prefix_len} outside the prompt")
        if self.max_tokens < 1:
            raise ValueError(f"{self.id}: max_tokens must be >= 1")
        if self.n < 1:
            raise ValueError(f"{self.id}: n must be >= 1")
        if self.prefix_len and self.prefix_name is None:
            raise ValueError(f"{self.id}: prefix_len > 0 needs a prefix_name")
        if self.cache_salt is not None and not self.cache_salt:
            raise ValueError(f"{self.id}: cache_salt must be a non-empty string or None")
        if not (math.isfinite(self.temperature) and 0 <= self.temperature <= MAX_TEMPERATURE):
            raise ValueError(f"{self.id}: temperature must be in 0..{MAX_TEMPERATURE:g}, got {self.temperature}")
        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"{self.id}: seed must be in 0..{MAX_SEED}, got {self.seed}")
        if self.choices is not None:
            if not 1 <= len(self.choices) <= MAX_CHOICES or len(set(self.choices)) != len(self.choices):
                raise ValueError(f"{self.id}: choices must be 1..{MAX_CHOICES} distinct strings")
            if not all(isinstance(c, str) and CHOICE_TEXT.fullmatch(c) for c in self.choices):
                raise ValueError(f"{self.id}: a choice must be 1-64 letters, digits or spaces")
            if self.ignore_eos:
                raise ValueError(f"{self.id}: a constrained request must stop at its EOS (ignore_eos False)")
        if self.adapter is not None and not ADAPTER_NAME.fullmatch(self.adapter):
            raise ValueError(f"{self.id}: adapter must be a name of 1-64 letters, digits, '.', '_' or '-'")
        if self.cancel_at_prefill is not None and self.cancel_at_prefill < 1:
            raise ValueError(f"{self.id}: cancel_at_prefill must be >= 1, got {self.cancel_at_prefill}")

    @property
    def answer_key(self) -> RequestSpec | None:
        """What decides this request's answer alone on a flushed cache: the request without its
        id, its schedule and its prefix's name (so two requests with one key are the same
        computation there); None for an unseeded sampled request, whose answer is a draw.

        >>> a = RequestSpec("r01", 3.0, (5, 6), 4)
        >>> a.answer_key == RequestSpec("r07_b", 9.5, (5, 6), 4).answer_key != RequestSpec("r2", 0, (5, 7), 4).answer_key
        True
        >>> RequestSpec("r01", 0, (5, 6), 4, temperature=0.8).answer_key is None
        True
        """
        if self.sampled and self.seed is None:
            return None
        return dataclasses.replace(self, id="r", offset_ms=0.0, prefix_name="p" if self.prefix_len else None,
                                   cancel_after_ms=None, cancel_at_prefill=None)

    @property
    def sampled(self) -> bool:
        """Whether the engine samples this request's tokens (temperature > 0)."""
        return self.temperature > 0

    @property
    def seeded(self) -> bool:
        """A sampled request with a seed: as reproducible as a greedy one where the engine
        promises per-request seeds (the same tokens alone and under load)."""
        return self.sampled and self.seed is not None

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def suffix_len(self) -> int:
        return len(self.prompt_ids) - self.prefix_len

    @property
    def cancelled(self) -> bool:
        """Whether the runner will cut this request on purpose (its output is indeterminate)."""
        return self.cancel_after_ms is not None

    def to_json(self) -> dict[str, Any]:
        """JSON-ready; an unsalted request leaves `cache_salt` out, so its JSON (and every
        finding written before salts) reads the same as ever.

        >>> spec = RequestSpec("r01", 0.0, (5, 6), 2, cache_salt="tenant-a")
        >>> RequestSpec.from_json(spec.to_json()) == spec, "cache_salt" in RequestSpec("r01", 0.0, (5,), 1).to_json()
        (True, False)
        """
        d = dataclasses.asdict(self)
        d["prompt_ids"] = list(self.prompt_ids)
        if self.cache_salt is None:
            del d["cache_salt"]
        # A greedy request is written as before sampling existed, so its files (and the dedup
        # signatures and hashes taken over them) stay what they were.
        if not self.sampled:
            del d["temperature"]
        if self.seed is None:
            del d["seed"]
        if self.choices is None:
            del d["choices"]  # an unconstrained request reads as it always did
        else:
            d["choices"] = list(self.choices)
        if self.adapter is None:
            del d["adapter"]
        if self.cancel_at_prefill is None:
            del d["cancel_at_prefill"]  # a clock's cut reads as it always did
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RequestSpec:
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - fields
        if unknown:
            raise ValueError(f"unknown request fields: {sorted(unknown)}")
        kw = dict(d)
        kw["prompt_ids"] = tuple(int(t) for t in d["prompt_ids"])
        if "temperature" in kw:
            kw["temperature"] = float(kw["temperature"])
        if kw.get("choices") is not None:
            if not isinstance(kw["choices"], list | tuple):
                raise ValueError(f"choices must be a list of strings, got {type(kw['choices']).__name__}")
            kw["choices"] = tuple(kw["choices"])
        return cls(**kw)


@dataclass(frozen=True)
class Scenario:
    """A seed and its timed requests. Requests are kept sorted by (offset_ms, id)."""

    seed: int
    requests: tuple[RequestSpec, ...]
    # Free-form provenance: which strategy or mutator made it, the page size it aimed at.
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = [r.id for r in self.requests]
        if len(set(ids)) != len(ids):
            raise ValueError("request ids in a scenario must be unique")
        ordered = tuple(sorted(self.requests, key=lambda r: (r.offset_ms, r.id)))
        object.__setattr__(self, "requests", ordered)
        object.__setattr__(self, "meta", dict(self.meta))

    def __hash__(self) -> int:  # meta is a dict; identity is seed + requests
        return hash((self.seed, self.requests))

    def by_id(self) -> dict[str, RequestSpec]:
        return {r.id: r for r in self.requests}

    def subset(self, ids: Iterable[str]) -> Scenario:
        keep = set(ids)
        return dataclasses.replace(self, requests=tuple(r for r in self.requests if r.id in keep))

    def with_requests(self, requests: Sequence[RequestSpec]) -> Scenario:
        return dataclasses.replace(self, requests=tuple(requests))

    @property
    def total_requests(self) -> int:
        """Requests on the wire: a request with n choices is still one request."""
        return len(self.requests)

    @property
    def seeded(self) -> frozenset[str]:
        """The seeded sampled requests: their flips are draws, judged by the sampled rule."""
        return frozenset(r.id for r in self.requests if r.seeded)

    @property
    def unseeded(self) -> frozenset[str]:
        """Sampled requests without a seed: no two of their answers need agree (liveness only)."""
        return frozenset(r.id for r in self.requests if r.sampled and r.seed is None)

    @property
    def constrained(self) -> dict[str, tuple[str, ...]]:
        """The constrained requests and their choices (the constraint oracle's subjects)."""
        return {r.id: r.choices for r in self.requests if r.choices is not None}

    @property
    def duration_ms(self) -> float:
        return max((r.offset_ms for r in self.requests), default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "meta": dict(self.meta),
            "requests": [r.to_json() for r in self.requests],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Scenario:
        return cls(
            seed=int(d["seed"]),
            requests=tuple(RequestSpec.from_json(r) for r in d["requests"]),
            meta=dict(d.get("meta", {})),
        )


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one per target, large
class TextSource:
    """Natural text for prompts: `tokens`, a corpus as the target's tokenizer splits it (read
    cyclically), and `tail`, what the target's chat template writes after a user's text (empty
    where it has none). `where`: the text's provenance, in words."""

    tokens: TokenIds
    tail: TokenIds = ()
    where: str = ""

    def __post_init__(self) -> None:
        if len(set(self.tokens)) < 16:
            raise ValueError("too little text to build prompts from")

    def run(self, start: int, length: int) -> TokenIds:
        n = len(self.tokens)
        return tuple(self.tokens[(start + i) % n] for i in range(length))


class PromptBuilder:
    """Builds prompts at the token level from named shared prefixes and unique suffixes.

    A named prefix is a fixed random token sequence; a request takes its first `prefix_len`
    tokens. The first suffix token is chosen so that no two requests of this builder that share
    a prefix length also share that token, and so that it differs from the named prefix's own
    next token: the shared part is then *exactly* `prefix_len` tokens, which is the property
    page-boundary bugs hinge on. With `text`, prefixes and suffixes are runs of natural text
    (the module docstring).
    """

    def __init__(self, seed: int, vocab: range, text: TextSource | None = None) -> None:
        if len(vocab) < 16:
            raise ValueError("vocabulary range too small to build prompts")
        self._rng = random.Random(seed)
        self._vocab = vocab
        self._text = text
        self._prefixes: dict[str, list[int]] = {}
        self._starts: dict[str, int] = {}  # with text: where each named prefix starts in it
        # With text, the first token of every prompt that starts anew (a named prefix, a prompt
        # without one) differs from every other's: text repeats its words where random ids
        # almost never collide, and two such prompts must share no prefix at all.
        self._heads: set[int] = set()
        self._first_suffix: dict[tuple[str | None, int], set[int]] = {}

    def _token(self) -> int:
        return self._vocab[self._rng.randrange(len(self._vocab))]

    def prefix_tokens(self, name: str, length: int) -> TokenIds:
        toks = self._prefixes.setdefault(name, [])
        if self._text is not None and len(toks) < length + 1:
            if name not in self._starts:
                self._starts[name] = self._free_start(self._heads)
                self._heads.add(self._text.tokens[self._starts[name]])
            toks[:] = self._text.run(self._starts[name], length + 1)
        while len(toks) < length + 1:  # one extra: the prefix's own next token
            toks.append(self._token())
        return tuple(toks[:length])

    def prompt(self, prefix_name: str | None, prefix_len: int, prompt_len: int) -> TokenIds:
        if prompt_len < 1 or not 0 <= prefix_len <= prompt_len:
            raise ValueError(f"bad lengths: prefix_len={prefix_len} prompt_len={prompt_len}")
        if prefix_len and prefix_name is None:
            raise ValueError("prefix_len > 0 needs a prefix name")
        head = self.prefix_tokens(prefix_name, prefix_len) if prefix_len and prefix_name is not None else ()
        if prompt_len == prefix_len:
            return head
        used = self._first_suffix.setdefault((prefix_name if prefix_len else None, prefix_len), set())
        banned = set(used)
        if prefix_len:
            banned.add(self._prefixes[prefix_name][prefix_len])  # type: ignore[index]
        if self._text is not None:
            if not prefix_len:
                banned |= self._heads
            suffix = self._text_suffix(banned, used, prompt_len - prefix_len)
            if not prefix_len:
                self._heads.add(suffix[0])
            return head + suffix
        return head + self._random_suffix(banned, used, prompt_len - prefix_len)

    def _text_suffix(self, banned: set[int], used: set[int], length: int) -> TokenIds:
        """A run of the text whose first token is not `banned`, ended by the chat tail where
        there is room for text before it."""
        assert self._text is not None
        text = self._text
        start = self._free_start(banned)
        if text.tokens[start] in banned:  # every token of the text is taken: a random first token
            return self._random_suffix(banned, used, length)
        used.add(text.tokens[start])
        tail = text.tail if length > len(text.tail) else ()
        return text.run(start, length - len(tail)) + tail

    def _free_start(self, banned: set[int]) -> int:
        """A random place in the text whose token is not `banned` (the next one after a random
        place that is); a banned one only where the whole text is."""
        assert self._text is not None
        tokens = self._text.tokens
        start = self._rng.randrange(len(tokens))
        for _ in range(len(tokens)):
            if tokens[start] not in banned:
                break
            start = (start + 1) % len(tokens)
        return start

    def _random_suffix(self, banned: set[int], used: set[int], length: int) -> TokenIds:
        first = self._token()
        for _ in range(4 * len(self._vocab)):
            if first not in banned:
                break
            first = self._token()
        used.add(first)
        return (first, *(self._token() for _ in range(length - 1)))
