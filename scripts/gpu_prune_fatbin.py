#!/usr/bin/env python3
"""Cut a CUDA shared object's fat binaries down to what one GPU architecture loads.

    gpu_prune_fatbin.py IN.so OUT.so 90

An engine's kernel library carries each kernel compiled for many GPUs (sm_80, sm_90, sm_100,
...) plus PTX; the lent H200 loads the sm_90 code and nothing else, and the device tool takes at
most 64 MiB a call. This keeps, in every fat binary of the `.nv_fatbin` section, the entries that
GPU would pick (its ELF images, else the newest PTX it can JIT), moved to the front, and
zero-fills the rest: nothing else in the file moves, since each fat binary is reached through
its own wrapper pointer, so the library links and loads as before (on sm_90 the driver's choice
is unchanged; on another GPU it finds nothing, as a build for sm_90 alone would).

The layout (CUDA's fatbinary.h): a fat binary is a 16-byte header (magic 0xBA55ED50, u16
version, u16 header size, u64 size of the entries) followed by entries, each a header (u16 kind:
1 PTX, 2 ELF; u16 version; u32 header size; u64 payload size; ...; u32 arch at byte 28) and its
payload.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from dataclasses import dataclass

FATBIN_MAGIC = 0xBA55ED50
PTX, ELF = 1, 2


@dataclass(frozen=True)
class Entry:
    offset: int  # of its header, in the file
    kind: int
    size: int  # header and payload
    arch: int  # 90 for sm_90


def section(path: str, name: str = ".nv_fatbin") -> tuple[int, int]:
    """File offset and size of section `name` (readelf, from binutils)."""
    out = subprocess.run(["readelf", "-S", "-W", path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if f" {name} " in line:
            fields = line.split("]", 1)[1].split()  # name, type, address, offset, size, ...
            return int(fields[3], 16), int(fields[4], 16)
    raise SystemExit(f"{path}: no {name} section")


def entries(buf: bytearray, start: int, end: int) -> list[Entry]:
    found, at = [], start
    while at < end:
        kind, _version, header, payload = struct.unpack_from("<HHIQ", buf, at)
        arch = struct.unpack_from("<I", buf, at + 28)[0]
        found.append(Entry(at, kind, header + payload, arch))
        at += header + payload
    if at != end:
        raise SystemExit(f"fat binary entries overrun their header's size at {at:#x}")
    return found


def chosen(found: list[Entry], arch: int) -> list[Entry]:
    """What a GPU of `arch` would load: its ELF images; where none, the newest PTX at or below it;
    where neither, the smallest entry, so the fat binary stays well-formed and, as in the
    original, holds nothing this GPU can run."""
    elf = [e for e in found if e.kind == ELF and e.arch == arch]
    if elf:
        return elf
    ptx = [e for e in found if e.kind == PTX and e.arch <= arch]
    if ptx:
        return [max(ptx, key=lambda e: e.arch)]
    return [min(found, key=lambda e: e.size)]


def prune(buf: bytearray, start: int, size: int, arch: int) -> tuple[int, int, int]:
    """Prune every fat binary in buf[start:start+size] in place: (fat binaries, bytes kept, freed)."""
    count = kept = at = 0
    end = start + size
    at = start
    while at + 16 <= end:
        magic, _version, header, body = struct.unpack_from("<IHHQ", buf, at)
        if magic != FATBIN_MAGIC:
            at += 8  # fat binaries are 8-byte aligned, padding between them
            continue
        count += 1
        first, last = at + header, at + header + body
        blob = b"".join(bytes(buf[e.offset:e.offset + e.size]) for e in chosen(entries(buf, first, last), arch))
        buf[first:last] = blob + bytes(body - len(blob))
        struct.pack_into("<Q", buf, at + 8, len(blob))
        kept += len(blob)
        at = last
    return count, kept, size - kept


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not argv[2].isdigit():
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    src, dst, arch = argv[0], argv[1], int(argv[2])
    start, size = section(src)
    with open(src, "rb") as f:
        buf = bytearray(f.read())
    count, kept, freed = prune(buf, start, size, arch)
    with open(dst, "wb") as f:
        f.write(buf)
    print(f"{src}: {count} fat binaries; kept {kept / 1e6:.1f} MB for sm_{arch}, zeroed {freed / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
