#!/usr/bin/env python3
"""Copy a llama-style Hugging Face folder with its vocabulary widened to N rows.

    gpu_widen_vocab.py SRC DST N

SGLang's own radix-cache check (`python3 -m sglang.test.test_deterministic --test-mode
radix_cache`, the same file in 0.5.17 and 0.5.23) sends 100 token ids drawn from 100..50000
(`random.seed(42)`: the largest is 49829), and SGLang refuses input ids at or past the model's
vocabulary ("The input_ids ... contains values greater than the vocab size"): servefuzz's tiny
model (2,048) and SmolLM2-135M (49,152) cannot take it as written. The copy keeps every weight
and the first rows of `model.embed_tokens.weight` and `lm_head.weight`, appends N - old rows
drawn from a seeded normal at each matrix's own standard deviation, and sets `vocab_size`; the
tokenizer is the source's, which decodes an id past its own vocabulary as nothing (tokenizers
0.23.2, checked here). So the check runs unchanged, on a model that differs from the tiny one
only in rows its other requests never read.

Reads and writes float32/bfloat16 safetensors with numpy (the GPU image has both packages).
Exit 2 on bad usage or a folder that is not of this shape.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

WIDENED = ("model.embed_tokens.weight", "lm_head.weight")
SEED = 0


def widen(src: Path, dst: Path, vocab: int) -> int:
    config = json.loads((src / "config.json").read_text())
    old = int(config["vocab_size"])
    if vocab <= old:
        raise ValueError(f"{src}: vocab_size is already {old}, not below {vocab}")
    with safe_open(str(src / "model.safetensors"), "np") as f:
        metadata = f.metadata()
        tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    rng = np.random.default_rng(SEED)
    for name in WIDENED:
        if name not in tensors or tensors[name].shape[0] != old:
            raise ValueError(f"{src}: no {name} of {old} rows (a tied or non-llama model?)")
        rows = tensors[name]
        extra = rng.standard_normal((vocab - old, rows.shape[1])) * float(rows.astype(np.float64).std())
        tensors[name] = np.concatenate([rows, extra.astype(rows.dtype)])
    dst.mkdir(parents=True, exist_ok=True)
    for path in src.iterdir():
        if path.is_file() and path.name not in ("config.json", "model.safetensors"):
            shutil.copy(path, dst / path.name)
    (dst / "config.json").write_text(json.dumps({**config, "vocab_size": vocab}, indent=2) + "\n")
    save_file(tensors, str(dst / "model.safetensors"), metadata=metadata)
    return old


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not argv[2].isdigit():
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    src, dst, vocab = Path(argv[0]), Path(argv[1]), int(argv[2])
    if not (src / "config.json").is_file() or not (src / "model.safetensors").is_file():
        print(f"{src}: no config.json and model.safetensors", file=sys.stderr)
        return 2
    try:
        old = widen(src, dst, vocab)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"wrote {dst}: vocab {old} -> {vocab} ({', '.join(WIDENED)} widened, seed {SEED})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
