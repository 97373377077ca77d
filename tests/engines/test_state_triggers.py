"""The strategies aimed at the state the architectures keep (issue 42) make it happen on a real
engine: llama-server 0c1e570 serving servefuzz's tiny models of each architecture, the scenario
sent through servefuzz's own runner, the trigger read from the engine's answers (`cache_n`, the
prompt tokens it reused, and what it evaluated) or its `/slots`. Each beside a control where it
does not happen.

What llama-server does with this state (measured here, `-lv 4` logs): a recurrent model's slot
keeps the state at the end of its sequence and a context checkpoint 4 tokens before its prompt's
end (another one step before the end with a small `-b`); a hit is served from a checkpoint at or
below the shared length, or the whole prompt is recomputed. A windowed model reuses a hit whose
cached tail still holds the window, else restores a checkpoint or recomputes. A cut stream is
noticed only when the server writes: with `return_progress` (what the adapter asks for on a
stream it will cut) that is after each prefill step, so the cut lands between steps, and the
adapter places it by that progress (`cancel_at_prefill`), not by the clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from servefuzz import engine_files
from servefuzz.campaign.choose import shape_of
from servefuzz.coverage import points, window_bucket
from servefuzz.engines import llamacpp as llamacpp_engine
from servefuzz.history import RequestRecord, RunHistory
from servefuzz.launcher import ServerProcess
from servefuzz.model_facts import read_model_facts
from servefuzz.runner import RunConfig, Runner
from servefuzz.strategies import (
    Draft,
    ExpertBatch,
    PrefillAbort,
    StateRestore,
    TargetShape,
    WindowEdge,
    WindowPrefix,
    offered,
)
from servefuzz.targets import make_target
from servefuzz.terms import common_prefix
from servefuzz.workload import RequestSpec, Scenario

pytestmark = pytest.mark.engine

# llama-server keeps a recurrent model's checkpoint this many tokens before its prompt's end.
CHECKPOINT_BACK = 4


@contextmanager
def _serving(arch: str, tmp_path: Path, extra: Sequence[str] = ()) -> Iterator[tuple[ServerProcess, Path]]:
    """llama-server as the `llama-server` preset starts it (`preset_argv`), on the tiny model of
    `arch`, with `extra` flags after its own."""
    if not engine_files.installed("llama-server"):
        pytest.skip(f"llama-server is not built under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    if engine_files.gguf_converter() is None:
        pytest.skip(f"no llama.cpp converter beside llama-server: run {engine_files.SETUP_SCRIPT}")
    folder = engine_files.arch_models(arch)
    (gguf,) = folder.glob("*.gguf")
    argv = [*llamacpp_engine.preset_argv(engine_files.program("llama-server"), gguf, save_path=str(tmp_path)), *extra]
    server = ServerProcess(argv, log_path=tmp_path / "server.log", start_timeout_s=60)
    server.start()
    try:
        yield server, folder
    finally:
        server.stop()


async def _runner_shape(runner: Runner, folder: Path, **changes: Any) -> TargetShape:
    """What a campaign would hand the strategies: the target's shape with the model's facts, as
    servefuzz records them when it launches the model (`servers._say_launch`)."""
    assert runner.info is not None
    info = dataclasses.replace(runner.info, architecture=read_model_facts(folder))
    return dataclasses.replace(shape_of(info), **changes)


def _run(url: str, folder: Path, make: Callable[[TargetShape], Scenario], **changes: Any) -> tuple[Scenario, RunHistory, TargetShape]:
    """`make(shape)`'s scenario on a flushed server through servefuzz's runner, its requests one
    at a time in the order the scenario sends them, the cache kept between them.

    One at a time: the two cores here run other work too (a load average of 18 measured while
    writing this: a 255-token prefill took 1.8 s, ten times a campaign's), so a scenario's own
    spacing (a hit 150-250 ms after its prompt was cached) says nothing of what the engine had
    cached by then. In order, each request meets the state the earlier ones left, which is what
    a trigger needs; a campaign sends the same requests together. The next request waits for
    every slot to be idle: a cut request's slot is released only when the server's loop takes
    the cancel, and a retry sent before that went to another slot (measured: the retry's task
    was placed 0.1 ms before the cut one's slot let go)."""

    async def main() -> tuple[Scenario, RunHistory, TargetShape]:
        async with Runner(make_target("llamacpp", url), RunConfig(top_k=1, request_timeout_s=120)) as r:
            shape = await _runner_shape(r, folder, **changes)
            scenario = make(shape)
            assert await r.flush()
            records = []
            for i, spec in enumerate(sorted(scenario.requests, key=lambda s: s.offset_ms)):
                one = Scenario(scenario.seed, (dataclasses.replace(spec, offset_ms=0.0),), scenario.meta)
                records += (await r.run(one, run=i)).records
                await _slots_idle(url)
            return scenario, RunHistory(0, "load", tuple(records)), shape

    return asyncio.run(main())


async def _slots_idle(url: str) -> None:
    """Until no slot of the server is processing (`/slots`, `is_processing`)."""
    async with aiohttp.ClientSession() as s:
        for _ in range(3000):
            async with s.get(url + "/slots") as got:
                if not any(slot.get("is_processing") for slot in await got.json()):
                    return
            await asyncio.sleep(0.01)
    pytest.fail("a slot was still processing 30 s after its request ended")


def _records(history: RunHistory) -> dict[str, RequestRecord]:
    return {r.request_id: r for r in history.records}


@pytest.mark.parametrize("arch", ["qwen3-next", "nemotron-h"])  # gated delta net, Mamba2
def test_state_restore_hits_a_recurrent_state_at_the_cached_length_and_a_shorter_share_recomputes(
        arch: str, tmp_path: Path) -> None:
    with _serving(arch, tmp_path) as (server, folder):
        def aimed(shape: TargetShape) -> Scenario:
            assert [s.name for s in offered([StateRestore()], shape)] == ["state-restore"]
            return StateRestore().generate(random.Random(3), shape, seed=3)

        scenario, history, shape = _run(server.base_url, folder, aimed)

        def control(shape: TargetShape) -> Scenario:
            # The same cached prompt, then a prompt sharing only its first half: no state there.
            d = Draft(3, shape)
            d.add(0, 150, 4, prefix="p0", prefix_len=150)
            d.add(200, 170, 4, prefix="p0", prefix_len=75)
            return d.scenario("control")

        _, quiet, _ = _run(server.base_url, folder, control)
    assert shape.model.recurrent and shape.model.state_chunk == {"qwen3-next": 64, "nemotron-h": 32}[arch]
    records = _records(history)
    where = points(scenario, shape, [history])
    restored = {}
    for spec in scenario.requests:
        rec = records[spec.id]
        assert rec.ok, rec
        if where[spec.id]["reuse"] in ("exact", "whole-but-last") and rec.cached_tokens:
            restored[where[spec.id]["reuse"]] = (spec, rec.cached_tokens)
    # A hit at exactly a cached prompt's length, and one of all of it but its last token, each
    # served from the state llama-server checkpointed 4 tokens before that prompt's end: a
    # recurrent state restored at a length the request did not end at.
    assert set(restored) == {"exact", "whole-but-last"}, restored
    for kind, (spec, cached) in restored.items():
        back = 0 if kind == "exact" else 1  # what the request leaves out of the cached prompt
        whole = next(len(e.prompt_ids) for e in scenario.requests
                     if e.offset_ms < spec.offset_ms and common_prefix(e.prompt_ids, spec.prompt_ids) == len(e.prompt_ids) - back)
        assert cached == whole - CHECKPOINT_BACK, (spec.id, cached, whole)
    cold = _records(quiet)
    assert cold["r02"].ok and cold["r02"].cached_tokens == 0  # 75 shared tokens: no state there


def test_window_prefix_reuses_a_cached_prefix_longer_than_the_window_and_not_one_a_window_stale(
        tmp_path: Path) -> None:
    with _serving("gemma3", tmp_path) as (server, folder):
        scenario, history, shape = _run(server.base_url, folder,
                                        lambda shape: WindowPrefix().generate(random.Random(1), shape, seed=1))

        def control(shape: TargetShape) -> Scenario:
            d = Draft(1, shape)
            d.add(0, 200, 4, prefix="p0", prefix_len=200)
            d.add(200, 120, 4, prefix="p0", prefix_len=60)  # ends 140 tokens, over two windows, before it
            return d.scenario("control")

        _, quiet, _ = _run(server.base_url, folder, control)
    w = shape.model.window
    assert w == 64
    records = _records(history)
    cached = scenario.meta["aims"][0]  # type: ignore[index]
    assert cached > w
    hits = [records[s.id].cached_tokens for s in scenario.requests[2:] if s.prefix_len == cached]
    assert all(records[s.id].ok for s in scenario.requests)
    # At least one hit of the whole cached prompt was served from the cache beyond the window.
    assert any(c is not None and c > w for c in hits), hits
    assert _records(quiet)["r02"].cached_tokens == 0  # a window stale: recomputed, not reused


def test_window_edge_sends_prompts_on_the_window_and_crosses_it_while_decoding(tmp_path: Path) -> None:
    with _serving("gemma3", tmp_path) as (server, folder):
        scenario, history, shape = _run(server.base_url, folder,
                                        lambda shape: WindowEdge().generate(random.Random(1), shape, seed=1))
    w = shape.model.window
    assert w is not None
    records = _records(history)
    seen = set()
    for spec in scenario.requests:
        rec = records[spec.id]
        assert rec.ok and rec.prompt_tokens is not None, rec
        made = len(rec.choices[0].token_ids)
        # The engine's own counts: the prompt it evaluated and the tokens it wrote.
        seen.add(window_bucket(rec.prompt_tokens, made, w))
        if made == spec.max_tokens and rec.prompt_tokens // w < (rec.prompt_tokens + made - 1) // w:
            seen.add("crossed")
    assert {"edge", "crossing", "crossed"} <= seen, seen
    # Control: the same prompts with one token each cross nothing while decoding.
    assert not any(window_bucket(records[s.id].prompt_tokens or 0, 1, w) == "crossing" for s in scenario.requests)


def test_prefill_abort_cuts_a_recurrent_prefill_between_steps_and_the_retry_reuses_the_state_at_the_cut(
        tmp_path: Path) -> None:
    step = 16  # llama-server's -b: the step a prompt's prefill is split in
    budget = 1024  # the step budget the strategy is told: its prompts are 3-6 of it, its cuts a multiple
    seed = 6  # one cut request (3,856 tokens: 241 steps), cut once 1,024 of them are in its slot, then retried

    def aimed(shape: TargetShape) -> Scenario:
        return PrefillAbort().generate(random.Random(seed), shape, seed=seed)

    def uncut(shape: TargetShape) -> Scenario:
        full = aimed(shape)
        return dataclasses.replace(full, requests=tuple(dataclasses.replace(s, cancel_after_ms=None) for s in full.requests))

    # One slot of 4,096 tokens (the preset's eight of 1,024 hold no such prompt).
    with _serving("qwen3-next", tmp_path, ["-b", str(step), "-ub", str(step), "-np", "1"]) as (server, folder):
        # The cut is placed by the prefill's progress (`cancel_at_prefill`), not by the clock:
        # once. (On the clock it landed before the slot started on a quiet box and after the
        # whole prefill in a loaded suite.)
        scenario, history, _ = _run(server.base_url, folder, aimed, chunked_prefill_size=budget)
        _, quiet, _ = _run(server.base_url, folder, uncut, chunked_prefill_size=budget)
    (victim,) = [s for s in scenario.requests if s.cancel_after_ms is not None]
    (retry,) = [s for s in scenario.requests if s.prompt_ids == victim.prompt_ids and s is not victim]
    # Cut at the budget's first step, the server's 64th. The client cuts on the first progress
    # chunk past it, but the server goes on computing until it notices the client gone and its
    # loop takes the cancel, which took it from one step to 0.6 s at a load average of 8 (with a
    # 1,563-token prompt cut at 256: released at 272-1,547 tokens; a 367-token one ran to its
    # end in 2 of 5 runs). Here 176 steps, about 1.5 s loaded, are left after the cut for that.
    assert victim.stream and victim.cancel_at_prefill == budget and len(victim.prompt_ids) > 240 * step
    records = _records(history)
    assert records[victim.id].status.value == "cancelled", records[victim.id]
    assert "prefilled" in (records[victim.id].error or "")  # cut by its progress, not by the clock
    # The retry found the state the cut prefill left: at or past the cut, on a step boundary,
    # and short of both checkpoints a finished prefill leaves (one step and 4 tokens before its end).
    cached = records[retry.id].cached_tokens
    assert cached is not None and budget <= cached < len(retry.prompt_ids) - step and cached % step == 0, cached
    # Control: uncut, the retry hits the finished prompt's own checkpoint, 4 tokens before its end.
    calm = _records(quiet)
    assert calm[retry.id].cached_tokens == len(retry.prompt_ids) - CHECKPOINT_BACK, calm[retry.id].cached_tokens


def test_expert_batch_decodes_a_probe_while_its_batch_grows_and_shrinks(tmp_path: Path) -> None:
    def aimed(shape: TargetShape) -> Scenario:
        return ExpertBatch().generate(random.Random(2), shape, seed=2)

    def alone(shape: TargetShape) -> Scenario:
        return dataclasses.replace(aimed(shape), requests=aimed(shape).requests[:1])

    with _serving("qwen3-moe", tmp_path) as (server, folder):
        # The newcomers' waves meet the probe's decode as the clock has it: up to three tries.
        tries = []
        for _ in range(3):
            tries.append(_busy_slots_while(server.base_url, folder, aimed))
            if len(set(tries[-1])) >= 3:
                break
        else:
            pytest.fail(f"the probe's batch took fewer than three sizes: {[sorted(set(t)) for t in tries]}")
        calm = _busy_slots_while(server.base_url, folder, alone)
    # The probe's decode steps ran in batches of several sizes.
    assert max(tries[-1]) >= 3
    # Control: the probe alone runs in a batch of one row throughout (the poll may also miss
    # it, short as it is alone: the check must stay quiet either way).
    assert set(calm) <= {1}, calm


def _busy_slots_while(url: str, folder: Path, make: Callable[[TargetShape], Scenario]) -> list[int]:
    """Busy slots (`/slots`, `is_processing`) sampled while the scenario's first request runs."""

    async def main() -> list[int]:
        async with Runner(make_target("llamacpp", url), RunConfig(top_k=1, request_timeout_s=120)) as r:
            shape = await _runner_shape(r, folder)
            assert shape.model.experts == 8
            scenario = make(shape)
            assert await r.flush()
            run = asyncio.create_task(r.run(scenario, run=0))
            seen: list[int] = []
            async with aiohttp.ClientSession() as s:
                while not run.done():
                    async with s.get(url + "/slots") as got:
                        slots = await got.json()
                    n = sum(1 for slot in slots if slot.get("is_processing"))
                    if n:
                        seen.append(n)
                    await asyncio.sleep(0.003)
            history = await run
            assert all(rec.ok for rec in history.records)
            return seen

    return asyncio.run(main())


def test_state_specs_are_what_a_campaign_on_a_dense_model_leaves_out() -> None:
    # The control of every test above: on the default (dense llama) model none of them is offered.
    dense = TargetShape()
    assert offered([StateRestore(), WindowPrefix(), PrefillAbort(), ExpertBatch()], dense) == ()
    assert "window" not in points(Scenario(1, (RequestSpec("r01", 0.0, (5, 6), 2),)), dense)["r01"]
