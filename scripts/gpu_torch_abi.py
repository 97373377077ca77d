#!/usr/bin/env python3
"""Which torch symbols a wheel's native libraries import that a given torch does not export.

    gpu_torch_abi.py WHEEL TORCH

WHEEL is a wheel (an engine's kernel package: sglang-kernel, vllm); TORCH is a torch wheel or
a torch/lib folder (on the device: `python3 -c 'import torch, os; print(os.path.dirname(
torch.__file__))'`/lib). For each shared object in WHEEL that imports torch's C++ (c10::, at::,
torch::, caffe2::) or C (aoti_torch_*, torch_*) symbols, it prints how many and, demangled, the
ones that none of torch's own libraries (libc10, libc10_cuda, libtorch, libtorch_cpu,
libtorch_cuda) defines. Python loads an extension with RTLD_NOW, so one missing symbol fails its
import ("undefined symbol"), as a library built against another torch's internal ABI does.

Why it exists: the lent GPU image has torch 2.11.0+cu130 and nothing can be installed there, so
an SGLang release is usable on it only if its kernel package loads against that torch. Read on
2026-12-07: sglang-kernel 0.4.5 (SGLang 0.5.17's pin) resolves in full against torch 2.11.0;
0.4.6.post1, 0.4.7, 0.4.9 and 0.4.10 (SGLang 0.5.18-0.5.23's pins) each miss 1-4 symbols there,
and 0.4.10 resolves in full against torch 2.14.1, the torch SGLang 0.5.23 pins. Resolving is
necessary, not sufficient (a struct's layout can change under the same names): a library that
passes still has to be run on the device.

Needs binutils' `nm` (and `c++filt` to demangle). Exit 0: every torch symbol resolves; 1: some
do not; 2: bad usage, an unreadable input or no `nm`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

TORCH_LIBS = ("libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so")
# Mangled names in torch's namespaces (functions, methods, vtables, typeinfo) and its C shims.
TORCH_SYMBOL = re.compile(r"^(?:_Z(?:T[VIS])?N?K?(?:3c10|2at|5torch|6caffe2)|aoti_torch_|torch_)")


class Unreadable(Exception):
    """An input this cannot read: said in one line, exit 2."""


def symbols(lib: Path, which: str) -> set[str]:
    """The dynamic symbols of `lib`, `which` being "--defined-only" or "--undefined-only", without
    their version suffix (`@GLIBCXX_3.4`)."""
    done = subprocess.run(["nm", "-D", which, str(lib)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise Unreadable(f"{lib.name}: nm failed: {done.stderr.strip()[:200]}")
    return {line.split()[-1].split("@")[0] for line in done.stdout.splitlines() if line.split()}


def demangle(names: list[str]) -> list[str]:
    if not names or shutil.which("c++filt") is None:
        return names
    done = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=False)
    out = done.stdout.splitlines()
    return out if done.returncode == 0 and len(out) == len(names) else names


def unpack(wheel: Path, members: list[str], into: Path) -> list[Path]:
    try:
        with zipfile.ZipFile(wheel) as z:
            for name in members:
                z.extract(name, into)
    except (OSError, zipfile.BadZipFile, KeyError) as e:
        raise Unreadable(f"{wheel}: {e}") from e
    return [into / name for name in members]


def torch_side(torch: Path, scratch: Path) -> tuple[str, set[str]]:
    """torch's version (as its version.py says, else the path) and every symbol its libraries define."""
    if torch.is_dir():
        libs = [torch / name for name in TORCH_LIBS if (torch / name).is_file()]
        version_py = torch.parent / "version.py"
        version = version_py.read_text() if version_py.is_file() else ""
    else:
        try:
            with zipfile.ZipFile(torch) as z:
                names = set(z.namelist())
                version = z.read("torch/version.py").decode() if "torch/version.py" in names else ""
        except (OSError, zipfile.BadZipFile) as e:
            raise Unreadable(f"{torch}: {e}") from e
        libs = unpack(torch, [f"torch/lib/{n}" for n in TORCH_LIBS if f"torch/lib/{n}" in names], scratch)
    if not libs:
        raise Unreadable(f"{torch}: none of {', '.join(TORCH_LIBS)}")
    found = re.search(r"__version__\s*=\s*'([^']+)'", version)
    defined: set[str] = set()
    for lib in libs:
        defined |= symbols(lib, "--defined-only")
    return (found.group(1) if found else str(torch)), defined


def check(wheel: Path, torch: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        version, defined = torch_side(torch, scratch / "torch")
        try:
            with zipfile.ZipFile(wheel) as z:
                native = sorted(n for n in z.namelist() if re.search(r"\.so(\.\d+)*$", n))
        except (OSError, zipfile.BadZipFile) as e:
            raise Unreadable(f"{wheel}: {e}") from e
        failing = checked = 0
        for name in native:
            (lib,) = unpack(wheel, [name], scratch / "wheel")
            wanted = sorted(s for s in symbols(lib, "--undefined-only") if TORCH_SYMBOL.match(s))
            lib.unlink()  # FA3's library alone is 1.1 GB
            if not wanted:
                continue
            checked += 1
            missing = [s for s in wanted if s not in defined]
            print(f"{name}: {len(wanted)} torch symbols, {len(missing)} not in torch {version}")
            for line in demangle(missing):
                print(f"    {line}")
            failing += bool(missing)
    print(f"{checked - failing} of {checked} libraries of {wheel.name} resolve against torch {version}")
    return 1 if failing else 0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    if shutil.which("nm") is None:
        print("gpu_torch_abi: needs binutils' nm on PATH", file=sys.stderr)
        return 2
    try:
        return check(Path(argv[0]), Path(argv[1]))
    except Unreadable as e:
        print(f"gpu_torch_abi: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
