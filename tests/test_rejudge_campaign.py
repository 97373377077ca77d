"""bench/rejudge_campaign.py re-judges a stored campaign by the code that judges now, and the
campaign's own learning comes out of it unchanged: on the stored vLLM bfloat16 campaigns
(bench/data/vllm-bf16), the rebuilt noise model has exactly the campaign's samples where no
rule changed, the bf16-tie flip is drift again, and the anomalous shift that the old 30-sample
bar accused (14.8x the largest of 211) is no longer one under the 1,000-sample bar."""

from __future__ import annotations

import tarfile
from pathlib import Path
from types import ModuleType

from scriptload import load_script

from servefuzz.store import read_noise

BENCH = Path(__file__).resolve().parent.parent / "bench"
DATA = BENCH / "data" / "vllm-bf16"


def bench_module() -> ModuleType:
    return load_script(BENCH / "rejudge_campaign.py")


def campaign(name: str, into: Path) -> Path:
    with tarfile.open(DATA / f"{name}.tar.xz") as tar:
        tar.extractall(into, filter="data")
    return into / name


def test_rejudging_a_stored_campaign_rebuilds_its_noise_and_keeps_its_drift(tmp_path: Path) -> None:
    rejudge = bench_module().rejudge
    out = campaign("bf16-seed2-1710", tmp_path)  # judged by today's rules when it ran
    r = rejudge(out)
    assert r.executions == 12
    assert r.samples == r.stored_samples == read_noise(out).samples > 10_000
    assert r.before == r.after == {"numeric-drift": 1}  # r21's flip at a bf16 tie (margin 0.0625)
    assert r.anomalies == {"numeric-drift": 2}  # the replay and the isolation oracle agree


def test_rejudging_drops_the_shift_the_old_bar_accused(tmp_path: Path) -> None:
    r = bench_module().rejudge(campaign("bf16-seed2-1520", tmp_path))
    assert r.before == {"anomalous-shift": 1}
    assert r.after == {"indeterminate": 1}  # the same scenario's cut connections remain
    # r08's 117 agreeing tokens were kept out of the campaign's noise as anomalous; now they are noise.
    assert r.samples == r.stored_samples + 117


def test_the_same_campaign_under_a_promised_mode_re_judges_its_drift_as_a_contract_violation(tmp_path: Path) -> None:
    """The campaign's own config names the server; said to run under VLLM_BATCH_INVARIANT=1 (by
    the variable, or by the launch profile that sets it), the same near-tie flip breaks that
    mode's promise. The oracles' numbers are the same: only the verdict of the finding moves."""
    import json

    for say in ({"env": {"VLLM_BATCH_INVARIANT": "1"}}, {"profile": "batch-invariant"}):
        out = campaign("bf16-seed2-1710", tmp_path / next(iter(say)))
        config = json.loads((out / "config.json").read_text())
        config["target"].update(say)
        (out / "config.json").write_text(json.dumps(config))
        r = bench_module().rejudge(out)
        assert r.before == {"numeric-drift": 1} and r.after == {"contract-violation": 1}, say
        assert r.anomalies == {"numeric-drift": 2}  # the oracles judge without the promise
