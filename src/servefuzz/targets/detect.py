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

A probe that fails in any way (refused, 404, not JSON, not UTF-8, too large) just says "not
this one"; only when no probe decides does detection fail, with one line naming what was tried.
A server behind auth gets the same `headers` on every probe as the adapter sends later, and
answers no probe more than `max_response_bytes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from servefuzz.errors import TargetError
from servefuzz.targets.base import (
    DEFAULT_MAX_RESPONSE_BYTES,
    BadReply,
    auth_headers,
    describe_error,
    parse_json,
    read_body,
    split_credentials,
)

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


async def detect_engine(
    session: aiohttp.ClientSession,
    base_url: str,
    *,
    headers: Mapping[str, str] | None = None,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> Detection:
    """Probe `base_url` and say which dialect to speak; TargetError when nothing answers usefully.

    `headers` (auth) go with every probe; credentials in the URL become a Basic Authorization
    header, as the adapters make them.
    """
    url, from_url = split_credentials(base_url)
    base = url.rstrip("/")
    sent = auth_headers(headers={**({"Authorization": from_url} if from_url else {}), **(headers or {})})
    reached = False

    async def get(path: str) -> tuple[int, str] | None:
        nonlocal reached
        try:
            async with session.get(base + path, headers=sent, allow_redirects=False) as resp:
                reached = True
                if resp.status != 200:
                    return resp.status, ""
                body = await read_body(resp, max_response_bytes)
                return resp.status, body.decode("utf-8", errors="replace")
        except (aiohttp.ClientError, TimeoutError, OSError, BadReply):
            return None

    def obj(answer: tuple[int, str] | None) -> dict[str, Any] | None:
        if answer is None or answer[0] != 200:
            return None
        try:
            d = parse_json(answer[1], "a probe")
        except BadReply:
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
            async with session.get(base + "/", headers=sent, allow_redirects=False):
                pass
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise TargetError(f"cannot reach {base}: {describe_error(e)}") from None
    raise TargetError(
        f"cannot tell which engine serves {base} (no /props, /server_info, /version or /v1/models "
        "answered as a known engine's); pass --engine"
    )
