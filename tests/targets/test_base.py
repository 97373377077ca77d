"""The registry, TargetInfo and the small parsers every dialect shares."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from servefuzz.errors import UsageError
from servefuzz.targets import available_engines, get_target_class, llamacpp, make_target, openai, sglang
from servefuzz.targets.base import BadStatus, Exchange, TargetInfo, parse_prometheus
from servefuzz.targets.openai import OpenAITarget
from servefuzz.targets.sglang import ReferenceTarget, SGLangTarget


def test_registry_maps_engine_names_to_dialects() -> None:
    assert {"sglang", "reference", "openai"} <= set(available_engines())
    assert get_target_class("sglang") is SGLangTarget
    assert get_target_class("reference") is ReferenceTarget
    t = make_target("openai", "http://127.0.0.1:8000/", model="tiny")
    assert isinstance(t, OpenAITarget) and t.engine == "openai" and t.base_url == "http://127.0.0.1:8000"
    assert make_target("reference", "http://127.0.0.1:1").engine == "reference"


@pytest.mark.parametrize(
    ("engine", "url", "opts", "message"),
    [
        ("tgi", "http://127.0.0.1:1", {}, "unknown engine 'tgi' (known: "),
        ("sglang", "127.0.0.1:30000", {}, "target URL must start with http://"),
        ("sglang", "http://127.0.0.1:1", {"model": "x"}, "bad option for engine 'sglang'"),
    ],
)
def test_bad_target_requests_are_usage_errors(engine: str, url: str, opts: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        make_target(engine, url, **opts)


def test_target_info_round_trips_through_json() -> None:
    info = TargetInfo(
        engine="reference",
        base_url="http://127.0.0.1:1",
        version="0.1",
        server_args={"page_size": 16},
        page_size=16,
        max_total_tokens=4096,
        vocab_size=512,
        eos_token_id=2,
        faults=("page-boundary",),
    )
    assert TargetInfo.from_json(info.to_json()) == info


def test_prometheus_text_sums_label_sets_and_skips_comments() -> None:
    text = (
        "# HELP sglang:cache_hit_rate The cache hit rate\n"
        "# TYPE sglang:cache_hit_rate gauge\n"
        'sglang:cache_hit_rate{model_name="tiny"} 0.25\n'
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 32.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 8.0\n'
        'weird{path="/a b}"} 3 1700000000000\n'
        "plain 1e3\n"
        "broken_line\n"
    )
    assert parse_prometheus(text) == {
        "sglang:cache_hit_rate": 0.25,
        "vllm:prefix_cache_hits_total": 40.0,
        "weird": 3.0,
        "plain": 1000.0,
    }


@pytest.mark.parametrize(
    ("absorb", "kw", "answer"),
    [
        (llamacpp._absorb, {"position": 0}, {"index": 0, "tokens": [5], "content": "", "stop": True}),
        (openai._absorb, {}, {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}),
        (sglang._absorb, {"position": 0}, {"meta_info": {"finish_reason": {"type": "length"}}, "output_ids": [5]}),
    ],
    ids=["llamacpp", "openai", "sglang"],
)
def test_a_failure_reported_inside_a_200_answer_is_a_bad_status(
    absorb: Callable[..., None], kw: dict[str, Any], answer: dict[str, Any]
) -> None:
    """llama.cpp, vLLM and SGLang report a failure once the status is sent as `{"error": ...}`:
    every dialect reads it as the server's error (`base.in_band_error`), its message kept."""
    for error in ({"message": "out of KV slots", "code": 500}, "out of KV slots"):
        exchange = Exchange(clock=lambda: 0.0, http_status=200)
        with pytest.raises(BadStatus, match=r"^HTTP 200: in-band error: out of KV slots$"):
            absorb(exchange, {"error": error}, streamed=True, **kw)
    absorb(Exchange(clock=lambda: 0.0, http_status=200), answer, streamed=False, **kw)  # the control: no error, no raise
