"""The llamacpp adapter's reading of answers that a real server does not send on demand: entries
that are not their tokens' must stay `malformed` (the byte-token reading must not excuse them).
The real server's byte tokens are tests/engines/test_llamacpp_real_model.py."""

from __future__ import annotations

import pytest

from servefuzz.targets.base import BadReply, Exchange
from servefuzz.targets.llamacpp import _absorb


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
