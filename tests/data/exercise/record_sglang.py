"""Record what `tests/test_exercise.py` reads: a real SGLang CPU server's answers to one scenario
whose requests share a prefix, once with the radix cache on and once with `--disable-radix-cache`.

Run from the repository root (SGLang installed by scripts/setup_engines.sh):

    PYTHONPATH=src python tests/data/exercise/record_sglang.py tests/data/exercise

For each server it writes a folder `sglang-<name>/`: `target.json` (the server as servefuzz read
it, `TargetInfo`), `scenario.json`, and `histories.jsonl`, its execution by `trial.execute` (two
loaded runs with the `/metrics` counter deltas in their meta, the warm and primed probe of one
request, each request alone) as the campaign appends it to its own histories.jsonl.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from servefuzz import engine_files, engines
from servefuzz.engines import sglang as sglang_engine
from servefuzz.history import RunHistory, write_history_jsonl
from servefuzz.launcher import ServerProcess
from servefuzz.models import build_models
from servefuzz.runner import RunConfig, Runner
from servefuzz.targets import make_target
from servefuzz.trial import execute, probe_targets
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

PAGE = 16


def scenario() -> Scenario:
    """Four requests sharing a 40-token prefix (two whole pages and 8 tokens), 30 ms apart, so
    each later one finds the earlier ones' pages in the radix tree."""
    builder = PromptBuilder(seed=5, vocab=range(3, 1000))
    return Scenario(seed=5, requests=tuple(
        RequestSpec(f"r{i:02d}", 30.0 * i, builder.prompt("p", prefix_len=40, prompt_len=40 + 6 + i),
                    max_tokens=6, prefix_name="p", prefix_len=40)
        for i in range(4)))


async def record(url: str, out: Path) -> None:
    sc = scenario()
    async with Runner(make_target("sglang", url), RunConfig(top_k=5, request_timeout_s=300)) as r:
        done = await execute(r, sc, runs=2, with_alone=True, probes=probe_targets(sc, 1))
        assert r.info is not None
        info = r.info
    out.mkdir(parents=True, exist_ok=True)
    (out / "target.json").write_text(json.dumps(info.to_json(), indent=1) + "\n")
    (out / "scenario.json").write_text(json.dumps(sc.to_json(), indent=1) + "\n")
    alone = tuple(rec for recs in done.alone.values() for rec in recs)
    write_history_jsonl(out / "histories.jsonl", [*done.loaded, RunHistory(0, "alone", alone),
                                                  RunHistory(0, "cache", tuple(done.cache))])


def main(out: Path) -> None:
    version = engines.PRESET_VERSIONS["sglang-cpu"].default
    models = build_models(Path(tempfile.mkdtemp()), dtype="float32", seed=0)
    for name, extra in (("radix", ["--enable-metrics"]), ("no-radix", ["--enable-metrics", "--disable-radix-cache"])):
        argv = sglang_engine.cpu_argv(engine_files.program("sglang-cpu", version), models.hf_dir, page_size=PAGE, extra=extra)
        srv = ServerProcess(argv, env=sglang_engine.cpu_env(str(engine_files.standin_path()), version),
                            log_path=out / f".{name}.log", start_timeout_s=sglang_engine.START_TIMEOUT_S)
        srv.start()
        try:
            asyncio.run(record(srv.base_url, out / f"sglang-{name}"))
        finally:
            srv.stop()
        print(name, "recorded", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
