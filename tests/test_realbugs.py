"""bench/realbugs.py: each real bug's check recognises its own finding and no other, the trace
arm replays a trace whose sessions share prefixes, and the table says why an arm that cannot
send what a bug needs did not find it."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from scriptload import load_script

from servefuzz.strategies import TargetShape

BENCH = Path(__file__).resolve().parent.parent / "bench"


def bench_module() -> ModuleType:
    return load_script(BENCH / "realbugs.py")


def test_each_bug_s_check_takes_its_own_signature_and_refuses_the_others() -> None:
    rb = bench_module()
    own = {
        "llamacpp-lora-base-after-adapter": ("corruption", "llamacpp:replay:corruption:lora,prefix=page-aligned"),
        "llamacpp-ram-prompt-cache": ("corruption", "llamacpp:replay:corruption:abort,prefix=mid-page,stream"),
        "vllm-cpu-lora-base-rows": ("corruption", "vllm:isolation:corruption:lora,prefix=page-aligned"),
        "vllm-cpu-seed-chunked-crash": ("crash", "vllm:liveness:crash:-"),
        "sglang-cpu-salt-dropped": ("isolation-breach", "sglang:tenant-isolation:isolation-breach:prefix=page-aligned"),
    }
    assert set(own) == set(rb.BUGS)
    for name, bug in rb.BUGS.items():
        assert rb.matches(bug, *own[name]), name
        # A drift of the same engine, and the corruption of a bug with other features, are not it.
        assert not rb.matches(bug, "numeric-drift", own[name][1])
    assert not rb.matches(rb.BUGS["llamacpp-ram-prompt-cache"], *own["llamacpp-lora-base-after-adapter"])


def test_the_trace_arm_replays_sessions_that_share_prefixes() -> None:
    rb = bench_module()
    rows = rb.synthetic_trace(0)
    assert rows == rb.synthetic_trace(0) and rows != rb.synthetic_trace(1)  # a seed's trace is fixed
    replay = rb.TraceReplay(0)
    shape = TargetShape(page_size=16, context_length=4096)
    scenarios = [replay.generate(None, shape, seed=s) for s in range(4)]
    assert all(s.meta["strategy"] == "trace" for s in scenarios)
    assert any(r.prefix_len > 0 for s in scenarios for r in s.requests)  # a later turn reuses its session


def test_the_table_says_why_an_arm_that_cannot_send_the_need_found_nothing() -> None:
    rb = bench_module()
    rows = [
        {"bug": "llamacpp-lora-base-after-adapter", "arm": "servefuzz", "seed": 0, "cap_s": 90.0, "found": True,
         "requests": 226, "seconds": 11.1},
        {"bug": "llamacpp-lora-base-after-adapter", "arm": "bench-serving", "seed": 0, "cap_s": 90.0, "found": False,
         "requests": None, "seconds": None},
        {"bug": "llamacpp-lora-base-after-adapter", "arm": "leave-one-out", "seed": 0, "cap_s": 90.0, "found": False,
         "requests": None, "seconds": None},
    ]
    line = rb.table(rows).splitlines()[-1]
    assert "226 (11 s), 1/1" in line and "none in 90 s, 0/1; sends no LoRA adapters |" in line
    # Leave-one-out keeps coverage on: its covering arrays send adapters (issue 41), so a miss there says no more.
    assert line.count("sends no") == 1 and line.split(" | ")[2] == "none in 90 s, 0/1", line


def test_the_anchor_batteries_fit_a_small_context_on_every_seed() -> None:
    """llama-server's lora profile gives each of its 8 slots 1,024 tokens: the SGLang battery's
    radix_cache mode resent its first prompt with the prefix length it asked for, not the one
    the draft clipped it to, and the arm stopped at 'every strategy failed' on 2 of 3 seeds."""
    import random

    rb = bench_module()
    small = TargetShape(context_length=1024)
    for battery in (rb.SGLangDeterminismModes(), rb.BenchServingLoad()):
        for seed in range(60):
            scenario = battery.generate(random.Random(seed), small, seed=seed)
            assert all(r.prefix_len <= len(r.prompt_ids) for r in scenario.requests)


def test_each_bug_knows_whether_its_engine_at_its_version_is_installed(tmp_path: Path, monkeypatch) -> None:
    """`--list` and the run's own check ask this of every bug (the SGLang bug's check once raised)."""
    from servefuzz import engine_files

    rb = bench_module()
    monkeypatch.setenv("SERVEFUZZ_CACHE", str(tmp_path))
    assert not any(bug.installed() for bug in rb.BUGS.values())
    folder = engine_files.engine_dir("sglang-cpu", "0.5.10.post1")  # the salt bug's version, not the default
    folder.mkdir(parents=True)
    (folder / ".complete").touch()
    assert [name for name, bug in rb.BUGS.items() if bug.installed()] == ["sglang-cpu-salt-dropped"]
