"""Both dialects end to end against the real reference engine (a subprocess on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from servefuzz.history import RequestRecord, Status
from servefuzz.runner import RunConfig, Runner
from servefuzz.targets import make_target
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

PAGE = 16
PROMPT = tuple(range(10, 50))  # 40 tokens: two full pages and a bit
T = TypeVar("T")


@pytest.fixture
def ref(reference_server: Callable[..., str]) -> str:
    return reference_server("--page-size", str(PAGE))


def with_runner(url: str, engine: str, body: Callable[[Runner], Coroutine[Any, Any, T]], **kw: Any) -> T:
    async def main() -> T:
        async with Runner(make_target(engine, url), RunConfig(**kw)) as r:
            return await body(r)

    return asyncio.run(main())


def greedy_and_top_k(rec: RequestRecord, k: int) -> None:
    """Temperature 0: each chosen token is the best of its top-k, with the same logprob."""
    for c in rec.choices:
        assert len(c.token_ids) == len(c.logprobs) == len(c.top_logprobs)
        for tok, lp, top in zip(c.token_ids, c.logprobs, c.top_logprobs, strict=True):
            assert len(top) == k and top[0] == (tok, lp)
            assert [p[1] for p in top] == sorted((p[1] for p in top), reverse=True)


def test_server_info_describes_the_engine(reference_server: Callable[..., str]) -> None:
    url = reference_server("--page-size", "8", "--fault", "stale-padding")
    info = with_runner(url, "reference", lambda r: r.server_info())
    assert (info.engine, info.page_size, info.faults) == ("reference", 8, ("stale-padding",))
    assert info.vocab_size and info.eos_token_id is not None and info.max_total_tokens
    assert info.server_args["disable_radix_cache"] is False


def test_both_dialects_return_the_same_exact_tokens(ref: str) -> None:
    spec = RequestSpec("r", 0.0, PROMPT, max_tokens=8)
    sg = with_runner(ref, "reference", lambda r: r.run_alone(spec, run=0), top_k=4)
    oa = with_runner(ref, "openai", lambda r: r.run_alone(spec, run=0), top_k=4)
    assert sg.status is Status.OK and oa.status is Status.OK, (sg.error, oa.error)
    (a,), (b,) = sg.choices, oa.choices
    assert len(a.token_ids) == 8 and a.finish_reason == "length"
    assert b.token_ids == a.token_ids and b.logprobs == a.logprobs and b.finish_reason == "length"
    assert b.text == a.text != ""
    greedy_and_top_k(sg, 4)
    # The openai answer keys alternatives by text only: the chosen token is all that maps to an id.
    assert all(top == ((t, lp),) for t, lp, top in zip(b.token_ids, b.logprobs, b.top_logprobs, strict=True))
    assert sg.prompt_tokens == oa.prompt_tokens == len(PROMPT)


@pytest.mark.parametrize("engine", ["reference", "openai"])
def test_repeat_hits_the_cache_and_flush_empties_it(ref: str, engine: str) -> None:
    spec = RequestSpec("c", 0.0, PROMPT, max_tokens=2)

    async def body(r: Runner) -> tuple[RequestRecord, RequestRecord, bool, RequestRecord]:
        cold = await r.run_alone(spec, run=0, flush=engine == "reference")
        warm = await r.run_alone(spec, run=1, flush=False)
        flushed = await r.flush()
        again = await r.run_alone(spec, run=2, flush=False)
        return cold, warm, flushed, again

    if engine == "openai":  # the openai dialect has no flush: empty the cache through SGLang's
        with_runner(ref, "reference", lambda r: r.flush())
    cold, warm, flushed, again = with_runner(ref, engine, body)
    assert cold.cached_tokens == 0
    assert warm.cached_tokens is not None and 0 < warm.cached_tokens < len(PROMPT)
    assert warm.choices[0].token_ids == cold.choices[0].token_ids
    if engine == "reference":
        assert flushed and again.cached_tokens == 0
    else:
        assert not flushed and again.cached_tokens == warm.cached_tokens


@pytest.mark.parametrize("engine", ["reference", "openai"])
def test_streaming_gives_first_token_time_and_the_same_answer(ref: str, engine: str) -> None:
    plain = RequestSpec("p", 0.0, PROMPT, max_tokens=6, n=2)
    streamed = RequestSpec("s", 0.0, PROMPT, max_tokens=6, n=2, stream=True)

    async def body(r: Runner) -> tuple[RequestRecord, RequestRecord]:
        return await r.run_alone(plain, run=0, flush=False), await r.run_alone(streamed, run=0, flush=False)

    a, b = with_runner(ref, engine, body)
    assert a.status is Status.OK and b.status is Status.OK, (a.error, b.error)
    assert a.first_token_ms is None
    assert b.sent_ms is not None and b.first_token_ms is not None and b.end_ms is not None
    assert b.sent_ms < b.first_token_ms <= b.end_ms
    assert [c.token_ids for c in b.choices] == [c.token_ids for c in a.choices]
    assert [c.top_logprobs for c in b.choices] == [c.top_logprobs for c in a.choices]
    assert [c.text for c in b.choices] == [c.text for c in a.choices]
    assert len(b.choices) == 2 and all(c.finish_reason == "length" for c in b.choices)


def test_cancelled_request_is_cancelled_and_aborted_by_the_server(ref: str) -> None:
    spec = RequestSpec("x", 0.0, PROMPT, max_tokens=3000, stream=True, cancel_after_ms=100)

    async def body(r: Runner) -> tuple[RequestRecord, float, float]:
        before = (await r.metrics())["sglang:num_aborted_requests_total"]
        rec = await r.run_alone(spec, run=0, flush=False)
        for _ in range(100):  # the server notices the disconnect a moment later
            after = (await r.metrics())["sglang:num_aborted_requests_total"]
            if after > before:
                break
            await asyncio.sleep(0.02)
        return rec, before, after

    rec, before, after = with_runner(ref, "reference", body)
    assert rec.status is Status.CANCELLED and rec.indeterminate
    assert rec.choices and 0 < len(rec.choices[0].token_ids) < 3000  # partial output kept
    assert after == before + 1


def test_concurrent_run_matches_each_request_alone(ref: str) -> None:
    """The clean engine is batch-invariant: under load every request answers as it does alone."""
    b = PromptBuilder(seed=3, vocab=range(3, 1000))
    specs = tuple(
        RequestSpec(
            f"r{i}",
            2.0 * i,
            b.prompt("p", prefix_len=PAGE * (i % 3), prompt_len=48 + i),
            max_tokens=6,
            prefix_name="p",
            prefix_len=PAGE * (i % 3),
            n=1 + i % 2,
            stream=i % 3 == 0,
        )
        for i in range(8)
    )

    async def body(r: Runner) -> tuple[Any, list[RequestRecord], Any]:
        load = await r.run(Scenario(seed=3, requests=specs), run=0, label="load")
        alone = [await r.run_alone(s, run=0) for s in specs]
        await r.run_alone(specs[-1], run=0)  # leave its prompt cached, then hit it under load
        warm = await r.run(Scenario(seed=3, requests=specs), run=1, label="warm")
        return load, alone, warm

    load, alone, warm = with_runner(ref, "reference", body)
    assert [r.request_id for r in load.records] == [s.id for s in specs]
    assert all(r.status is Status.OK and r.label == "load" for r in load.records)
    assert all(r.status is Status.OK and r.label == "alone" for r in alone)
    for under_load, by_itself in zip(load.records, alone, strict=True):
        assert [c.token_ids for c in under_load.choices] == [c.token_ids for c in by_itself.choices]
    # A warm cache changes nothing either, and it really was hit.
    assert [[c.token_ids for c in r.choices] for r in warm.records] == [[c.token_ids for c in r.choices] for r in load.records]
    assert warm.by_id()[specs[-1].id].cached_tokens


def test_a_salt_travels_with_the_request_and_keys_the_cache(ref: str) -> None:
    # The SGLang dialect sends the salt as `extra_key` (the vLLM one as `cache_salt`: checked
    # below, and against vLLM itself in tests/engines). Through the Runner: the same salt reuses
    # the tenant's two pages, another salt none.
    def spec(rid: str, salt: str) -> RequestSpec:
        return RequestSpec(rid, 0.0, PROMPT, 2, cache_salt=salt)

    async def body(r: Runner) -> list[int | None]:
        await r.flush()
        out = []
        for rid, salt in (("a1", "tenant-a"), ("a2", "tenant-a"), ("b1", "tenant-b")):
            out.append((await r.run_alone(spec(rid, salt), run=0, flush=False)).cached_tokens)
        return out

    assert with_runner(ref, "reference", body) == [0, 2 * PAGE, 0]


def test_a_salted_request_is_refused_where_the_dialect_has_no_salt(ref: str) -> None:
    from servefuzz.errors import UsageError
    from servefuzz.targets.base import capabilities

    salted = RequestSpec("r01", 0.0, (5, 6), 2, cache_salt="tenant-a")
    assert [capabilities(make_target(e, "http://127.0.0.1:1")).salts for e in ("reference", "sglang", "vllm", "openai", "llamacpp")] == [
        True, True, True, False, False]
    assert make_target("sglang", "http://127.0.0.1:1").body(salted, top_k=1)["extra_key"] == "tenant-a"
    assert make_target("vllm", "http://127.0.0.1:1").body(salted, top_k=1, model="m")["cache_salt"] == "tenant-a"
    assert "cache_salt" not in make_target("vllm", "http://127.0.0.1:1").body(
        RequestSpec("r01", 0.0, (5, 6), 2), top_k=1, model="m")
    with pytest.raises(UsageError, match="no cache salt|has none"):
        make_target("llamacpp", "http://127.0.0.1:1").body(salted, top_k=1)

    # Refused before anything is sent: the plain OpenAI dialect has no salt (it would be sent
    # unsalted, and test something else), though this server would take one.
    async def refused(r: Runner) -> None:
        await r.run(Scenario(0, (salted,)), run=0)

    with pytest.raises(UsageError, match="openai dialect has none"):
        with_runner(ref, "openai", refused)


def test_a_seeded_sampled_spec_is_sent_as_one_and_both_dialects_draw_the_same(ref: str) -> None:
    # The adapters send the spec's temperature and seed (SGLang's sampling_seed, OpenAI's seed):
    # the same seed draws the same tokens in both dialects, another seed other tokens, and the
    # draws are not the greedy answer.
    seeded = RequestSpec("s", 0.0, PROMPT, max_tokens=12, n=2, temperature=1.5, seed=42)
    sg = with_runner(ref, "reference", lambda r: r.run_alone(seeded, run=0), top_k=4)
    oa = with_runner(ref, "openai", lambda r: r.run_alone(seeded, run=0), top_k=4)
    assert sg.status is Status.OK and oa.status is Status.OK, (sg.error, oa.error)
    assert [c.token_ids for c in sg.choices] == [c.token_ids for c in oa.choices]
    assert sg.choices[0].token_ids != sg.choices[1].token_ids  # choice i draws with (seed, i)
    other = with_runner(ref, "reference", lambda r: r.run_alone(dataclasses.replace(seeded, seed=43), run=0), top_k=4)
    greedy = with_runner(ref, "reference", lambda r: r.run_alone(RequestSpec("g", 0.0, PROMPT, 12), run=0), top_k=4)
    assert other.choices[0].token_ids != sg.choices[0].token_ids != greedy.choices[0].token_ids


def test_each_dialect_spells_temperature_and_seed_its_own_way() -> None:
    from servefuzz.targets.llamacpp import LlamaCppTarget
    from servefuzz.targets.sglang import SGLangTarget
    from servefuzz.targets.vllm import VLLMTarget

    spec = RequestSpec("s", 0.0, (5, 6), 3, n=2, temperature=0.7, seed=9)
    sp = SGLangTarget("http://127.0.0.1:1").body(spec, top_k=2)["sampling_params"]
    assert (sp["temperature"], sp["sampling_seed"], sp["n"]) == (0.7, 9, 2)
    oa = VLLMTarget("http://127.0.0.1:1", model="m").body(spec, top_k=2, model="m")
    assert (oa["temperature"], oa["seed"], oa["n"]) == (0.7, 9, 2)
    lc = LlamaCppTarget("http://127.0.0.1:1").body(spec, top_k=2)
    assert (lc["temperature"], lc["seed"], lc["n_cmpl"]) == (0.7, 9, 2)
    greedy = RequestSpec("g", 0.0, (5, 6), 3)
    assert "seed" not in VLLMTarget("http://127.0.0.1:1").body(greedy, top_k=2, model="m")
    assert "sampling_seed" not in SGLangTarget("http://127.0.0.1:1").body(greedy, top_k=2)["sampling_params"]
    assert "seed" not in LlamaCppTarget("http://127.0.0.1:1").body(greedy, top_k=2)


def test_each_dialect_spells_a_choice_constraint_its_own_way() -> None:
    from servefuzz.errors import UsageError
    from servefuzz.targets.llamacpp import LlamaCppTarget
    from servefuzz.targets.openai import OpenAITarget
    from servefuzz.targets.sglang import SGLangTarget
    from servefuzz.targets.vllm import VLLMTarget

    spec = RequestSpec("c", 0.0, (5, 6), 8, ignore_eos=False, choices=(" w5 w7", " w9"))
    sp = SGLangTarget("http://127.0.0.1:1").body(spec, top_k=2)["sampling_params"]
    assert (sp["regex"], sp["ignore_eos"]) == ("( w5 w7| w9)", False)
    oa = VLLMTarget("http://127.0.0.1:1", model="m").body(spec, top_k=2, model="m")
    assert (oa["structured_outputs"], oa["ignore_eos"]) == ({"choice": [" w5 w7", " w9"]}, False)
    lc = LlamaCppTarget("http://127.0.0.1:1").body(spec, top_k=2)
    assert (lc["grammar"], lc["ignore_eos"]) == ('root ::= " w5 w7" | " w9"', False)
    with pytest.raises(UsageError, match="openai dialect has none"):
        OpenAITarget("http://127.0.0.1:1").body(spec, top_k=2, model="m")
    free = RequestSpec("f", 0.0, (5, 6), 3)
    assert "regex" not in SGLangTarget("http://127.0.0.1:1").body(free, top_k=2)["sampling_params"]
    assert "structured_outputs" not in VLLMTarget("http://127.0.0.1:1").body(free, top_k=2, model="m")
    assert "grammar" not in LlamaCppTarget("http://127.0.0.1:1").body(free, top_k=2)


def test_a_constrained_spec_answers_one_of_its_choices_and_the_text_reads_as_it(ref: str) -> None:
    # The reference engine reads the SGLang adapter's regex as token choices; its text leaves
    # out the EOS that ended the answer, as SGLang's does, so the answer reads as its choice.
    choices = (" w5 w7", " w900", " w11 w12 w13")
    bound = RequestSpec("c", 0.0, PROMPT, max_tokens=8, n=2, ignore_eos=False, choices=choices)
    got = with_runner(ref, "reference", lambda r: r.run_alone(bound, run=0), top_k=2)
    assert got.status is Status.OK, got.error
    assert all(c.text in choices and c.finish_reason == "stop" for c in got.choices), got.choices
def test_an_adapter_travels_with_the_request_in_each_dialect(reference_server: Callable[..., str]) -> None:
    from servefuzz.errors import UsageError
    from servefuzz.targets.base import capabilities

    url = reference_server("--page-size", str(PAGE), "--lora", "lora-a=1", "--lora", "lora-b=2")
    info = with_runner(url, "reference", lambda r: r.server_info())
    assert info.adapters == ("lora-a", "lora-b")
    base, under_a = RequestSpec("b", 0.0, PROMPT, 8), RequestSpec("a", 0.0, PROMPT, 8, adapter="lora-a")
    sg_base = with_runner(url, "reference", lambda r: r.run_alone(base, run=0), top_k=2)
    sg_a = with_runner(url, "reference", lambda r: r.run_alone(under_a, run=0), top_k=2)
    # The OpenAI dialect names an adapter as the request's model, as vLLM does: the same answer.
    async def as_model_lora_a() -> RequestRecord:
        async with Runner(make_target("openai", url, model="lora-a"), RunConfig(top_k=2)) as r:
            return await r.run_alone(base, run=0)

    oa_a = asyncio.run(as_model_lora_a())
    assert sg_a.status is Status.OK and oa_a.status is Status.OK, (sg_a.error, oa_a.error)
    assert sg_a.choices[0].token_ids == oa_a.choices[0].token_ids != sg_base.choices[0].token_ids
    assert [capabilities(make_target(e, "http://127.0.0.1:1")).adapters for e in ("reference", "sglang", "vllm", "openai")] == [
        True, True, True, False]
    assert make_target("vllm", "http://127.0.0.1:1").body(under_a, top_k=1, model="m")["model"] == "lora-a"
    assert make_target("sglang", "http://127.0.0.1:1").body(under_a, top_k=1)["lora_path"] == "lora-a"
    assert "lora_path" not in make_target("sglang", "http://127.0.0.1:1").body(base, top_k=1)

    async def refused(r: Runner) -> None:
        await r.run(Scenario(0, (under_a,)), run=0)

    with pytest.raises(UsageError, match="openai dialect has none"):
        with_runner(url, "openai", refused)


def test_a_scenario_under_an_adapter_the_server_does_not_serve_is_refused_before_sending(ref: str) -> None:
    from servefuzz.errors import UsageError

    async def refused(r: Runner) -> None:
        await r.run(Scenario(0, (RequestSpec("r01", 0.0, (5, 6), 2, adapter="lora-a"),)), run=0)

    with pytest.raises(UsageError, match="which this server does not serve \\(it serves: none\\)"):
        with_runner(ref, "reference", refused)
