"""servefuzz's stand-in `sgl_kernel` (src/servefuzz/standins) against SGLang's own kernels.

The stand-in writes SGLang's request-to-KV-slot map and moves KV rows: a wrong one would plant
the very bug servefuzz looks for. `check_standins.py` runs in each installed SGLang's venv, as
the server does, and compares every helper with SGLang's own reference on random inputs (its
Triton kernels run by Triton's interpreter, and its torch fallback); each one-slot mutant of
the stand-in must fail the same check, or the check proves nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from servefuzz import engine_files, engines
from servefuzz.engines import sglang as sglang_engine

pytestmark = pytest.mark.engine

CHECK = engine_files.standin_path() / "check_standins.py"
HELPERS = {"assign_req_to_token_pool_cpu", "copy_all_layer_kv_cache_cpu"}
USED = {"0.5.23": HELPERS, "0.5.10.post1": set()}
MUTATED = {"assign-start+1": "assign_req_to_token_pool_cpu", "copy-src+1": "copy_all_layer_kv_cache_cpu",
           "alloc-free+1": "alloc_extend_kernel"}
# SGLang's own kernels the launcher runs under Triton's interpreter (sglang_engine.INTERPRETED),
# each checked against SGLang's torch version of it.
INTERPRETED = {"0.5.23": set(), "0.5.10.post1": {"alloc_extend_kernel"}}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", engines.PRESET_VERSIONS["sglang-cpu"].known)
def test_the_standins_do_what_sglangs_own_kernels_do_and_a_one_slot_change_is_caught(version: str) -> None:
    if not engine_files.installed("sglang-cpu", version):
        pytest.skip(f"SGLang CPU {version} is not installed under {engine_files.cache_dir()}: run {engine_files.SETUP_SCRIPT}")
    p = subprocess.run([str(engine_files.program("sglang-cpu", version)), str(CHECK), "--mutants", "--cases", "60"],
                       env={**os.environ, **sglang_engine.cpu_env(str(engine_files.standin_path()), version)},
                       capture_output=True, text=True, timeout=880)
    assert p.stdout.strip(), p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["sglang"] == version and "error" not in out, out
    # The helpers this version imports at all (0.5.23: both; 0.5.10.post1: neither on the CPU,
    # it imports only the hierarchical cache's, which refuse), each checked.
    used = set(out["used"])
    assert used == USED[version]
    checks = {c["fn"]: c for c in out["checks"]}
    assert set(checks) == used
    assert all(c["cases"] == 60 and c["failed"] == 0 for c in checks.values()), checks
    interpreted = {c["fn"]: c for c in out["interpreted"]}
    assert set(interpreted) == INTERPRETED[version]
    assert all(c["cases"] == 60 and c["failed"] == 0 for c in interpreted.values()), interpreted
    assert set(interpreted) <= set(sglang_engine.INTERPRETED.get(version, ()))
    assert set(out["mutants"]) == {m for m, fn in MUTATED.items() if fn in used | set(interpreted)}
    for name, found in out["mutants"].items():
        failed = {c["fn"]: c["failed"] for c in found}
        target = MUTATED[name]
        assert failed[target] > 0, f"{name}: the check did not catch a one-slot change"
        assert all(n == 0 for fn, n in failed.items() if fn != target), f"{name} changed only {target}"
    assert p.returncode == 0


def test_the_standins_are_never_on_servefuzzs_own_path() -> None:
    """Only SGLang's processes get the folder (engines.sglang.cpu_env); servefuzz's interpreter
    imports neither the stand-in nor its sitecustomize."""
    probe = "import importlib.util, sys; print(importlib.util.find_spec('sgl_kernel') is None)"
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "True"
    assert str(engine_files.standin_path()) not in sys.path
    env = sglang_engine.cpu_env(str(engine_files.standin_path()))
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(engine_files.standin_path())
    assert (engine_files.standin_path() / "sgl_kernel" / "__init__.py").is_file()
