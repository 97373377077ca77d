"""vLLM's OpenAI server: the openai dialect plus what vLLM adds for servefuzz.

- `POST /reset_prefix_cache?reset_external=true` empties the prefix cache, and with the query
  parameter the KV connector's store too: with KV offloading (`--kv-offloading-size`) the plain
  call answers `{"success": true}` and leaves the CPU tier full, so a request's own earlier run
  is served from it after the "flush" (measured on 0.26.0 on the H200; the parameter reaches
  the connector's `reset_cache`, read in 0.26.0 and 0.32.0; a server that does not know it
  ignores it, and a server with no connector treats it as done). vLLM mounts the endpoint only
  when started with `VLLM_SERVER_DEV_MODE=1` (404 otherwise: then there is no flush, as in the
  openai dialect), and answers `{"success": false}` while any block is still held by a running
  request or an offload transfer, so a flush is retried `flush_attempts` times,
  `flush_interval_s` apart.
- `/metrics` carries `vllm:cache_config_info`, an info gauge whose *labels* are the resolved
  cache settings: the block size (servefuzz's page size) and the pool size come from there.
  The prefix-cache counters (`vllm:prefix_cache_queries_total`, `..._hits_total`) count tokens.
- `usage.prompt_tokens_details.cached_tokens` per request needs `--enable-prompt-tokens-details`.
- vLLM rejects `n > 1` at temperature 0 (400: "n must be 1 when using greedy sampling"), so a
  spec with `n > 1` goes out as n concurrent requests of n = 1, one per choice. The server args
  this adapter reports say so (`servefuzz_n_as_requests`): their disagreement means what it
  means for n identical requests in flight together, not for n choices forked from one prefill.
  A sampled spec goes out with its own n: vLLM forks it into n children, child i seeded with
  seed + i (`ParentRequest._get_child_sampling_params`), so each choice is a reproducible draw.

    >>> t = VLLMTarget("http://127.0.0.1:8000", model="tiny")
    >>> b = t.body(RequestSpec("r01", 0.0, (5, 6), max_tokens=3), top_k=5, model="tiny")
    >>> b["return_token_ids"], b["return_tokens_as_token_ids"]
    (True, True)
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import re
from typing import Any, ClassVar

import aiohttp

from servefuzz.errors import TargetError
from servefuzz.targets.base import (
    BadReply,
    BadStatus,
    Exchange,
    ReproDialect,
    TargetInfo,
    parse_json,
    read_error,
    register,
    reply_shape,
)
from servefuzz.targets.openai import OpenAITarget
from servefuzz.workload import RequestSpec

__all__ = ["VLLMTarget", "info_labels"]

# One `key="value"` pair of a Prometheus label set; a value may hold commas and escaped quotes.
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# The flush's query: the connector's tiers too (KV offloading's CPU tier), not the GPU pool alone.
FLUSH_PARAMS = {"reset_external": "true"}
_N_NOTE = "n > 1 at temperature 0 is sent as n concurrent requests of n = 1 (vLLM rejects n > 1 there)"


# How minimal_repro.py (reports.minimal) reads this dialect's answers and empties its cache.
_MINIMAL_TOKENS = '''def tokens(answer):  # /v1/completions: ids as token_ids, or "token_id:N" with return_tokens_as_token_ids
    return [tuple(c.get("token_ids") or [int(t.split(":", 1)[1]) for t in c["logprobs"]["tokens"]])
            for c in sorted(answer["choices"], key=lambda c: c["index"])]'''
_MINIMAL_FLUSH = '''def flush():  # reset_external empties the offloading connector's CPU tier too
    empty_cache("/reset_prefix_cache?reset_external=true")'''


@register("vllm")
class VLLMTarget(OpenAITarget):
    """A vLLM server (`python -m vllm.entrypoints.openai.api_server ...`)."""

    # vLLM spells top-k keys `token_id:N` on request, which keeps every alternative's id.
    spell_token_ids: ClassVar[bool] = True
    repro: ClassVar[ReproDialect | None] = ReproDialect("openai", "/v1/completions", "vllm", n_as_requests=True,
        minimal_tokens=_MINIMAL_TOKENS, minimal_flush=_MINIMAL_FLUSH)
    # What it sends that the plain dialect does not (its spec, engines/vllm.py, says it can):
    # `cache_salt` in the /v1/completions body: hashed into the first block's key
    # (vllm/v1/core/kv_cache_utils.py, 0.32), so different salts never share a cached block.
    # `structured_outputs={"choice": [...]}` (the grammar bitmask of vLLM #19493 / PR #19565).
    # A LoRA adapter is a model of its own in /v1/completions (`"model": NAME`, served under
    # `--enable-lora --lora-modules NAME=PATH`); /v1/models lists it with its base as `parent`.

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        flush_attempts: int = 50,
        flush_interval_s: float = 0.1,
        **http: Any,
    ) -> None:
        super().__init__(base_url, model=model, **http)
        self.flush_attempts = flush_attempts
        self.flush_interval_s = flush_interval_s

    async def send(
        self, session: aiohttp.ClientSession, spec: RequestSpec, *, top_k: int, exchange: Exchange
    ) -> None:
        if spec.n == 1 or spec.sampled:
            await super().send(session, spec, top_k=top_k, exchange=exchange)
            return
        one = dataclasses.replace(spec, n=1)
        parts = [_OneChoice(exchange, i) for i in range(spec.n)]
        send_one = super().send
        tasks = [asyncio.ensure_future(send_one(session, one, top_k=top_k, exchange=p)) for p in parts]
        try:
            await asyncio.gather(*tasks)
        finally:
            # One part failed, or the whole request was cut: the other parts go too.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            _gather_usage(exchange, parts)

    async def flush_cache(self, session: aiohttp.ClientSession) -> bool:
        for attempt in range(self.flush_attempts):
            if attempt:
                await asyncio.sleep(self.flush_interval_s)
            async with self.post(session, "/reset_prefix_cache", params=FLUSH_PARAMS) as resp:
                if resp.status == 404:
                    return False  # started without VLLM_SERVER_DEV_MODE=1
                if resp.status >= 300:
                    raise BadStatus(resp.status, await read_error(resp))
                body = parse_json(await self.read(resp), "/reset_prefix_cache")
            with reply_shape("/reset_prefix_cache"):
                if body["success"]:
                    return True
        raise TargetError(
            f"{self.base_url}/reset_prefix_cache still answered success=false after "
            f"{self.flush_attempts} tries (blocks held by running requests)"
        )

    async def server_info(self, session: aiohttp.ClientSession) -> TargetInfo:
        base = await super().server_info(session)
        async with self.get(session, "/metrics") as resp:
            if resp.status >= 300:
                raise BadStatus(resp.status, await read_error(resp))
            text = (await self.read(resp)).decode("utf-8", errors="replace")
        with reply_shape("/metrics"):
            cache = {k: _typed(v) for k, v in info_labels(text, "vllm:cache_config_info").items()}
        if not cache:
            raise BadReply("/metrics has no vllm:cache_config_info (is this a vLLM server?)")
        block_size = _opt_int(cache.get("block_size"))
        blocks = _opt_int(cache.get("num_gpu_blocks"))
        pool = _opt_int(cache.get("kv_cache_size_tokens"))
        if pool is None and block_size is not None and blocks is not None:
            pool = block_size * blocks
        adapters = tuple(str(m["id"]) for m in await self._models(session) if m.get("parent"))
        return dataclasses.replace(
            base,
            adapters=adapters,
            server_args={**base.server_args, **cache, "servefuzz_n_as_requests": _N_NOTE},
            page_size=block_size,
            max_total_tokens=pool,
        )


class _OneChoice(Exchange):
    """The exchange of one of the n requests a spec with n > 1 becomes.

    Its choice 0 *is* the parent's choice `index` (the same draft object), so tokens land in
    the parent as they arrive and a request cut mid-stream leaves its partial output there.
    """

    def __init__(self, parent: Exchange, index: int) -> None:
        super().__init__(clock=parent.clock, drafts={0: parent.choice(index)})
        self.parent = parent

    def token_arrived(self) -> None:
        self.parent.token_arrived()


def _gather_usage(exchange: Exchange, parts: list[_OneChoice]) -> None:
    statuses = [p.http_status for p in parts if p.http_status is not None]
    if statuses:
        exchange.http_status = max(statuses)  # an error status, if any part got one
    prompts = [p.prompt_tokens for p in parts if p.prompt_tokens is not None]
    if prompts:
        exchange.prompt_tokens = prompts[0]
    cached = [p.cached_tokens for p in parts if p.cached_tokens is not None]
    if cached:
        # The parts hit each other's blocks; the smallest count is what the request itself
        # found in the cache (the same reading as SGLang's n > 1 choices).
        exchange.cached_tokens = min(cached)


def info_labels(text: str, metric: str) -> dict[str, str]:
    """The labels of a Prometheus info gauge (`name{k="v",...} 1.0`) as a dict; {} if absent.

    >>> info_labels('# HELP x\\nvllm:cache_config_info{block_size="32",a="x,y"} 1.0\\n', "vllm:cache_config_info")
    {'block_size': '32', 'a': 'x,y'}
    """
    for line in text.splitlines():
        if line.startswith(metric + "{"):
            labels = line[len(metric) + 1 : line.rfind("}")]
            return {k: re.sub(r"\\(.)", r"\1", v) for k, v in _LABEL.findall(labels)}
    return {}


def _typed(value: str) -> Any:
    """Label values are strings; give back the ints, floats and booleans they spell (so that the
    flags a report rebuilds from them type-check: `gpu_memory_utilization` is a number)."""
    if value in ("True", "False"):
        return value == "True"
    if value.lstrip("-").isdigit() and len(value) <= 30:
        return int(value)
    try:
        number = float(value)
    except ValueError:
        return value
    return number if math.isfinite(number) and any(c.isdigit() for c in value) else value


def _opt_int(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None

