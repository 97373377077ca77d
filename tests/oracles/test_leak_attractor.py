"""The leak oracle on a served model with long attractor runs: quiet on tie flips, firing on a
real leak. The data is real: what vLLM 0.26.0 and SGLang 0.5.17 on the H200 wrote, serving the
tiny seed-0 model (float32 weights) in bfloat16 (`../shared/evidence/*-gpu-bf16/`), where a tie
flip (margin 0.0625 <= threshold 0.25) lands on a run that many requests continue with whatever
came before; and what the reference engine wrote with its stale-slot fault planted (a finished
request's answer handed to a fresh one). The truth is `servefuzz model build --seed 0`'s HF model,
the one the H200 campaigns served."""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from servefuzz.anomaly import Variant, Verdict
from servefuzz.engine_files import hf_model_dir
from servefuzz.finding import Finding, load_finding
from servefuzz.oracles.controls import LEAK, LEAK_MIN_TOKENS, ControlResult, chance_run, leak_tokens
from servefuzz.oracles.judge import rejudged_leaks
from servefuzz.truth import Truth

DATA = Path(__file__).parent / "data"
BENCH = Path(__file__).resolve().parents[2] / "bench"
ATTRACTOR = ("vllm-h200-bf16-attractor.json", "sglang-h200-bf16-attractor.json")


@pytest.fixture(scope="module")
def truth() -> Truth:
    return Truth.load(hf_model_dir(None))  # the cache's seed-0 float32 models, built on first use


def leaks(f: Finding) -> list[ControlResult]:
    return [c for a in f.anomalies for c in a.controls if c.name == LEAK]


@pytest.mark.parametrize("name", ATTRACTOR)
def test_a_tie_flip_onto_an_attractor_run_is_numeric_drift_under_the_leak_rule(name: str, truth: Truth) -> None:
    stored = load_finding(DATA / name)
    assert stored.verdict is Verdict.CORRUPTION  # what the old rule said: backed by the leak alone
    # Without the model: an unchecked leak backs only a flip above the noise, and these are ties.
    assert rejudged_leaks(stored).verdict is Verdict.NUMERIC_DRIFT
    # With it: the forced check says every matched token is the victim's own continuation.
    again = rejudged_leaks(stored, truth)
    assert again.verdict is Verdict.NUMERIC_DRIFT
    checks = [c.own_check for c in leaks(again)]
    assert checks and all(c is not None and c.explains and c.how == "truth" and c.checked >= 8 for c in checks), checks
    assert all(not c.backs and c.summary.startswith("no leak: ") for c in leaks(again))


def test_the_same_model_with_another_requests_text_planted_after_the_flip_is_still_a_leak(truth: Truth) -> None:
    """The control: in the vLLM finding, the deviant answer's matched run is replaced by a run of
    another request's prompt, which the victim's own context does not continue with."""
    stored = load_finding(DATA / ATTRACTOR[0])
    head = next(a for a in stored.anomalies if LEAK in a.backed_by)
    [leak] = [c for c in head.controls if c.name == LEAK and c.backs]
    assert leak.leak is not None
    start, match = leak.leak.from_token, list(leak.leak.match)
    source = next(s for s in stored.scenario.requests if s.id != head.request_id)
    planted_run = list(source.prompt_ids[5:5 + len(match)])

    def plant(v: Variant) -> Variant:
        if list(v.token_ids[start:start + len(match)]) != match:
            return v
        return dataclasses.replace(v, token_ids=(*v.token_ids[:start], *planted_run, *v.token_ids[start + len(match):]))

    moved = dataclasses.replace(leak.leak, match=tuple(planted_run), source=f"{source.id} prompt")
    controls = tuple(dataclasses.replace(c, leak=moved) if c is leak else c for c in head.controls)
    planted = dataclasses.replace(head, variants=tuple(plant(v) for v in head.variants), controls=controls)
    finding = dataclasses.replace(stored, anomalies=(planted,))
    again = rejudged_leaks(finding, truth)
    assert again.verdict is Verdict.CORRUPTION, [c.summary for c in leaks(again)]
    [check] = [c.own_check for c in leaks(again) if c.own_check is not None]
    assert not check.explains and check.first_other is not None and check.first_other >= start


def test_the_stale_slot_leak_was_proven_by_the_forced_check_and_stays_a_leak() -> None:
    """A campaign of the reference engine with `stale-slot-continuation` planted (servefuzz fuzz
    --fault stale-slot-continuation): its confirmation ran the forced check on the engine."""
    stored = load_finding(DATA / "reference-stale-slot.json")
    assert stored.verdict is Verdict.CORRUPTION and LEAK in stored.headline.backed_by
    checks = [c.own_check for c in leaks(stored) if c.backs and c.own_check is not None]
    assert checks and all(c.how == "engine" and not c.explains for c in checks)
    assert rejudged_leaks(stored).verdict is Verdict.CORRUPTION


def _bench_executions() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rejudge_campaign", BENCH / "rejudge_campaign.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def longest_chance_run(out: Path) -> int:
    """The longest chance run over a stored campaign's executions, as its campaign measures it."""
    return max((chance_run({s.id: s.prompt_ids for s in ex.scenario.requests}, ex.alone)
                for ex in _bench_executions().executions(out)), default=0)


@pytest.mark.slow
def test_the_chance_runs_of_an_attractor_model_raise_what_a_leak_needs(tmp_path: Path) -> None:
    """Measured on the served model's own answers alone: the bf16 tiny model on vLLM CPU (a stored
    campaign, bench/data/vllm-bf16) shares runs of 9 and more tokens between unrelated requests;
    the reference engine's model (a clean campaign, run here) stays within the floor's reach."""
    with tarfile.open(BENCH / "data" / "vllm-bf16" / "bf16-seed2-1710.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    attractor = longest_chance_run(tmp_path / "bf16-seed2-1710")
    assert attractor >= 9 and leak_tokens(attractor) >= 18, attractor
    out = tmp_path / "clean"
    p = subprocess.run([sys.executable, "-m", "servefuzz", "fuzz", "--fault", "none", "--time", "15", "--out", str(out)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    clean = longest_chance_run(out)
    assert leak_tokens(clean) == LEAK_MIN_TOKENS, clean
