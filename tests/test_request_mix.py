"""bench/request_mix.py splits a campaign's requests by what they were for: the scenario's own
first run, the replays, the alone references, the cache probes and, as the remainder of
`progress.json`'s count, the confirmations."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from scriptload import load_script

BENCH = Path(__file__).resolve().parent.parent / "bench"


def bench_module() -> ModuleType:
    return load_script(BENCH / "request_mix.py")


def test_the_mix_counts_each_kind_and_leaves_the_rest_to_confirmation(tmp_path: Path) -> None:
    records = [("load", 0)] * 4 + [("load", 1)] * 4 + [("alone", 0)] * 3 + [("warm", 0), ("primed", 0)]
    lines = [{"kind": "run", "run": 0, "label": "load"}] + [
        {"kind": "record", "request_id": f"r{i}", "run": run, "label": label} for i, (label, run) in enumerate(records)]
    (tmp_path / "histories.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp_path / "progress.json").write_text(json.dumps({"requests": 20, "elapsed_s": 120.0}))
    mix = bench_module().mix_of(tmp_path)
    assert (mix.scenario, mix.replay, mix.alone, mix.probes, mix.confirmation) == (4, 4, 3, 2, 7)
    assert mix.row().split(" | ")[1:4] == ["20", "10", "4 (20%)"]  # 20 requests in 2 minutes


def test_a_folder_that_is_no_campaign_is_one_line_and_exit_2(tmp_path: Path) -> None:
    assert bench_module().main([str(tmp_path)]) == 2


def test_references_reused_from_an_earlier_request_are_not_counted_as_sent(tmp_path: Path) -> None:
    lines = [{"kind": "run", "run": 0, "label": "load"},
             *({"kind": "record", "request_id": f"r{i}", "run": 0, "label": "load"} for i in range(3)),
             {"kind": "run", "run": 0, "label": "alone", "meta": {"reused": ["r1", "r2"]}},
             *({"kind": "record", "request_id": f"r{i}", "run": 0, "label": "alone"} for i in range(3))]
    (tmp_path / "histories.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp_path / "progress.json").write_text(json.dumps({"requests": 4, "elapsed_s": 60.0}))
    mix = bench_module().mix_of(tmp_path)
    assert (mix.scenario, mix.alone, mix.reused, mix.confirmation) == (3, 1, 2, 0)
