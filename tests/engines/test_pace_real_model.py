"""The request timeout scales with the target's measured speed (`servefuzz.pace`), on a real
slow target: llama-server serving the real SmolLM2-135M-Instruct (about 39 tokens/s here).

The floor is set low (4 s) so that the test needs only seconds: a run whose requests take longer
than the floor is a false hang at a fixed timeout (it fires) and answers in full once a few lone
requests have measured the target (as a campaign's isolation references do); on the tiny
reference engine the measured pace leaves the default floor (120 s) as it was (it stays quiet).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from servefuzz.history import RunHistory, Status
from servefuzz.launcher import ServerProcess
from servefuzz.runner import RunConfig, Runner
from servefuzz.targets import make_target
from servefuzz.workload import RequestSpec, Scenario

pytestmark = pytest.mark.engine

FLOOR_S = 4.0
# Four requests of 96 tokens each in one run: about 10 s of decoding at 39 tokens/s.
SCENARIO = Scenario(seed=0, requests=tuple(
    RequestSpec(f"r{i}", 0.0, tuple(range(200 + 10 * i, 260 + 10 * i)), max_tokens=96, ignore_eos=True)
    for i in range(4)
))
# What measures the target first: short requests alone, of different shapes (prompt, output).
LONE = ((30, 8), (90, 2), (15, 12))


def _run(engine: str, url: str, config: RunConfig) -> tuple[RunHistory, float]:
    async def main() -> tuple[RunHistory, float]:
        async with Runner(make_target(engine, url), config) as r:
            for i, (prompt, out) in enumerate(LONE):
                lone = await r.run_alone(RequestSpec(f"m{i}", 0.0, tuple(range(300, 300 + prompt)), max_tokens=out,
                                                     ignore_eos=True), run=0)
                assert lone.status is Status.OK, lone.error
            assert r.meter.pace is not None  # measured either way; used when paced
            limit = r.timeout_s(SCENARIO.requests)  # before the run, which the meter then reads too
            return await r.run(SCENARIO, run=0), limit

    return asyncio.run(main())


def test_a_slow_real_model_is_no_hang_when_the_timeout_is_paced(real_llama_server: ServerProcess) -> None:
    fixed, limit = _run("llamacpp", real_llama_server.base_url, RunConfig(request_timeout_s=FLOOR_S))
    assert limit == FLOOR_S
    assert Status.TIMEOUT in {r.status for r in fixed.records}  # the false hang a fixed timeout makes
    paced, limit = _run("llamacpp", real_llama_server.base_url, RunConfig(request_timeout_s=FLOOR_S, paced=True))
    assert limit > FLOOR_S
    assert all(r.status is Status.OK for r in paced.records), [r.error for r in paced.records]
    assert paced.meta["request_timeout_s"] == round(limit, 1)
    # The paced limit bounds this run's time: the serial bound, times PACE_MULTIPLE, is above it.
    took = max(r.end_ms or 0.0 for r in paced.records) / 1000.0
    assert took < limit


def test_a_fast_target_keeps_the_floor(reference_server: Callable[..., str]) -> None:
    history, limit = _run("reference", reference_server(), RunConfig(paced=True))
    assert limit == RunConfig.request_timeout_s
    assert "request_timeout_s" not in history.meta
    assert all(r.status is Status.OK for r in history.records)
