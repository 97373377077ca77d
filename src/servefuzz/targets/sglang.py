"""The SGLang native dialect: `POST /generate` with `input_ids`, `/flush_cache`, `/server_info`.

The reference engine speaks the same dialect and registers as `reference`.

Answer shapes (SGLang `io_struct.GenerateReqInput` and the tokenizer manager's output; recorded
examples and their sources are in `tests/targets/data/sglang/`):
- one dict per choice, a list of them when `sampling_params.n > 1`, each
  `{"text", "output_ids", "index"?, "meta_info": {...}}` (`index` only in n > 1 streams);
- `meta_info.output_token_logprobs`: `[logprob, token_id, text]` per output position;
  `meta_info.output_top_logprobs`: a list of such triples per position, best first (or null);
- `meta_info.finish_reason`: `{"type": "length" | "stop" | "abort", ...}` or null while running;
  an abort is an error the server reports in-band, never a finished answer;
- `meta_info.cached_tokens`, `prompt_tokens`, `completion_tokens`;
- streaming: `data: {...}` lines, then `data: [DONE]`. Depending on server flags each list in a
  chunk is cumulative (the default) or only the new part (`--incremental-streaming-output`;
  older `--stream-output` cut only `output_ids`); `completion_tokens` in the same chunk tells
  which, list by list (see `_merge`).

    >>> t = SGLangTarget("http://127.0.0.1:30000")
    >>> spec = RequestSpec("r01", 0.0, (5, 6, 7), max_tokens=4)
    >>> t.body(spec, top_k=5)["sampling_params"]
    {'temperature': 0.0, 'max_new_tokens': 4, 'ignore_eos': True, 'n': 1}
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import aiohttp

from servefuzz.errors import TargetError
from servefuzz.model_facts import ModelFacts
from servefuzz.targets.base import (
    BadReply,
    BadStatus,
    Exchange,
    HttpTarget,
    ReproDialect,
    TargetInfo,
    in_band_error,
    read_error,
    register,
    reply_shape,
)
from servefuzz.workload import RequestSpec

__all__ = ["ReferenceTarget", "SGLangTarget", "choice_regex"]

_E = TypeVar("_E")


# How minimal_repro.py (reports.minimal) reads this dialect's answers and empties its cache.
_MINIMAL_TOKENS = '''def tokens(answer):  # SGLang's /generate: one item per choice, or the one item
    items = answer if isinstance(answer, list) else [answer]
    return [tuple(i.get("output_ids") or [t[1] for t in i["meta_info"]["output_token_logprobs"]]) for i in items]'''
_MINIMAL_FLUSH = '''def flush():
    empty_cache("/flush_cache")'''


@register("sglang")
class SGLangTarget(HttpTarget):
    """An SGLang server (`python -m sglang.launch_server ...`).

    `/flush_cache` answers non-200 while requests are running (the scheduler flushes only when
    idle), so a flush is retried `flush_attempts` times, `flush_interval_s` apart.
    """

    def __init__(self, base_url: str, *, flush_attempts: int = 50, flush_interval_s: float = 0.1, **http: Any) -> None:
        super().__init__(base_url, **http)
        self.flush_attempts = flush_attempts
        self.flush_interval_s = flush_interval_s

    # What its spec (engines/sglang.py) says it sends, and how: SGLang keys its radix cache on
    # (extra_key, tokens) since PR #10317. The native /generate
    # takes `extra_key` in every version servefuzz installs (0.5.10.post1's has no `cache_salt`),
    # so the salt travels as that. Up to 0.5.10.post1 the scheduler dropped the key (sglang#23300,
    # fixed in 0.5.11): a breach there is that bug, and the catalogue says so.
    # SGLang's native /generate names a request's adapter in `lora_path` (the NAME of
    # `--lora-paths NAME=PATH`); the reference engine takes the same field.

    repro: ClassVar[ReproDialect | None] = ReproDialect("sglang", "/generate", "sglang",
        minimal_tokens=_MINIMAL_TOKENS, minimal_flush=_MINIMAL_FLUSH)

    def repro_body(self, spec: RequestSpec, *, top_k: int, model: str | None) -> dict[str, Any]:
        return self.body(spec, top_k=top_k)

    def body(self, spec: RequestSpec, *, top_k: int) -> dict[str, Any]:
        salt = self.salt_of(spec)
        sampling: dict[str, Any] = {
            "temperature": spec.temperature,
            "max_new_tokens": spec.max_tokens,
            "ignore_eos": spec.ignore_eos,
            "n": spec.n,
        }
        if spec.seed is not None:
            # SGLang's per-request seed (honoured by its seeded sampler; the reference engine
            # seeds choice i's own generator with (seed, i)).
            sampling["sampling_seed"] = spec.seed
        choices = self.choices_of(spec)
        if choices is not None:
            # SGLang constrains by a regex over the whole output; the choices hold only letters,
            # digits and spaces, so the alternation of them needs no escape. The reference engine
            # reads exactly this shape (`reference.server`).
            sampling["regex"] = choice_regex(choices)
        adapter = self.adapter_of(spec)
        return {
            **({"extra_key": salt} if salt is not None else {}),
            **({"lora_path": adapter} if adapter is not None else {}),
            "input_ids": list(spec.prompt_ids),
            "sampling_params": sampling,
            "return_logprob": True,
            "top_logprobs_num": top_k,
            # -1: logprobs of the output only. Asking for prompt logprobs makes SGLang
            # recompute the prompt, which would hide the radix-cache reuse we are testing.
            "logprob_start_len": -1,
            "stream": spec.stream,
        }

    async def send(
        self, session: aiohttp.ClientSession, spec: RequestSpec, *, top_k: int, exchange: Exchange
    ) -> None:
        # n > 1 answers a list, one dict per choice; n == 1 a bare dict.
        await self.generate(session, "/generate", self.body(spec, top_k=top_k), spec, exchange, _absorb)

    async def flush_cache(self, session: aiohttp.ClientSession) -> bool:
        status, body = 0, ""
        for attempt in range(self.flush_attempts):
            if attempt:
                await asyncio.sleep(self.flush_interval_s)
            async with self.post(session, "/flush_cache") as resp:
                if resp.status == 200:
                    return True
                if resp.status == 404:
                    return False
                status, body = resp.status, await read_error(resp)
        excerpt = BadStatus(status, body).excerpt
        raise TargetError(
            f"{self.base_url}/flush_cache still refused after {self.flush_attempts} tries "
            f"(HTTP {status}: {excerpt})"
        )

    async def server_info(self, session: aiohttp.ClientSession) -> TargetInfo:
        try:
            d = await self.get_json(session, "/server_info")
        except BadStatus as e:
            if e.status != 404:
                raise
            d = await self.get_json(session, "/get_server_info")  # SGLang before 0.4.7
        if not isinstance(d, dict):
            raise BadReply(f"/server_info answered a {type(d).__name__}, not an object")
        with reply_shape("/server_info"):
            # SGLang merges the scheduler's facts into the server args: `max_total_num_tokens` is
            # the KV pool it sized, while the `max_total_tokens` arg stays null unless set.
            pool = d.get("max_total_num_tokens")
            return TargetInfo(
                engine=self.engine,
                base_url=self.base_url,
                auth=self.authenticated,
                version=None if d.get("version") is None else str(d["version"]),
                server_args={k: v for k, v in d.items() if k != "internal_states"},
                page_size=_opt_int(d.get("page_size")),
                max_total_tokens=_opt_int(d.get("max_total_tokens") if pool is None else pool),
                vocab_size=_opt_int(d.get("vocab_size")),
                eos_token_id=_opt_int(d.get("eos_token_id")),
                faults=tuple(str(f) for f in d.get("faults") or ()),
                adapters=_adapter_names(d),
            )


@register("reference")
class ReferenceTarget(SGLangTarget):
    """servefuzz's embedded reference engine: the SGLang dialect, plus faults in `/server_info`,
    and what its model keeps per request (`architecture`: a recurrent state and its checkpoint
    interval), which no config.json tells since the engine builds its model itself."""

    async def server_info(self, session: aiohttp.ClientSession) -> TargetInfo:
        info = await super().server_info(session)
        d = info.server_args.get("architecture")
        return dataclasses.replace(info, architecture=ModelFacts.from_json(d)) if d is not None else info


def choice_regex(choices: Sequence[str]) -> str:
    """The regex whose full matches are exactly `choices` (letters, digits, spaces: no escapes).

    >>> choice_regex([" w5 w7", " w9"])
    '( w5 w7| w9)'
    """
    return "(" + "|".join(choices) + ")"


def _absorb(exchange: Exchange, item: Any, *, position: int, streamed: bool) -> None:
    """Fold one choice's answer (or stream chunk) into the exchange."""
    with reply_shape("/generate"):
        in_band_error(exchange, item)
        meta = item["meta_info"]
        reason = meta.get("finish_reason")
        if isinstance(reason, Mapping) and reason.get("type") == "abort":
            # The scheduler gave up on the request (too long, out of memory, aborted): what it
            # sent so far is a cut answer, not a finished one.
            status = reason.get("status_code") or exchange.http_status or 200
            raise BadStatus(int(status), f"aborted: {reason.get('message')}")
        draft = exchange.choice(int(item.get("index", position)))
        produced = meta.get("completion_tokens")
        triples = meta.get("output_token_logprobs") or []
        ids = item.get("output_ids")
        if ids is None:  # older SGLang: the ids live only in the logprob triples
            ids = [t[1] for t in triples]
        before = len(draft.token_ids)
        whole = _merge(draft.token_ids, [int(t) for t in ids], produced)
        if triples:  # `--stream-output` cut only the ids; the text goes with the logprob lists
            whole = _merge(draft.logprobs, [_opt_float(t[0]) for t in triples], produced)
        tops = meta.get("output_top_logprobs") or []
        top = [tuple((int(t[1]), float(t[0])) for t in alts or ()) for alts in tops]
        _merge(draft.top_logprobs, top, produced)
        text = str(item.get("text") or "")
        draft.text = text if whole else draft.text + text
        draft.finish_reason = reason.get("type") if isinstance(reason, Mapping) else reason
        if streamed and len(draft.token_ids) > before:
            exchange.token_arrived()
        cached = meta.get("cached_tokens")
        if cached is not None:
            # With n > 1 each choice reports its own count; the smallest is the most the request
            # can have found. (Real SGLang first runs a hidden prefill of the prompt and the n
            # choices then hit it, so there every choice reports about the whole prompt.)
            seen = exchange.cached_tokens
            exchange.cached_tokens = int(cached) if seen is None else min(seen, int(cached))
        if meta.get("prompt_tokens") is not None:
            exchange.prompt_tokens = int(meta["prompt_tokens"])


def _merge(dst: list[_E], new: Sequence[_E], produced: int | None) -> bool:
    """Put a chunk's list into `dst`; True when the chunk held the whole list so far.

    A chunk as long as `completion_tokens` holds everything (cumulative); a shorter one holds
    only the new part. When the two readings coincide (nothing came before), both give the same.
    """
    if produced is None or len(new) == produced:
        dst[:] = new
        return True
    dst.extend(new)
    return False


def _opt_int(x: Any) -> int | None:
    return None if x is None else int(x)


def _opt_float(x: Any) -> float | None:
    return None if x is None else float(x)


def _adapter_names(server_info: Mapping[str, Any]) -> tuple[str, ...]:
    """The LoRA adapters a server's args name: SGLang's `lora_paths` (`NAME=PATH` strings, a
    name -> path object, or `{"lora_name": ...}` entries) or the reference engine's `lora`
    (`NAME=SEED`). Names only: a path is never kept (TargetInfo drops unsafe names).

    >>> _adapter_names({"lora_paths": ["a=/x", {"lora_name": "b"}], "lora": ["c=7"]}), _adapter_names({})
    (('a', 'b', 'c'), ())
    """
    names: list[str] = []
    for key in ("lora_paths", "lora"):
        entries = server_info.get(key) or ()
        if isinstance(entries, Mapping):
            entries = list(entries)
        if not isinstance(entries, list | tuple):
            continue
        for e in entries:
            if isinstance(e, Mapping):
                e = e.get("lora_name")
            if isinstance(e, str):
                names.append(e.split("=", 1)[0])
    return tuple(names)
