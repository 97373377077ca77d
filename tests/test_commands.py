"""`servefuzz fuzz --launch`: a server servefuzz starts, owns, and starts again after a crash;
and the engine told from the server's own answers when `--engine` is not given.

The crash is real: the test kills the server servefuzz launched (its PID, from the campaign's
`server.json`) with SIGKILL while the campaign runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from servefuzz.api import FuzzOptions
from servefuzz.errors import TargetError, UsageError
from servefuzz.finding import load_finding
from servefuzz.launcher import Launch, ServerProcess, free_port, reference_argv
from servefuzz.servers import open_target
from servefuzz.targets import detect_engine
from servefuzz.targets.detect import decide_server_info


def _server_json(out: Path) -> dict:
    return json.loads((out / "server.json").read_text(encoding="utf-8"))


def _requests_so_far(out: Path) -> int:
    try:
        return int(json.loads((out / "progress.json").read_text(encoding="utf-8"))["requests"])
    except (OSError, ValueError, KeyError):
        return 0


def _kill_server_mid_campaign(out: Path, launch: str, requests: int, after: int) -> tuple[dict, dict]:
    """Run `fuzz --launch` into `out`, SIGKILL its server once `after` requests are done; the
    server's first `server.json` and the campaign's `--json` summary."""
    campaign = subprocess.Popen(
        [sys.executable, "-m", "servefuzz", "fuzz", "--launch", launch, "--keep-going",
         "--requests", str(requests), "--json", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _requests_so_far(out) < after:
            time.sleep(0.1)
        first = _server_json(out)
        assert first["starts"] == 1 and _requests_so_far(out) >= after, "the campaign got going"
        os.kill(first["pid"], signal.SIGKILL)  # the reference server is a single process
        stdout, stderr = campaign.communicate(timeout=240)
    finally:
        if campaign.poll() is None:
            campaign.kill()
    assert "Traceback" not in stderr, stderr
    return first, json.loads(stdout)


def test_a_launched_server_killed_mid_campaign_is_a_crash_finding_and_is_started_again(tmp_path: Path) -> None:
    out = tmp_path / "campaign"
    first, summary = _kill_server_mid_campaign(out, "reference", requests=300, after=30)
    assert summary["restarts"] == 1, summary
    assert summary["stopped_because"] == "request budget of 300 spent", summary  # it went on
    second = _server_json(out)
    assert second["starts"] == 2 and second["pid"] != first["pid"]
    crashes = [load_finding(Path(f["path"])) for f in summary["findings"] if f["verdict"] == "crash"]
    assert crashes, summary["findings"]
    evidence = next(a.evidence for f in crashes for a in f.anomalies if a.verdict.value == "crash")
    assert evidence["exit_code"] == -signal.SIGKILL
    assert f"--port {first['port']}" in evidence["log_tail"]  # the dead server's own log
    log = (out / "server.log").read_text(encoding="utf-8")
    assert log.count("--- servefuzz ") == 2 and f"listening on {second['base_url']}" in log
    with pytest.raises(ProcessLookupError):  # stopped at the end: nothing left running
        os.kill(second["pid"], 0)
    # The control of the test below: a kill from outside is not the scenario's doing, so its
    # replay on the restarted server finds nothing, and the crash stays as seen, unconfirmed.
    assert all(f.confirmation is None or f.confirmation.reproduced == 0 for f in crashes), crashes


def _fuzz_stub(mode: str, out: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`fuzz --launch` on the stub server in `mode` (tests/targets/stub_server.py), `--json`."""
    stub = Path(__file__).parent / "targets" / "stub_server.py"
    run = subprocess.run(
        [sys.executable, "-m", "servefuzz", "fuzz", "--launch", f"{sys.executable} {stub} --mode {mode} --port {{port}}",
         "--engine", "sglang", "--json", "--out", str(out), *extra],
        capture_output=True, text=True, timeout=240,
    )
    assert "Traceback" not in run.stderr, run.stderr
    return run, json.loads(run.stdout)


def test_a_crash_that_comes_back_on_the_restarted_server_is_confirmed(tmp_path: Path) -> None:
    # A server that dies on its first /generate, every time it is started: each scenario's
    # replay on the restarted server takes it down again (tests/targets/stub_server.py).
    out = tmp_path / "campaign"
    run, summary = _fuzz_stub("crash", out, "--requests", "200", "--stop-at-first")
    assert summary["stopped_because"] == "first confirmed finding", summary
    # One death seen, one more on the replay: two restarts, and the finding says it came back.
    assert summary["restarts"] == 2 and summary["first_confirmed"]["crash"]["requests"] > 0, summary
    [crash] = [load_finding(Path(f["path"])) for f in summary["findings"]]
    assert summary["findings"][0]["count"] == 1  # one sighting, confirmed: not counted as two
    assert crash.confirmation is not None and (crash.confirmation.reproduced, crash.confirmation.attempts) == (1, 1)
    assert any(n.startswith("confirmed: the server died again") for n in crash.notes), crash.notes
    evidence = next(a.evidence for a in crash.anomalies if a.verdict.value == "crash")
    assert evidence["exit_code"] == 3  # the first death's own status, waited for
    assert [p.name for p in (out / "findings").glob("*.json")] == [Path(summary["findings"][0]["path"]).name]
    assert run.returncode == 1  # found


def test_once_a_crash_is_confirmed_later_crashes_are_kept_as_seen_without_a_replay(tmp_path: Path) -> None:
    _, summary = _fuzz_stub("crash", tmp_path / "c", "--requests", "500", "--keep-going")
    # Restarts: the first death, its replay's, then one per later death until the five are spent;
    # the death that finds none left is seen too: five sightings, only the first replayed.
    assert summary["restarts"] == 5 and "5 restarts already" in summary["stopped_because"], summary
    crashes = [load_finding(Path(f["path"])) for f in summary["findings"]]
    confirmed = [f for f in crashes if f.confirmation is not None and f.confirmation.reproduced]
    assert len(confirmed) == 1 and sum(f["count"] for f in summary["findings"]) == 5, summary["findings"]


def test_a_server_that_stops_answering_is_restarted_and_its_hang_confirmed_there(tmp_path: Path) -> None:
    # The stub's `hang` mode answers nothing, ever, from its first request on: a wedged server.
    # Every later run on it would hang as a consequence, so after the first run's hangs a lone
    # 1-token request tells a wedge from a slow request, and the server is started again.
    run, summary = _fuzz_stub("hang", tmp_path / "c", "--requests", "200", "--request-timeout", "2",
                              "--stop-at-first")
    assert summary["stopped_because"] == "first confirmed finding", summary
    assert summary["restarts"] == 2, summary  # the wedge, then its replay's on the restarted server
    [hang] = [load_finding(Path(f["path"])) for f in summary["findings"]]
    assert hang.verdict.value == "hang" and summary["findings"][0]["count"] == 1
    assert hang.confirmation is not None and (hang.confirmation.reproduced, hang.confirmation.attempts) == (1, 1)
    assert any(n.startswith("confirmed: the server hung again") for n in hang.notes), hang.notes
    wedged = [a.evidence["wedged"] for a in hang.anomalies if a.verdict.value == "hang"]
    assert wedged and all("a lone 1-token request got no answer within 2 s either" in w for w in wedged), wedged
    assert not any(a.verdict.value == "crash" for a in hang.anomalies)  # alive, not dead: no crash claimed
    assert run.returncode == 1


def test_a_server_that_hangs_some_requests_but_still_answers_is_not_restarted(tmp_path: Path) -> None:
    # Control: `hang-long` hangs every request for more than one token and answers the lone
    # 1-token one. The hang is a finding, confirmed on the same server; nothing is lost.
    run, summary = _fuzz_stub("hang-long", tmp_path / "c", "--requests", "400", "--request-timeout", "2",
                              "--stop-at-first")
    assert summary["restarts"] == 0, summary
    hangs = [load_finding(Path(f["path"])) for f in summary["findings"] if f["verdict"] == "hang"]
    assert hangs and summary["stopped_because"] == "first confirmed finding", summary
    assert not any("wedged" in a.evidence for h in hangs for a in h.anomalies)
    assert not any(n.startswith("confirmed: the server hung again") for h in hangs for n in h.notes)
    assert run.returncode == 1


def test_a_server_that_cannot_start_again_ends_the_campaign_with_why(tmp_path: Path) -> None:
    # The command works once: it deletes the file it needs, so the restart after the kill fails.
    flag = tmp_path / "once"
    flag.write_text("")
    script = (f"import os,sys,runpy; os.remove({str(flag)!r}); "
              "sys.argv=['servefuzz.reference',*sys.argv[1:]]; runpy.run_module('servefuzz.reference', run_name='__main__')")
    cmd = f"{sys.executable} -c \"{script}\" --host 127.0.0.1 --port {{port}}"
    _, summary = _kill_server_mid_campaign(tmp_path / "campaign", cmd, requests=2000, after=10)
    assert summary["restarts"] == 0
    assert "could not be started again" in summary["stopped_because"], summary
    assert any(f["verdict"] == "crash" for f in summary["findings"])


def test_presets_for_a_new_campaign() -> None:
    launch = Launch.resolve("reference", reference_flags=["--fault", "overlap-war"])
    assert launch.engine == "reference" and list(launch.argv) == reference_argv(["--fault", "overlap-war"])
    own = Launch.resolve("my-server --port {port}")
    assert own.engine == "" and own.argv == ("my-server", "--port", "{port}")  # "": detect it
    assert Launch.resolve("my-server --port {port}", engine="vllm").engine == "vllm"
    with pytest.raises(UsageError, match="neither a preset"):
        Launch.resolve("vllm")
    with pytest.raises(UsageError, match="no such file"):
        Launch.resolve("vllm-cpu", model=Path("/nonexistent/model"))


@pytest.mark.parametrize("opts, message", [
    (dict(url="http://127.0.0.1:1", launch="reference"), "not both"),
    (dict(url="127.0.0.1:1"), "must start with http"),
    (dict(model=Path("m")), r"model= names the model a preset serves: give it with launch= .*vllm-cpu"),
    (dict(launch="reference", model=Path("m")), r"give it with launch= .*vllm-cpu"),
])
def test_contradictory_options_are_refused_before_anything_starts(opts: dict, message: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=message):
        FuzzOptions(out=tmp_path, **opts).validate()


def test_bad_launch_input_is_one_line_and_a_nonzero_exit(tmp_path: Path) -> None:
    for args in (["--launch", "no-port-here"], ["--launch", "vllm-cpu", "--fault", "overlap-war"],
                 ["--launch", "reference", "--model", str(tmp_path / "missing")]):
        run = subprocess.run([sys.executable, "-m", "servefuzz", "fuzz", "--out", str(tmp_path / "o"), *args],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 2, (args, run.stderr)
        assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


# -- engine detection ---------------------------------------------------------------------------


async def _detect(url: str) -> str:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
        return (await detect_engine(s, url)).engine


def test_the_reference_engine_is_told_apart_from_sglang(reference_server: Callable[..., str]) -> None:
    url = reference_server()
    assert asyncio.run(_detect(url)) == "reference"
    assert asyncio.run(open_target(url, None)).engine == "reference"
    assert asyncio.run(open_target(url, "sglang")).engine == "sglang"  # a given engine is kept


def test_an_openai_only_server_is_detected_as_openai(stub_server: Callable[[str], ServerProcess]) -> None:
    assert asyncio.run(_detect(stub_server("openai").base_url)) == "openai"


def test_server_info_shapes_of_each_engine() -> None:
    # SGLang's /server_info is its ServerArgs plus scheduler state (python/sglang/srt/server_args.py).
    assert decide_server_info({"model_path": "m", "tp_size": 1, "page_size": 1, "version": "0.5"}) == "sglang"
    assert decide_server_info({"vllm_config": "model='tiny', ..."}) == "vllm"
    assert decide_server_info({"version": "stub", "page_size": 16}) is None


def test_nothing_listening_is_one_line_saying_so() -> None:
    with pytest.raises(TargetError, match="connection refused"):
        asyncio.run(_detect(f"http://127.0.0.1:{free_port()}"))
