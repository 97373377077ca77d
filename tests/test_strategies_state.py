"""The strategies aimed at the state the architectures keep (issue 42): the model's facts read from
its config, the strategies offered only where the model has the trait they aim at, the lengths
they aim at, and the coverage dimensions that measure them. The triggers on a real engine are
tests/engines/test_state_triggers.py."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servefuzz.campaign import CampaignConfig, run_campaign
from servefuzz.campaign.choose import shape_of
from servefuzz.coverage import FeatureSpace, points, reuse_buckets, state_bucket, window_bucket
from servefuzz.errors import UsageError
from servefuzz.model_facts import GDN_CHUNK, ModelFacts, facts_from_config, read_model_facts
from servefuzz.models import deepseek_v3, gemma3, gpt_oss, nemotron_h, qwen3_moe, qwen3_next
from servefuzz.models.llama import TINY, llama_config
from servefuzz.runner import Runner
from servefuzz.server_facts import TargetInfo
from servefuzz.strategies import (
    DEFAULT_MIX,
    STRATEGIES,
    ExpertBatch,
    PrefillAbort,
    RandomLoad,
    StateRestore,
    Strategy,
    TargetShape,
    WindowEdge,
    WindowPrefix,
    get_strategies,
    left_out,
    offered,
    shape_aims,
)
from servefuzz.targets import make_target
from servefuzz.terms import common_prefix

IDS = {"<s>": 1, "</s>": 2, "<pad>": 0}
STATE = ("window-edge", "window-prefix", "state-restore", "prefill-abort", "expert-batch")

WINDOWED = TargetShape(context_length=1024, model=facts_from_config(gemma3.config(2048, IDS, "float32")))
RECURRENT = TargetShape(context_length=1024, model=facts_from_config(nemotron_h.config(2048, IDS, "float32")))
MOE = TargetShape(context_length=1024, model=facts_from_config(qwen3_moe.config(2048, IDS, "float32")))


def test_every_built_architecture_states_its_own_traits() -> None:
    facts = {m.NAME: facts_from_config(m.config(2048, IDS, "float32"))
             for m in (qwen3_moe, deepseek_v3, gpt_oss, gemma3, qwen3_next, nemotron_h)}
    facts["llama"] = facts_from_config(llama_config(TINY, 2048, IDS, "float32"))
    assert {a: sorted(f.traits) for a, f in facts.items()} == {
        "qwen3-moe": ["experts"],  # it writes `use_sliding_window: false`: no window
        "deepseek-v3": ["experts"],
        "gpt-oss": ["experts", "stateful", "window"],
        "gemma3": ["stateful", "window"],
        "qwen3-next": ["experts", "state", "stateful"],
        "nemotron-h": ["experts", "state", "stateful"],
        "llama": [],
    }
    assert facts["gemma3"].window == facts["gpt-oss"].window == 64
    assert facts["nemotron-h"].state_chunk == 32 and facts["qwen3-next"].state_chunk == GDN_CHUNK
    assert (facts["qwen3-moe"].experts, facts["qwen3-moe"].experts_per_token) == (8, 2)


def test_model_facts_are_read_from_the_folder_a_launch_names(tmp_path: Path) -> None:
    built = tmp_path / "tiny-gemma3-seed0"
    (built / "hf-float32").mkdir(parents=True)
    (built / "hf-float32" / "config.json").write_text(json.dumps(gemma3.config(2048, IDS, "float32")))
    (built / "gemma3.gguf").write_bytes(b"GGUF")
    # The built folder (`--model-arch`), its GGUF (llama-server's model), its HF form (`--model`).
    for path in (built, built / "gemma3.gguf", built / "hf-float32"):
        assert read_model_facts(path).window == 64, path
    # No config, or one that does not parse: nothing known, never an error.
    assert read_model_facts(tmp_path / "nowhere") == ModelFacts()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    assert read_model_facts(tmp_path / "bad") == ModelFacts()


def test_the_facts_travel_in_the_target_info_to_the_strategies_shape() -> None:
    facts = RECURRENT.model
    info = TargetInfo("llamacpp", "http://127.0.0.1:1", architecture=facts)
    back = TargetInfo.from_json(json.loads(json.dumps(info.to_json())))
    assert back.architecture == facts and shape_of(back).model == facts
    # An old finding has none; a hostile one's malformed record reads as nothing known.
    assert "architecture" not in TargetInfo("llamacpp", "http://127.0.0.1:1").to_json()
    assert TargetInfo.from_json({"engine": "llamacpp", "base_url": "http://h:1", "architecture": {"window": "64",
                                 "recurrent": "yes", "experts": -3}}).architecture == ModelFacts()


def test_state_strategies_are_offered_only_where_the_model_has_the_trait_and_the_rest_is_said() -> None:
    mix = get_strategies("mix")
    assert set(STATE) <= set(DEFAULT_MIX)
    names = {shape: {s.name for s in offered(mix, shape)} & set(STATE)
             for shape in (TargetShape(), WINDOWED, RECURRENT, MOE)}
    assert names == {
        TargetShape(): set(),
        WINDOWED: {"window-edge", "window-prefix", "prefill-abort"},
        RECURRENT: {"state-restore", "prefill-abort", "expert-batch"},
        MOE: {"expert-batch"},
    }
    assert left_out(mix, TargetShape()) == {
        "window-edge": "needs a sliding window: the served model has none known",
        "window-prefix": "needs a sliding window: the served model has none known",
        "state-restore": "needs a recurrent state: the served model has none known",
        "prefill-abort": "needs a sliding window or a recurrent state: the served model has none known",
        "expert-batch": "needs experts: the served model has none known",
        "retraction": "needs a KV pool one scenario can fill past (at most 10,240 tokens): the server states none",
    }
    assert set(left_out(mix, WINDOWED)) == {"state-restore", "expert-batch", "retraction"}
    assert shape_aims(RECURRENT) == ("state-restore", "prefill-abort", "expert-batch")
    assert shape_aims(TargetShape()) == ()


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), name=st.sampled_from(STATE),
       shape=st.sampled_from([WINDOWED, RECURRENT, MOE, TargetShape(context_length=256, model=RECURRENT.model),
                              # a pool smaller than the aims (they are clamped, never sent too long)
                              TargetShape(context_length=64, model=ModelFacts(window=8, recurrent=True, state_chunk=2,
                                                                              experts=8, experts_per_token=2)),
                              TargetShape(max_total_tokens=3000, model=ModelFacts(window=4096, recurrent=True,
                                                                                  state_chunk=256))]))
def test_state_strategies_are_reproducible_and_fit_the_target(seed: int, name: str, shape: TargetShape) -> None:
    s = STRATEGIES[name]
    a, b = s.generate(random.Random(seed), shape, seed=seed), s.generate(random.Random(seed), shape, seed=seed)
    assert a == b and a.meta["strategy"] == name
    for r in a.requests:
        assert r.prompt_len + r.max_tokens * r.n <= shape.pool_tokens
        assert all(t in shape.vocab for t in r.prompt_ids)


@pytest.mark.parametrize("seed", range(20))
def test_window_edge_puts_prompts_on_the_window_and_crosses_it_while_decoding(seed: int) -> None:
    s = WindowEdge().generate(random.Random(seed), WINDOWED, seed=seed)
    buckets = {window_bucket(r.prompt_len, r.max_tokens, 64) for r in s.requests}
    assert {"edge", "crossing"} <= buckets
    # One request decodes across a whole window.
    assert any(r.max_tokens > 64 for r in s.requests)


@pytest.mark.parametrize("seed", range(20))
def test_window_prefix_hits_a_cached_prompt_longer_than_the_window(seed: int) -> None:
    s = WindowPrefix().generate(random.Random(seed), WINDOWED, seed=seed)
    primer = s.requests[0]
    cached = s.meta["aims"][0]  # type: ignore[index]
    assert primer.prompt_len == cached > 64 and primer.offset_ms == 0
    hits = [r for r in s.requests if common_prefix(r.prompt_ids, primer.prompt_ids) == cached and r is not primer]
    assert len(hits) >= 2 and all(r.offset_ms >= 150 for r in hits)
    assert {reuse_buckets(s, 64)[r.id] for r in hits} == {"exact"}  # the whole cached prompt, longer than the window


@pytest.mark.parametrize("seed", range(20))
def test_state_restore_hits_each_cached_prompt_exactly_all_but_its_last_token_and_again(seed: int) -> None:
    s = StateRestore().generate(random.Random(seed), RECURRENT, seed=seed)
    chunk = RECURRENT.model.state_chunk
    assert chunk is not None
    primers = s.requests[:2]
    assert all(r.prompt_len in s.meta["aims"] for r in primers)  # type: ignore[operator]
    heads: dict[str, str] = {}
    for p in primers:
        kinds = []
        for r in s.requests:
            shared = common_prefix(r.prompt_ids, p.prompt_ids)
            if r.offset_ms <= 100 or not shared:
                continue
            if r.prompt_len == shared < p.prompt_len and shared % chunk == 0:
                kinds.append("head")  # its beginning alone, up to the last chunk multiple below its length
                heads[r.id] = "whole-but-last" if shared == p.prompt_len - 1 else "within"
            elif shared >= p.prompt_len - 1:
                kinds.append("all-but-last" if shared < p.prompt_len else "extend" if r.prompt_len > p.prompt_len else "again")
        # The hits, and a straggler that extends it again 1.2-2 s in (a slow engine's trigger).
        head = ["head"] if p.prompt_len > chunk else []
        assert sorted(kinds) == sorted(["again", "all-but-last", "extend", "extend", *head] if p.prompt_len > 1
                                       else ["again", "extend", "extend"])
        assert any(r.offset_ms >= 1200 and common_prefix(r.prompt_ids, p.prompt_ids) == p.prompt_len for r in s.requests)
    buckets = reuse_buckets(s, None)
    # (A hit on all but the last token sent after the head is an exact hit on the head.)
    assert "exact" in buckets.values() and {"whole-but-last", "within"} & set(buckets.values())
    assert {rid: buckets[rid] for rid in heads} == heads  # the N-1 hit: every token of the prompt cached
    # Every cached prompt holds at least a chunk but its last token (32 here): a shorter one would
    # leave no scanned state to restore (how often they land on a chunk edge: the next test).
    assert all(state_bucket(r.prompt_len, 32) != "sub-chunk" for r in primers)


def test_state_restore_lengths_land_on_the_state_chunk_and_its_edges_most_of_the_time() -> None:
    kinds = [state_bucket(r.prompt_len, 32) for seed in range(60)
             for r in StateRestore().generate(random.Random(seed), RECURRENT, seed=seed).requests[:2]]
    assert kinds.count("aligned") + kinds.count("edge") > len(kinds) / 2


@pytest.mark.parametrize("seed", range(20))
def test_prefill_abort_cuts_long_streams_and_retries_each_at_once(seed: int) -> None:
    shape = TargetShape(context_length=1024, chunked_prefill_size=64, model=RECURRENT.model)
    s = PrefillAbort().generate(random.Random(seed), shape, seed=seed)
    cut = [r for r in s.requests if r.cancel_after_ms is not None]
    assert cut and all(r.stream and r.prompt_len >= 3 * 64 and 5 <= r.cancel_after_ms <= 120 for r in cut)
    # Where the engine reports its prefill's progress the cut lands in the prefill: after whole
    # steps of the budget, two of them at least still to come.
    assert all(r.cancel_at_prefill is not None and r.cancel_at_prefill % 64 == 0
               and 64 <= r.cancel_at_prefill <= r.prompt_len - 2 * 64 for r in cut)
    for v in cut:
        (retry,) = [r for r in s.requests if r.prompt_ids == v.prompt_ids and r is not v]
        assert retry.cancel_after_ms is None
        assert v.offset_ms + v.cancel_after_ms < retry.offset_ms <= v.offset_ms + v.cancel_after_ms + 60  # type: ignore[operator]


@pytest.mark.parametrize("seed", range(20))
def test_expert_batch_grows_and_shrinks_the_batch_while_its_probe_decodes(seed: int) -> None:
    s = ExpertBatch().generate(random.Random(seed), MOE, seed=seed)
    probe, *rest = s.requests
    copies = [r for r in rest if r.prompt_ids == probe.prompt_ids]
    assert 1 <= len(copies) <= 2 and all(r.max_tokens == probe.max_tokens for r in copies)
    waves = sorted({round(r.offset_ms // 10) for r in rest if r not in copies})
    assert len(waves) >= 3  # newcomers join in several waves, each short
    assert all(r.max_tokens <= 12 for r in rest if r not in copies) and probe.max_tokens >= 48


def test_state_dimensions_exist_only_where_the_model_has_the_trait() -> None:
    def names(shape: TargetShape) -> set[str]:
        return set(FeatureSpace.for_shape(shape).names) & {"window", "state", "reuse"}

    assert names(TargetShape()) == names(MOE) == set()
    assert names(WINDOWED) == {"window", "reuse"} and names(RECURRENT) == {"state", "reuse"}
    # A dense model's space is what it was before these dimensions (the coverage doctest's 573).
    dense = TargetShape(page_size=16, chunked_prefill_size=128, max_total_tokens=2048)
    assert len(FeatureSpace.for_shape(dense).pairs) == 573
    assert "beyond-window" not in FeatureSpace.for_shape(RECURRENT).dimension("reuse").buckets
    space = FeatureSpace.for_shape(WINDOWED)
    assert FeatureSpace.from_json(space.to_json()) == space


def test_points_measure_the_state_strategies_aims() -> None:
    s = StateRestore().generate(random.Random(5), RECURRENT, seed=5)
    pts = points(s, RECURRENT)
    assert {p["reuse"] for p in pts.values()} >= {"none", "exact", "whole-but-last"}
    assert all("state" in p and "window" not in p for p in pts.values())
    w = WindowEdge().generate(random.Random(5), WINDOWED, seed=5)
    assert {p["window"] for p in points(w, WINDOWED).values()} >= {"edge", "crossing"}
    # Control: the same scenario on a dense model has none of these dimensions.
    assert not any({"window", "state", "reuse"} & set(p) for p in points(w, TargetShape()).values())


@pytest.mark.timeout(120)
def test_a_campaign_on_a_model_without_the_trait_leaves_the_strategy_out_and_says_so_once(
        tmp_path: Path, reference_server: Callable[..., str]) -> None:
    async def go(out: Path, strategies: list[Strategy]) -> None:
        async with Runner(make_target("reference", reference_server())) as runner:
            await run_campaign(runner, strategies, CampaignConfig(out, seed=0, request_budget=1))

    asyncio.run(go(tmp_path / "mixed", [WindowEdge(), StateRestore(), RandomLoad()]))
    config = json.loads((tmp_path / "mixed" / "config.json").read_text())
    assert config["strategies"] == ["random"]
    assert config["left_out"] == {"window-edge": "needs a sliding window: the served model has none known",
                                  "state-restore": "needs a recurrent state: the served model has none known"}
    # Control: nothing left out, nothing said; and a campaign of nothing but such strategies
    # is refused in one line.
    asyncio.run(go(tmp_path / "plain", [RandomLoad()]))
    assert "left_out" not in json.loads((tmp_path / "plain" / "config.json").read_text())
    with pytest.raises(UsageError, match="a model with a sliding window"):
        asyncio.run(go(tmp_path / "none", [WindowEdge()]))


@pytest.mark.timeout(120)
def test_the_hybrid_reference_engine_says_its_state_and_the_state_strategies_are_offered_on_it(
        tmp_path: Path, reference_server: Callable[..., str]) -> None:
    # The reference engine builds its model itself: no config.json, so its /server_info says what
    # the model keeps (a recurrent state, checkpointed every --mamba-track-interval tokens).
    url = reference_server("--model-arch", "qwen3-next", "--mamba-track-interval", "128")

    async def go() -> None:
        async with Runner(make_target("reference", url)) as runner:
            assert runner.info is not None and runner.info.architecture.traits == {"state", "stateful"}
            assert shape_of(runner.info).model.state_chunk == 128
            await run_campaign(runner, [StateRestore(), PrefillAbort(), WindowEdge(), RandomLoad()],
                               CampaignConfig(tmp_path, seed=0, request_budget=1))

    asyncio.run(go())
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["strategies"] == ["state-restore", "prefill-abort", "random"]
    assert list(config["left_out"]) == ["window-edge"]


def test_the_model_facts_examples_run() -> None:
    import doctest

    from servefuzz import model_facts

    result = doctest.testmod(model_facts)
    assert result.attempted > 0 and result.failed == 0
