"""The runner: the only place that awaits the network during a run.

It fires a scenario's requests at their offsets on one event loop, through one aiohttp session,
and records a `RunHistory`: every request ends as a `RequestRecord`, whatever the server does.

    async with Runner(make_target("reference", url), RunConfig(top_k=5)) as r:
        load = await r.run(scenario, run=0, label="load")
        alone = await r.run_alone(scenario.requests[0], run=0)   # on a flushed cache

How a request ends, and what its record says:

| what happened                                  | status             |
|------------------------------------------------|--------------------|
| a complete answer                              | OK                 |
| a non-2xx answer (or an error inside a stream) | HTTP_ERROR         |
| a 2xx answer that cannot be understood         | MALFORMED          |
| no complete answer within `request_timeout_s`  | TIMEOUT            |
| refused, reset, cut mid-answer, server died    | CONNECTION_ERROR   |
| cut on purpose at `cancel_after_ms`            | CANCELLED          |
| cut on purpose at `cancel_at_prefill`          | CANCELLED          |
| cut (or never sent) at the runner's `stop_at`  | CANCELLED          |

The last four are indeterminate: partial output is kept, but never counts as corruption.

Deadlines: `request_timeout_s` (with `paced`, the timeout the measured speed gives the run,
`servefuzz.pace`, never below it) bounds each request as a whole, from the moment it is handed to
aiohttp to its last byte (a server that drips its answer a byte a second is cut there like one
that never answers). `stop_at(when, why)` sets one deadline for everything the runner does (the
campaign's time budget): a request still in flight then is cut and recorded as CANCELLED, one
not yet sent is recorded unsent, and a run or a call about the server begun after it (or cut by
it) raises `DeadlinePassed`, so that the caller stops where it is instead of waiting.

Timing: each request is handed to aiohttp at its offset from the start of the run. The runner
sleeps until `spin_ms` before the offset and then spins, because the event loop's timer
resolution and wake-up jitter are about a millisecond, which is the scale of the batching
windows the fuzzer aims at. All times are `time.perf_counter()` milliseconds from run start.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Self, TypeVar

import aiohttp

from servefuzz.errors import TargetError, UsageError
from servefuzz.history import RequestRecord, RunHistory, Status
from servefuzz.natural import MARK, chat_tail, corpus_text, text_source
from servefuzz.pace import PaceMeter
from servefuzz.targets.base import (
    BadReply,
    BadStatus,
    CutInPrefill,
    Exchange,
    Target,
    TargetInfo,
    cut_in_prefill,
    describe_error,
    unsupported,
)
from servefuzz.workload import RequestSpec, Scenario, TextSource

__all__ = ["DeadlinePassed", "RunConfig", "Runner"]

_R = TypeVar("_R")


@dataclass(frozen=True)
class RunConfig:
    """How the runner talks to a target.

    `max_connections` caps open connections; keep it above a scenario's peak concurrency, or
    requests queue inside the client and reach the server later than their send time says.
    """

    # With `paced`, the floor of a timeout that scales with the target's measured speed
    # (`servefuzz.pace`); without, the timeout itself (what `--request-timeout` gives).
    request_timeout_s: float = 120.0
    paced: bool = False
    # Read natural text in the target's own tokens when the runner starts (`servefuzz.natural`):
    # `text`, where the target's model has a real tokenizer, for the prompts of a campaign.
    natural_text: bool = False
    connect_timeout_s: float = 5.0
    max_connections: int = 1024
    top_k: int = 5
    spin_ms: float = 1.0
    # How long an idle pooled connection is kept for reuse. Below the servers' own idle limit
    # (vLLM's uvicorn closes after 5 s: VLLM_HTTP_TIMEOUT_KEEP_ALIVE): with aiohttp's 15 s, a
    # request sent just as the server closes the connection fails with "Can not write request
    # body" before the server ever saw it, and a campaign on vLLM recorded that as an
    # indeterminate connection cut in a reference run (2026-12-01).
    keepalive_s: float = 2.0
    # A request's isolation reference (its answer alone on a flushed cache) is taken once per
    # runner and reused for every later request that is the same computation there
    # (`RequestSpec.answer_key`; `Runner.reference`). False sends every reference again.
    reuse_references: bool = True

    @classmethod
    def timing_out(
        cls, request_timeout_s: float | None, *, reuse_references: bool = True, natural_text: bool = False
    ) -> RunConfig:
        """The config of a `--request-timeout` as given: that timeout, or None (not given): paced
        above the default floor."""
        if request_timeout_s is None:
            return cls(paced=True, reuse_references=reuse_references, natural_text=natural_text)
        return cls(request_timeout_s=request_timeout_s, reuse_references=reuse_references, natural_text=natural_text)

    def __post_init__(self) -> None:
        for name in ("request_timeout_s", "connect_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        if self.top_k < 0 or self.spin_ms < 0 or self.keepalive_s < 0:
            raise ValueError("top_k, spin_ms and keepalive_s must be >= 0")


# References a runner keeps for reuse (`Runner.reference`): a few MB of token ids and logprobs.
_MAX_REFERENCES = 4096


class DeadlinePassed(Exception):
    """The runner's `stop_at` deadline has passed: it starts nothing more, and a call about the
    server in flight at it was cut. Not a `ServefuzzError`: a campaign stops at its budget here,
    and one that escapes to the command line is a bug of ours (exit 4), never a finding or a
    bad flag. The message says why the deadline was set."""


class Runner:
    """Runs scenarios against one target; an async context manager owning one HTTP session.

    Entering checks that the target answers its server-info call and keeps that as `info`;
    a target that cannot be used at all raises `TargetError` with one line saying why.
    """

    def __init__(self, target: Target, config: RunConfig = RunConfig()) -> None:
        self.target = target
        self.config = config
        self._session: aiohttp.ClientSession | None = None
        self.info: TargetInfo | None = None
        self._stop_at: float | None = None  # time.monotonic(); None: no deadline
        self._stop_why = ""
        self._flushes = False  # whether the last flush emptied the cache (the engine has one)
        self._no_coverage = False  # the target said it has no engine coverage (`engine_coverage`)
        self._references: dict[RequestSpec, RequestRecord] = {}
        self.meter = PaceMeter()
        # Paced but not yet measured: the whole-request timeouts in flight, each restarted
        # whenever a request completes (`pace`: the server answers, so none of them is hung yet).
        self._unmeasured: set[asyncio.Timeout] = set()
        # Natural text for prompts (`RunConfig.natural_text`); None: random ids.
        self.text: TextSource | None = None

    def stop_at(self, when: float | None, why: str) -> None:
        """From `when` (a `time.monotonic()` instant; None: never) on, start nothing and cut what
        is in flight; `why` goes into the cut records and the `DeadlinePassed` raised."""
        self._stop_at, self._stop_why = when, why

    @property
    def stopped(self) -> str | None:
        """Why the runner starts nothing more (its deadline has passed); None while it may."""
        return self._stop_why if self._stop_at is not None and time.monotonic() >= self._stop_at else None

    def _deadline(self) -> float | None:
        """The `stop_at` deadline on the event loop's clock (what `asyncio.timeout_at` reads),
        which need not be `time.monotonic()` itself (another loop may count from elsewhere)."""
        if self._stop_at is None:
            return None
        return asyncio.get_running_loop().time() + (self._stop_at - time.monotonic())

    async def __aenter__(self) -> Self:
        c = self.config
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=c.max_connections, limit_per_host=c.max_connections, keepalive_timeout=c.keepalive_s
            ),
            # Paced, each request's own deadline is the limit (`_exchange`); aiohttp's is none.
            timeout=aiohttp.ClientTimeout(total=None if c.paced else c.request_timeout_s,
                                          sock_connect=c.connect_timeout_s),
        )
        try:
            self.info = await self.server_info()
            if c.natural_text:
                self.text = await self.natural_text()
        except BaseException:
            await self._session.close()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use the Runner inside `async with`")
        return self._session

    # --- calls about the server, outside the timed part --------------------------------------

    async def server_info(self) -> TargetInfo:
        return await self._call("/server_info", lambda: self.target.server_info(self.session))

    async def flush(self) -> bool:
        """Empty the target's prefix cache; False when the engine has no flush."""
        self._flushes = await self._call("/flush_cache", lambda: self.target.flush_cache(self.session))
        return self._flushes

    async def metrics(self) -> dict[str, float]:
        return await self._call("/metrics", lambda: self.target.metrics(self.session))

    async def engine_coverage(self) -> dict[int, int]:
        """The engine's cumulative coverage map (the reference engine's `--coverage`), {} where
        there is none. A target that said it has none (a 404) is not asked again: its answer
        would be the same every run."""
        read = getattr(self.target, "engine_coverage", None)
        if read is None or self._no_coverage:
            return {}
        got: dict[int, int] | None = await self._call("/coverage", lambda: read(self.session))
        if got is None:
            self._no_coverage = True
        return got or {}

    @property
    def coverage_context_free(self) -> bool:
        """Whether the target's coverage points are edges alone, with no context of the engine's
        own (`targets.base.CoverageSource`): the trial then folds in the run's."""
        source = getattr(self.target, "coverage_source", None)
        return bool(getattr(source, "context_free", False))

    async def _call(self, what: str, call: Callable[[], Awaitable[_R]]) -> _R:
        """Await a call about the server; any failure means the target cannot be used.

        Past the `stop_at` deadline the call is not made, and one in flight at it is cut: both
        raise `DeadlinePassed` (the server is not at fault, so it is no `TargetError`).
        """
        if (why := self.stopped) is not None:
            raise DeadlinePassed(why)
        cut = asyncio.timeout_at(self._deadline())
        try:
            async with cut:
                return await self._call_once(what, call)
        except TimeoutError:
            # _call_once turns every timeout of its own into a TargetError: this one is the deadline's.
            if cut.expired():
                raise DeadlinePassed(self._stop_why) from None
            raise

    async def _call_once(self, what: str, call: Callable[[], Awaitable[_R]]) -> _R:
        """`_call` without the deadline.

        A server that closed a pooled keep-alive connection (llama.cpp does after a stream)
        fails the next call on it as "server disconnected" although it is alive and well: such
        a call is made once more, on a fresh connection, before the target counts as gone.
        """
        url = self.target.base_url
        try:
            try:
                return await call()
            except aiohttp.ServerDisconnectedError:
                return await call()
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise TargetError(f"cannot reach {url}: {describe_error(e)}") from None
        except BadStatus as e:
            raise TargetError(f"cannot use {url}: {what} answered {e}") from None
        except BadReply as e:
            raise TargetError(f"cannot use {url}: {e}") from None

    async def natural_text(self) -> TextSource | None:
        """The corpus (`natural.corpus_text`) in the target's tokens and its chat template's
        tail, where the server tokenizes text and its tokenizer is a trained one; else None."""
        text = corpus_text()
        tokenize = getattr(self.target, "tokenize", None)
        if text is None or tokenize is None:
            return None
        try:
            tokens = await self._call("/tokenize", lambda: tokenize(self.session, text))
        except TargetError:
            return None  # no /tokenize: prompts stay random ids
        try:
            tail = chat_tail(await self._call("/tokenize", lambda: tokenize(self.session, MARK, chat=True)),
                             await self._call("/tokenize", lambda: tokenize(self.session, MARK)))
        except TargetError:
            tail = None  # no chat template: the text alone
        return text_source(text, tokens, tail)

    def timeout_s(self, requests: Sequence[RequestSpec]) -> float:
        """The request timeout of a run of `requests`: the configured one, or paced, what the
        measured speed gives them (`Pace.timeout_s`), never below the configured floor (until
        the speed is measured, the floor, restarted at each completion: `pace`)."""
        floor = self.config.request_timeout_s
        pace = self.meter.pace if self.config.paced else None
        return floor if pace is None else pace.timeout_s(requests, floor_s=floor)

    # --- timed runs ----------------------------------------------------------------------------

    async def run(self, scenario: Scenario, *, run: int, label: str = "load", cold: bool = False) -> RunHistory:
        """Fire every request of `scenario` at its offset; return when all have ended.

        `cold`: the requests are clean references (see `Exchange.cold`). Past the `stop_at`
        deadline nothing is sent: `DeadlinePassed`."""
        if (why := self.stopped) is not None:
            raise DeadlinePassed(why)
        refused = next((why for s in scenario.requests if (why := unsupported(self.target, s)) is not None), None)
        if refused is not None:
            # Refused before anything is sent: the adapter would refuse each such request, and
            # a refusal inside a run would be recorded as the server's answer.
            raise UsageError(refused)
        served = () if self.info is None else self.info.adapters
        missing = next((s for s in scenario.requests if s.adapter is not None and s.adapter not in served), None)
        if missing is not None and self.info is not None:
            # Refused before anything is sent, as above: the server would refuse each such request,
            # and its refusal would be recorded as its answer (a relaunch without the adapters, a
            # finding replayed against another server).
            raise UsageError(
                f"request {missing.id} runs under LoRA adapter {missing.adapter}, which this server does not serve "
                f"(it serves: {', '.join(served) or 'none'})"
            )
        started_at = datetime.now(UTC).isoformat(timespec="milliseconds")
        # A garbage collection pauses the loop for up to ~20 ms here, delaying every send due
        # meanwhile: none during the run. What is garbage only by cycle waits until the run ends,
        # which bounds it by the scenario's size, and the collector's next turn after it frees it.
        # (No full collection before each run: it walks the whole heap, and it was 60% of a
        # campaign's client CPU and more in a process that holds much, such as a test worker.)
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return await self._run(scenario, run, label, started_at, cold)
        finally:
            if was_enabled:
                gc.enable()

    async def _run(self, scenario: Scenario, run: int, label: str, started_at: str, cold: bool) -> RunHistory:
        session = self.session
        t0 = time.perf_counter()

        def clock() -> float:
            return (time.perf_counter() - t0) * 1000.0

        limit = self.timeout_s(scenario.requests)
        # One task per request, each waiting for its own offset: the request then leaves in the
        # same loop step as its wait ends. A TaskGroup, so that a run abandoned from outside
        # (Ctrl-C) cancels its requests too.
        async with asyncio.TaskGroup() as tg:
            tasks = [
                tg.create_task(self._exchange(session, spec, t0, clock, run, label, cold, limit))
                for spec in scenario.requests
            ]
        records = tuple(t.result() for t in tasks)
        self.meter.observe(records)
        meta: dict[str, object] = {"started_at": started_at, "engine": self.target.engine}
        if limit != self.config.request_timeout_s:
            meta["request_timeout_s"] = round(limit, 1)  # what a hang in this run waited for
        return RunHistory(run=run, label=label, records=records, meta=meta)

    async def run_alone(
        self, spec: RequestSpec, *, run: int, label: str = "alone", flush: bool = True
    ) -> RequestRecord:
        """Send one request with nothing else in flight, on a flushed cache unless told not to.

        A target without a flush (the openai dialect) runs it on whatever cache it has. A
        flushed run is a clean reference, and says so to the adapter (`Exchange.cold`).
        """
        if flush:
            await self.flush()
        alone = Scenario(seed=0, requests=(dataclasses.replace(spec, offset_ms=0.0),))
        return (await self.run(alone, run=run, label=label, cold=flush)).records[0]

    async def reference(self, spec: RequestSpec) -> tuple[RequestRecord, bool]:
        """`spec`'s isolation reference, its answer alone on a flushed cache, and whether it was
        sent for it. A request this runner already sent alone with the same `answer_key` is the
        same computation on a flushed cache, so its answer is reused under `spec`'s id (nothing
        sent) where the reference was a clean one: answered in full, on a target whose flush
        emptied the cache. Half the references of a campaign repeat an earlier one (mutants keep
        their parents' requests, bursts repeat a request; docs/benchmarks.md). Confirmation does
        not come here: its references are fresh by design (`trial.reproduce`)."""
        key = spec.answer_key if self.config.reuse_references else None
        kept = self._references.get(key) if key is not None else None
        if kept is not None:
            return dataclasses.replace(kept, request_id=spec.id), False
        record = await self.run_alone(spec, run=0)
        if key is not None and record.ok and self._flushes:
            if len(self._references) >= _MAX_REFERENCES:
                del self._references[next(iter(self._references))]  # the oldest
            self._references[key] = record
        return record, True

    def _answered(self, limit: float, stop: float | None) -> None:
        """A request completed: the server answers, so every unmeasured request in flight gets
        its floor again from now (never past the runner's deadline)."""
        again = asyncio.get_running_loop().time() + limit
        if stop is not None:
            again = min(again, stop)
        for t in self._unmeasured:
            when = t.when()
            if when is not None and when < again:
                t.reschedule(again)

    async def _wait_until(self, deadline: float) -> None:
        spin_s = self.config.spin_ms / 1000.0
        remaining = deadline - time.perf_counter()
        if remaining > spin_s:
            await asyncio.sleep(remaining - spin_s)
        while time.perf_counter() < deadline:
            pass  # spin: the last millisecond is below the event loop's timer resolution

    async def _exchange(
        self,
        session: aiohttp.ClientSession,
        spec: RequestSpec,
        t0: float,
        clock: Callable[[], float],
        run: int,
        label: str,
        cold: bool,
        limit: float,
    ) -> RequestRecord:
        ex = Exchange(clock=clock, cold=cold)
        loop = asyncio.get_running_loop()
        stop = self._deadline()
        due = t0 + spec.offset_ms / 1000.0
        if stop is None or loop.time() + (due - time.perf_counter()) < stop:
            await self._wait_until(due)
        if stop is not None and max(loop.time(), loop.time() + (due - time.perf_counter())) >= stop:
            # Due at or after the deadline: never sent, and said so at once (nothing to wait for).
            return RequestRecord(request_id=spec.id, run=run, label=label, status=Status.CANCELLED,
                                 scheduled_ms=spec.offset_ms, end_ms=clock(), error=f"not sent: {self._stop_why}")
        status, error, http_status = Status.OK, None, None
        # One deadline for the whole request, first byte to last: the server's answer and the
        # adapter's work on it (a vllm n > 1 is n requests). aiohttp's own total timeout is the
        # same length and stays as a backstop; either way the request ends in TIMEOUT.
        own = loop.time() + limit
        by_stop = stop is not None and stop < own
        whole = asyncio.timeout_at(stop if stop is not None and by_stop else own)
        # A cut on the clock, unless the adapter cuts it in the prefill (`cut_in_prefill`), where
        # the engine says it got to: a clock lands wherever the machine's load puts the prefill.
        clocked = spec.cancel_after_ms is not None and not cut_in_prefill(self.target, spec)
        cut = asyncio.timeout(spec.cancel_after_ms / 1000.0 if clocked and spec.cancel_after_ms is not None else None)
        # Paced but unmeasured: the floor restarts at every completion (`pace`, `_answered`).
        restarts = self.config.paced and not by_stop and self.meter.pace is None
        sent_ms = clock()
        try:
            async with whole:
                if restarts:
                    self._unmeasured.add(whole)
                try:
                    async with cut:
                        await self.target.send(session, spec, top_k=self.config.top_k, exchange=ex)
                finally:
                    self._unmeasured.discard(whole)
        except CutInPrefill as e:
            status, error = Status.CANCELLED, str(e)
        except TimeoutError as e:  # before ClientError: aiohttp's timeouts are both
            if cut.expired():
                status, error = Status.CANCELLED, "cancelled by the client"
            elif whole.expired() and (by_stop or (stop is not None and loop.time() >= stop)):
                status, error = Status.CANCELLED, f"cut: {self._stop_why}"
            elif whole.expired() and restarts:
                status, error = Status.TIMEOUT, (f"no complete answer, and no other request answered either, "
                                                 f"for {limit:g} s")
            elif whole.expired():
                status, error = Status.TIMEOUT, f"no complete answer within {limit:g} s"
            else:
                status, error = Status.TIMEOUT, describe_error(e)
        except BadStatus as e:
            status, error, http_status = Status.HTTP_ERROR, str(e), e.status
        except BadReply as e:
            status, error = Status.MALFORMED, str(e)
        except (aiohttp.ClientError, OSError) as e:
            status, error = Status.CONNECTION_ERROR, describe_error(e)
        except Exception as e:  # noqa: BLE001 - a record must survive even an adapter's bug
            status, error = Status.MALFORMED, f"unexpected {type(e).__name__}: {e}"
        if status is Status.OK:
            self._answered(limit, stop)
        return RequestRecord(
            request_id=spec.id,
            run=run,
            label=label,
            status=status,
            scheduled_ms=spec.offset_ms,
            sent_ms=sent_ms,
            first_token_ms=ex.first_token_ms,
            end_ms=clock(),
            choices=ex.choices(),
            cached_tokens=ex.cached_tokens,
            prompt_tokens=ex.prompt_tokens,
            http_status=http_status if http_status is not None else ex.http_status,
            error=error,
        )
