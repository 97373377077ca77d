"""What every target adapter is: the `Target` Protocol, its registry and the shared plumbing.

An adapter speaks one engine's HTTP dialect. It turns a `RequestSpec` into a request with the
exact prompt token ids, temperature 0 and per-token top-k logprobs, and parses the answer into
the in-flight `Exchange` that the runner hands it. The runner owns the clock, the deadlines and
the final `RequestRecord`; the adapter only fills the exchange as data arrives, so a request cut
mid-stream still leaves its partial output behind.

    >>> from servefuzz.targets import make_target, available_engines
    >>> "sglang" in available_engines()
    True
    >>> make_target("sglang", "http://127.0.0.1:30000/").base_url
    'http://127.0.0.1:30000'

An adapter signals what went wrong with the answer by raising `BadStatus` (a non-2xx answer) or
`BadReply` (a 2xx answer it cannot understand); aiohttp's own errors and timeouts pass through.
The runner turns each into a record status: server misbehaviour is data, not a tool failure.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import aiohttp

from servefuzz.errors import UsageError
from servefuzz.finding import TargetInfo
from servefuzz.history import ChoiceRecord, TopLogprobs
from servefuzz.workload import RequestSpec

__all__ = [
    "BadReply",
    "BadStatus",
    "ChoiceDraft",
    "Exchange",
    "HttpTarget",
    "Target",
    "TargetInfo",
    "available_engines",
    "describe_error",
    "get_target_class",
    "make_target",
    "parse_prometheus",
    "register",
    "reply_shape",
    "sse_payloads",
]

# How much of an error body a record keeps: enough to recognise the message, not a whole page.
_EXCERPT_CHARS = 200


@dataclass
class ChoiceDraft:
    """One choice as it grows while a request is in flight (mutable; frozen at the end)."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[TopLogprobs] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None

    def freeze(self, index: int) -> ChoiceRecord:
        return ChoiceRecord(
            index=index,
            token_ids=tuple(self.token_ids),
            logprobs=tuple(self.logprobs),
            top_logprobs=tuple(self.top_logprobs),
            text=self.text,
            finish_reason=self.finish_reason,
        )


@dataclass
class Exchange:
    """The mutable, in-flight side of one request: the adapter fills it, the runner freezes it.

    `clock` gives milliseconds since the start of the run; the adapter calls `token_arrived()`
    when a streamed chunk carries output, so the first-token time is taken on the runner's clock.
    `cold`: this request is a clean reference (alone, on a flushed cache); an adapter that can
    also tell the engine not to reuse a cached prompt does so (llama.cpp's `cache_prompt`).
    """

    clock: Callable[[], float]
    cold: bool = False
    first_token_ms: float | None = None
    http_status: int | None = None
    cached_tokens: int | None = None
    prompt_tokens: int | None = None
    drafts: dict[int, ChoiceDraft] = field(default_factory=dict)

    def choice(self, index: int) -> ChoiceDraft:
        return self.drafts.setdefault(index, ChoiceDraft())

    def token_arrived(self) -> None:
        if self.first_token_ms is None:
            self.first_token_ms = self.clock()

    def choices(self) -> tuple[ChoiceRecord, ...]:
        return tuple(self.drafts[i].freeze(i) for i in sorted(self.drafts))

    def require_finished(self, n: int) -> None:
        """Raise if a stream ended before all `n` choices said why they stopped.

        Some servers send no `data: [DONE]`, so the end of a stream is judged by the answer
        itself; a stream closed early is a cut answer (indeterminate), not a finished one.
        """
        done = sum(1 for d in self.drafts.values() if d.finish_reason is not None)
        if done < n:
            raise aiohttp.ClientPayloadError(f"stream ended with {done} of {n} choices finished")


class BadStatus(Exception):
    """The server answered with a non-2xx status (or reported an error inside a 2xx stream)."""

    def __init__(self, status: int, body: str) -> None:
        self.status = status
        self.excerpt = " ".join(body.split())[:_EXCERPT_CHARS]
        super().__init__(f"HTTP {status}: {self.excerpt}" if self.excerpt else f"HTTP {status}")


class BadReply(Exception):
    """A 2xx answer that cannot be understood as this dialect."""


@contextlib.contextmanager
def reply_shape(what: str) -> Iterator[None]:
    """Turn the lookup errors of parsing a JSON answer into one `BadReply`.

    A server that answers `{"meta_info": 3}` would otherwise surface as a bare TypeError deep
    in a parser; here it becomes "malformed /generate answer: ...".
    """
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise BadReply(f"malformed {what} answer: {type(e).__name__}: {e}") from e


@runtime_checkable
class Target(Protocol):
    """One engine endpoint spoken to in its own dialect.

    Every method takes the runner's one `aiohttp.ClientSession`: the adapter never opens its own,
    so connection limits and timeouts are set in exactly one place.
    """

    engine: str
    base_url: str

    async def send(
        self, session: aiohttp.ClientSession, spec: RequestSpec, *, top_k: int, exchange: Exchange
    ) -> None:
        """Send `spec` (temperature 0, exact ids, top-k logprobs) and fill `exchange`."""

    async def flush_cache(self, session: aiohttp.ClientSession) -> bool:
        """Empty the prefix cache: True once flushed, False when the engine has no flush.

        Raises TargetError when the engine has a flush but keeps refusing it.
        """

    async def server_info(self, session: aiohttp.ClientSession) -> TargetInfo:
        """What the server says about itself; raises BadStatus/BadReply/aiohttp errors."""

    async def metrics(self, session: aiohttp.ClientSession) -> dict[str, float]:
        """The Prometheus metrics, parsed by `parse_prometheus`; {} when the engine has none."""

    async def health(self, session: aiohttp.ClientSession) -> bool:
        """Whether the server says it is healthy (False, not an exception, when unreachable)."""


class HttpTarget:
    """Plumbing the dialects share: URL handling, JSON GETs, `/health` and `/metrics`."""

    engine: ClassVar[str] = ""

    def __init__(self, base_url: str) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise UsageError(f"target URL must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")

    def url(self, path: str) -> str:
        return self.base_url + path

    async def get_json(self, session: aiohttp.ClientSession, path: str) -> Any:
        async with session.get(self.url(path)) as resp:
            body = await resp.text()
            if resp.status >= 300:
                raise BadStatus(resp.status, body)
        try:
            return json.loads(body)
        except ValueError as e:
            raise BadReply(f"{path} answered something that is not JSON: {body[:60]!r}") from e

    async def health(self, session: aiohttp.ClientSession) -> bool:
        try:
            async with session.get(self.url("/health")) as resp:
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def metrics(self, session: aiohttp.ClientSession) -> dict[str, float]:
        async with session.get(self.url("/metrics")) as resp:
            if resp.status == 404:
                return {}  # metrics switched off (SGLang without --enable-metrics)
            body = await resp.text()
            if resp.status >= 300:
                raise BadStatus(resp.status, body)
        return parse_prometheus(body)


async def sse_payloads(resp: aiohttp.ClientResponse) -> AsyncIterator[Any]:
    """Yield the JSON payload of each `data:` line of a server-sent-event stream.

    Ends at `data: [DONE]` or at the end of the body (`Exchange.require_finished` then tells a
    finished stream from a cut one). Lines are split here rather than with aiohttp's line
    reader, whose line-length cap a cumulative top-k stream can exceed.
    """
    buf = bytearray()
    async for chunk in resp.content.iter_any():
        buf += chunk
        while (nl := buf.find(b"\n")) >= 0:
            line = bytes(buf[:nl]).strip()
            del buf[: nl + 1]
            if not line.startswith(b"data:"):
                continue  # blank separators, comments and `event:` lines carry nothing we use
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            try:
                yield json.loads(data)
            except ValueError as e:
                raise BadReply(f"stream chunk is not JSON: {data[:60]!r}") from e


def parse_prometheus(text: str) -> dict[str, float]:
    """Parse Prometheus exposition text into {metric name: value}, summing over label sets.

    Labels are dropped because the engines label every series with the model name, and the
    fuzzer wants one number per metric (a counter's delta around a run).

    >>> parse_prometheus('# TYPE x counter\\nx{model="a"} 3\\nx{model="b"} 4\\ny 1.5e2\\n')
    {'x': 7.0, 'y': 150.0}
    """
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name_end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=-1)
        if name_end <= 0:
            continue
        rest = line[line.rfind("}") + 1 :] if line[name_end] == "{" else line[name_end:]
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue  # not a sample line; exposition text may carry other content
        name = line[:name_end]
        out[name] = out.get(name, 0.0) + value
    return out


def describe_error(exc: BaseException) -> str:
    """A short lower-case phrase for a network failure: 'connection refused', 'timed out'."""
    if isinstance(exc, TimeoutError):  # aiohttp's timeouts are TimeoutErrors too
        return "timed out"
    if isinstance(exc, aiohttp.ClientConnectorError) and exc.os_error.errno:
        # The errno, not the message: asyncio's message is "Connect call failed (host, port)".
        return os.strerror(exc.os_error.errno).lower()
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server disconnected"
    if isinstance(exc, aiohttp.ClientPayloadError):
        # aiohttp appends the repr of the parser error it wraps; the first clause says enough.
        reason = str(exc).split(": <")[0]
        return f"answer cut short ({reason})" if reason else "answer cut short"
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno).lower()
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# --- registry -----------------------------------------------------------------------------

_REGISTRY: dict[str, type[Target]] = {}
_T = TypeVar("_T")


def register(name: str) -> Callable[[type[_T]], type[_T]]:
    """Class decorator: make an adapter available under an engine name (and set its `engine`)."""

    def deco(cls: type[_T]) -> type[_T]:
        if name in _REGISTRY:
            raise ValueError(f"engine {name!r} is already registered")
        cls.engine = name  # type: ignore[attr-defined]
        _REGISTRY[name] = cls  # type: ignore[assignment]
        return cls

    return deco


def available_engines() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def get_target_class(engine: str) -> type[Target]:
    try:
        return _REGISTRY[engine]
    except KeyError:
        raise UsageError(f"unknown engine {engine!r} (known: {', '.join(available_engines())})") from None


def make_target(engine: str, base_url: str, **opts: Any) -> Target:
    """Build the adapter for `engine`; `opts` go to its constructor (e.g. `model=` for openai)."""
    cls = get_target_class(engine)
    try:
        return cls(base_url, **opts)  # type: ignore[call-arg]
    except TypeError as e:
        raise UsageError(f"bad option for engine {engine!r}: {e}") from None
