"""A tiny PNG reader (8-bit RGB/RGBA, non-interlaced: what Chromium's screenshots are), with
the standard library's zlib, so the HTML test can look at the pixels without an image library.

    >>> import struct, zlib
    >>> def chunk(kind, data):
    ...     return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    >>> raw = b"\\x00" + bytes([255, 0, 0, 0, 0, 255])  # one row, filter 0: red, blue
    >>> png = b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 1, 8, 2, 0, 0, 0))
    >>> png += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    >>> read_png(png)
    (2, 1, [(255, 0, 0), (0, 0, 255)])
"""

from __future__ import annotations

import struct
import zlib

__all__ = ["read_png", "hex_rgb"]


def hex_rgb(colour: str) -> tuple[int, int, int]:
    """'#d62728' -> (214, 39, 40)."""
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def read_png(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """(width, height, pixels as RGB tuples, row by row)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, (depth, colour_type, interlace)
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    pixels: list[tuple[int, int, int]] = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        _unfilter(kind, line, prev, bpp)
        pixels += [(line[i], line[i + 1], line[i + 2]) for i in range(0, stride, bpp)]
        prev = line
    return width, height, pixels


def _unfilter(kind: int, line: bytearray, prev: bytearray, bpp: int) -> None:
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        up = prev[i]
        corner = prev[i - bpp] if i >= bpp else 0
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 2:
            line[i] = (line[i] + up) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            p = left + up - corner
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
            pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
            line[i] = (line[i] + pred) & 0xFF
