"""Server facts: each engine's module reads its own recorded server args into one normalized
record (`ServerFacts`), and every reader takes the facts, never an engine's key.

The inputs are what real servers reported: SGLang's `/server_info` (tests/targets/data, and the
exercise recordings), and the targets of findings servefuzz made on vLLM, llama-server and
SGLang (docs/findings), loaded as they were stored, before facts existed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servefuzz.campaign.choose import shape_of
from servefuzz.engines import llamacpp, openai, sglang, vllm
from servefuzz.engines.registry import facts_of, spec_of
from servefuzz.engines.spec import ServerFacts
from servefuzz.finding import load_finding
from servefuzz.server_facts import REDACTED, TargetInfo
from servefuzz.strategies import DEFAULT_CAPTURE_SIZES

ROOT = Path(__file__).resolve().parent.parent
FINDINGS = ROOT / "docs" / "findings"


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_sglang_reads_its_server_info() -> None:
    args = _json(ROOT / "tests" / "targets" / "data" / "sglang" / "server_info.json")
    f = sglang.facts(args)
    assert (f.chunk_budget, f.max_running, f.page_size, f.capture_sizes, f.prefix_caching, f.pool_tokens) == (
        8192, 128, 1, (1, 2, 4), True, 20480)
    # The recording's context_length is null (the model's decides); the scheduler's longest
    # admitted prompt, max_req_input_len 20,474 (its 20,480-token pool's bound), is told.
    assert f.context_length == 20475
    untold = {k: v for k, v in args.items() if k != "max_req_input_len"}
    assert sglang.facts(untold).context_length is None
    off = sglang.facts(_json(ROOT / "tests" / "data" / "exercise" / "sglang-no-radix" / "target.json")["server_args"])
    on = sglang.facts(_json(ROOT / "tests" / "data" / "exercise" / "sglang-radix" / "target.json")["server_args"])
    assert (off.prefix_caching, on.prefix_caching, on.chunk_budget, on.page_size) == (False, True, 4096, 16)


def test_the_reference_engine_speaks_sglang_s_names() -> None:
    args = {"page_size": 64, "chunked_prefill_size": 256, "disable_radix_cache": True}
    assert spec_of("reference").facts(args) == sglang.facts(args)
    assert spec_of("reference").facts(args).page_size == 64


def test_vllm_reads_its_recorded_cache_config() -> None:
    f = load_finding(FINDINGS / "vllm-cpu-seed-chunked-crash" / "finding.json").target.facts
    assert (f.context_length, f.page_size, f.prefix_caching) == (2048, 32, True)
    assert f.capture_sizes == () and f.deterministic is None and f.promise is None


def test_llama_server_reads_its_props() -> None:
    target = load_finding(FINDINGS / "llamacpp-lora-base-after-adapter" / "finding.json").target
    f = target.facts
    assert (f.context_length, f.prefix_caching, f.page_size, f.chunk_budget, f.max_running) == (1024, True, None, None, None)
    assert llamacpp.facts({"cache_prompt": False}).prefix_caching is False


def test_a_stored_sglang_finding_has_its_facts_on_load() -> None:
    target = load_finding(FINDINGS / "sglang-cpu-tiny-pool-hang" / "finding.json").target
    f = target.facts
    assert (f.chunk_budget, f.max_running, f.page_size, f.pool_tokens) == (2048, 32, 1, 1024)
    assert f.capture_sizes[:3] == (1, 2, 3) and f.capture_sizes[-1] == 32
    assert "facts" not in target.to_json()  # derived, never stored


def test_an_engine_reads_only_its_own_names_and_the_generic_dialect_reads_all() -> None:
    """The control: vLLM's names mean nothing to SGLang's module, and the plain dialect, which
    may front any engine, reads either engine's."""
    v_args = {"max_model_len": 2048, "max_num_batched_tokens": 512, "max_num_seqs": 4, "block_size": 16}
    s_args = {"context_length": 2048, "chunked_prefill_size": 512, "max_running_requests": 4, "page_size": 16}
    assert sglang.facts(v_args) == ServerFacts() and vllm.facts(s_args) == ServerFacts()
    assert openai.facts(v_args) == openai.facts(s_args) == ServerFacts(2048, 512, 4, 16)
    assert spec_of("an-engine-nobody-knows").facts(v_args) == openai.facts(v_args)


@pytest.mark.parametrize("bad", [0, -1, True, "16", 1.5, None])
def test_a_value_that_is_not_a_positive_integer_is_no_fact(bad: object) -> None:
    assert sglang.facts({"page_size": bad, "chunked_prefill_size": bad, "cuda_graph_bs": [1, bad]}) == ServerFacts()


def test_the_contract_mode_is_a_fact() -> None:
    config = _json(ROOT / "docs" / "gpu" / "engines-2026-12-02" / "campaign-vllm-gpu-batch-invariant" / "config.json")
    target = TargetInfo.from_json(config["target"])
    assert target.facts.deterministic == "VLLM_BATCH_INVARIANT=1" == target.deterministic
    assert target.promise is not None and target.facts.promise == target.promise
    plain = TargetInfo("sglang", "http://127.0.0.1:1", server_args={"enable_deterministic_inference": False})
    assert plain.facts.deterministic is None
    on = facts_of("sglang", {"enable_deterministic_inference": True}, {})
    assert on.deterministic == "--enable-deterministic-inference" and on.promise is not None


def test_a_given_page_size_wins_and_the_facts_say_it() -> None:
    info = TargetInfo("vllm", "http://127.0.0.1:1", server_args={"block_size": 16}, page_size=32)
    assert info.page_size == info.facts.page_size == 32
    assert TargetInfo("vllm", "http://127.0.0.1:1", server_args={"block_size": 16}).page_size == 16


def test_facts_are_read_after_redaction() -> None:
    info = TargetInfo("openai", "http://u:p@127.0.0.1:1", server_args={"api_key": "sk-1", "max_model_len": 100})
    assert info.server_args["api_key"] == REDACTED and info.facts.context_length == 100


def test_the_campaign_s_shape_is_the_facts() -> None:
    args = _json(ROOT / "tests" / "targets" / "data" / "sglang" / "server_info.json")
    shape = shape_of(TargetInfo("sglang", "http://127.0.0.1:1", server_args=args, page_size=1))
    assert (shape.chunked_prefill_size, shape.max_running_requests, shape.capture_sizes, shape.context_length) == (
        8192, 128, (1, 2, 4), 20475)  # the scheduler's bound (test_sglang_reads_its_server_info)
    untold = {k: v for k, v in args.items() if k != "max_req_input_len"}
    assert shape_of(TargetInfo("sglang", "http://127.0.0.1:1", server_args=untold, page_size=1)).context_length == 4096
    assert shape.choices  # its grammar backend is xgrammar
    # The CPU preset's SGLang runs without one and answers a constrained request with a 400: the
    # campaign sends none there (a 30-minute campaign sent 654 before this, each refused).
    no_grammar = shape_of(TargetInfo("sglang", "http://127.0.0.1:1", server_args={**args, "grammar_backend": "none"}))
    assert not no_grammar.choices and "choices" not in no_grammar.capabilities
    # llama-server's args never tell its step budget: under the prefill-steps profile it is the
    # profile's -b, so prefill-abort cuts between its 64-token steps; elsewhere none is assumed.
    stepped = shape_of(TargetInfo("llamacpp", "http://127.0.0.1:1", server_args={"total_slots": 8}, profile="prefill-steps"))
    plain = shape_of(TargetInfo("llamacpp", "http://127.0.0.1:1", server_args={"total_slots": 8}))
    assert (stepped.chunked_prefill_size, plain.chunked_prefill_size) == (64, None)
    vllm_shape = shape_of(load_finding(FINDINGS / "vllm-cpu-seed-chunked-crash" / "finding.json").target)
    assert (vllm_shape.context_length, vllm_shape.page_size, vllm_shape.capture_sizes) == (2048, 32, DEFAULT_CAPTURE_SIZES)
