"""llama.cpp's server (`llama-server`): its native `POST /completion` with a token-id prompt.

Answer shapes (llama.cpp `tools/server`, `server-task.cpp`):
- one object per completion, a list of them when `n_cmpl > 1`, each with `index`, `content`,
  `tokens` (the output ids; only with `return_tokens: true`, else empty), `stop`,
  `stop_type` (`limit` | `eos` | `word`), `tokens_evaluated` (the prompt's length),
  `timings.cache_n` (prompt tokens reused from the slot's cache) and `tokens_cached` (what the
  slot holds at the end, prompt *and* output: not a reuse count);
- `completion_probabilities`: per output token `{id, logprob, bytes, top_logprobs: [{id, logprob,
  bytes}]}`, but only for the tokens after which the text so far is whole UTF-8 (below);
- streaming: `data: {...}` lines, one token each with its probabilities and `tokens_predicted`
  (how many tokens so far), then a last chunk with `stop: true`, the stop type and the timings
  (and no `data: [DONE]`). The server then closes the connection, though its headers promise
  keep-alive. With `return_progress: true` (asked for on a stream that will be cut) each prefill
  step first sends a chunk with `prompt_progress` (`{total, cache, processed, time_ms}`,
  `processed` the prompt tokens the slot holds so far) and a placeholder `tokens: [0]`: skipped,
  or, for a request with `cancel_at_prefill`, the cut once `processed` reaches it (the server
  sends one at the slot's start too, `processed` then what it reused).

Byte tokens (`server-context.cpp`, `process_token`): a byte-level BPE model writes a character
of several UTF-8 bytes as several tokens, and while the text ends in part of a character the
server keeps the token out of `completion_probabilities` and, streaming, sends nothing at all.
The token that completes the character comes with its own probabilities and with `bytes` holding
the whole character (the withheld bytes and its own). So a whole answer holds every token but
fewer probability entries (SmolLM2 writing Chinese: 48 tokens, 28 entries), and a stream skips
tokens (`tokens_predicted` jumps). `_align` places each entry on its token (a position it cannot
place unambiguously gets none) and the withheld positions have no logprob and no top-k, so a
verdict there says it cannot tell rather than reading margins that were never sent;
`_recover` gets a stream's withheld ids back from `/tokenize` of the character.

n > 1 is llama.cpp's own `n_cmpl`: the prompt is processed once and its state copied into
n slots, the same fork as SGLang's n (a choice that reads a sibling's KV shows here).

`cache_prompt: false` makes a request ignore and overwrite its slot's cache. The clean
baseline sends it: every `cold` exchange (the isolation reference that `Runner.run_alone` sends
after a flush), and every request of `make_target("llamacpp", url, cache_prompt=False)`
(triage's variant). `flush_cache` erases every
slot (`POST /slots/{id}?action=erase`), which the server allows only when started with
`--slot-save-path`; otherwise there is no flush. An erase does not empty the RAM prompt cache
(`--cache-ram`), which can restore an erased prompt: launch with `--cache-ram 0` for a flush
that leaves nothing behind.

    >>> t = LlamaCppTarget("http://127.0.0.1:8080")
    >>> b = t.body(RequestSpec("r01", 0.0, (5, 6, 7), max_tokens=4, n=2), top_k=5)
    >>> b["prompt"], b["n_predict"], b["n_probs"], b["n_cmpl"], b["cache_prompt"]
    ([5, 6, 7], 4, 5, 2, True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, ClassVar

import aiohttp

from servefuzz.errors import UsageError
from servefuzz.history import TopLogprobs
from servefuzz.targets.base import (
    BadReply,
    BadStatus,
    CutInPrefill,
    Exchange,
    HttpTarget,
    ReproDialect,
    TargetInfo,
    cut_in_prefill,
    in_band_error,
    parse_json,
    read_error,
    register,
    reply_shape,
)
from servefuzz.workload import RequestSpec

__all__ = ["LlamaCppTarget", "gbnf_choice"]

# llama.cpp's stop types, spelled as the other dialects spell finish reasons.
_FINISH = {"limit": "length", "eos": "stop", "word": "stop"}


def gbnf_choice(choices: Sequence[str]) -> str:
    """A GBNF grammar whose language is exactly `choices`. They hold only letters, digits and
    spaces (`workload.CHOICE_TEXT`), so each is a literal as it stands, with nothing to escape.

    >>> gbnf_choice([" w5 w7", " w9"])
    'root ::= " w5 w7" | " w9"'
    """
    return "root ::= " + " | ".join(f'"{c}"' for c in choices)


# How minimal_repro.py (reports.minimal) reads this dialect's answers and empties its cache.
_MINIMAL_TOKENS = '''def tokens(answer):  # llama-server's /completion: one object per choice, each with its tokens
    items = answer if isinstance(answer, list) else [answer]
    return [tuple(i["tokens"]) for i in sorted(items, key=lambda i: i.get("index", 0))]'''
_MINIMAL_FLUSH = '''def flush():  # needs --slot-save-path; the slots' cached prompts are erased
    for slot in range(get("/props")["total_slots"]):
        empty_cache(f"/slots/{slot}?action=erase")'''


@register("llamacpp")
class LlamaCppTarget(HttpTarget):
    """A llama.cpp server (`llama-server -m model.gguf ...`). It has no per-request cache salt
    (its spec, engines/llamacpp.py, has no `salts`): its slots and prompt cache are shared by
    everyone. A choice constraint goes as a GBNF `grammar` (`gbnf_choice`)."""

    # A request names adapters by id in `lora: [{"id": i, "scale": s}]` (those it leaves out run
    # at scale 0); servefuzz calls adapter i by its file's stem, as `/lora-adapters` lists it.

    def __init__(
        self, base_url: str, *, cache_prompt: bool = True, adapters: Sequence[str] | None = None, **http: Any
    ) -> None:
        """`adapters`: the adapters' names in id order where already known (a finding's), else
        read from `/lora-adapters` before the first request that needs them."""
        super().__init__(base_url, **http)
        self.cache_prompt = cache_prompt
        self._slots: int | None = None
        self._lora_ids: dict[str, int] | None = None if adapters is None else {n: i for i, n in enumerate(adapters)}

    repro: ClassVar[ReproDialect | None] = ReproDialect("llamacpp", "/completion", "llamacpp",
        minimal_tokens=_MINIMAL_TOKENS, minimal_flush=_MINIMAL_FLUSH)

    def repro_body(self, spec: RequestSpec, *, top_k: int, model: str | None) -> dict[str, Any]:
        return self.body(spec, top_k=top_k)

    def body(self, spec: RequestSpec, *, top_k: int, cold: bool = False) -> dict[str, Any]:
        """The `/completion` body; a `cold` request (a clean reference) never reuses a cached
        prompt, so it is cold even on a server without slot erase (no `--slot-save-path`)."""
        self.salt_of(spec)  # llama.cpp has no cache salt: a salted request is refused
        adapter = self.adapter_of(spec)
        # A base-model request names no adapter, as most clients send it: it runs under the
        # server's own scales (0 under the lora profile, `engine_files.adapter_flags`).
        lora = {} if adapter is None else {"lora": [{"id": self._lora_id(adapter), "scale": 1.0}]}
        return {
            **lora,
            "prompt": list(spec.prompt_ids),
            "n_predict": spec.max_tokens,
            # At 0 greedy (the probabilities are still the plain softmax); above 0 the server's
            # default sampler chain, then a draw seeded by `seed` (docs/engines.md, Seeds).
            "temperature": spec.temperature,
            "n_probs": top_k,
            "n_cmpl": spec.n,
            "ignore_eos": spec.ignore_eos,
            "cache_prompt": self.cache_prompt and not cold,
            "return_tokens": True,
            "stream": spec.stream,
            # A stream to be cut gets the prefill's progress, one chunk per prefill step: llama-server
            # notices a closed connection only when it writes, so without them a cut lands after
            # the whole prefill, never in the middle of a chunked one (`strategies.PrefillAbort`).
            **({"return_progress": True} if spec.stream and spec.cancel_after_ms is not None else {}),
            **({"seed": spec.seed} if spec.seed is not None else {}),
            **({"grammar": gbnf_choice(choices)} if (choices := self.choices_of(spec)) is not None else {}),
        }

    async def send(
        self, session: aiohttp.ClientSession, spec: RequestSpec, *, top_k: int, exchange: Exchange
    ) -> None:
        # llama-server closes the connection after a stream although it advertises keep-alive;
        # a pooled connection reused for the next request then fails as "server disconnected".
        # Closing it from our side keeps that connection out of the pool.
        headers = {"Connection": "close"} if spec.stream else None
        if spec.adapter is not None and self._lora_ids is None:
            await self._adapters(session)
        body = self.body(spec, top_k=top_k, cold=exchange.cold)
        withheld: list[_Withheld] = []
        # Cut where the prefill's progress reaches it (at most the whole prompt: the prefill's end).
        cut_at = min(spec.cancel_at_prefill or 0, len(spec.prompt_ids)) if cut_in_prefill(self, spec) else None

        def absorb(exchange: Exchange, item: Any, *, position: int, streamed: bool) -> None:
            if cut_at is not None and (done := _prefilled(item)) is not None and done >= cut_at:
                raise CutInPrefill(done)
            _absorb(exchange, item, position=position, streamed=streamed, withheld=withheld)

        await self.generate(session, "/completion", body, spec, exchange, absorb, headers=headers)
        for gap in withheld:
            await self._recover(session, exchange, gap)

    async def tokenize(self, session: aiohttp.ClientSession, text: str, *, chat: bool = False) -> tuple[int, ...]:
        """llama-server's `/tokenize` (`content`); with `chat`, `text` goes through the model's
        chat template first (`/apply-template`), whose special tokens are then read as such."""
        if not chat:
            return await self.post_tokens(session, "/tokenize", {"content": text, "parse_special": False})
        async with self.post(session, "/apply-template", json={"messages": [{"role": "user", "content": text}]}) as resp:
            if resp.status >= 300:
                raise BadStatus(resp.status, await read_error(resp))
            data = parse_json(await self.read(resp), "/apply-template")
        with reply_shape("/apply-template"):
            prompt = str(data["prompt"])
        return await self.post_tokens(session, "/tokenize", {"content": prompt, "parse_special": True})

    async def _recover(self, session: aiohttp.ClientSession, exchange: Exchange, gap: _Withheld) -> None:
        """Fill the ids a stream withheld before the token that completed a character: the
        server's own tokenization of that text, taken only where it ends in the completing token
        and has exactly the withheld count before it (else the answer cannot be read back)."""
        ids = await self.tokenize(session, gap.text)
        if len(ids) != gap.count + 1 or ids[-1] != gap.token:
            raise BadReply(
                f"a stream withheld {gap.count} byte tokens before token {gap.token}, and /tokenize of their text "
                f"gives {len(ids)} tokens ending in {ids[-1] if ids else None}: their ids are unknown"
            )
        draft = exchange.choice(gap.choice)
        draft.token_ids[gap.start : gap.start + gap.count] = ids[:-1]

    async def flush_cache(self, session: aiohttp.ClientSession) -> bool:
        slots = self._slots if self._slots is not None else await self._total_slots(session)
        for slot in range(slots):
            # A busy slot's erase waits in the server's queue until the slot is free.
            async with self.post(session, f"/slots/{slot}?action=erase") as resp:
                if resp.status in (404, 501):
                    return False  # no --slot-save-path: the server offers no erase
                if resp.status >= 300:
                    raise BadStatus(resp.status, await read_error(resp))
        return True

    def _lora_id(self, name: str) -> int:
        if self._lora_ids is None or name not in self._lora_ids:
            raise UsageError(f"this llama-server has no LoRA adapter named {name} (started without it in --lora?)")
        return self._lora_ids[name]

    async def _adapters(self, session: aiohttp.ClientSession) -> tuple[str, ...]:
        """The adapters' names (their files' stems) in id order, from `/lora-adapters`; none
        where the server has no such endpoint or loaded none."""
        try:
            listed = await self.get_json(session, "/lora-adapters")
        except BadStatus:
            listed = []
        with reply_shape("/lora-adapters"):
            entries = [e for e in listed if isinstance(e, Mapping)] if isinstance(listed, list) else []
            names = {int(e["id"]): PurePath(str(e.get("path", ""))).stem for e in entries}
        self._lora_ids = {name: i for i, name in names.items()}
        return tuple(name for _, name in sorted(names.items()))

    async def server_info(self, session: aiohttp.ClientSession) -> TargetInfo:
        props = await self.get_json(session, "/props")
        models = await self.get_json(session, "/v1/models")
        adapters = await self._adapters(session)
        with reply_shape("/props"):
            settings = props["default_generation_settings"]
            slots = int(props["total_slots"])
            slot_ctx = int(settings["n_ctx"])
            meta = models["data"][0].get("meta") or {}
            self._slots = slots
            return TargetInfo(
                engine=self.engine,
                base_url=self.base_url,
                auth=self.authenticated,
                version=None if props.get("build_info") is None else str(props["build_info"]),
                server_args={
                    "model_path": props.get("model_path"),
                    "total_slots": slots,
                    "slot_n_ctx": slot_ctx,
                    "n_ctx_train": meta.get("n_ctx_train"),
                    "context_length": slot_ctx,  # one request must fit one slot
                    "cache_prompt": self.cache_prompt,
                },
                max_total_tokens=slot_ctx * slots,
                vocab_size=None if meta.get("n_vocab") is None else int(meta["n_vocab"]),
                adapters=adapters,
            )

    async def _total_slots(self, session: aiohttp.ClientSession) -> int:
        props = await self.get_json(session, "/props")
        with reply_shape("/props"):
            self._slots = int(props["total_slots"])
        return self._slots


@dataclass(frozen=True)
class _Withheld:
    """Byte tokens a stream did not send: `count` of them at `start` in choice `choice`, before
    `token`, which completed `text` (their characters and its own piece)."""

    choice: int
    start: int
    count: int
    token: int
    text: str


def _align(ids: Sequence[int], entries: Sequence[int]) -> list[int | None]:
    """The token position of each probability entry (`entries`: their ids, in order), where
    llama-server sent fewer entries than tokens (byte tokens, module docstring); None for an
    entry whose position is ambiguous. An entry lies between its leftmost and its rightmost
    placement over every in-order matching, so one that both put at the same token is there.
    Raises BadReply where no matching exists: then the entries are not these tokens'.

    >>> _align([5, 7, 8, 9], [5, 8, 9])   # 7 a partial character, completed by 8
    [0, 2, 3]
    >>> _align([5, 7, 7, 9], [7, 9])      # which 7 completed the character is unknown
    [None, 3]
    """
    left: list[int] = []
    for i, t in enumerate(ids):
        if len(left) < len(entries) and t == entries[len(left)]:
            left.append(i)
    if len(left) < len(entries):
        raise BadReply(f"{len(ids)} tokens but {len(entries)} token probabilities, which are not theirs")
    right: list[int] = []
    for i in range(len(ids) - 1, -1, -1):
        if len(right) < len(entries) and ids[i] == entries[len(entries) - 1 - len(right)]:
            right.append(i)
    right.reverse()
    return [a if a == b else None for a, b in zip(left, right)]


def _whole_bytes(p: Mapping[str, Any]) -> bytes | None:
    """An entry's `bytes` (the text it sent), where the server gives them."""
    raw = p.get("bytes")
    return None if not isinstance(raw, list) else bytes(int(b) & 0xFF for b in raw)


def _prefilled(item: Any) -> int | None:
    """The prompt tokens a progress chunk (`return_progress`) says the slot holds, reused or
    computed (`prompt_progress.processed`); None for any other chunk.

    >>> _prefilled({"prompt_progress": {"total": 367, "cache": 0, "processed": 128, "time_ms": 90}, "tokens": [0]})
    128
    >>> _prefilled({"tokens": [17], "content": "a"}) is None
    True
    """
    if not isinstance(item, Mapping) or "prompt_progress" not in item:
        return None
    with reply_shape("/completion"):
        return int(item["prompt_progress"]["processed"])


def _absorb(
    exchange: Exchange, item: Any, *, position: int, streamed: bool, withheld: list[_Withheld] | None = None
) -> None:
    """Fold one completion (or one stream chunk) into the exchange; a stream's withheld byte
    tokens go to `withheld` (placeholders in the draft until `_recover` fills them)."""
    with reply_shape("/completion"):
        in_band_error(exchange, item)
        if "prompt_progress" in item:  # a prefill step's progress (`return_progress`): its `tokens` [0] is no token
            return
        index = int(item.get("index", position))
        draft = exchange.choice(index)
        ids = [int(t) for t in item.get("tokens") or ()]
        probs = item.get("completion_probabilities") or ()
        if streamed and ids and item.get("tokens_predicted") is not None:
            # Tokens the stream skipped: the partial characters before this one (docstring).
            skipped = int(item["tokens_predicted"]) - len(draft.token_ids) - len(ids)
            if skipped > 0:
                whole = _whole_bytes(probs[0]) if probs else None
                if withheld is None or whole is None:
                    raise BadReply(f"the stream skipped {skipped} tokens")
                withheld.append(_Withheld(index, len(draft.token_ids), skipped, ids[0],
                                          whole.decode("utf-8", errors="replace")))
                draft.token_ids.extend([ids[0]] * skipped)  # placeholders, until `_recover`
                draft.logprobs.extend([None] * skipped)
                draft.top_logprobs.extend([()] * skipped)
        if probs and len(probs) > len(ids):
            raise BadReply(f"{len(ids)} tokens but {len(probs)} token probabilities")
        entries = [int(p["id"]) for p in probs]
        if probs and len(probs) < len(ids):
            at = _align(ids, entries)
            _explained(ids, probs, at)
        else:
            for token, e in zip(ids, entries):
                if e != token:
                    raise BadReply(f"token {token} came with the probabilities of token {e}")
            at = list(range(len(probs)))
        lps: list[float | None] = [None] * len(ids) if probs else []
        tops: list[TopLogprobs] = [()] * len(ids) if probs else []
        for p, i in zip(probs, at):
            if i is not None:
                lps[i] = float(p["logprob"])
                tops[i] = tuple(
                    sorted(((int(a["id"]), float(a["logprob"])) for a in p["top_logprobs"]), key=lambda a: -a[1])
                )
        draft.token_ids.extend(ids)
        draft.logprobs.extend(lps)
        draft.top_logprobs.extend(tops)
        draft.text += str(item.get("content") or "")
        if item.get("stop"):
            draft.finish_reason = _FINISH.get(str(item.get("stop_type")), str(item.get("stop_type")))
        if streamed and ids:
            exchange.token_arrived()
        timings = item.get("timings") or {}
        if timings.get("cache_n") is not None:
            # With n_cmpl > 1 only the parent processed the prompt; the smallest count is what
            # the request itself found in the cache (the children copy the parent's state).
            cached = int(timings["cache_n"])
            exchange.cached_tokens = cached if exchange.cached_tokens is None else min(exchange.cached_tokens, cached)
        if item.get("tokens_evaluated") is not None:
            exchange.prompt_tokens = int(item["tokens_evaluated"])


def _explained(ids: Sequence[int], probs: Sequence[Mapping[str, Any]], at: Sequence[int | None]) -> None:
    """Tokens without an entry must be the bytes of a character the next entry completed (or
    of one cut off at the end): an entry after such a gap that sent only ASCII says otherwise."""
    last = -1
    for p, i in zip(probs, at):
        if i is None:
            return  # an ambiguous placement: the gaps are not known exactly
        whole = _whole_bytes(p)
        if i > last + 1 and whole is not None and all(b < 0x80 for b in whole):
            raise BadReply(f"tokens {list(ids[last + 1 : i])} came without probabilities before ASCII text")
        last = i
