"""Run servefuzz's stand-in `sgl_kernel` helpers against SGLang's own references.

Runs in an SGLang venv with this folder on PYTHONPATH, as the server does (`python
check_standins.py [--mutants] [--cases N]`), never in servefuzz's: it imports SGLang, which
imports the stand-in. It prints one JSON object: `{"sglang": VERSION, "checks": [{"fn",
"reference", "cases", "failed", "first_failure"}], "mutants": {NAME: checks}, "interpreted": checks}` and exits 0 when
every case agrees, 1 when one does not, 2 when a reference cannot run. Only the helpers this
SGLang imports are checked (`used`: SGLang 0.5.10.post1 computes with none of them on the CPU).

The references are SGLang's, not ours: its Triton kernels, run by Triton's interpreter on the
CPU (TRITON_INTERPRET=1: the kernel's own code, element by element), and its torch fallback
where it has one. Inputs are random but in the range SGLang passes: distinct rows and target
slots, lengths that cross the kernels' 32-slot blocks, empty ranges, source and target rows
that overlap, every dtype the callers use.

Where the launcher runs one of SGLang's own Triton kernels under Triton's interpreter instead
(`engines.sglang.INTERPRETED`: 0.5.10.post1's paged allocator), `interpreted` holds that kernel,
interpreted, against SGLang's own torch version of it (and `--mutants` feeds it a free list one
page late, which must fail).

`--mutants` also checks copies of the stand-in changed by one slot (`MUTANTS` says what each
changes), each of which must fail: the check shows that it fails when the stand-in is wrong.
The exit status is then 0 only when the stand-in passes and every mutant fails.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: SGLang's kernels on the CPU
os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the stand-in, as the launcher puts it

import sgl_kernel  # noqa: E402
import torch  # noqa: E402

__all__ = ["MUTANTS", "MUTATED", "main"]


def _assign_off_by_one(req_pool_indices: Any, req_to_token: Any, start_offset: Any, end_offset: Any,
                       out_cache_loc: Any, pool_len: int) -> None:
    """The stand-in with each request's range starting one slot late."""
    sgl_kernel.assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset + 1,
                                            torch.maximum(end_offset, start_offset + 1), out_cache_loc, pool_len)


def _copy_off_by_one(data_ptrs: Any, strides: Any, tgt_loc: Any, src_loc: Any) -> None:
    """The stand-in reading each row one slot past its source (the last row stays: never
    past the buffer's end)."""
    shifted = torch.minimum(src_loc + 1, src_loc.max()) if src_loc.numel() else src_loc
    sgl_kernel.copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, shifted)


MUTANTS: dict[str, tuple[str, Callable[..., None]]] = {
    "assign-start+1": ("assign_req_to_token_pool_cpu", _assign_off_by_one),
    "copy-src+1": ("copy_all_layer_kv_cache_cpu", _copy_off_by_one),
}


# Each mutant and the function whose check must catch it.
MUTATED = {**{name: fn for name, (fn, _) in MUTANTS.items()}, "alloc-free+1": "alloc_extend_kernel"}


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _assign_case(rng: random.Random) -> dict[str, Any]:
    bs = rng.randint(1, 9)
    pool_len = rng.choice((32, 33, 64, 100, 257))
    rows = rng.sample(range(bs + rng.randint(0, 6)), bs)
    starts, ends = [], []
    for _ in range(bs):
        a = rng.randint(0, pool_len)
        b = a if rng.random() < 0.15 else rng.randint(a, pool_len)  # some empty ranges
        starts.append(a)
        ends.append(b)
    index_dtype = rng.choice((torch.int32, torch.int64))
    offset_dtype = rng.choice((torch.int32, torch.int64))
    total = sum(e - s for s, e in zip(starts, ends))
    return {
        "req_pool_indices": torch.tensor(rows, dtype=index_dtype),
        "req_to_token": torch.randint(-(2 ** 30), 2 ** 30, (max(rows) + 1 + rng.randint(0, 2), pool_len),
                                      dtype=torch.int32),  # garbage: a stray write shows
        "start_offset": torch.tensor(starts, dtype=offset_dtype),
        "end_offset": torch.tensor(ends, dtype=offset_dtype),
        "out_cache_loc": torch.tensor(rng.sample(range(1, 1 << 20), total), dtype=torch.int64),
        "pool_len": pool_len,
    }


def check_assign(standin: Callable[..., None], cases: int, seed: int) -> dict[str, Any]:
    """The stand-in against SGLang's Triton kernel `assign_req_to_token_pool`, interpreted."""
    from sglang.srt.mem_cache.allocation import assign_req_to_token_pool as kernel

    rng = random.Random(seed)
    failed, first = 0, None
    for k in range(cases):
        c = _assign_case(rng)
        ours, theirs = c["req_to_token"].clone(), c["req_to_token"].clone()
        args = (c["req_pool_indices"], c["start_offset"], c["end_offset"], c["out_cache_loc"])
        standin(args[0], ours, args[1], args[2], args[3], c["pool_len"])
        bs = int(c["req_pool_indices"].numel())
        kernel[(bs,)](args[0], theirs, args[1], args[2], args[3], c["pool_len"], _pow2(bs))
        if not torch.equal(ours, theirs):
            failed += 1
            if first is None:
                bad = (ours != theirs).nonzero().tolist()
                first = {"case": k, "cells_differing": len(bad), "first_cell": bad[0],
                         "starts": c["start_offset"].tolist(), "ends": c["end_offset"].tolist()}
    return {"fn": "assign_req_to_token_pool_cpu", "reference": "allocation.assign_req_to_token_pool (Triton, interpreted)",
            "cases": cases, "failed": failed, "first_failure": first}


def _copy_case(rng: random.Random) -> dict[str, Any]:
    layers = rng.randint(1, 3)
    slots = rng.randint(8, 300)
    heads, dim = rng.choice((1, 2, 4)), rng.choice((4, 8, 16, 64))
    dtype = rng.choice((torch.float32, torch.bfloat16, torch.float16))
    k = [torch.randn(slots, heads, dim).to(dtype) for _ in range(layers)]
    v = [torch.randn(slots, heads, dim).to(dtype) for _ in range(layers)]
    n = rng.randint(0, min(slots, 256))  # SGLang's call site chunks at 256
    tgt = rng.sample(range(slots), n)  # distinct targets, as SGLang's moves have
    if rng.random() < 0.5:
        src = [rng.randrange(slots) for _ in range(n)]
    else:  # overlapping: sources are other targets (an in-place shuffle)
        src = rng.sample(tgt, n) if n else []
    loc_dtype = rng.choice((torch.int32, torch.int64))
    return {"k": k, "v": v, "tgt": torch.tensor(tgt, dtype=loc_dtype), "src": torch.tensor(src, dtype=loc_dtype)}


def check_copy(standin: Callable[..., None], cases: int, seed: int) -> dict[str, Any]:
    """The stand-in against SGLang's Triton kernel `copy_all_layer_kv_cache_tiled` (interpreted,
    on the same raw addresses the pool passes) and its torch fallback `move_kv_cache_native`."""
    from sglang.kernels.ops.kvcache.cache_move import copy_all_layer_kv_cache_tiled as kernel
    from sglang.srt.mem_cache.memory_pool import move_kv_cache_native

    rng = random.Random(seed)
    failed, first = 0, None
    for i in range(cases):
        c = _copy_case(rng)
        ours, tiled = [b.clone() for b in c["k"] + c["v"]], [b.clone() for b in c["k"] + c["v"]]
        native_k, native_v = [b.clone() for b in c["k"]], [b.clone() for b in c["v"]]
        standin(*_pool_args(ours), c["tgt"], c["src"])
        ptrs, strides = _pool_args(tiled)
        n, tile = int(c["tgt"].numel()), rng.choice((16, 64, 256))  # the pool's tile sizes vary with the row
        kernel[(len(tiled), -(-int(strides.max()) // tile))](ptrs, strides, c["tgt"], c["src"], n, _pow2(n),
                                                             BYTES_PER_TILE=tile)
        move_kv_cache_native(native_k, native_v, c["tgt"], c["src"])
        agree = {"triton": all(torch.equal(a, b) for a, b in zip(ours, tiled)),
                 "native": all(torch.equal(a, b) for a, b in zip(ours, native_k + native_v))}
        if not all(agree.values()):
            failed += 1
            if first is None:
                first = {"case": i, "rows": n, "dtype": str(c["k"][0].dtype), "agrees_with": agree}
    return {"fn": "copy_all_layer_kv_cache_cpu",
            "reference": "cache_move.copy_all_layer_kv_cache_tiled (Triton, interpreted) and memory_pool.move_kv_cache_native (torch)",
            "cases": cases, "failed": failed, "first_failure": first}


def _pool_args(buffers: list[Any]) -> tuple[Any, Any]:
    """As the pool builds them (memory_pool.py): one address and one row stride in bytes per buffer."""
    return (torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64),
            torch.tensor([b.stride(0) * b.dtype.itemsize for b in buffers]))


def _alloc_case(rng: random.Random) -> dict[str, Any]:
    """A batch as the paged allocator gets it: each request's cached prefix ends at `last_loc`
    (inside its last prefix page), its new tokens go to the partial page, whole free pages, then
    a partial one; the free list holds distinct pages none of the prefixes use."""
    page = rng.choice((2, 16, 64))
    bs = rng.randint(1, 8)
    prefix = [rng.choice((0, page, rng.randint(0, 4 * page))) for _ in range(bs)]
    seq = [p + rng.randint(1, 5 * page) for p in prefix]
    new_pages = sum(-(-s // page) - -(-p // page) for p, s in zip(prefix, seq))
    pages = rng.sample(range(1, 2 * (new_pages + bs) + 8), new_pages + bs)
    held, free = pages[:bs], pages[bs:]  # each request's last prefix page, and the free list
    last = [h * page + (p - 1) % page if p else -1 for h, p in zip(held, prefix)]
    as_t = lambda xs: torch.tensor(xs, dtype=torch.int64)  # noqa: E731
    return {"page": page, "prefix": as_t(prefix), "seq": as_t(seq), "last": as_t(last), "free": as_t(free),
            "tokens": sum(seq) - sum(prefix)}


def check_interpreted_allocator(cases: int, seed: int, *, mutant: bool = False) -> dict[str, Any] | None:
    """Where this SGLang's paged allocator is a Triton kernel only (0.5.10.post1: it dies on a
    CPU without the interpreter), the launcher runs it under Triton's interpreter: the kernel
    `alloc_extend_kernel`, interpreted, against SGLang's own torch version `alloc_extend_naive`
    (its NPU path). None where the version has no such kernel. `mutant`: the interpreted kernel
    reads the free list one page late, which the check must catch."""
    try:
        from sglang.srt.mem_cache.allocator import alloc_extend_kernel as kernel
        from sglang.srt.mem_cache.allocator import alloc_extend_naive as naive
    except ImportError:
        return None
    rng = random.Random(seed)
    failed, first = 0, None
    for i in range(cases):
        c = _alloc_case(rng)
        theirs = torch.full((c["tokens"],), -7, dtype=torch.int64)
        interpreted = theirs.clone()
        naive(c["prefix"], c["seq"], c["last"], c["free"], theirs, c["page"], "cpu")
        bs = int(c["prefix"].numel())
        free = torch.roll(c["free"], 1) if mutant else c["free"]
        kernel[(bs,)](c["prefix"], c["seq"], c["last"], free, interpreted, _pow2(bs), c["page"])
        if not torch.equal(theirs, interpreted):
            failed += 1
            if first is None:
                first = {"case": i, "page": c["page"], "prefix": c["prefix"].tolist(), "seq": c["seq"].tolist()}
    return {"fn": "alloc_extend_kernel", "reference": "allocator.alloc_extend_naive (torch)",
            "cases": cases, "failed": failed, "first_failure": first}


CHECKS: dict[str, Callable[[Callable[..., None], int, int], dict[str, Any]]] = {
    "assign_req_to_token_pool_cpu": check_assign,
    "copy_all_layer_kv_cache_cpu": check_copy,
}


def imported_from_sgl_kernel() -> set[str]:
    """Every name this SGLang's serving code imports from `sgl_kernel` (its modules, read as
    text; the diffusion package `multimodal_gen` apart): which of the stand-in's helpers this
    version can call at all."""
    import sglang

    root = Path(sglang.__file__).parent
    names: set[str] = set()
    for path in root.rglob("*.py"):
        if "multimodal_gen" in path.parts:
            continue
        for m in re.finditer(r"^\s*from sgl_kernel(?:\.\w+)? import (\([^)]*\)|[^\n]*)", path.read_text(errors="replace"), re.M):
            names |= {w.strip().split(" as ")[0] for w in m.group(1).strip("()").replace("\n", " ").split(",") if w.strip()}
    return names


def run_checks(standins: dict[str, Callable[..., None]], used: set[str], cases: int, seed: int) -> list[dict[str, Any]]:
    return [check(standins[fn], cases, seed) for fn, check in CHECKS.items() if fn in used]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--mutants", action="store_true",
                    help="also check each mutant (MUTANTS), each of which must fail its check")
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import sglang

    standins: dict[str, Callable[..., None]] = {
        "assign_req_to_token_pool_cpu": sgl_kernel.assign_req_to_token_pool_cpu,
        "copy_all_layer_kv_cache_cpu": sgl_kernel.copy_all_layer_kv_cache_cpu,
    }
    used = imported_from_sgl_kernel() & set(CHECKS)
    try:
        checks = run_checks(standins, used, args.cases, args.seed)
        mutants = {name: run_checks({**standins, fn: mutant}, used, args.cases, args.seed)
                   for name, (fn, mutant) in MUTANTS.items() if fn in used} if args.mutants else {}
    except ImportError as e:  # this SGLang has no such reference: the check cannot speak for it
        print(json.dumps({"sglang": sglang.__version__, "error": f"{type(e).__name__}: {e}"}))
        return 2
    allocator = check_interpreted_allocator(args.cases, args.seed)
    interpreted = [allocator] if allocator is not None else []
    if allocator is not None and args.mutants:
        mutants["alloc-free+1"] = [check_interpreted_allocator(args.cases, args.seed, mutant=True)]
    print(json.dumps({"sglang": sglang.__version__, "used": sorted(used), "checks": checks, "mutants": mutants,
                      "interpreted": interpreted}))
    faithful = all(c["failed"] == 0 for c in (*checks, *interpreted))
    caught = all(any(c["fn"] == MUTATED[name] and c["failed"] > 0 for c in found) for name, found in mutants.items())
    return 0 if faithful and caught else 1


if __name__ == "__main__":
    sys.exit(main())
