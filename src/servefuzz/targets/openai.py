"""The OpenAI completions dialect: `POST /v1/completions` with a token-id prompt.

Spoken by vLLM, llama.cpp's server, the reference engine and others. The standard answer names
output tokens by their *strings* (`logprobs.tokens`, `top_logprobs` dicts keyed by string), which
loses ids; so the request also asks for `return_token_ids: true` (a `token_ids` list per choice,
as vLLM and the reference engine give). A dialect whose servers accept vLLM's
`return_tokens_as_token_ids` sets `spell_token_ids`, and then tokens and top-k keys come spelled
`token_id:123`, which keeps the ids of the top-k alternatives too. Whatever the server gives is
used; ids are exact whenever the server provides them.

    >>> t = OpenAITarget("http://127.0.0.1:8000", model="tiny")
    >>> b = t.body(RequestSpec("r01", 0.0, (5, 6), max_tokens=3), top_k=5, model="tiny")
    >>> b["prompt"], b["temperature"], b["logprobs"]
    ([5, 6], 0.0, 5)

The engine has no cache flush in this dialect; `flush_cache` answers False.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import aiohttp

from servefuzz.history import TopLogprobs
from servefuzz.targets.base import (
    BadReply,
    BadStatus,
    Exchange,
    HttpTarget,
    ReproDialect,
    TargetInfo,
    in_band_error,
    parse_json,
    read_error,
    register,
    reply_shape,
)
from servefuzz.workload import RequestSpec

__all__ = ["OpenAITarget"]

_ID_PREFIX = "token_id:"


@register("openai")
class OpenAITarget(HttpTarget):
    """A server with an OpenAI-compatible `/v1/completions`; `model` defaults to the first
    model `/v1/models` lists (looked up once, by `server_info`, before any timed request)."""

    # Ask for `return_tokens_as_token_ids` (vLLM accepts it; a strict server may reject it).
    spell_token_ids: ClassVar[bool] = False
    repro: ClassVar[ReproDialect | None] = ReproDialect("openai", "/v1/completions")

    def __init__(self, base_url: str, *, model: str | None = None, **http: Any) -> None:
        super().__init__(base_url, **http)
        self.model = model

    def repro_body(self, spec: RequestSpec, *, top_k: int, model: str | None) -> dict[str, Any]:
        body = self.body(spec, top_k=top_k, model=model or "")
        # None: the script asks /v1/models, as the adapter does. A LoRA adapter is the model.
        body["model"] = spec.adapter or model
        return body

    def body(self, spec: RequestSpec, *, top_k: int, model: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            # vLLM serves a LoRA adapter under its own model name (`--lora-modules NAME=PATH`).
            "model": self.adapter_of(spec) or model,
            "prompt": list(spec.prompt_ids),
            "max_tokens": spec.max_tokens,
            "temperature": spec.temperature,
            "n": spec.n,
            "logprobs": top_k,
            "stream": spec.stream,
            "ignore_eos": spec.ignore_eos,
            "return_token_ids": True,
        }
        if spec.seed is not None:
            body["seed"] = spec.seed
        salt = self.salt_of(spec)
        if salt is not None:
            body["cache_salt"] = salt  # vLLM's top-level field (PR #17045); SGLang's OpenAI API too
        choices = self.choices_of(spec)
        if choices is not None:
            # vLLM's structured outputs (vllm/entrypoints/openai/completion/protocol.py, 0.32):
            # the completion's text must be exactly one of the strings.
            body["structured_outputs"] = {"choice": list(choices)}
        if self.spell_token_ids:
            body["return_tokens_as_token_ids"] = True
        if spec.stream:
            body["stream_options"] = {"include_usage": True}  # usage (cached tokens) comes last
        return body

    async def send(
        self, session: aiohttp.ClientSession, spec: RequestSpec, *, top_k: int, exchange: Exchange
    ) -> None:
        model = self.model if self.model is not None else await self._first_model(session)
        body = self.body(spec, top_k=top_k, model=model)
        async with self.post(session, "/v1/completions", json=body) as resp:
            exchange.http_status = resp.status
            if resp.status >= 300:
                raise BadStatus(resp.status, await read_error(resp))
            if spec.stream:
                async for chunk in self.stream(resp):
                    _absorb(exchange, chunk, streamed=True)
                exchange.require_finished(spec.n)
                return
            raw = await self.read(resp)
        _absorb(exchange, parse_json(raw, "/v1/completions"), streamed=False)

    async def flush_cache(self, session: aiohttp.ClientSession) -> bool:
        return False

    async def server_info(self, session: aiohttp.ClientSession) -> TargetInfo:
        models = await self._models(session)
        if self.model is None:
            self.model = str(models[0]["id"])
        entry = next((m for m in models if m.get("id") == self.model), {})
        args: dict[str, Any] = {"model": self.model}
        if "max_model_len" in entry:  # vLLM's context length
            args["max_model_len"] = entry["max_model_len"]
        return TargetInfo(
            engine=self.engine, base_url=self.base_url, auth=self.authenticated,
            version=await self._version(session), server_args=args,
        )

    async def _first_model(self, session: aiohttp.ClientSession) -> str:
        self.model = str((await self._models(session))[0]["id"])
        return self.model

    async def _models(self, session: aiohttp.ClientSession) -> list[Mapping[str, Any]]:
        d = await self.get_json(session, "/v1/models")
        with reply_shape("/v1/models"):
            models = [m for m in d["data"] if isinstance(m, Mapping) and "id" in m]
        if not models:
            raise BadReply("/v1/models lists no model")
        return models

    async def _version(self, session: aiohttp.ClientSession) -> str | None:
        # vLLM answers /version; other servers need not, and that is no reason to fail.
        try:
            d = await self.get_json(session, "/version")
        except (BadStatus, BadReply):
            return None
        return str(d["version"]) if isinstance(d, Mapping) and "version" in d else None


def _absorb(exchange: Exchange, data: Any, *, streamed: bool) -> None:
    """Fold a completion (or one stream chunk: deltas, then a usage-only chunk) into the exchange."""
    with reply_shape("/v1/completions"):
        in_band_error(exchange, data)
        for c in data.get("choices") or ():
            draft = exchange.choice(int(c["index"]))
            lp = c.get("logprobs") or {}
            tokens = [str(t) for t in lp.get("tokens") or ()]
            ids = c.get("token_ids")
            ids = [int(t) for t in ids] if ids is not None else [_token_id(t) for t in tokens]
            draft.token_ids.extend(ids)
            draft.logprobs.extend(_opt_float(x) for x in lp.get("token_logprobs") or ())
            draft.top_logprobs.extend(
                _top(alts, tokens[i] if i < len(tokens) else None, ids[i] if i < len(ids) else None)
                for i, alts in enumerate(lp.get("top_logprobs") or ())
            )
            draft.text += str(c.get("text") or "")
            if c.get("finish_reason") is not None:
                draft.finish_reason = str(c["finish_reason"])
            if streamed and ids:
                exchange.token_arrived()
        usage = data.get("usage")
        if usage:
            exchange.prompt_tokens = int(usage["prompt_tokens"])
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                exchange.cached_tokens = int(details["cached_tokens"])


def _token_id(token: str) -> int:
    if not token.startswith(_ID_PREFIX):
        raise BadReply(
            "the answer names tokens only by their text; the openai dialect needs a server that "
            "returns token ids (return_token_ids or return_tokens_as_token_ids)"
        )
    return int(token[len(_ID_PREFIX) :])


def _top(alts: Mapping[str, float] | None, chosen: str | None, chosen_id: int | None) -> TopLogprobs:
    """Top-k alternatives at one position as (id, logprob), best first.

    A key spelled `token_id:N` gives its id; a plain-text key equal to the chosen token gets the
    chosen id; any other plain-text key cannot be mapped to an id and is left out.
    """
    out: list[tuple[int, float]] = []
    for key, logprob in (alts or {}).items():
        if key.startswith(_ID_PREFIX):
            out.append((int(key[len(_ID_PREFIX) :]), float(logprob)))
        elif key == chosen and chosen_id is not None:
            out.append((chosen_id, float(logprob)))
    return tuple(sorted(out, key=lambda p: -p[1]))


def _opt_float(x: Any) -> float | None:
    return None if x is None else float(x)
