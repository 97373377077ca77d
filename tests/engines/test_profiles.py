"""The launch presets' feature profiles (`engines.PROFILES`): each one starts and serves a request
on the real engine, with its flags on the command line, and the flags are there only with it.

One launch per llama-server profile (a few seconds each); one vLLM launch for its three
(preemption, spec-ngram, chunked-prefill) together, since each vLLM start costs about a minute. The lora profiles launch in test_lora.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from engine_client import alone

from servefuzz import engine_files
from servefuzz.engines import PROFILES, flag_pairs, with_flags
from servefuzz.errors import UsageError
from servefuzz.launcher import Launch, ServerProcess
from servefuzz.models import ModelPaths
from servefuzz.server_facts import TargetInfo
from servefuzz.strategies import DEFAULT_MIX
from servefuzz.workload import RequestSpec

pytestmark = pytest.mark.engine

_MODEL = {"llama-server": lambda m: m.gguf, "vllm-cpu": lambda m: m.hf_dir}


def _launch(preset: str, models: ModelPaths, profile: str | None = None, target: TargetInfo | None = None) -> Launch:
    if not engine_files.installed(preset):
        pytest.skip(f"{preset} is not set up under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    return Launch.resolve(preset, target, model=_MODEL[preset](models), profile=profile)


def _check_flags(launch: Launch, plain: Launch) -> None:
    """The profile's flags are on the launched command line, and (together) not without it."""
    assert launch.profile is not None and launch.default_argv == plain.argv and plain.profile is None
    wanted = flag_pairs(launch.profile.flags)
    assert all(pair in flag_pairs(launch.argv) for pair in wanted)
    assert not all(pair in flag_pairs(plain.argv) for pair in wanted), "the profile changes nothing"


def _serve_one(launch: Launch, log: Path, look: str = "") -> Any:
    """Start `launch`, send one request alone, check that it was answered in full, and return
    what the server's `look` endpoint says (None without one)."""
    # A prompt that repeats itself: the n-gram drafters have something to propose from it.
    prompt = tuple(range(10, 40)) * 3
    with ServerProcess(launch.argv, env=launch.env, log_path=log, start_timeout_s=launch.start_timeout_s) as srv:
        (record,) = alone(launch.engine, srv.base_url, RequestSpec("one", 0.0, prompt, max_tokens=8))
        seen = json.load(urllib.request.urlopen(srv.base_url + look, timeout=10)) if look else None  # noqa: S310 - 127.0.0.1
    assert record.ok, (record.status, record.error, srv.log_tail(5))
    assert len(record.choices[0].token_ids) == 8
    return seen


# What llama-server's /slots says once the feature took hold (the preset: 1024 tokens a slot,
# no speculation; -md alone would not change that at this commit). With --kv-unified a slot may
# grow to the tiny model's 2048-token context in the shared pool; with -c 2048 over 8 slots each
# has 256.
_SLOT_SAYS = {
    "default": {"n_ctx": 1024, "speculative": False},
    "kv-unified": {"n_ctx": 2048},
    "context-shift": {"n_ctx": 256},
    "spec-ngram": {"speculative": True},
    "spec-draft": {"speculative": True},  # held to its draft in test_spec_draft.py
}


# The lora profiles are launched and held to their adapters in tests/engines/test_lora.py (one
# launch each; their flags name the adapters servefuzz builds into its cache).
@pytest.mark.parametrize("name", [n for n in PROFILES["llama-server"] if n not in ("default", "lora")])
def test_each_llama_server_profile_starts_and_serves_with_its_flags(
    name: str, tiny_models: ModelPaths, tmp_path: Path
) -> None:
    launch = _launch("llama-server", tiny_models, name)
    assert launch.profile == engine_files.profile("llama-server", name, model=tiny_models.gguf)  # spec-draft's: its -md added
    _check_flags(launch, _launch("llama-server", tiny_models))
    slot = _serve_one(launch, tmp_path / "server.log", "/slots")[0]
    said = {**_SLOT_SAYS["default"], **_SLOT_SAYS.get(name, {})}
    assert {k: slot.get(k) for k in said} == said


# One vLLM start for the three profiles together (each start costs about a minute on two busy
# cores; one each took three): every profile's flags are on its own launch's command line
# (`_check_flags`), and the server started with all of them at once serves a request and says
# in its log that each feature took hold. Their flags compose: preemption sizes the pool and the
# context, chunked-prefill the step's budget, spec-ngram the drafter, and both that set a
# sequence count agree on 32.
_VLLM_PROFILES = [n for n in PROFILES["vllm-cpu"] if n not in ("default", "lora")]


def test_the_vllm_profiles_start_and_serve_with_their_flags(tiny_models: ModelPaths, tmp_path: Path) -> None:
    plain = _launch("vllm-cpu", tiny_models)
    together = plain
    for name in _VLLM_PROFILES:
        launch = _launch("vllm-cpu", tiny_models, name)
        assert launch.profile == engine_files.profile("vllm-cpu", name)
        _check_flags(launch, plain)
        together = dataclasses.replace(together, argv=tuple(with_flags(together.argv, launch.profile.flags)))
    _serve_one(together, tmp_path / "server.log")
    log = (tmp_path / "server.log").read_text(errors="replace")
    assert set(_VLLM_LOG_SAYS) == set(_VLLM_PROFILES)
    for name, said in _VLLM_LOG_SAYS.items():
        assert said in log, (name, said)


# What vLLM's log says once the feature took hold.
_VLLM_LOG_SAYS = {
    "preemption": "CPU KV cache size: 768 tokens",
    "chunked-prefill": "max_num_batched_tokens=80",
    "spec-ngram": "method='ngram'",
}


def test_a_finding_s_profile_is_rebuilt_by_name_and_an_unknown_one_is_refused(tiny_models: ModelPaths) -> None:
    made = TargetInfo("llamacpp", "http://127.0.0.1:1", server_args={"total_slots": 8}, profile="cache-reuse")
    again = _launch("llama-server", tiny_models, target=made)
    assert again.profile is not None and again.profile.name == "cache-reuse"
    assert again.argv[-2:] == ("--cache-reuse", "64")
    # The name is looked up in servefuzz's table: a profile of the other preset, or a name that
    # was never one, is refused in one line rather than launched without its feature.
    for name in ("preemption", "--host=0.0.0.0"):
        with pytest.raises(UsageError, match="not a profile of llama-server") as e:
            _launch("llama-server", tiny_models, target=TargetInfo("llamacpp", "http://127.0.0.1:1", profile=name))
        assert "\n" not in str(e.value)


def test_a_campaign_under_a_profile_launches_its_flags_records_its_name_and_aims_first(tiny_models: ModelPaths, tmp_path: Path) -> None:
    if not engine_files.installed("llama-server"):
        pytest.skip(f"llama-server is not built under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    from servefuzz.api import fuzz

    out = tmp_path / "c"
    fuzz(out=out, launch="llama-server", model=tiny_models.gguf, profile="cache-reuse", requests=4, coverage=False)
    # The target every finding of the campaign is made with (config.json's) names the profile:
    # the server cannot say it, servefuzz does.
    config = json.loads((out / "config.json").read_text())
    assert config["target"]["profile"] == "cache-reuse"
    argv = json.loads((out / "server.json").read_text())["argv"]
    assert argv[argv.index("--cache-reuse") + 1] == "64"
    # The first round starts with the strategies aimed at the feature (the mix starts elsewhere).
    aims = PROFILES["llama-server"]["cache-reuse"].aims
    assert DEFAULT_MIX[0] != aims[0] and config["strategies"][: len(aims)] == list(aims)
    first = json.loads((out / "scenarios.jsonl").read_text().splitlines()[0])
    assert first["origin"] == aims[0]
    # Resumed without --profile: the same profile again (and the same strategy order, or the
    # resume would be refused as another campaign).
    fuzz(out=out, launch="llama-server", model=tiny_models.gguf, resume=True, requests=8, coverage=False)
    argv = json.loads((out / "server.json").read_text())["argv"]
    assert argv[argv.index("--cache-reuse") + 1] == "64"


def test_a_replay_under_a_profile_says_so_in_its_target(tiny_models: ModelPaths) -> None:
    # What a shrunk finding records as its target (the replay bench's): the profile stays on it.
    from servefuzz.servers import Replayer

    with Replayer(_launch("llama-server", tiny_models, "kv-unified")) as bench:
        assert bench.info.profile == "kv-unified"
    with Replayer(_launch("llama-server", tiny_models)) as bench:
        assert bench.info.profile is None


def test_prefill_steps_lets_a_campaign_cut_a_prompt_between_two_steps(tmp_path: Path) -> None:
    """Under `prefill-steps` (`-b 64 -ub 64`) the campaign's shape has a 64-token step budget, so
    prefill-abort places its cuts at multiples of 64 inside the prompt, and llama-server's
    progress stream lets the client cut there: a cancelled request says how many of its prompt
    tokens were prefilled, fewer than the prompt. (The preset's own -b takes these prompts in one
    step, with nothing to cut between.) A recurrent model, since prefill-abort needs kept state."""
    if not engine_files.installed("llama-server"):
        pytest.skip(f"llama-server is not built under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    out = tmp_path / "c"
    done = subprocess.run(
        [sys.executable, "-m", "servefuzz", "fuzz", "--launch", "llama-server", "--profile", "prefill-steps",
         "--model-arch", "qwen3-next", "--strategy", "prefill-abort", "--requests", "40", "--keep-going",
         "--json", "--out", str(out)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    scenarios = [json.loads(line)["scenario"] for line in (out / "scenarios.jsonl").read_text().splitlines()]
    assert {s["meta"]["chunk"] for s in scenarios} == {64}
    cuts = {r["id"]: r["cancel_at_prefill"] for s in scenarios[:1] for r in s["requests"] if r.get("cancel_at_prefill")}
    assert cuts and all(c % 64 == 0 for c in cuts.values()), cuts
    prompt = {r["id"]: len(r["prompt_ids"]) for r in scenarios[0]["requests"]}
    said = []
    for line in (out / "histories.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "record" and r["request_id"] in cuts and r.get("run") == 0 and r.get("label") == "load":
            said.append((r["request_id"], r["status"], r.get("error")))
    inside = [(rid, int(m.group(1))) for rid, status, error in said if status == "cancelled"
              and (m := re.search(r"at (\d+) prompt tokens prefilled", error or ""))]
    assert inside and all(n < prompt[rid] for rid, n in inside), said
