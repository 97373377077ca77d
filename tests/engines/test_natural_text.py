"""Prompts of natural text on a real model (`servefuzz.natural`): llama-server serving the real
SmolLM2-135M-Instruct tokenizes the text with its own tokenizer and chat template, and a trained
model answers it without the short loops random ids make it write; servefuzz's random models
(the tiny GGUF, the reference engine) keep random ids (the control)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from servefuzz.launcher import ServerProcess
from servefuzz.natural import REAL_TOKENS_PER_CHAR, corpus_text
from servefuzz.runner import RunConfig, Runner
from servefuzz.targets import make_target
from servefuzz.workload import PromptBuilder, RequestSpec, TextSource, TokenIds

pytestmark = pytest.mark.engine

PROMPTS = 12
MAX_TOKENS = 48


def _text(engine: str, url: str) -> TextSource | None:
    async def main() -> TextSource | None:
        async with Runner(make_target(engine, url), RunConfig(natural_text=True)) as r:
            return r.text

    return asyncio.run(main())


def _loops(ids: TokenIds, span: int = 24, period: int = 8) -> bool:
    """Whether an answer ends in a short loop: its last `span` tokens repeat with a period of at
    most `period` tokens."""
    tail = ids[-span:]
    return len(tail) == span and any(all(tail[i] == tail[i - p] for i in range(p, span)) for p in range(1, period + 1))


def _looping(url: str, text: TextSource | None) -> int:
    """How many of `PROMPTS` greedy answers end in a loop, prompts from a builder with `text`."""
    b = PromptBuilder(seed=1, vocab=range(3, 49152), text=text)
    specs = [RequestSpec(f"r{i}", 0.0, b.prompt("p" if i % 2 else None, 32 * (i % 2), 100 + 8 * i),
                         max_tokens=MAX_TOKENS, ignore_eos=True) for i in range(PROMPTS)]

    async def main() -> int:
        async with Runner(make_target("llamacpp", url), RunConfig(request_timeout_s=300)) as r:
            records = [await r.run_alone(s, run=0) for s in specs]
        assert all(rec.ok for rec in records)
        return sum(_loops(rec.choices[0].token_ids) for rec in records)

    return asyncio.run(main())


def test_a_real_model_gets_its_own_tokens_and_chat_tail(real_llama_server: ServerProcess) -> None:
    text = _text("llamacpp", real_llama_server.base_url)
    assert text is not None
    corpus = corpus_text()
    assert corpus is not None and len(text.tokens) <= REAL_TOKENS_PER_CHAR * len(corpus)
    assert text.tail == (2, 198, 1, 520, 9531, 198)  # "<|im_end|>\n<|im_start|>assistant\n": ChatML's


def test_natural_text_ends_the_loops_random_ids_make(real_llama_server: ServerProcess) -> None:
    text = _text("llamacpp", real_llama_server.base_url)
    random_loops, natural_loops = _looping(real_llama_server.base_url, None), _looping(real_llama_server.base_url, text)
    assert random_loops >= PROMPTS // 2  # what random ids do to a trained model (measured 18 of 24)
    assert natural_loops <= PROMPTS // 6  # natural text (measured 0 of 24)


def test_servefuzz_random_models_keep_random_ids(llama_server: ServerProcess,
                                                 reference_server: Callable[..., str]) -> None:
    assert _text("llamacpp", llama_server.base_url) is None  # the tiny GGUF: its tokenizer is no trained one
    assert _text("reference", reference_server()) is None  # no /tokenize
