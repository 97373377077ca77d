"""The host tier in-process (`reference/hosttier.py`): pages written through to host memory, kept
there when the device evicts them, loaded back on a later hit, bit for bit. The headline is the
property test of test_ref_core.py again, on workloads made to go through the tier: a prefix,
enough other prompts to push it out of a small device pool, then the prefix again (its own
tenant's, another's, under adapters), with aborts and pressure; every answer must equal the plain
single-sequence forward and nothing may leak."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refclient import burst, flush, generate_body, get, wrong_answers
from test_ref_core import LORAS, PREFIXES, assert_exact, assert_no_leaks, run

from servefuzz.reference.model import TinyModel
from servefuzz.reference.scheduler import Engine, Request, RequestError
from servefuzz.reference.server_args import ArgsError, ServerArgs, parse_args
from servefuzz.targets.base import parse_prometheus


def tokens(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 1024, n)]


@st.composite
def tiered(draw: st.DrawFn) -> ServerArgs:
    page = draw(st.sampled_from([1, 16, 64]))
    pool = draw(st.sampled_from([14, 20])) * page if page > 1 else draw(st.sampled_from([300, 500]))
    return ServerArgs(
        page_size=page,
        max_total_tokens=pool,
        chunked_prefill_size=draw(st.sampled_from([-1, 64, 300])),
        max_running_requests=draw(st.integers(1, 6)),
        disable_overlap_schedule=draw(st.booleans()),
        disable_cuda_graph=draw(st.booleans()),
        lora=LORAS,
        # Smaller than the pool (the host drops pages of its own), or larger.
        host_tier_tokens=max(page, int(pool * draw(st.sampled_from([0.5, 2.0, 4.0])))),
    )


@st.composite
def returns(draw: st.DrawFn) -> list[tuple[int, Request, int | None]]:
    """Prefix holders first, fillers that push them out of the device, then returns to them."""
    plan: list[tuple[int, Request, int | None]] = []
    tenants = [(None, None), ("tenant-a", None), (None, "lora-a"), ("tenant-b", "lora-b")]

    def req(rid: str, prompt: list[int], tenant: tuple[str | None, str | None]) -> Request:
        return Request(rid, tuple(prompt), max_new_tokens=draw(st.integers(0, 12)), n=draw(st.sampled_from([1, 1, 2])),
                       top_logprobs_num=2, cache_salt=tenant[0], adapter=tenant[1])

    prefix = PREFIXES[draw(st.integers(0, 1))][: draw(st.integers(16, 140))]
    first = draw(st.sampled_from(tenants))
    for i in range(draw(st.integers(1, 2))):
        plan.append((draw(st.integers(0, 3)), req(f"h{i}", prefix + tokens(100 + i, 5), first), None))
    for i in range(draw(st.integers(2, 6))):
        plan.append((draw(st.integers(4, 30)), req(f"f{i}", tokens(200 + i, draw(st.integers(30, 140))), (None, None)),
                     draw(st.one_of(st.none(), st.none(), st.integers(0, 8)))))
    for i in range(draw(st.integers(1, 4))):
        back = first if draw(st.booleans()) else draw(st.sampled_from(tenants))
        plan.append((draw(st.integers(25, 90)), req(f"b{i}", prefix + tokens(300 + i, draw(st.integers(1, 20))), back),
                     None))
    return plan


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=tiered(), plan=returns())
def test_the_host_tier_is_bit_exact_under_any_schedule(model: TinyModel, args: ServerArgs, plan: list) -> None:
    engine = Engine(args, model=model)
    servable = []
    for item in plan:
        try:
            engine.check(item[1])
        except RequestError:
            continue
        servable.append(item)
    outcomes = run(engine, servable)
    assert_exact(model, outcomes, aborted={r.rid for _, r, a in servable if a is not None})
    assert_no_leaks(engine)
    assert engine.host is not None and not engine.host.pending


HELD = PREFIXES[0][:128]


def push_out_and_return(engine: Engine, back: Request) -> dict:
    """H caches a 128-token prefix (two 64-token pages); five 300-token fillers push it out of a
    1,024-token device pool; then `back` returns to it, alone."""
    first = run(engine, [(0, Request("H", tuple(HELD + tokens(1, 10)), 4, top_logprobs_num=2), None)])
    fillers = run(engine, [(i, Request(f"f{i}", tuple(tokens(10 + i, 300)), 4), None) for i in range(5)])
    return {**first, **fillers, **run(engine, [(0, back, None)])}


def test_a_prefix_pushed_out_of_the_device_comes_back_from_the_host_exactly(model: TinyModel) -> None:
    engine = Engine(ServerArgs(page_size=64, max_total_tokens=1024, host_tier_tokens=4096), model=model)
    out = push_out_and_return(engine, Request("B", tuple(HELD + tokens(2, 10)), 8, top_logprobs_num=2))
    assert engine.stats.evicted_tokens > 0 and engine.host is not None
    assert out["B"].req.cached_tokens == 128  # both pages, from the host
    assert engine.host.stats.load_back_tokens == 128 and engine.host.stats.host_hit_tokens == 128
    assert engine.host.stats.dropped_tokens == 0
    assert_exact(model, out)
    assert_no_leaks(engine)
    # Loaded back, the pages are the device's again: the next hit is a device hit.
    again = run(engine, [(0, Request("C", tuple(HELD + tokens(3, 10)), 8, top_logprobs_num=2), None)])
    assert again["C"].req.cached_tokens == 128 and engine.host.stats.load_back_tokens == 128
    assert_exact(model, again)


def test_without_the_tier_the_same_return_misses(model: TinyModel) -> None:
    engine = Engine(ServerArgs(page_size=64, max_total_tokens=1024), model=model)
    out = push_out_and_return(engine, Request("B", tuple(HELD + tokens(2, 10)), 8))
    assert engine.host is None and out["B"].req.cached_tokens == 0


def test_the_host_keys_on_the_tenant_and_the_adapter(model: TinyModel) -> None:
    # H cached the prefix as the base model with no salt: another tenant, or an adapter, that
    # sends the same prefix after it left the device finds nothing on the host either.
    for salt, adapter in (("tenant-b", None), (None, "lora-a")):
        engine = Engine(ServerArgs(page_size=64, max_total_tokens=1024, host_tier_tokens=4096, lora=LORAS), model=model)
        back = Request("B", tuple(HELD + tokens(2, 10)), 8, top_logprobs_num=2, cache_salt=salt, adapter=adapter)
        out = push_out_and_return(engine, back)
        assert out["B"].req.cached_tokens == 0 and engine.host is not None
        assert engine.host.stats.load_back_tokens == 0
        assert_exact(model, out)


def test_a_small_host_drops_its_least_recently_used_pages(model: TinyModel) -> None:
    # Two pages of host: the fillers' pages written through after H's push H's out of the host too.
    engine = Engine(ServerArgs(page_size=64, max_total_tokens=1024, host_tier_tokens=128), model=model)
    out = push_out_and_return(engine, Request("B", tuple(HELD + tokens(2, 10)), 8))
    assert out["B"].req.cached_tokens == 0 and engine.host is not None and engine.host.used_pages == 2
    assert_exact(model, out)


def test_a_flush_empties_the_host_tier_unless_told_to_keep_it(model: TinyModel) -> None:
    for device_only in (False, True):
        engine = Engine(ServerArgs(page_size=64, host_tier_tokens=4096, flush_device_only=device_only), model=model)
        run(engine, [(0, Request("H", tuple(HELD + tokens(1, 10)), 2), None)])
        assert engine.flush_now()
        again = run(engine, [(0, Request("C", tuple(HELD + tokens(3, 10)), 8, top_logprobs_num=2), None)])
        # Written through, the prefix was on the host at once: a device-only flush leaves it there.
        assert again["C"].req.cached_tokens == (128 if device_only else 0), device_only
        assert_exact(model, again)


def test_the_host_tier_flags_round_trip_and_refuse_a_size_under_a_page() -> None:
    a = parse_args(["--host-tier-tokens", "8192", "--flush-device-only"])
    assert (a.host_tier_tokens, a.flush_device_only) == (8192, True) and parse_args(a.to_argv()) == a
    for bad in (["--host-tier-tokens", "-1"], ["--host-tier-tokens", "10"]):
        try:
            parse_args(bad)
        except ArgsError:
            continue
        raise AssertionError(f"{bad} was accepted")
    assert dataclasses.replace(ServerArgs(), host_tier_tokens=0).host_tier_tokens == 0


def test_the_server_meters_the_tier_under_sglangs_names_and_reports_its_size(
    reference_server: Callable[..., str], model: TinyModel
) -> None:
    # Over HTTP: what /metrics says the tier did (parsed by servefuzz's own reader, as a campaign
    # reads it) and what /server_info says it is.
    url = reference_server("--max-total-tokens", "1024", "--host-tier-tokens", "4096")
    flush(url)
    info = json.loads(get(url, "/server_info")[1])
    assert (info["host_tier_tokens"], info["max_total_num_tokens"]) == (4096, 1024)
    before = parse_prometheus(get(url, "/metrics")[1])
    burst(url, [("H", 0, generate_body(HELD + tokens(1, 10), 2))])
    burst(url, [(f"F{i}", i, generate_body(tokens(10 + i, 300), 4)) for i in range(5)])
    back = burst(url, [("B", 0, generate_body(HELD + tokens(2, 10), 8))])
    after = parse_prometheus(get(url, "/metrics")[1])
    moved = {k.removeprefix("sglang:"): after[k] - before.get(k, 0.0) for k in after if k.endswith(("_total", "}"))}
    assert back[0].cached_tokens == 128 and wrong_answers(model, back) == {}
    assert moved["load_back_tokens_total"] == 128 and moved["cached_tokens_total{cache_source=host}"] == 128
    assert moved["hicache_backup_tokens_total"] >= 128 and moved["evicted_tokens_total"] > 0
    assert after["sglang:hicache_host_total_tokens"] == 4096 and after["sglang:hicache_host_used_tokens"] > 0
    flush(url)
    assert parse_prometheus(get(url, "/metrics")[1])["sglang:hicache_host_used_tokens"] == 0
