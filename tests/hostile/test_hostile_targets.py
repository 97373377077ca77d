"""The runner, the adapters and the reports against a real hostile server: every misbehaviour
ends as a recorded status (and an anomaly) or as one clear line, never as a traceback or a hang;
and what the server said reaches no terminal, markdown or HTML as anything but text."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import aiohttp
import pytest
from hostile_server import HOSTILE_TEXT, TOKEN

from servefuzz.anomaly import Anomaly, Oracle, Variant, Verdict
from servefuzz.engines.reference import relaunch_argv as reference_flag_argv
from servefuzz.errors import TargetError, UsageError
from servefuzz.finding import Finding
from servefuzz.history import RunHistory, Status
from servefuzz.oracles.liveness import liveness
from servefuzz.reports.facts import server_command
from servefuzz.reports.html import report_html
from servefuzz.reports.issue_md import issue_markdown
from servefuzz.reports.repro import repro_script
from servefuzz.runner import DeadlinePassed, RunConfig, Runner
from servefuzz.server_facts import TargetInfo
from servefuzz.targets import auth_headers, detect_engine, make_target
from servefuzz.workload import RequestSpec, Scenario

# Short timeouts: a hang must end as a record within seconds, never stall the suite.
CONFIG = RunConfig(request_timeout_s=3.0, connect_timeout_s=2.0)
GUARD_S = 60.0  # no single test step may take longer than this, whatever the server does
_T = TypeVar("_T")


def scenario(stream: bool) -> Scenario:
    return Scenario(7, (
        RequestSpec("r01", 0.0, (5, 6, 7, 8), 3, stream=stream),
        RequestSpec("r02", 1.0, (5, 6, 9), 3, stream=stream),
    ))  # fmt: skip


def guarded(coro: Awaitable[_T]) -> _T:
    async def go() -> _T:
        return await asyncio.wait_for(coro, GUARD_S)

    return asyncio.run(go())


async def _runs(url: str, stream: bool, runs: int = 2, **opts: Any) -> tuple[TargetInfo, list[RunHistory]]:
    async with Runner(make_target("sglang", url, **opts), CONFIG) as runner:
        assert runner.info is not None
        histories = [await runner.run(scenario(stream), run=i) for i in range(runs)]
        return runner.info, histories


def runs(url: str, stream: bool, runs: int = 2, **opts: Any) -> tuple[TargetInfo, list[RunHistory]]:
    return guarded(_runs(url, stream, runs, **opts))


def statuses(histories: list[RunHistory]) -> list[Status]:
    return [r.status for h in histories for r in h.records]


INERT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e\ud800]")


def assert_inert(text: str) -> None:
    assert not INERT.search(text), INERT.search(text)


def reports_of(info: TargetInfo, histories: list[RunHistory], text: str = "") -> list[str]:
    """Every renderer's output for a finding made of what the server answered."""
    anomalies = liveness(histories)
    if not anomalies:  # a well-formed answer: give the finding a divergence of the recorded text
        record = histories[0].records[0]
        choice = record.choices[0]
        anomalies = [Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, record.request_id, f"{record.request_id}: {choice.text}",
                             variants=(Variant(0, choice.token_ids, choice.text, 1, (0,), "load"),
                                       Variant(0, (1,), text, 1, (1,), "load")))]
    finding = Finding(0, 7, scenario(False), info, tuple(anomalies))
    return [issue_markdown(finding, ()), report_html(finding, ()), repro_script(finding), server_command(info)]


# --- the control: a well-behaved server is judged well-behaved ---------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_well_behaved_server_gives_ok_records_and_no_anomaly(hostile_server, stream: bool) -> None:
    info, histories = runs(hostile_server("ok"), stream)
    assert statuses(histories) == [Status.OK] * 4
    assert liveness(histories) == []
    assert histories[0].records[0].choices[0].token_ids == (10, 11, 12)
    assert info.page_size == 16 and info.auth is False


# --- what a server says is data ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_markup_and_escape_sequences_in_answers_are_recorded_and_rendered_as_text(hostile_server, stream: bool) -> None:
    info, histories = runs(hostile_server("markup"), stream)
    assert statuses(histories) == [Status.OK] * 4
    assert histories[0].records[0].choices[0].text == HOSTILE_TEXT  # the record keeps the evidence
    assert info.version == HOSTILE_TEXT
    for text in reports_of(info, histories, HOSTILE_TEXT):
        assert_inert(text)


@pytest.mark.parametrize(
    ("mode", "stream", "status", "says"),
    [
        ("http500", False, Status.HTTP_ERROR, "HTTP 500: Internal Server Error: [/oops]"),
        ("http500", True, Status.HTTP_ERROR, "HTTP 500: Internal Server Error"),
        ("nonutf8", False, Status.HTTP_ERROR, "HTTP 500: \ufffd\ufffd\ufffd internal error \\x1b[5;31m"),
        ("badjson", False, Status.MALFORMED, "/generate answered something that is not JSON"),
        ("badjson", True, Status.MALFORMED, "a stream chunk answered something that is not JSON"),
        ("nan", False, Status.MALFORMED, "NaN is not a number a server may answer"),
        ("nan", True, Status.MALFORMED, "NaN"),
        ("wrongshape", False, Status.MALFORMED, "malformed /generate answer"),
        ("wrongshape", True, Status.MALFORMED, "malformed /generate answer"),
        ("truncated", False, Status.CONNECTION_ERROR, "answer cut short"),
        ("truncated", True, Status.CONNECTION_ERROR, ""),
        ("oversized", False, Status.MALFORMED, "over the 8 MiB cap (max_response_bytes)"),
        ("oversized", True, Status.MALFORMED, "a stream line is over the 8 MiB cap (max_response_bytes)"),
    ],
)
def test_a_misbehaving_answer_is_one_recorded_status(hostile_server, mode: str, stream: bool, status: Status, says: str) -> None:
    info, histories = runs(hostile_server(mode), stream)
    records = [r for h in histories for r in h.records]
    assert {r.status for r in records} == {status}, [(r.status, r.error) for r in records]
    for r in records:
        assert r.error is not None and says in r.error and "\n" not in r.error and "Traceback" not in r.error
        assert_inert(r.error)
        if status is Status.HTTP_ERROR:
            assert r.http_status == 500  # a body that is not UTF-8 keeps its status
    found = liveness(histories)
    if status is Status.CONNECTION_ERROR:
        assert all(a.verdict in (Verdict.CRASH, Verdict.INDETERMINATE) for a in found)
    else:
        assert found and {a.verdict for a in found} == {Verdict.SERVER_ERROR if status is Status.HTTP_ERROR else Verdict.MALFORMED}
    for text in reports_of(info, histories):
        assert_inert(text)


def test_non_utf8_inside_answers_is_replaced_not_fatal(hostile_server) -> None:
    info, histories = runs(hostile_server("nonutf8-ok"), False)
    assert statuses(histories) == [Status.OK] * 4
    assert histories[0].records[0].choices[0].text == "t\ufffdo\ufffdk"
    assert info.version == "v\ufffd\ufffd"


def test_a_stream_that_never_ends_is_cut_at_the_stream_cap(hostile_server) -> None:
    _, histories = runs(hostile_server("flood"), True, runs=1, max_response_bytes=64 << 10, max_stream_bytes=1 << 20)
    records = histories[0].records
    assert {r.status for r in records} == {Status.MALFORMED}
    assert all("the stream is over the 1 MiB cap (max_stream_bytes)" in (r.error or "") for r in records)
    assert all(r.choices and r.choices[0].token_ids == (10, 11, 12) for r in records)  # what came is kept


def test_a_server_that_hangs_on_some_requests_leaves_timeouts_not_a_hang(hostile_server) -> None:
    _, histories = runs(hostile_server("hang"), False)
    seen = statuses(histories)
    assert Status.TIMEOUT in seen and Status.OK in seen
    assert any(a.verdict is Verdict.HANG for a in liveness(histories))


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_timeout_bounds_the_whole_answer_not_each_read(hostile_server, stream: bool) -> None:
    # The drip server sends its headers at once and then a byte a second: no read ever waits
    # long, so only a deadline on the whole request ends it (its whole answer takes minutes).
    timeout_s = 2.0

    async def one() -> tuple[float, Any]:
        async with Runner(make_target("sglang", hostile_server("drip")), RunConfig(request_timeout_s=timeout_s)) as r:
            began = time.monotonic()
            rec = await r.run_alone(RequestSpec("r01", 0.0, (5, 6, 7), 3, stream=stream), run=0)
            return time.monotonic() - began, rec

    took, rec = guarded(one())
    assert rec.status is Status.TIMEOUT and rec.indeterminate, rec
    assert timeout_s - 0.1 < took < timeout_s + 1.0, took
    assert rec.error == f"no complete answer within {timeout_s:g} s"


def test_the_runner_deadline_cuts_what_is_in_flight_and_starts_nothing_after(hostile_server) -> None:
    # Every other request of the hang server never ends; the request timeout is far off. The
    # deadline (a campaign's budget) cuts those in flight as indeterminate, not as hangs, records
    # a request due after it unsent, and refuses the next run and the next call about the server.
    late = RequestSpec("r03", 3000.0, (5, 6, 8), 3)

    async def go() -> tuple[float, RunHistory, list[str]]:
        async with Runner(make_target("sglang", hostile_server("hang")), RunConfig(request_timeout_s=60.0)) as r:
            began = time.monotonic()
            r.stop_at(began + 1.5, "time budget of 1.5 s spent")
            h = await r.run(dataclasses.replace(scenario(False), requests=(*scenario(False).requests, late)), run=0)
            took = time.monotonic() - began
            refused = []
            for call in (r.run(scenario(False), run=1), r.flush(), r.metrics()):
                with pytest.raises(DeadlinePassed) as e:
                    await call
                refused.append(str(e.value))
            return took, h, refused

    took, h, refused = guarded(go())
    assert 1.4 < took < 2.5, took
    by = h.by_id()
    # r01 and r02 are consecutive calls, so one of them hangs (which one: the session's count).
    (hung,) = [r for r in (by["r01"], by["r02"]) if not r.ok]
    assert hung.status is Status.CANCELLED and hung.error == "cut: time budget of 1.5 s spent"
    assert 1400 < (hung.end_ms or 0) < 2000
    assert by["r03"].status is Status.CANCELLED and by["r03"].sent_ms is None
    assert by["r03"].error == "not sent: time budget of 1.5 s spent"
    assert not liveness([h]), "a request cut at the deadline is no hang"
    assert refused == ["time budget of 1.5 s spent"] * 3


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("hanginfo", "timed out"),
        ("deepinfo", "/server_info answered JSON nested too deeply to read"),
        ("bigint", "/server_info answered something that is not JSON (Exceeds the limit (4300 digits)"),
    ],
)
def test_a_server_info_that_cannot_be_used_is_one_line(hostile_server, mode: str, says: str) -> None:
    with pytest.raises(TargetError) as e:
        runs(hostile_server(mode), False)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_flush_the_server_keeps_refusing_is_one_line(hostile_server) -> None:
    async def go() -> None:
        async with Runner(make_target("sglang", hostile_server("flushfail"), flush_attempts=2, flush_interval_s=0.01),
                          CONFIG) as runner:
            await runner.flush()

    with pytest.raises(TargetError) as e:
        guarded(go())
    message = str(e.value)
    assert "/flush_cache still refused after 2 tries (HTTP 503: busy [/oops]" in message
    assert_inert(message)


def test_metrics_that_are_not_utf8_parse_to_what_is_readable(hostile_server) -> None:
    async def go() -> dict[str, float]:
        async with Runner(make_target("sglang", hostile_server("markup")), CONFIG) as runner:
            return await runner.metrics()

    assert guarded(go()) == {"sglang:x": 1.0}


# --- planted server args ---------------------------------------------------------------------------


def test_planted_flags_are_recorded_but_never_relaunched(hostile_server) -> None:
    async def detect() -> str:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
            return (await detect_engine(s, hostile_server("plant"))).engine

    assert guarded(detect()) == "reference"

    async def info_of() -> TargetInfo:
        async with Runner(make_target("reference", hostile_server("plant")), CONFIG) as runner:
            assert runner.info is not None
            return runner.info

    info = guarded(info_of())
    assert info.server_args["disable_radix_cache"] == "--host=0.0.0.0"  # recorded as the server said
    with pytest.raises(UsageError) as e:
        reference_flag_argv(info.server_args, info.faults)
    assert str(e.value).startswith("server arg context_length: expected an integer, got '4096; touch /tmp/servefuzz-pwned'")
    # The reports' command takes only what type-checks: the one valid flag, the one valid fault.
    command = server_command(info)
    assert command.splitlines()[0] == ("servefuzz serve-reference --page-size 16 --max-running-requests 8 "
                                       "--fault overlap-war --port 30000")
    assert "--host" not in command and "touch" not in command and "$(" not in command


# --- servers behind auth ------------------------------------------------------------------------------


def test_without_credentials_the_target_is_one_line_about_it(hostile_server) -> None:
    with pytest.raises(TargetError) as e:
        runs(hostile_server("auth"), False)
    assert "/server_info answered HTTP 401: unauthorized [/oops]" in str(e.value)
    assert_inert(str(e.value))


def test_credentials_go_with_every_request_and_are_never_recorded(hostile_server) -> None:
    url = hostile_server("auth")
    headers = auth_headers(TOKEN, header_lines=["X-Org: lab"])
    before = hostile_server.stats()["unauthorized"]

    async def go() -> tuple[TargetInfo, list[RunHistory], str, bool, dict[str, float], bool]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
            engine = (await detect_engine(s, url, headers=headers)).engine
        target = make_target(engine, url, headers=headers)
        async with Runner(target, CONFIG) as runner:
            assert runner.info is not None
            histories = [await runner.run(scenario(True), run=0), await runner.run(scenario(False), run=1)]
            alone = await runner.run_alone(scenario(False).requests[0], run=2)
            histories.append(RunHistory(2, "alone", (alone,)))
            return runner.info, histories, engine, await runner.flush(), await runner.metrics(), await target.health(runner.session)

    info, histories, engine, flushed, metrics, healthy = guarded(go())
    assert engine == "sglang" and flushed and healthy and metrics["sglang:x"] == 1.0
    assert statuses(histories) == [Status.OK] * 5
    assert hostile_server.stats()["unauthorized"] == before  # not one request went without them
    assert info.auth is True
    finding = Finding(0, 7, scenario(False), info, (Anomaly(Oracle.LIVENESS, Verdict.HANG, "r01", "x"),))
    stored = str(finding.to_json()) + "".join(reports_of(info, histories))
    assert TOKEN not in stored and "'auth': True" in stored


def test_credentials_in_the_url_leave_it_and_become_a_header(hostile_server) -> None:
    url = hostile_server("auth").replace("http://", "http://bob:pw@")
    target = make_target("sglang", url)
    assert "bob" not in target.base_url and "pw" not in target.base_url
    assert target.headers["Authorization"].startswith("Basic ")
    with pytest.raises(TargetError) as e:  # this server wants a bearer token: Basic is refused...
        runs(url, False)
    assert "bob" not in str(e.value) and "pw@" not in str(e.value)
    assert TargetInfo("sglang", url).base_url == hostile_server("auth")  # ...and no record keeps them


def test_a_header_that_would_smuggle_a_line_is_refused() -> None:
    with pytest.raises(UsageError, match="holds a line break"):
        auth_headers("k\r\nX-Evil: 1")
    with pytest.raises(UsageError, match="'Name: value'"):
        auth_headers(header_lines=["no colon here"])
    with pytest.raises(UsageError, match="not a valid header name"):
        make_target("sglang", "http://127.0.0.1:1", headers={"Bad Name": "x"})
    with pytest.raises(UsageError, match="query"):
        make_target("sglang", "http://127.0.0.1:1/?api_key=x")


def test_dataclass_replace_keeps_the_url_clean() -> None:
    info = TargetInfo("sglang", "http://u:p@127.0.0.1:1/x?token=t&a=1")
    assert info.base_url == "http://127.0.0.1:1/x?token=<redacted>&a=1"
    assert dataclasses.replace(info, version="2").base_url == info.base_url
