"""Run at start-up by every Python process that has this folder on its path: SGLang's, only.

SGLang imports torchvision at load (a multimodal config module), and PyPI's torchvision is built
against CUDA torch: with the CPU torch its C extension does not load, so its fake-tensor
registrations for `torchvision::nms` and `qnms` die ("operator torchvision::nms does not exist")
and the import with them. Text serving calls no torchvision operator, so the two schemas are
declared (no implementation: a call would fail loudly) right before torchvision is first
imported, and its pure-Python parts load. Nothing is imported here until then.

When servefuzz traces the engine's coverage it puts `coverage/` on the path too, after this
folder: only the first `sitecustomize` on the path runs, so this one starts the tracer
(`coverage/servefuzz_tracer.py`) as that folder's own would.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType

# The schemas torchvision's own C++ registers (torchvision/csrc/ops/nms.cpp, quantized/qnms).
_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_kept: list[object] = []  # the Library object must live, or its definitions go with it


class _DeclareTorchvisionOps(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != "torchvision":
            return None
        sys.meta_path.remove(self)  # once; the normal finders then import torchvision itself
        import torch

        lib = torch.library.Library("torchvision", "FRAGMENT")
        for schema in _SCHEMAS:
            try:
                lib.define(schema)
            except RuntimeError:  # already there: a torchvision whose extension did load
                pass
        _kept.append(lib)
        return None


sys.meta_path.insert(0, _DeclareTorchvisionOps())

if os.environ.get("SERVEFUZZ_ENGINE_COVERAGE"):
    import servefuzz_tracer  # noqa: F401 - importing it starts it
