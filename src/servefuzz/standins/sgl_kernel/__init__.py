"""servefuzz's stand-in for SGLang's kernel package on a CPU host (never imported by servefuzz).

PyPI's `sgl-kernel` is CUDA-only, and SGLang's CPU kernel build exists only as source. With
`SGLANG_USE_CPU_ENGINE=1` SGLang's layers fall back to their own torch code by themselves
(`cpu_has_amx_support()` is false when `torch.ops.sgl_kernel` is empty); what is left are the
few helpers some modules import from `sgl_kernel` at load. The launcher puts this folder's
parent on the PYTHONPATH of SGLang's processes only (the scheduler and detokenizer are separate
processes, so it must be on the path, not patched in).

Each helper here does what SGLang's own reference does, and nothing else:
- `assign_req_to_token_pool_cpu`: the Triton kernel `assign_req_to_token_pool`
  (sglang/srt/mem_cache/allocation.py) and the CPU kernel's contract (sgl-kernel
  csrc/cpu: `req_to_token[req_pool_indices[i], start_offset[i]:end_offset[i]] =
  out_cache_loc[prefix[i]:prefix[i+1]]`, prefix the running sum of the lengths);
- `copy_all_layer_kv_cache_cpu`: the Triton kernel `copy_all_layer_kv_cache_tiled`
  (sglang/kernels/ops/kvcache/cache_move.py) and SGLang's torch fallback `move_kv_cache_native`
  (mem_cache/memory_pool.py): per layer, every row at `src_loc` read first, then written at
  `tgt_loc` (safe in place).
`check_standins.py` beside this package runs both against those references on random inputs.

These sit inside the state servefuzz tests (the request-to-KV-slot map), so every call is
counted: the first call of each helper writes one line to stderr (the server log) and
`SERVEFUZZ_STANDIN_LOG`, when set, gets one JSON line per call, so a finding can say whether its
path ran through a stand-in. Anything else SGLang asks of this package is refused at import
(an allow-list: SGLang's own `except ImportError` fallbacks then take over), except the
speculative-decoding helpers its scheduler imports at load on a CPU host (`REFUSED`): they exist
so that the import succeeds, and a call to one raises, naming itself, rather than computing
something SGLang never computed. servefuzz's presets run no speculative decoding on SGLang.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading

import torch

# Imported at load by sglang/kernels/ops/speculative/{spec_tree,eagle,multi_layer_eagle,
# cache_locs}.py (SGLang 0.5.23) under `if _is_cpu`, called only by speculative decoding.
# (`sgl_kernel.kvcacheio` holds the hierarchical cache's, which 0.5.10.post1 imports.)
REFUSED = (
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "build_tree_kernel_efficient_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "rotate_input_ids_cpu",
    "verify_tree_greedy_cpu",
)

__all__ = ["REFUSED", "assign_req_to_token_pool_cpu", "copy_all_layer_kv_cache_cpu", *REFUSED]

STANDIN = True  # what servefuzz's checks look for: this is not SGLang's kernel package
_seen: set[str] = set()
_lock = threading.Lock()


def _note(name: str, **facts: object) -> None:
    """Record a call: once to stderr per helper, every call to SERVEFUZZ_STANDIN_LOG."""
    with _lock:
        if name not in _seen:
            _seen.add(name)
            print(f"servefuzz stand-in: sgl_kernel.{name} called (first call, pid {os.getpid()})",
                  file=sys.stderr, flush=True)
        path = os.environ.get("SERVEFUZZ_STANDIN_LOG")
        if path:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"fn": name, "pid": os.getpid(), **facts}) + "\n")


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Write each request's new KV slots into its row of the request-to-token map, in place.

    Request i (row `req_pool_indices[i]`) gets positions `start_offset[i]:end_offset[i]`,
    filled from `out_cache_loc` in order, request after request (the running sum of the
    lengths says where request i's part starts). `pool_len` is the row length, which the CUDA
    kernel needs for its pointer arithmetic; here it is checked, not used.
    """
    if req_to_token.dim() != 2 or req_to_token.shape[1] != pool_len:
        raise ValueError(f"req_to_token has shape {tuple(req_to_token.shape)}, not (*, {pool_len})")
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    rows = req_pool_indices.tolist()
    _note("assign_req_to_token_pool_cpu", requests=len(rows), slots=int(out_cache_loc.numel()))
    at = 0
    for row, start, end in zip(rows, starts, ends, strict=True):
        n = max(end - start, 0)  # the Triton kernel's loop runs cdiv(end - start, 32) <= 0 times
        if n:
            req_to_token[row, start:end] = out_cache_loc[at:at + n].to(req_to_token.dtype)
        at += n


def _bytes_at(address: int, size: int) -> torch.Tensor:
    """A uint8 tensor over `size` bytes of memory at `address` (no copy): a KV buffer that
    SGLang hands over as a raw pointer, as its kernels take it."""
    return torch.frombuffer((ctypes.c_uint8 * size).from_address(address), dtype=torch.uint8)


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor,
    strides: torch.Tensor,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
) -> None:
    """Copy KV rows `src_loc` to `tgt_loc` in every buffer, in place.

    `data_ptrs[b]` is the address of buffer b (a K or V pool of one layer), `strides[b]` the
    bytes of one row (one token slot) in it. Every source row is read before any target row is
    written, as the Triton kernel loads a whole tile before it stores and as
    `move_kv_cache_native`'s `k[tgt] = k[src]` does: overlapping source and target are safe.
    """
    src = src_loc.reshape(-1).long()
    tgt = tgt_loc.reshape(-1).long()
    if src.numel() != tgt.numel():
        raise ValueError(f"{src.numel()} source rows for {tgt.numel()} target rows")
    _note("copy_all_layer_kv_cache_cpu", rows=int(src.numel()),
          moved=int((src != tgt).sum()), buffers=int(data_ptrs.numel()))
    if src.numel() == 0:
        return
    last = int(torch.maximum(src, tgt).max()) + 1  # rows the copy touches: 0 .. last - 1
    for address, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        rows = _bytes_at(int(address), last * int(stride)).view(last, int(stride))
        rows[tgt] = rows[src]  # advanced indexing on the right copies first


def _refused(name: str, why: str = "SGLang's speculative decoding does not run on the stand-in") -> object:
    """A helper that exists so that SGLang's import of it succeeds, and raises when called."""
    def refuse(*args: object, **kwargs: object) -> None:
        _note(name, refused=True)
        raise NotImplementedError(f"servefuzz stand-in: sgl_kernel.{name} is not provided ({why})")

    refuse.__name__ = refuse.__qualname__ = name.rpartition(".")[2]
    return refuse


for _name in REFUSED:
    globals()[_name] = _refused(_name)
