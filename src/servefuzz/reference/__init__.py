"""The embedded reference engine: a small, exact, continuous-batching server with a fault zoo.

It is servefuzz's default target and the benchmark of its detection power. It imports nothing
from the rest of servefuzz but the architecture modules of `servefuzz.models` (data: the layer
layout it serves): it is a separate server, started by `servefuzz serve-reference` or
`python -m servefuzz.reference`. Layout, imports pointing down the list:

- `recurrent.py`   the gated delta rule of linear-attention layers, in the same exact fixed point
- `experts.py`     a mixture of experts: top-k routing continuous at its edge, the same fixed point
- `model.py`       tiny transformer in exact integer-valued float64 arithmetic (and sliding windows)
- `architectures.py` the architectures `--model-arch` serves (layouts from `servefuzz.models`)
- `faults.py`      the planted-bug catalogue (one fault per real corruption class)
- `server_args.py` SGLang-named flags <-> one frozen record
- `kvpool.py`      paged KV pool, page allocator, req_to_token rows
- `radix.py`       radix prefix cache over pages (lock_ref, LRU eviction)
- `statecache.py`  a hybrid model's state slots and the checkpoints kept with radix nodes
- `window.py`      a windowed model's window KV pool and the radix cache that holds its windows
- `tracer.py`      engine coverage (`--coverage`): its own lines as edges in the step's context
- `transfer.py`    prefill/decode KV transfer: wire format, the prefill outbox, the decode receive buffer
- `scheduler.py`   continuous batching, chunked prefill, padded decode, overlap, abort
- `pd.py`          the prefill/decode pair's router (`--disaggregation-mode pair`), which starts both servers
- `server.py`      aiohttp: SGLang and OpenAI dialects (and the two sides of a pair)
"""

from __future__ import annotations

import os

# Set before numpy loads: on small shared machines a multi-threaded BLAS on tiny matrices only
# fights the HTTP loop and other processes for cores. Exactness does not depend on it.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

__all__: list[str] = []
