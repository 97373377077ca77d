"""A target of several servers (issue 56): the reference engine's prefill/decode pair as a
campaign owns it. `--launch reference-pd` starts the router, which starts the prefill and the
decode server in order; a finding made on it records the pair and rebuilds it; triage's "one
server" row relaunches it as one engine; the exercise evidence says what each server did, from
each one's meters. The engine side (exactness through the pair, the transfer fault firing and
cured) is tests/reference/test_ref_pd.py and test_ref_faults.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from servefuzz.engines.reference import PAIR_FLAGS, TRIAGE
from servefuzz.engines.registry import spec_of
from servefuzz.engines.request import LaunchRequest
from servefuzz.engines.spec import Feature
from servefuzz.finding import load_finding
from servefuzz.launcher import Launch, ServerProcess, group_alive, reference_argv
from servefuzz.reference.server_args import parse_args
from servefuzz.reports.issue_md import issue_markdown
from servefuzz.runner import Runner
from servefuzz.server_facts import TargetInfo
from servefuzz.servers import Replayer
from servefuzz.targets import make_target

PAIR = list(PAIR_FLAGS)
ONE_SERVER = next(v for v in TRIAGE if v.name == "--disaggregation-mode null")


def test_the_reference_pd_preset_is_the_reference_engine_as_a_pair() -> None:
    request = LaunchRequest.parse("reference-pd")
    assert request.is_reference and request.preset == "reference-pd"
    assert Launch.resolve(request).argv == tuple(reference_argv(PAIR))
    # A planted fault's own settings may say pair already: never twice.
    assert Launch.resolve(request, reference_flags=[*PAIR, "--fault", "transfer-region-dedupe"]).argv.count(PAIR[0]) == 1
    assert Launch.resolve("reference").argv == tuple(reference_argv())


def test_one_server_is_a_triage_row_only_for_a_pair_and_relaunches_one_engine() -> None:
    # Triage relaunches a finding's server from its recorded args, which say its mode.
    def rebuilt(mode: str) -> Launch:
        return Launch.resolve("reference", TargetInfo("reference", "http://127.0.0.1:1", server_args={"disaggregation_mode": mode}))

    pair, one = rebuilt("pair"), rebuilt("null")
    assert ONE_SERVER.changes(pair) and not ONE_SERVER.changes(one) and ONE_SERVER.flags == ("--disaggregation-mode", "null")
    relaunched = [a.replace("{port}", "0") for a in ONE_SERVER.apply(pair).argv]
    assert relaunched[:3] == reference_argv()[:3] and parse_args(relaunched[3:]).disaggregation_mode == "null"


def test_a_pair_s_target_records_it_and_rebuilds_it(reference_server: Callable[..., str]) -> None:
    url = reference_server(*PAIR, "--page-size", "16")
    with Replayer.at("reference", url) as bench:
        info = bench.info
    assert info.facts.transfer == "http-pull" and info.page_size == 16
    argv = Launch.resolve("reference", info).argv
    assert "--disaggregation-mode=pair" in argv and "--page-size=16" in argv
    assert not any("peer" in a for a in argv)  # the router picks its servers' ports itself
    one = reference_server("--page-size", "16")
    with Replayer.at("reference", one) as bench:
        assert bench.info.facts.transfer is None


def test_each_server_s_meters_reach_the_campaign_by_its_role(reference_server: Callable[..., str]) -> None:
    async def go() -> dict[str, float]:
        async with Runner(make_target("reference", reference_server(*PAIR))) as runner:
            return await runner.metrics()

    served = asyncio.run(go())
    transfer = {m.metric for m in spec_of("reference").meters if m.feature is Feature.KV_TRANSFER}
    assert transfer <= set(served) and {"{role=prefill}", "{role=decode}"} <= {m[m.find("{"):] for m in transfer}
    # Every other counter is both servers' sum, and each one's part is there too.
    assert served["sglang:forward_steps_total"] == served["sglang:forward_steps_total{role=prefill}"] \
        + served["sglang:forward_steps_total{role=decode}"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_campaign_owns_the_pair_finds_its_transfer_fault_and_leaves_no_server(tmp_path: Path) -> None:
    out = tmp_path / "pd"
    p = subprocess.run([sys.executable, "-m", "servefuzz", "fuzz", "--launch", "reference-pd", "--fault",
                        "transfer-region-dedupe", "--stop-at-first", "--time", "150", "--json", "--out", str(out)],
                       capture_output=True, text=True, timeout=280, check=False)
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    summary = json.loads(p.stdout)
    assert summary["stopped_because"] == "first confirmed finding", summary["stopped_because"]
    found = [load_finding(f) for f in (out / "findings").glob("finding_*.json")]
    confirmed = [f for f in found if f.verdict.value == "corruption" and f.confirmation and f.confirmation.reproduced]
    assert confirmed, [f.verdict.value for f in found]
    f = confirmed[0]
    assert f.target.server_args["disaggregation_mode"] == "pair" and f.target.facts.transfer == "http-pull"
    # Which server did what: the transfers each counted under its load, by role.
    said = {(t.source, t.what) for t in f.triggered if t.feature is Feature.KV_TRANSFER and t.value > 0}
    assert ("sglang:kv_transfers_total{role=decode}", "transfers received by the decode server") in said, f.triggered
    assert any("role=prefill" in source for source, _ in said), said
    # And the issue draft says it in its environment.
    servers = next(line for line in issue_markdown(f, []).splitlines() if line.startswith("- servers:"))
    assert "KV transfer: http-pull" in servers and "transfers received by the decode server" in servers, servers
    # The router's group took both servers down with it: nothing of the pair is left.
    pids = [f.target.server_args["disaggregation"][role]["pid"] for role in ("prefill", "decode")]
    assert not any(group_alive(pid) or Path(f"/proc/{pid}").exists() for pid in pids), pids


def test_a_pair_server_process_stops_all_three() -> None:
    with ServerProcess.reference(PAIR) as srv:
        with urllib.request.urlopen(srv.base_url + "/server_info", timeout=30) as resp:  # noqa: S310 - 127.0.0.1
            info = json.loads(resp.read())
        pids = [info["disaggregation"][role]["pid"] for role in ("prefill", "decode")]
        assert all(Path(f"/proc/{pid}").exists() for pid in pids)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
