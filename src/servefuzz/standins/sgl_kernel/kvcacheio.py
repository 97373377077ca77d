"""KV transfers between device and host memory (SGLang's hierarchical cache), refused.

SGLang 0.5.10.post1 imports these at load in mem_cache/memory_pool_host.py on every host but
NPU, XPU and MPS, and calls them only with `--enable-hierarchical-cache`, which servefuzz's
presets never set. Each exists so that the import succeeds; a call raises, naming itself.
"""

from __future__ import annotations

from sgl_kernel import _refused

NAMES = (
    "transfer_kv_all_layer",
    "transfer_kv_all_layer_direct_lf_pf",
    "transfer_kv_all_layer_lf_pf",
    "transfer_kv_all_layer_lf_ph",
    "transfer_kv_all_layer_mla",
    "transfer_kv_all_layer_mla_lf_pf",
    "transfer_kv_direct",
    "transfer_kv_per_layer",
    "transfer_kv_per_layer_direct_pf_lf",
    "transfer_kv_per_layer_mla",
    "transfer_kv_per_layer_mla_pf_lf",
    "transfer_kv_per_layer_pf_lf",
    "transfer_kv_per_layer_ph_lf",
)
__all__ = list(NAMES)

for _name in NAMES:
    globals()[_name] = _refused(f"kvcacheio.{_name}", "SGLang's hierarchical cache does not run on the stand-in")
