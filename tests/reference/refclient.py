"""A small HTTP client for the reference engine's tests: bursts, flushes, metrics, and the check
of every answer against the plain single-sequence forward of the model.

Kept apart from servefuzz's runner on purpose: these tests prove the *engine*, so they speak
its wire format directly.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import numpy as np

from servefuzz.reference.model import LOGIT_UNIT, Generation, TinyModel

__all__ = ["LORAS", "LORA_FLAGS", "Answer", "burst", "flush", "generate_body", "get", "metric", "post", "seeded_draw", "wrong_answers"]


def generate_body(
    prompt: Sequence[int],
    max_new_tokens: int,
    *,
    n: int = 1,
    top_k: int = 2,
    temperature: float = 0.0,
    seed: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """An SGLang /generate body with logprobs, at temperature 0 unless told (then with its seed)."""
    sampling: dict[str, Any] = {"temperature": temperature, "max_new_tokens": max_new_tokens, "n": n, "ignore_eos": True}
    if seed is not None:
        sampling["sampling_seed"] = seed
    return {
        "input_ids": list(prompt),
        "sampling_params": sampling,
        "return_logprob": True,
        "top_logprobs_num": top_k,
        **extra,
    }


# The adapters the LoRA tests serve (`--lora NAME=SEED`), and the seed that makes each one.
LORAS = {"lora-a": 1, "lora-b": 2}
LORA_FLAGS = [f for name, seed in LORAS.items() for f in ("--lora", f"{name}={seed}")]


@dataclass(frozen=True)
class Answer:
    """One choice of one /generate answer."""

    name: str
    prompt: tuple[int, ...]
    ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top: tuple[tuple[tuple[int, float], ...], ...]
    cached_tokens: int
    # A sampled choice: (temperature, seed, choice index), the draw its tokens must be.
    draw: tuple[float, int, int] | None = None
    adapter: str | None = None  # the LoRA adapter (a LORAS name) it ran under


def post(base: str, path: str, body: Any, timeout: float = 60) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def get(base: str, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(base + path, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def flush(base: str) -> None:
    """Flush the cache, waiting for the engine to go idle (it refuses while busy)."""
    deadline = time.monotonic() + 30
    while post(base, "/flush_cache", b"")[0] != 200:
        assert time.monotonic() < deadline, "flush_cache kept refusing"
        time.sleep(0.05)


def metric(base: str, name: str) -> float:
    _, text = get(base, "/metrics")
    for line in text.splitlines():
        if line.startswith(f"sglang:{name}{{"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def _answers(
    name: str, prompt: Sequence[int], payload: Any, sampling: dict[str, Any] | None = None, adapter: str | None = None
) -> list[Answer]:
    choices = payload if isinstance(payload, list) else [payload]
    sp = sampling or {}
    temperature = float(sp.get("temperature", 0))
    out = []
    for i, c in enumerate(choices):
        meta = c["meta_info"]
        out.append(
            Answer(
                name if len(choices) == 1 else f"{name}#{i}",
                tuple(prompt),
                tuple(c["output_ids"]),
                tuple(lp for lp, _, _ in meta["output_token_logprobs"]),
                tuple(tuple((t, lp) for lp, t, _ in top) for top in meta.get("output_top_logprobs", [])),
                meta["cached_tokens"],
                (temperature, int(sp.get("sampling_seed", 0)), i) if temperature > 0 else None,
                adapter,
            )
        )
    return out


async def _burst(base: str, requests: Sequence[tuple[str, float, dict[str, Any]]]) -> list[Answer]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:

        async def one(name: str, delay_ms: float, body: dict[str, Any]) -> list[Answer]:
            await asyncio.sleep(delay_ms / 1000)
            async with session.post(base + "/generate", json=body) as resp:
                payload = await resp.json()
                assert resp.status == 200, payload
            return _answers(name, body["input_ids"], payload, body.get("sampling_params"), body.get("lora_path"))

        results = await asyncio.gather(*(one(*r) for r in requests))
    return [a for answers in results for a in answers]


def burst(base: str, requests: Sequence[tuple[str, float, dict[str, Any]]]) -> list[Answer]:
    """Send (name, delay_ms, /generate body) concurrently; every choice's answer, in order."""
    return asyncio.run(_burst(base, requests))


def seeded_draw(model: TinyModel, a: Answer, top_k: int) -> Generation:
    """What a seeded sampled choice *should* have drawn at each step, given its output so far:
    the Gumbel-max draw over the plain forward's logits at `a.draw`'s temperature, with one
    Exp(1) noise per vocabulary token per step from the choice's own generator (seed, index).
    Written here from the sampler's definition, not imported from the engine."""
    assert a.draw is not None and a.ids
    temperature, seed, index = a.draw
    logits = model.forward(list(a.prompt) + list(a.ids[:-1]))[len(a.prompt) - 1 :]
    rng = np.random.default_rng((seed % 2**63, index))
    drawn = []
    for row in logits:
        z = (row - row.max()) / (LOGIT_UNIT * temperature)
        drawn.append(int(np.argmax(z - np.log(rng.standard_exponential(len(row))))))
    steps = model.logprobs(logits, drawn, [top_k] * len(logits))
    return Generation(tuple(drawn), tuple(steps))


def wrong_answers(model: TinyModel, answers: Sequence[Answer]) -> dict[str, int]:
    """Answers that differ from the plain forward of their sequence alone -> first bad step.

    The reference is one no-cache forward over prompt + output: at every step, the token the
    engine produced must be the argmax (for a sampled choice, its seeded draw: `seeded_draw`),
    with bit-identical logprob and top-k.
    """
    bad = {}
    for a in answers:
        k = len(a.top[0]) if a.top else 0
        # Under an adapter, the plain forward runs on the adapter's merged weights.
        m = model if a.adapter is None else model.with_lora(LORAS[a.adapter])
        ref = m.score(a.prompt, a.ids, top_k=k) if a.draw is None else seeded_draw(m, a, k)
        for i, step in enumerate(ref.steps):
            got_top = a.top[i] if a.top else ()
            if (step.token_id, step.logprob, step.top) != (a.ids[i], a.logprobs[i], got_top):
                bad[a.name] = i
                break
    return bad
