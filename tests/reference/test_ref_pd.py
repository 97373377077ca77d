"""The prefill/decode pair (`reference/pd.py`, `reference/transfer.py`) over real HTTP: a router,
a prefill server and a decode server, three processes on 127.0.0.1. The headline is the engine's
property again: through the pair every token and logprob equals the plain single-sequence
forward, and the meters of each server say the KV was moved (what a campaign reads to know the
transfer ran). The planted transfer fault fires and its cure quiets it in test_ref_faults.py."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable

import numpy as np
import pytest
from refclient import LORA_FLAGS, burst, flush, generate_body, get, post, wrong_answers

from servefuzz.reference.model import TinyModel
from servefuzz.reference.server_args import ArgsError, parse_args
from servefuzz.reference.transfer import ReceiveBuffer, Transfer
from servefuzz.targets.base import parse_prometheus

PAIR = ("--disaggregation-mode", "pair", *LORA_FLAGS)


def toks(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 1024, n)]


SHARED = toks(200, 128)  # two pages: hits on the prefill server's cache


def mixed(url: str) -> list:
    """Bursts of everything a request may be: shared prefixes (hits on the prefill side), n > 1,
    seeded draws, tenants, adapters, a prompt of one token, prompts chunked at the budget."""
    return burst(url, [
        ("plain", 0, generate_body(toks(201, 150), 12)),
        ("shared-a", 0, generate_body(SHARED + toks(202, 30), 10)),
        ("shared-b", 1, generate_body(SHARED + toks(203, 70), 10)),
        ("n3", 1, generate_body(toks(204, 90), 8, n=3)),
        ("seeded", 2, generate_body(toks(205, 60), 8, n=2, temperature=0.8, seed=11)),
        ("salted", 2, generate_body(SHARED + toks(206, 5), 6, extra_key="tenant-a")),
        ("adapter", 3, generate_body(SHARED + toks(207, 40), 6, lora_path="lora-a")),
        ("one", 3, generate_body([9], 6)),
        ("long", 4, generate_body(toks(208, 2300), 4)),  # over the 2,048-token budget: chunked
    ])


def test_the_clean_pair_answers_every_request_as_a_lone_forward(reference_server: Callable[..., str],
                                                               model: TinyModel) -> None:
    url = reference_server(*PAIR)
    flush(url)
    before = parse_prometheus(get(url, "/metrics")[1])
    first = mixed(url)
    again = mixed(url)  # the same prompts again: the prefill server's cache hits them now
    assert len(first) == len(again) == 12
    assert wrong_answers(model, first + again) == {}
    by_name = {a.name: a for a in again}
    assert by_name["shared-a"].cached_tokens >= 128 and by_name["plain"].cached_tokens >= 128
    after = parse_prometheus(get(url, "/metrics")[1])
    moved = {k: after[k] - before.get(k, 0.0) for k in after}
    # Each of the 18 requests (each split once, whatever its n) moved its KV: counted on both sides.
    for role in ("prefill", "decode"):
        assert moved[f"sglang:kv_transfers_total{{role={role}}}"] == 18, moved
        assert moved[f"sglang:kv_transfer_pages_total{{role={role}}}"] > 18
    assert moved["sglang:kv_transfer_bytes_total{role=decode}"] == moved["sglang:kv_transfer_bytes_total{role=prefill}"] > 0
    # The prefix cache's hits are the prefill server's; the decode server looks nothing up.
    assert moved["sglang:cache_hit_tokens_total{role=prefill}"] > 0
    assert moved["sglang:cache_hit_tokens_total{role=decode}"] == 0


def test_the_pair_streams_through_the_router_and_speaks_openai(reference_server: Callable[..., str],
                                                               model: TinyModel) -> None:
    url = reference_server(*PAIR)
    prompt = toks(210, 100)
    status, body = post(url, "/v1/completions", {"prompt": prompt, "max_tokens": 6, "temperature": 0,
                                                 "ignore_eos": True, "return_token_ids": True, "logprobs": 1})
    assert status == 200 and body["choices"][0]["token_ids"] == list(model.generate(prompt, 6).token_ids)
    req = urllib.request.Request(url + "/generate", data=json.dumps(generate_body(prompt, 6, stream=True)).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - 127.0.0.1
        events = [line[6:] for line in resp.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and len(events) > 2  # one event a step, passed on as the decode server sent it
    assert json.loads(events[-2])["output_ids"] == list(model.generate(prompt, 6).token_ids)


def test_the_pair_says_what_it_is_and_refuses_what_is_not_a_clients(reference_server: Callable[..., str]) -> None:
    url = reference_server(*PAIR)
    info = json.loads(get(url, "/server_info")[1])
    assert info["disaggregation_mode"] == "pair" and info["disaggregation"]["transfer_backend"] == "http-pull"
    ports = {info["disaggregation"][r]["port"] for r in ("prefill", "decode")}
    assert len(ports) == 2 and info["port"] not in ports
    status, body = post(url, "/generate", generate_body([5, 6, 7], 2, kv_transfer_params={"transfer_id": "0" * 32}))
    assert status == 400 and "router" in body["error"]["message"]
    # The decode server itself: a transfer that was never made is a 400, a bad id too.
    decode = f"http://127.0.0.1:{info['disaggregation']['decode']['port']}"
    status, body = post(decode, "/generate", generate_body([5, 6, 7], 2, kv_transfer_params={"transfer_id": "0" * 32}))
    assert status == 400 and "answered 404" in body["error"]["message"]
    status, _ = post(decode, "/generate", generate_body([5, 6, 7], 2, kv_transfer_params={"transfer_id": "../x"}))
    assert status == 400
    # Bad input through the router: the prefill server's one clear line.
    status, body = post(url, "/generate", generate_body([5, 10**6], 2))
    assert status == 400 and "vocabulary" in body["error"]["message"]


def test_pair_flags_round_trip_and_refuse_what_the_transfer_does_not_carry() -> None:
    a = parse_args(["--disaggregation-mode", "pair", "--fault", "transfer-region-dedupe"])
    assert parse_args(a.to_argv()) == a and a.to_json()["disaggregation_mode"] == "pair"
    for bad in (["--disaggregation-mode", "pair", "--model-arch", "qwen3-next"],
                ["--disaggregation-mode", "pair", "--host-tier-tokens", "4096"],
                ["--disaggregation-mode", "decode"], ["--disaggregation-mode", "both"]):
        with pytest.raises(ArgsError):
            parse_args(bad)


def test_the_receive_buffer_mixes_pages_only_with_two_transfers_in_flight() -> None:
    # In-process, the fault's mechanism alone: one transfer at a time is handed back whole.
    def transfer(seed: int) -> Transfer:
        kv = np.random.default_rng(seed).integers(-99, 99, (2, 9, 2, 1, 2)).astype(np.int16)
        return Transfer(tuple(range(10)), 0, kv)

    a, b = transfer(1), transfer(2)
    for dedupe in (False, True):
        buf = ReceiveBuffer(page_size=4, dedupe_by_base=dedupe)
        for t in (a, b):
            buf.stage("x", t)
            assert (buf.take("x").kv == t.kv).all()  # type: ignore[union-attr]
    clean, faulty = ReceiveBuffer(4, dedupe_by_base=False), ReceiveBuffer(4, dedupe_by_base=True)
    for buf in (clean, faulty):
        buf.stage("a", a)
        buf.stage("b", b)
    assert (clean.take("b").kv == b.kv).all()  # type: ignore[union-attr]
    got = faulty.take("b")
    assert got is not None and (got.kv == a.kv).all() and faulty.stats.deduped_pages == 3
