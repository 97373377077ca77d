#!/usr/bin/env python3
"""Cut a CUDA shared object's fat binaries down to what one GPU architecture loads.

    gpu_prune_fatbin.py IN.so OUT.so 90 [KERNELS]

An engine's kernel library carries each kernel compiled for many GPUs (sm_80, sm_90, sm_100,
...) plus PTX; the lent H200 loads the sm_90 code and nothing else, and the device tool takes at
most 64 MiB a call. This keeps, in every fat binary of the `.nv_fatbin` section, the entries that
GPU would pick (its ELF images, else the newest PTX it can JIT), moved to the front, and
zero-fills the rest: nothing else in the file moves, since each fat binary is reached through
its own wrapper pointer, so the library links and loads as before (on sm_90 the driver's choice
is unchanged; on another GPU it finds nothing, as a build for sm_90 alone would). A fat binary
with nothing this GPU can run (only sm_75 or sm_120 code, say) becomes the stub below.

The layout (CUDA's fatbinary.h): a fat binary is a 16-byte header (magic 0xBA55ED50, u16
version, u16 header size, u64 size of the entries) followed by entries, each a header (u16 kind:
1 PTX, 2 ELF; u16 version; u32 header size; u64 payload size; ...; u32 arch at byte 28) and its
payload.

With KERNELS (a Python regular expression), a fat binary none of whose kept ELF images defines
(nor its kept PTX declares) a kernel whose demangled name (c++filt) matches it is reduced to a
stub too: the smallest ELF image
in the file built for another GPU, so that it stays well-formed and, as a build without that
translation unit would, holds nothing this GPU can run. That is how SGLang's FA3 library (one fat
binary per translation unit, one per head dim, dtype and feature mix: 1.1 GB) comes down to the
kernels one model calls; launching a kernel cut away fails with "no kernel image is available".
An image compressed with zstd is read through the zstd program; one in a form this cannot read is
kept, never dropped on a guess. The last line printed counts what was kept, for a caller to pin.
"""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from dataclasses import dataclass

FATBIN_MAGIC = 0xBA55ED50
PTX, ELF = 1, 2
ZSTD_MAGIC, ELF_MAGIC = b"\x28\xb5\x2f\xfd", b"\x7fELF"
PTX_VERSION, PTX_ENTRY = re.compile(rb"^\s*\.version\s", re.M), re.compile(rb"\.entry\s+([\w$]+)")


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


def kernels(image: bytes) -> list[str] | None:
    """The mangled names of the kernels an ELF image defines (its `.text.NAME` sections) or a PTX
    text declares (`.entry NAME`), None when the image is in a form this cannot read."""
    if image[:4] == ZSTD_MAGIC:
        image = subprocess.run(["zstd", "-d", "-c", "-q"], input=image, capture_output=True).stdout
    if image[:4] != ELF_MAGIC and PTX_VERSION.search(image[:4096]):
        # PTX text (the JIT's input where a library ships no sm_90 image): its `.entry` names.
        return [name.decode(errors="replace") for name in PTX_ENTRY.findall(image)]
    if image[:4] != ELF_MAGIC or image[4] != 2:  # 64-bit ELF only
        return None
    shoff, = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)

    def header(i: int) -> tuple[int, int]:  # (name offset, section offset)
        name, = struct.unpack_from("<I", image, shoff + i * shentsize)
        offset, = struct.unpack_from("<Q", image, shoff + i * shentsize + 0x18)
        return name, offset

    names = header(shstrndx)[1]
    found = []
    for i in range(shnum):
        at = names + header(i)[0]
        name = image[at:image.index(b"\0", at)].decode(errors="replace")
        if name.startswith(".text."):
            found.append(name[len(".text."):])
    return found


def wanted(images: list[bytes], keep: re.Pattern[str]) -> bool:
    """Whether any image defines a kernel `keep` matches (or cannot be read: kept)."""
    mangled: list[str] = []
    for image in images:
        names = kernels(image)
        if names is None:
            return True
        mangled += names
    demangled = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True,
                               check=True).stdout.splitlines()
    return any(keep.search(name) for name in demangled)


def prune(buf: bytearray, start: int, size: int, arch: int,
          keep: re.Pattern[str] | None = None) -> tuple[int, int, int, int]:
    """Prune every fat binary in buf[start:start+size] in place: (fat binaries, of them stubbed for
    want of a kernel `keep` matches, bytes kept, freed)."""
    count = stubbed = kept = 0
    end = start + size
    binaries = []
    at = start
    while at + 16 <= end:
        magic, _version, header, body = struct.unpack_from("<IHHQ", buf, at)
        if magic != FATBIN_MAGIC:
            at += 8  # fat binaries are 8-byte aligned, padding between them
            continue
        binaries.append((at, entries(buf, at + header, at + header + body)))
        at += header + body
    # The stub: the smallest image for another GPU, read before anything is overwritten.
    others = [e for _, found in binaries for e in found if e.kind == ELF and e.arch != arch]
    stub = bytes(buf[(s := min(others, key=lambda e: e.size)).offset:s.offset + s.size]) if others else b""
    for at, found in binaries:
        count += 1
        first, last = found[0].offset, found[-1].offset + found[-1].size
        picked = chosen(found, arch)
        blob = b"".join(bytes(buf[e.offset:e.offset + e.size]) for e in picked)
        if stub and not any(e.arch == arch if e.kind == ELF else e.arch <= arch for e in picked):
            # Nothing this GPU can run (code for older or newer GPUs only, say an sm_120 kernel):
            # the stub serves as well as the smallest of its own images, and is shared.
            blob = stub
        elif keep is not None and stub:  # sm_90 images, or the PTX this GPU would JIT
            header = [struct.unpack_from("<I", buf, e.offset + 4)[0] for e in picked]
            images = [bytes(buf[e.offset + h:e.offset + e.size]) for e, h in zip(picked, header, strict=True)]
            if not wanted(images, keep):
                blob, stubbed = stub, stubbed + 1
        buf[first:last] = blob + bytes(last - first - len(blob))
        struct.pack_into("<Q", buf, at + 8, len(blob))
        kept += 0 if blob is stub else len(blob)
    return count, stubbed, kept, size - kept


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4) or not argv[2].isdigit():
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    src, dst, arch = argv[0], argv[1], int(argv[2])
    keep = re.compile(argv[3]) if len(argv) == 4 else None
    start, size = section(src)
    with open(src, "rb") as f:
        buf = bytearray(f.read())
    count, stubbed, kept, freed = prune(buf, start, size, arch, keep)
    with open(dst, "wb") as f:
        f.write(buf)
    print(f"{src}: {count} fat binaries, {stubbed} stubbed for want of a kernel KERNELS names; "
          f"kept {kept / 1e6:.1f} MB for sm_{arch}, zeroed {freed / 1e6:.1f} MB")
    print(f"kept {count - stubbed} of {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
