"""The campaign's truth check, quiet where it must be: llama-server serving servefuzz's tiny llama
computes that model (within `TRUTH_NEAR` of its float64 truth), so the campaign reads the check,
finds it near, says nothing and keeps the truth control for its confirmations. The check firing,
on an engine held to a model it does not compute, is in tests/test_campaign.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from rich.console import Console

from servefuzz.campaign import CampaignConfig, CampaignResult, run_campaign
from servefuzz.launcher import ServerProcess
from servefuzz.models import ModelPaths
from servefuzz.oracles.controls import TRUTH_NEAR
from servefuzz.progress import print_summary
from servefuzz.runner import Runner
from servefuzz.strategies import RandomLoad
from servefuzz.targets import make_target

pytestmark = [pytest.mark.engine, pytest.mark.timeout(300)]


def test_an_engine_that_computes_the_built_model_passes_the_truth_check_quietly(
    llama_server: ServerProcess, tiny_models: ModelPaths, tmp_path: Path
) -> None:
    config = CampaignConfig(tmp_path / "c", seed=1, request_budget=30, truth_model=tiny_models.gguf)
    lasts: list[str] = []

    async def go() -> CampaignResult:
        async with Runner(make_target("llamacpp", llama_server.base_url)) as runner:
            return await run_campaign(runner, [RandomLoad()], config, on_event=lambda s: lasts.append(s.last.words() if s.last else ""))

    result = asyncio.run(go())
    assert result.truth is not None, "the check read no answer alone"
    assert not result.truth.far and result.truth.distance <= TRUTH_NEAR, result.truth
    assert "computes the model" in result.truth.said()
    assert result.to_json()["truth_check"]["far"] is False
    assert not any("does not compute the exact" in last for last in lasts)
    assert not any("does not compute the exact" in note for _, f in result.findings for note in f.notes)
    console = Console(record=True, width=200)
    print_summary(console, result)
    assert "does not compute the exact" not in console.export_text()
