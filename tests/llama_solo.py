"""llama-server as the truth tests hold the exact truth to it: one slot (nothing is batched with
a request), no prompt cache, and a request's greedy answer with the top-5 logprobs of each
position (tests/test_truth.py on the tiny model, tests/test_realmodel.py on SmolLM2)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from servefuzz import engine_files
from servefuzz.engines import llamacpp as llamacpp_engine
from servefuzz.launcher import ServerProcess

Answer = tuple[list[int], list[list[tuple[int, float]]]]


@contextmanager
def one_slot_server(gguf: Path, log_dir: Path) -> Iterator[ServerProcess]:
    """llama-server on `gguf`, one slot of 2048 tokens and no prompt-cache RAM, for the block
    (skipped where scripts/setup_engines.sh has not built it); stopped after."""
    if not engine_files.installed("llama-server"):
        pytest.skip(f"llama-server is not built under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    srv = ServerProcess(llamacpp_engine.server_argv(engine_files.program("llama-server"), gguf, slots=1, ctx=2048,
                                                   extra=["--cache-ram", "0"]),
                        log_path=log_dir / "server.log", start_timeout_s=60)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def solo(url: str, prompt: list[int], n: int) -> Answer:
    """`n` greedy tokens after `prompt`, uncached, and each position's top 5 (id, logprob)."""
    body = {"prompt": prompt, "n_predict": n, "temperature": 0.0, "n_probs": 5, "ignore_eos": True,
            "cache_prompt": False, "return_tokens": True}
    req = urllib.request.Request(url + "/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:  # noqa: S310 - 127.0.0.1 only
        data = json.loads(resp.read())
    probs = data["completion_probabilities"]
    return [p["id"] for p in probs], [[(t["id"], t["logprob"]) for t in p["top_logprobs"]] for p in probs]
