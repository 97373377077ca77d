"""servefuzz's tracer inside the real engines (vLLM CPU, SGLang CPU) on 127.0.0.1: what it
reports, and that it reports nothing where it was not asked for.

The traced server follows one file only, the engine's scheduler: every point it reports is then
the scheduler's. The points must come from a process other than the one servefuzz started (the
scheduler runs in vLLM's engine core and SGLang's scheduler process, children of the server), so
the environment reached them; they grow with a served request. The untraced servers of the
other engine tests (`vllm_server`, `sglang_server`, started without the variable) answer nothing.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from servefuzz import engine_files, engines
from servefuzz.engines import sglang as sglang_engine
from servefuzz.engines import vllm as vllm_engine
from servefuzz.launcher import Launch, ServerProcess
from servefuzz.models import ModelPaths
from servefuzz.runner import RunConfig, Runner
from servefuzz.servers import tracing_env
from servefuzz.targets import make_target
from servefuzz.targets.base import HttpTarget
from servefuzz.targets.coverage_files import CoverageFiles
from servefuzz.workload import RequestSpec

pytestmark = [pytest.mark.engine,
              pytest.mark.timeout(int(max(vllm_engine.START_TIMEOUT_S, sglang_engine.START_TIMEOUT_S)) + 300)]

# Each preset's scheduler file, as a path fragment the tracer follows (`EngineSpec.traced`).
SCHEDULER = {"vllm-cpu": "vllm/v1/core/sched/scheduler.py", "sglang-cpu": "sglang/srt/managers/scheduler.py"}


def _installed(preset: str) -> None:
    version = engines.PRESET_VERSIONS[preset].known[0] if preset in engines.PRESET_VERSIONS else None
    if not engine_files.installed(preset, version):
        pytest.skip(f"{preset} is not installed under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")


def _coverage_around_a_request(engine: str, url: str, files: CoverageFiles) -> tuple[dict[int, int] | None, dict[int, int]]:
    async def main() -> tuple[dict[int, int] | None, dict[int, int]]:
        target = make_target(engine, url)
        assert isinstance(target, HttpTarget)
        target.coverage_source = files
        async with Runner(target, RunConfig(request_timeout_s=300)) as runner:
            before = await target.engine_coverage(runner.session)
            record = await runner.run_alone(RequestSpec("r0", 0.0, tuple(range(5, 69)), 8), run=0)
            assert record.ok, record
            return before, await runner.engine_coverage()

    return asyncio.run(main())


@pytest.mark.parametrize("preset", ["vllm-cpu", "sglang-cpu"])
def test_the_tracer_reports_the_schedulers_points_for_a_served_request(
    preset: str, tiny_models: ModelPaths, tmp_path: Path
) -> None:
    _installed(preset)
    launch = Launch.resolve(preset, model=tiny_models.hf_dir)
    files = CoverageFiles(tmp_path / "cov")
    files.reset()
    srv = ServerProcess(launch.argv, env=tracing_env(launch.env, files.folder, (SCHEDULER[preset],)),
                        log_path=tmp_path / "server.log", start_timeout_s=launch.start_timeout_s)
    with srv:
        before, after = _coverage_around_a_request(launch.engine, srv.base_url, files)
        answers = {int(p.stem): json.loads(p.read_text()) for p in files.folder.glob("*.json")}
    assert before is not None and after, srv.log_tail(20)
    grown = {p for p, n in after.items() if n > before.get(p, 0)}
    assert grown, "a served request reached none of the scheduler's edges"
    # Where the points came from: a child of the server servefuzz started (the env reached it).
    assert any(a["points"] for pid, a in answers.items() if pid != srv.pid), sorted(answers)


@pytest.mark.parametrize("fixture", ["vllm_server", "sglang_server"])
def test_an_engine_launched_without_the_variable_writes_nothing_and_has_no_coverage(
    fixture: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    srv: ServerProcess = request.getfixturevalue(fixture)  # skips when the engine is not installed
    engine = "vllm" if fixture == "vllm_server" else "sglang"
    files = CoverageFiles(tmp_path / "cov", wait_s=1.0)
    files.reset()
    before, after = _coverage_around_a_request(engine, srv.base_url, files)
    assert before is None and after == {}  # None from the target; the runner's "none" is {}
    assert [p.name for p in files.folder.iterdir()] == ["ask"]
