"""The runner against real misbehaving servers: every request ends as a record, and a target
that cannot be used at all is one clear TargetError line."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import pytest

from servefuzz.errors import TargetError
from servefuzz.history import Status
from servefuzz.launcher import ServerProcess, free_port
from servefuzz.runner import RunConfig, Runner
from servefuzz.targets import make_target
from servefuzz.workload import RequestSpec, Scenario

StubFactory = Callable[[str], ServerProcess]


def scenario(*specs: tuple[str, float, bool]) -> Scenario:
    """Requests (id, offset_ms, stream) with small fixed prompts."""
    return Scenario(
        seed=0,
        requests=tuple(RequestSpec(i, off, (5, 6, 7, 8), max_tokens=4, stream=s) for i, off, s in specs),
    )


async def run_once(url: str, sc: Scenario, config: RunConfig | None = None):
    async with Runner(make_target("sglang", url), config or RunConfig()) as r:
        return await r.run(sc, run=0, label="load")


def test_unreachable_target_is_one_line_target_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TargetError) as e:
        asyncio.run(run_once(url, scenario(("r1", 0, False))))
    assert str(e.value) == f"cannot reach {url}: connection refused"


def test_target_answering_500_everywhere_is_target_error(stub_server: StubFactory) -> None:
    srv = stub_server("down")
    with pytest.raises(TargetError, match=r"cannot use .*: /server_info answered HTTP 500: internal error"):
        asyncio.run(run_once(srv.base_url, scenario(("r1", 0, False))))


def test_500_answer_is_http_error_record(stub_server: StubFactory) -> None:
    srv = stub_server("http500")
    h = asyncio.run(run_once(srv.base_url, scenario(("r1", 0, False), ("r2", 5, True))))
    assert [r.status for r in h.records] == [Status.HTTP_ERROR, Status.HTTP_ERROR]
    assert all(r.http_status == 500 and "boom" in (r.error or "") for r in h.records)
    assert not any(r.indeterminate for r in h.records)


def test_garbage_json_is_malformed_record(stub_server: StubFactory) -> None:
    srv = stub_server("garbage")
    h = asyncio.run(run_once(srv.base_url, scenario(("r1", 0, False))))
    (rec,) = h.records
    assert rec.status is Status.MALFORMED and rec.http_status == 200
    assert "not JSON" in (rec.error or "")


def test_server_killed_mid_run_gives_full_history_of_connection_errors(stub_server: StubFactory) -> None:
    srv = stub_server("hang")
    early = [("a", 0, False), ("b", 0, True), ("c", 0, False), ("d", 0, True)]
    sc = scenario(*early, ("late1", 400, False), ("late2", 450, True))

    async def main():
        async with Runner(make_target("sglang", srv.base_url)) as r:
            run = asyncio.create_task(r.run(sc, run=3, label="load"))
            # Kill only once the four early requests are inside the server.
            async with aiohttp.ClientSession() as s:
                while (await (await s.get(srv.base_url + "/stats")).json())["inflight"] < 4:
                    await asyncio.sleep(0.01)
            srv.kill()
            return await run

    h = asyncio.run(main())
    assert [r.request_id for r in h.records] == ["a", "b", "c", "d", "late1", "late2"]
    assert {r.status for r in h.records} == {Status.CONNECTION_ERROR}
    assert all(r.indeterminate and r.run == 3 and r.end_ms is not None for r in h.records)
    # A stream cut mid-answer keeps what had arrived.
    streamed = h.by_id()["b"]
    assert streamed.first_token_ms is not None and streamed.choices[0].token_ids == (7,)


def test_slow_answer_is_timeout(stub_server: StubFactory) -> None:
    srv = stub_server("hang")
    h = asyncio.run(run_once(srv.base_url, scenario(("r1", 0, False)), RunConfig(request_timeout_s=0.3)))
    (rec,) = h.records
    assert rec.status is Status.TIMEOUT and rec.indeterminate


def test_cancel_after_ms_cuts_the_connection(stub_server: StubFactory) -> None:
    srv = stub_server("hang")
    spec = RequestSpec("c1", 0.0, (5, 6), max_tokens=4, stream=True, cancel_after_ms=50)

    async def main():
        async with Runner(make_target("sglang", srv.base_url)) as r:
            rec = (await r.run(Scenario(seed=0, requests=(spec,)), run=0)).records[0]
            async with aiohttp.ClientSession() as s:
                for _ in range(200):  # the server notices the disconnect a moment later
                    stats = await (await s.get(srv.base_url + "/stats")).json()
                    if stats["cut"]:
                        break
                    await asyncio.sleep(0.01)
            return rec, stats

    rec, stats = asyncio.run(main())
    assert rec.status is Status.CANCELLED and rec.error == "cancelled by the client"
    assert rec.choices[0].token_ids == (7,)  # the partial stream is kept
    assert stats == {"inflight": 0, "cut": 1}


def test_records_follow_schedule_order_and_carry_times(stub_server: StubFactory) -> None:
    srv = stub_server("http500")
    h = asyncio.run(run_once(srv.base_url, scenario(("x", 30, False), ("y", 0, False), ("z", 10, False))))
    assert [r.request_id for r in h.records] == ["y", "z", "x"]
    for r in h.records:
        assert r.sent_ms is not None and r.end_ms is not None
        assert r.sent_ms >= r.scheduled_ms  # never early
        assert r.end_ms >= r.sent_ms


async def _one_answer_per_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """An HTTP server that promises keep-alive but drops each connection's second request
    unanswered, as llama.cpp drops a connection after a stream."""
    answered = False
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        await reader.readexactly(length)
        if answered:
            writer.close()
            return
        body = b'{"version": "stub", "page_size": 16}' if head.startswith(b"GET /server_info") else b"{}"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        answered = True


def test_a_call_on_a_connection_the_server_dropped_is_made_again_on_a_fresh_one() -> None:
    async def main() -> tuple[bool, bool]:
        server = await asyncio.start_server(_one_answer_per_connection, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with server, Runner(make_target("sglang", url)) as r:  # /server_info: connection 1
            return await r.flush(), await r.flush()  # each first tries the dropped connection

    assert asyncio.run(main()) == (True, True)


def test_a_request_sent_alone_before_is_not_sent_again_for_its_reference(reference_server: Callable[..., str]) -> None:
    """`Runner.reference`: the same computation alone on a flushed cache is answered once; a
    request that differs, an unseeded sampled one, or reuse turned off is sent."""
    from servefuzz.trial import execute

    url = reference_server()
    first = Scenario(0, (RequestSpec("r01", 0.0, (5, 6, 7), 4), RequestSpec("r02", 1.0, (5, 6, 8), 4)))
    again = Scenario(1, (RequestSpec("r07_b", 3.0, (5, 6, 7), 4), RequestSpec("r08", 0.0, (5, 6, 7), 4, temperature=0.9),
                         RequestSpec("r09", 0.0, (5, 6, 8), 5)))

    async def go(reuse: bool) -> tuple[int, int, tuple[str, ...], dict[str, tuple[int, ...]]]:
        async with Runner(make_target("reference", url), RunConfig(reuse_references=reuse)) as runner:
            one = await execute(runner, first, runs=1, with_alone=True)
            two = await execute(runner, again, runs=1, with_alone=True)
        tokens = {rid: recs[0].choices[0].token_ids for rid, recs in (*one.alone.items(), *two.alone.items())}
        return one.sent, two.sent, one.reused + two.reused, tokens

    sent_one, sent_two, reused, tokens = asyncio.run(go(reuse=True))
    assert (sent_one, sent_two, reused) == (2 + 2, 3 + 2, ("r07_b",))  # r01's answer: one reference not sent
    assert tokens["r07_b"] == tokens["r01"]
    fresh_one, fresh_two, none, fresh = asyncio.run(go(reuse=False))
    assert (fresh_one, fresh_two, none) == (2 + 2, 3 + 3, ()) and fresh["r07_b"] == fresh["r01"]
