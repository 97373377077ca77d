"""Tell which engine serves a URL, from what it answers, when the user gave no `--engine`.

Each engine has an endpoint that only it (among those servefuzz speaks) answers in its own
shape, so a handful of GETs decide:

| probe                                    | answer that decides                    | engine      |
|------------------------------------------|----------------------------------------|-------------|
| `GET /props`                             | an object with `total_slots`           | `llamacpp`  |
| `GET /server_info` (`/get_server_info`)  | `engine: servefuzz-reference`          | `reference` |
|                                          | `vllm_config` (vLLM's dev mode)        | `vllm`      |
|                                          | `model_path` or `tp_size`              | `sglang`    |
| `GET /version` and `GET /metrics`        | a version, and `vllm:` metrics         | `vllm`      |
| `GET /v1/models`                         | a model list                           | `openai`    |

    >>> decide_server_info({"engine": "servefuzz-reference", "model_path": "ref"})
    'reference'
    >>> decide_server_info({"vllm_config": "model=tiny"}), decide_server_info({"tp_size": 1})
    ('vllm', 'sglang')

A probe that fails in any way (refused, 404, not JSON) just says "not this one"; only when no
probe decides does detection fail, with one line naming what was tried.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from servefuzz.errors import TargetError
from servefuzz.targets.base import describe_error

__all__ = ["Detection", "decide_server_info", "detect_engine"]


@dataclass(frozen=True)
class Detection:
    """The engine a URL speaks, and the answer that gave it away (shown to the user)."""

    engine: str
    because: str


def decide_server_info(d: Mapping[str, Any]) -> str | None:
    """The engine behind a `/server_info` object, or None when it is nobody's we know."""
    if d.get("engine") == "servefuzz-reference":
        return "reference"
    if "vllm_config" in d:
        return "vllm"
    if "model_path" in d or "tp_size" in d:
        return "sglang"
    return None


async def detect_engine(session: aiohttp.ClientSession, base_url: str) -> Detection:
    """Probe `base_url` and say which dialect to speak; TargetError when nothing answers usefully."""
    base = base_url.rstrip("/")
    reached = False

    async def get(path: str) -> tuple[int, str] | None:
        nonlocal reached
        try:
            async with session.get(base + path) as resp:
                reached = True
                return resp.status, await resp.text()
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None

    def obj(answer: tuple[int, str] | None) -> dict[str, Any] | None:
        if answer is None or answer[0] != 200:
            return None
        try:
            d = json.loads(answer[1])
        except ValueError:
            return None
        return d if isinstance(d, dict) else None

    props = obj(await get("/props"))
    if props is not None and "total_slots" in props:
        return Detection("llamacpp", "/props has total_slots (llama.cpp's server)")
    for path in ("/server_info", "/get_server_info"):
        info = obj(await get(path))
        if info is not None and (engine := decide_server_info(info)) is not None:
            return Detection(engine, f"{path} answered like {engine}")
    version = obj(await get("/version"))
    metrics = await get("/metrics")
    if version is not None and metrics is not None and "vllm:" in metrics[1]:
        return Detection("vllm", "/version answered and /metrics has vllm: series")
    models = obj(await get("/v1/models"))
    if models is not None and isinstance(models.get("data"), list):
        return Detection("openai", "/v1/models answered (an OpenAI-compatible server)")
    if not reached:
        try:  # say why, in the words every other connection failure uses
            async with session.get(base + "/"):
                pass
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise TargetError(f"cannot reach {base}: {describe_error(e)}") from None
    raise TargetError(
        f"cannot tell which engine serves {base} (no /props, /server_info, /version or /v1/models "
        "answered as a known engine's); pass --engine"
    )
