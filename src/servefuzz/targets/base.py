"""What every target adapter is: the `Target` Protocol, its registry and the shared plumbing.

An adapter speaks one engine's HTTP dialect. It turns a `RequestSpec` into a request with the
exact prompt token ids, the spec's temperature (0, greedy, unless the spec samples) and seed
(sent only when the spec has one, in the engine's own field: `seed`, SGLang's
`sampling_params.sampling_seed`), and per-token top-k logprobs, and parses the answer into
the in-flight `Exchange` that the runner hands it. The runner owns the clock, the deadlines and
the final `RequestRecord`; the adapter only fills the exchange as data arrives, so a request cut
mid-stream still leaves its partial output behind.

    >>> from servefuzz.targets import make_target, available_engines
    >>> "sglang" in available_engines()
    True
    >>> make_target("sglang", "http://127.0.0.1:30000/").base_url
    'http://127.0.0.1:30000'

An adapter signals what went wrong with the answer by raising `BadStatus` (a non-2xx answer) or
`BadReply` (a 2xx answer it cannot understand, `TooLarge` one over the cap); aiohttp's own
errors and timeouts pass through. The runner turns each into a record status: server
misbehaviour is data, not a tool failure.

Whatever a server sends is read defensively, here and only here (`HttpTarget.get`/`post`,
`read_body`, `read_error`, `sse_payloads`, `parse_json`): bytes are decoded with
`errors="replace"` (a 500 with a non-UTF-8 body keeps its status), every read is bounded
(`max_response_bytes` for a body or one line of a stream, `max_stream_bytes` for a whole
stream), and JSON that is not JSON, too deep, holds an integer past Python's 4,300 digits or a
NaN is one `BadReply`.

Servers behind auth: `make_target(engine, url, headers={"Authorization": "Bearer ..."})` sends
those headers with every request the adapter makes (answers, flushes, metrics, server info);
credentials in the URL (`http://user:pw@host`) become a Basic `Authorization` header and leave
the URL. The adapter keeps them in memory only: `TargetInfo.auth` records *that* auth was
used, never what.

    >>> t = make_target("sglang", "http://user:pw@127.0.0.1:30000/", headers={"X-Trace": "1"})
    >>> t.base_url, sorted(t.headers), t.authenticated
    ('http://127.0.0.1:30000', ['Authorization', 'X-Trace'], True)
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import aiohttp

from servefuzz.engines.registry import spec_of
from servefuzz.engines.spec import EngineSpec
from servefuzz.errors import UsageError
from servefuzz.history import ChoiceRecord, TopLogprobs
from servefuzz.sanitize import one_line
from servefuzz.server_facts import TargetInfo
from servefuzz.workload import RequestSpec

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_MAX_STREAM_BYTES",
    "MAX_COVERAGE_POINTS",
    "CoverageSource",
    "BadReply",
    "ReproDialect",
    "BadStatus",
    "ChoiceDraft",
    "Exchange",
    "HttpTarget",
    "Target",
    "TargetInfo",
    "TooLarge",
    "auth_headers",
    "parse_coverage",
    "available_engines",
    "describe_error",
    "get_target_class",
    "in_band_error",
    "make_target",
    "parse_json",
    "parse_prometheus",
    "SPLIT_LABELS",
    "read_body",
    "read_error",
    "register",
    "reply_shape",
    "split_credentials",
    "sse_payloads",
    "capabilities",
    "CutInPrefill",
    "cut_in_prefill",
    "unsupported",
]

# How much of an error body a record keeps: enough to recognise the message, not a whole page.
_EXCERPT_CHARS = 200
# How much of an error body is read at all: the excerpt comes from its start.
_ERROR_READ_BYTES = 64 << 10
# The most one answer may take: a whole body, or one line of a stream. SGLang's cumulative
# streams repeat every top-k list so far on each line: 4,096 tokens of top-5 are about 1 MB a
# line, so 8 MiB leaves room, while a 200 MB line without a newline is refused at once.
DEFAULT_MAX_RESPONSE_BYTES = 8 << 20
# The most a whole stream may take. The same cumulative streams total about the square of their
# length over two lines' worth (25 MB for 512 tokens of top-5): ample room, but bounded.
DEFAULT_MAX_STREAM_BYTES = 256 << 20


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
    """The server answered with a non-2xx status (or reported an error inside a 2xx stream).

    The excerpt is one line with its control characters made visible (`sanitize.one_line`): it
    travels into records, anomalies, findings and error lines, all of which a terminal may show.
    """

    def __init__(self, status: int, body: str) -> None:
        self.status = status
        self.excerpt = one_line(body)[:_EXCERPT_CHARS]
        super().__init__(f"HTTP {status}: {self.excerpt}" if self.excerpt else f"HTTP {status}")


def in_band_error(exchange: Exchange, item: Any) -> None:
    """Raise the failure a server reported inside a 200 answer or stream (`{"error": ...}`: how
    llama.cpp, vLLM and SGLang report one once the status is sent) as the `BadStatus` it is."""
    if "error" in item:
        err = item["error"]
        message = err.get("message", err) if isinstance(err, Mapping) else err
        raise BadStatus(exchange.http_status or 200, f"in-band error: {message}")


class BadReply(Exception):
    """A 2xx answer that cannot be understood as this dialect."""


class TooLarge(BadReply):
    """An answer (a body, one line of a stream, or a whole stream) past the adapter's cap."""


@contextlib.contextmanager
def reply_shape(what: str) -> Iterator[None]:
    """Turn the lookup errors of parsing a JSON answer into one `BadReply`.

    A server that answers `{"meta_info": 3}` would otherwise surface as a bare TypeError deep
    in a parser; here it becomes "malformed /generate answer: ...".
    """
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError, RecursionError) as e:
        raise BadReply(f"malformed {what} answer: {type(e).__name__}: {one_line(e)[:_EXCERPT_CHARS]}") from e


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
        """Send `spec` (exact ids, its temperature and seed, top-k logprobs) and fill `exchange`."""

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


def capabilities(target: object) -> EngineSpec:
    """What `target`'s dialect can send: the spec of the engine its adapter is registered as
    (`EngineSpec.salts`, `choices`, `adapters`); a Target of no known engine, none of them."""
    return spec_of(str(getattr(target, "engine", "") or ""))


def unsupported(target: object, spec: RequestSpec) -> str | None:
    """Why `target`'s dialect cannot send `spec` as it is, in one line; None when it can. The one
    capability check: the runner asks it before a run sends anything, the adapters before they
    build a body. A request it refuses is never sent without what it asks for (unsalted,
    unconstrained, to the base model): that would quietly test something else."""
    caps, engine = capabilities(target), getattr(target, "engine", "") or "this"
    if spec.cache_salt is not None and not caps.salts:
        return f"request {spec.id} carries a cache salt, and the {engine} dialect has none"
    if spec.choices is not None and not caps.choices:
        return f"request {spec.id} carries a choice constraint, and the {engine} dialect has none"
    if spec.adapter is not None and not caps.adapters:
        return f"request {spec.id} runs under LoRA adapter {spec.adapter}, and the {engine} dialect has none"
    return None


def cut_in_prefill(target: object, spec: RequestSpec) -> bool:
    """Whether `target` cuts `spec` where its prefill has reached `spec.cancel_at_prefill`
    (read from the engine's progress reports) instead of on the clock (`cancel_after_ms`).

    >>> spec = RequestSpec("r01", 0.0, (5,) * 300, 4, stream=True, cancel_after_ms=40.0, cancel_at_prefill=128)
    >>> llama, vllm = make_target("llamacpp", "http://127.0.0.1:8080"), make_target("vllm", "http://127.0.0.1:8000")
    >>> whole = RequestSpec("r02", 0.0, (5,) * 300, 4, cancel_after_ms=40.0, cancel_at_prefill=128)  # not a stream
    >>> cut_in_prefill(llama, spec), cut_in_prefill(vllm, spec), cut_in_prefill(llama, whole)
    (True, False, False)
    """
    return (spec.cancel_at_prefill is not None and spec.stream and spec.cancel_after_ms is not None
            and capabilities(target).prefill_progress)


class CutInPrefill(Exception):
    """The adapter cut a stream on purpose where the engine reported its prefill had reached the
    request's `cancel_at_prefill` (`cut_in_prefill`): the runner records it as cancelled."""

    def __init__(self, prefilled: int) -> None:
        self.prefilled = prefilled
        super().__init__(f"cancelled by the client at {prefilled} prompt tokens prefilled")


class Absorb(Protocol):
    """How a dialect folds one answer (or one stream chunk) of a generation into the exchange."""

    def __call__(self, exchange: Exchange, item: Any, *, position: int, streamed: bool) -> None: ...


@dataclass(frozen=True)
class ReproDialect:
    """How a finding's repro_full.py speaks an adapter's dialect: `reads`, which of the script's
    answer readers ("sglang", "openai", "llamacpp"); `path`, where requests go; `flush`, the cache
    flush it has (None: none); `n_as_requests`, whether n > 1 at temperature 0 goes as n requests
    of n = 1 (as the adapter sends it); and the two functions minimal_repro.py speaks it with."""

    reads: str
    path: str
    flush: str | None = None
    n_as_requests: bool = False
    # How minimal_repro.py (`reports.minimal`) reads an answer's token ids and empties the cache,
    # as Python source of a `tokens(answer)` and a `flush()` function; "" where it cannot.
    minimal_tokens: str = ""
    minimal_flush: str = ""


class CoverageSource(Protocol):
    """Engine coverage read other than over HTTP (`targets.coverage_files.CoverageFiles`), with
    `HttpTarget.engine_coverage`'s contract. `context_free`: its points are edges alone, no step
    context (the trial folds in the run's own: `feedback.run_context`)."""

    context_free: bool

    async def engine_coverage(self) -> dict[int, int] | None: ...


class HttpTarget:
    """Plumbing the dialects share: URL handling, auth headers, bounded reads, JSON GETs,
    `/health` and `/metrics`.

    Every request an adapter makes goes through `get` or `post`, which add the target's
    headers; so a server behind auth sees them on every call, and no call can forget them.
    """

    engine: ClassVar[str] = ""
    # How repro_full.py speaks it (`reports.repro`); None: repro_full.py cannot speak it yet.
    repro: ClassVar[ReproDialect | None] = None
    # What the dialect can send (salts, choice constraints, LoRA adapters) is its engine's spec's
    # (`capabilities`); a request it cannot send is refused (`unsupported`), never sent without.

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_stream_bytes: int = DEFAULT_MAX_STREAM_BYTES,
    ) -> None:
        url, from_url = split_credentials(base_url)
        self.base_url = url.rstrip("/")
        given = dict(headers or {})
        for name, value in given.items():
            _check_header(name, value)
        if from_url and not any(k.lower() == "authorization" for k in given):
            given["Authorization"] = from_url
        self.headers: Mapping[str, str] = given
        if max_response_bytes < 1 or max_stream_bytes < max_response_bytes:
            raise UsageError("max_response_bytes must be >= 1 and max_stream_bytes >= max_response_bytes")
        self.max_response_bytes = max_response_bytes
        self.max_stream_bytes = max_stream_bytes
        # Where the engine's coverage comes from when not from its `/coverage` route: the tracer
        # servefuzz runs inside an engine it launched (`targets.coverage_files`). None: the route.
        self.coverage_source: CoverageSource | None = None

    def repro_body(self, spec: RequestSpec, *, top_k: int, model: str | None) -> dict[str, Any]:
        """The exact body this adapter sends for `spec`, as repro_full.py replays it (`model`: the
        served model the finding recorded, for a dialect whose body names one)."""
        raise UsageError(f"repro_full.py cannot speak the {self.engine or '?'!r} dialect yet")

    @property
    def authenticated(self) -> bool:
        """Whether requests carry credentials (recorded in `TargetInfo.auth`; never what they are)."""
        return bool(self.headers)

    def url(self, path: str) -> str:
        return self.base_url + path

    def salt_of(self, spec: RequestSpec) -> str | None:
        """The salt to send for `spec` (a request this dialect cannot send: `UsageError`)."""
        self._sendable(spec)
        return spec.cache_salt

    def choices_of(self, spec: RequestSpec) -> tuple[str, ...] | None:
        """The choices to constrain `spec` to (a request this dialect cannot send: `UsageError`)."""
        self._sendable(spec)
        return spec.choices

    def adapter_of(self, spec: RequestSpec) -> str | None:
        """The adapter to name for `spec` (a request this dialect cannot send: `UsageError`)."""
        self._sendable(spec)
        return spec.adapter

    def _sendable(self, spec: RequestSpec) -> None:
        if (why := unsupported(self, spec)) is not None:
            raise UsageError(why)

    def get(self, session: aiohttp.ClientSession, path: str, **kw: Any) -> Any:
        """`session.get` of `path`, with the target's headers (an async context manager)."""
        return session.get(self.url(path), headers=self._headers(kw.pop("headers", None)), allow_redirects=False, **kw)

    def post(self, session: aiohttp.ClientSession, path: str, **kw: Any) -> Any:
        """`session.post` to `path`, with the target's headers (an async context manager).

        Redirects are not followed (a 3xx is an answer like any non-2xx): a server must not send
        the fuzzer, and its credentials, anywhere else.
        """
        return session.post(self.url(path), headers=self._headers(kw.pop("headers", None)), allow_redirects=False, **kw)

    def _headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        return {**self.headers, **(extra or {})}

    async def read(self, resp: aiohttp.ClientResponse) -> bytes:
        """The whole body of a 2xx answer, at most `max_response_bytes` (else `TooLarge`)."""
        return await read_body(resp, self.max_response_bytes)

    async def get_json(self, session: aiohttp.ClientSession, path: str) -> Any:
        async with self.get(session, path) as resp:
            if resp.status >= 300:
                raise BadStatus(resp.status, await read_error(resp))
            raw = await self.read(resp)
        return parse_json(raw, path)

    async def tokenize(self, session: aiohttp.ClientSession, text: str, *, chat: bool = False) -> tuple[int, ...]:
        """`text` in the served model's tokens, from the server's `/tokenize` (vLLM's and SGLang's
        shape: `{"tokens": [...]}`); with `chat`, as the one user message of a chat with the
        generation prompt after it. `BadStatus` where the server has no such endpoint."""
        body: dict[str, Any] = (
            {"messages": [{"role": "user", "content": text}], "add_generation_prompt": True}
            if chat else {"prompt": text, "add_special_tokens": False}
        )
        return await self.post_tokens(session, "/tokenize", body)

    async def post_tokens(self, session: aiohttp.ClientSession, path: str, body: Mapping[str, Any]) -> tuple[int, ...]:
        """POST `body` to `path` and read the `tokens` list of its answer."""
        async with self.post(session, path, json=body) as resp:
            if resp.status >= 300:
                raise BadStatus(resp.status, await read_error(resp))
            raw = await self.read(resp)
        data = parse_json(raw, path)
        with reply_shape(path):
            return tuple(int(t) for t in data["tokens"])

    async def health(self, session: aiohttp.ClientSession) -> bool:
        try:
            async with self.get(session, "/health") as resp:
                return bool(resp.status == 200)
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def metrics(self, session: aiohttp.ClientSession) -> dict[str, float]:
        async with self.get(session, "/metrics") as resp:
            if resp.status == 404:
                return {}  # metrics switched off (SGLang without --enable-metrics)
            if resp.status >= 300:
                raise BadStatus(resp.status, await read_error(resp))
            body = await self.read(resp)
        return parse_prometheus(body.decode("utf-8", errors="replace"))

    async def engine_coverage(self, session: aiohttp.ClientSession) -> dict[int, int] | None:
        """The engine's cumulative coverage map (`parse_coverage`: a malformed one is {}); None
        where it has none (404: an engine without `/coverage`, or the reference engine without
        `--coverage`). With a `coverage_source` (a launched engine traced from inside), its map."""
        if self.coverage_source is not None:
            return await self.coverage_source.engine_coverage()
        async with self.get(session, "/coverage") as resp:
            if resp.status == 404:
                return None
            if resp.status >= 300:
                raise BadStatus(resp.status, await read_error(resp))
            body = await self.read(resp)
        try:
            return parse_coverage(parse_json(body, "/coverage"))
        except BadReply:
            return {}

    def stream(self, resp: aiohttp.ClientResponse) -> AsyncIterator[Any]:
        """The JSON payloads of a server-sent-event answer, within this target's caps."""
        return sse_payloads(resp, max_line_bytes=self.max_response_bytes, max_total_bytes=self.max_stream_bytes)

    async def generate(
        self,
        session: aiohttp.ClientSession,
        path: str,
        body: Mapping[str, Any],
        spec: RequestSpec,
        exchange: Exchange,
        absorb: Absorb,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """POST a generation request and fold its answer into `exchange` with `absorb`: each
        stream chunk as it comes, or each item of a whole answer (a list for n > 1, one object
        for n == 1). A non-2xx answer is `BadStatus` with the server's (bounded) error text."""
        async with self.post(session, path, json=body, headers=headers) as resp:
            exchange.http_status = resp.status
            if resp.status >= 300:
                raise BadStatus(resp.status, await read_error(resp))
            if spec.stream:
                async for chunk in self.stream(resp):
                    absorb(exchange, chunk, position=0, streamed=True)
                exchange.require_finished(spec.n)
                return
            raw = await self.read(resp)
        data = parse_json(raw, path)
        for position, item in enumerate(data if isinstance(data, list) else [data]):
            absorb(exchange, item, position=position, streamed=False)


def split_credentials(base_url: str) -> tuple[str, str | None]:
    """The URL without its `user:password@`, and the Basic Authorization value they spell."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise UsageError(f"target URL must start with http:// or https://, got {one_line(base_url)[:100]!r}")
    try:
        parts = urllib.parse.urlsplit(base_url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as e:
        raise UsageError(f"target URL is not a URL: {e}") from None
    if parts.query or parts.fragment:
        raise UsageError("target URL must not have a query or a fragment (give the server's root URL)")
    if not parts.hostname:
        raise UsageError("target URL has no host")
    if parts.username is None and parts.password is None:
        return base_url, None
    host = parts.netloc.rpartition("@")[2]
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", "")), f"Basic {token}"


def _check_header(name: str, value: str) -> None:
    # A header is one line: a name of token characters, a value without CR or LF (which would
    # start another header or the body).
    if not name or any(c in name for c in ' \t\r\n:"(),/;<=>?@[\\]{}') or not name.isascii() or not name.isprintable():
        raise UsageError(f"not a valid header name: {one_line(name)[:60]!r}")
    if any(c in value for c in "\r\n\x00"):
        raise UsageError(f"the value of header {name} holds a line break")


def auth_headers(api_key: str | None = None, headers: Mapping[str, str] | None = None,
                 header_lines: tuple[str, ...] | list[str] = ()) -> dict[str, str]:
    """The headers to send to a server behind auth, from what a user gives on the command line.

    `api_key` becomes `Authorization: Bearer KEY`; each of `header_lines` is `Name: value`
    (as `curl -H` takes it); `headers` are added as they are. A header line that is not
    `Name: value` is a UsageError with one line (which never repeats the value).

    >>> auth_headers("sk-1", header_lines=["X-Org: lab"])
    {'Authorization': 'Bearer sk-1', 'X-Org': 'lab'}
    """
    out: dict[str, str] = {}
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    for line in header_lines:
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise UsageError("--header wants 'Name: value' (a colon between the name and the value)")
        out[name.strip()] = value.strip()
    out.update(headers or {})
    for name, value in out.items():
        _check_header(name, value)
    return out


async def read_body(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """Read a whole body, but never more than `limit` bytes: past it, `TooLarge`.

    The connection of a body left half-read is closed, not reused, when the response is released.
    """
    if resp.content_length is not None and resp.content_length > limit:
        raise TooLarge(f"the answer is {resp.content_length} bytes, over the {_size(limit)} cap (max_response_bytes)")
    buf = bytearray()
    async for chunk in resp.content.iter_chunked(64 << 10):
        buf += chunk
        if len(buf) > limit:
            raise TooLarge(f"the answer is over the {_size(limit)} cap (max_response_bytes)")
    return bytes(buf)


async def read_error(resp: aiohttp.ClientResponse) -> str:
    """The start of an error answer's body as text, whatever its bytes: a non-UTF-8 or endless
    body still gives its status and an excerpt. A body cut mid-way gives what came."""
    buf = bytearray()
    try:
        async for chunk in resp.content.iter_chunked(16 << 10):
            buf += chunk
            if len(buf) >= _ERROR_READ_BYTES:
                break
    except (aiohttp.ClientError, TimeoutError):
        pass  # the status is the news; a body cut short still says what it said so far
    return bytes(buf[:_ERROR_READ_BYTES]).decode("utf-8", errors="replace")


def _refuse_nan(name: str) -> float:
    if name == "NaN":
        raise ValueError("NaN is not a number a server may answer")
    return -math.inf if name.startswith("-") else math.inf


def parse_json(raw: bytes | str, what: str) -> Any:
    """Parse an answer's JSON; anything that is not plain JSON is one `BadReply` naming `what`.

    Non-UTF-8 bytes, a syntax error, nesting deeper than Python's recursion limit, an integer
    past Python's 4,300-digit limit and NaN all say so in one line; +-Infinity stand (a
    masked token's logprob is -inf).
    """
    if isinstance(raw, bytes | bytearray):
        raw = bytes(raw).decode("utf-8", errors="replace")
    try:
        return json.loads(raw, parse_constant=_refuse_nan)
    except RecursionError:
        raise BadReply(f"{what} answered JSON nested too deeply to read") from None
    except ValueError as e:
        reason = e.msg if isinstance(e, json.JSONDecodeError) else str(e).split(";")[0]
        raise BadReply(f"{what} answered something that is not JSON ({reason}): {one_line(raw[:60])!r}") from None


async def sse_payloads(
    resp: aiohttp.ClientResponse,
    *,
    max_line_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    max_total_bytes: int = DEFAULT_MAX_STREAM_BYTES,
) -> AsyncIterator[Any]:
    """Yield the JSON payload of each `data:` line of a server-sent-event stream.

    Ends at `data: [DONE]` or at the end of the body (`Exchange.require_finished` then tells a
    finished stream from a cut one). Lines are split here rather than with aiohttp's line
    reader, whose line-length cap a cumulative top-k stream can exceed. Each byte is scanned
    for a newline once (a line arriving in many chunks is never rescanned from its start), a
    line longer than `max_line_bytes` or a stream longer than `max_total_bytes` is `TooLarge`.
    """
    buf = bytearray()
    total = 0
    async for chunk in resp.content.iter_any():
        total += len(chunk)
        if total > max_total_bytes:
            raise TooLarge(f"the stream is over the {_size(max_total_bytes)} cap (max_stream_bytes)")
        search = len(buf)  # what came before holds no newline: only the new bytes need a look
        buf += chunk
        start = 0
        while (nl := buf.find(b"\n", search)) >= 0:
            line = bytes(buf[start:nl]).strip()
            start = search = nl + 1
            if not line.startswith(b"data:"):
                continue  # blank separators, comments and `event:` lines carry nothing we use
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            yield parse_json(data, "a stream chunk")
        del buf[:start]
        if len(buf) > max_line_bytes:
            raise TooLarge(f"a stream line is over the {_size(max_line_bytes)} cap (max_response_bytes)")


def _size(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n} bytes"


# The most points a /coverage answer may hold: the reference engine's map is at most 2**32 points
# (a 16-bit edge in a 16-bit step context) and a campaign reaches some tens of thousands; an
# answer past this is no coverage, not a memory hog.
MAX_COVERAGE_POINTS = 1 << 20


def parse_coverage(data: Any) -> dict[int, int]:
    """A `/coverage` answer (`{"points": {"<point>": hits}}`, the reference engine's `--coverage`)
    as {point: hits}; anything else, one malformed entry or more than `MAX_COVERAGE_POINTS`
    included, is {}: a server's word is untrusted, and bad coverage is no coverage, never a crash.

    >>> parse_coverage({"points": {"12": 3, "7": 1}}), parse_coverage({"points": {"x": 1}}), parse_coverage([])
    ({12: 3, 7: 1}, {}, {})
    >>> parse_coverage({"points": {"12": True}}), parse_coverage({"points": {"-1": 2}})
    ({}, {})
    """
    points = data.get("points") if isinstance(data, dict) else None
    if not isinstance(points, dict) or len(points) > MAX_COVERAGE_POINTS:
        return {}
    out: dict[int, int] = {}
    for key, hits in points.items():
        # Digits only, at most 12 (a point is ~25 bits): no sign, no '1_000', no 4,300-digit int.
        if not (isinstance(key, str) and 0 < len(key) <= 12 and key.isascii() and key.isdigit()):
            return {}
        if isinstance(hits, bool) or not isinstance(hits, int) or not 0 <= hits < 1 << 62:
            return {}
        out[int(key)] = hits
    return out


# Labels whose values split a counter into parts a meter reads on their own (`engines.spec.Meter`
# names one as `name{label=value}`): where a prompt's cached tokens came from (SGLang's
# `cached_tokens_total{cache_source="device"|"host"|"storage"}`: the host tier's hits), which
# request feature a retraction carried over (the reference engine's retractions by feature), which
# server of a prefill/decode pair counted it (the reference pair's router labels each one's series
# with its `role`: "prefill", "decode").
SPLIT_LABELS = ("cache_source", "feature", "role")
_SPLIT = re.compile(r'\b(' + "|".join(SPLIT_LABELS) + r')="([^"\\]*)"')


def parse_prometheus(text: str) -> dict[str, float]:
    """Parse Prometheus exposition text into {metric name: value}, summing over label sets.

    Labels are dropped because the engines label every series with the model name, and the
    fuzzer wants one number per metric (a counter's delta around a run); a label of
    `SPLIT_LABELS` also keeps its part, as `name{label=value}`.

    >>> parse_prometheus('# TYPE x counter\\nx{model="a"} 3\\nx{model="b"} 4\\ny 1.5e2\\n')
    {'x': 7.0, 'y': 150.0}
    >>> parse_prometheus('c{model="a",cache_source="host"} 3\\nc{model="a",cache_source="device"} 4\\n')
    {'c': 7.0, 'c{cache_source=host}': 3.0, 'c{cache_source=device}': 4.0}
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
        if line[name_end] == "{":
            for label, part in _SPLIT.findall(line[name_end : line.rfind("}")]):
                key = f"{name}{{{label}={part}}}"
                out[key] = out.get(key, 0.0) + value
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


def make_target(
    engine: str, base_url: str, *, headers: Mapping[str, str] | None = None, **opts: Any
) -> Target:
    """Build the adapter for `engine`; `headers` go with every request it makes (auth), `opts`
    to its constructor (`model=` for openai, `max_response_bytes=`, `max_stream_bytes=`)."""
    cls = get_target_class(engine)
    try:
        return cls(base_url, headers=headers, **opts)  # type: ignore[call-arg]
    except TypeError as e:
        raise UsageError(f"bad option for engine {engine!r}: {e}") from None
