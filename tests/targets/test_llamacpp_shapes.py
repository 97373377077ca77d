"""The llamacpp adapter's reading of answers that a real server does not send on demand: entries
that are not their tokens' must stay `malformed` (the byte-token reading must not excuse them).
The real server's byte tokens are tests/engines/test_llamacpp_real_model.py."""

from __future__ import annotations

import dataclasses

import pytest

from servefuzz.targets.base import BadReply, Exchange
from servefuzz.targets.llamacpp import LlamaCppTarget, _absorb
from servefuzz.workload import RequestSpec


def _entry(token: int, text: bytes) -> dict[str, object]:
    return {"id": token, "logprob": -0.1, "bytes": list(text), "top_logprobs": [{"id": token, "logprob": -0.1}]}


def _read(tokens: list[int], entries: list[dict[str, object]]) -> Exchange:
    ex = Exchange(clock=lambda: 0.0)
    _absorb(ex, {"tokens": tokens, "completion_probabilities": entries, "stop": True, "stop_type": "limit"},
            position=0, streamed=False)
    return ex


def test_a_character_of_byte_tokens_leaves_its_partial_positions_without_logprobs() -> None:
    c = _read([10, 228, 184, 11], [_entry(10, b"a"), _entry(184, "中".encode()), _entry(11, b"b")]).choices()[0]
    assert c.logprobs == (-0.1, None, -0.1, -0.1)
    assert c.top_logprobs[1] == ()


@pytest.mark.parametrize(("tokens", "entries"), [
    ([10, 12, 11], [_entry(10, b"a"), _entry(11, b"b")]),           # a token without an entry before ASCII
    ([10, 11], [_entry(10, b"a"), _entry(13, b"c")]),               # an entry of a token not there
    ([10], [_entry(10, b"a"), _entry(10, b"a")]),                   # more entries than tokens
])
def test_entries_that_are_not_the_tokens_are_still_malformed(tokens: list[int], entries: list[dict[str, object]]) -> None:
    with pytest.raises(BadReply):
        _read(tokens, entries)


# A prefill step's progress chunk as llama-server 0c1e570 streams it with `return_progress`
# (recorded from the tiny qwen3-next model, a 300-token prompt, `-b 64`): its `tokens` is [0].
PROGRESS = {"index": 0, "content": "", "tokens": [0], "stop": False, "id_slot": -1, "tokens_predicted": 0,
            "tokens_evaluated": 300, "prompt_progress": {"total": 300, "cache": 0, "processed": 64, "time_ms": 29}}


def test_a_prefill_progress_chunk_adds_no_token_and_only_a_stream_to_be_cut_asks_for_them() -> None:
    ex = Exchange(clock=lambda: 0.0)
    _absorb(ex, PROGRESS, position=0, streamed=True)
    _absorb(ex, {"index": 0, "content": "x", "tokens": [807], "stop": False, "tokens_predicted": 1}, position=0, streamed=True)
    assert ex.choice(0).token_ids == [807]
    target = LlamaCppTarget("http://127.0.0.1:1")
    spec = RequestSpec("r01", 0.0, (5, 6, 7), 4, stream=True, cancel_after_ms=30.0)
    assert target.body(spec, top_k=1)["return_progress"] is True
    # Control: a stream that is not cut, and a cut request that is not streamed, ask for none.
    for other in (dataclasses.replace(spec, cancel_after_ms=None), dataclasses.replace(spec, stream=False)):
        assert "return_progress" not in target.body(other, top_k=1)
