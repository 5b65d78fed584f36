"""gzip for shard indexes, shard data, raw chunks and Zarr codecs (libdeflate via imagecodecs).

Output is a standard single-member gzip stream that any reader accepts.
Decompression errors are raised as the caller's shardvol exception class with
the caller's context (a file name, a chunk key) in the message.
"""

from __future__ import annotations

import numbers
import struct
import zlib

import imagecodecs

from shardvol.errors import InvalidArgumentError, ShardvolError

GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_LEVEL = 6
MAX_LEVEL = 12  # libdeflate's levels: 0 stores, 1 is fastest, 9 is zlib's best, 10-12 smaller


def is_gzip(data: bytes) -> bool:
    """Whether ``data`` starts with the gzip magic bytes."""
    return data[:2] == GZIP_MAGIC


def gzip_compress(data: bytes, level: int = DEFAULT_LEVEL) -> bytes:
    """Standard gzip of ``data`` (libdeflate)."""
    return imagecodecs.gzip_encode(data, level=level)


def check_level(level: object) -> int:
    """``level`` (a ``compress_level`` option) as a gzip level in [0, MAX_LEVEL]."""
    if isinstance(level, bool) or not isinstance(level, numbers.Integral) or not (
        0 <= int(level) <= MAX_LEVEL
    ):
        raise InvalidArgumentError(
            f"compress_level must be an integer in [0, {MAX_LEVEL}], got {level!r}")
    return int(level)


def gzip_decompress(
    data: bytes,
    context: str,
    error: type[ShardvolError],
    expected_size: int | None = None,
) -> bytes:
    """Decompress a gzip stream, raising ``error("<context>: ...")`` on any corruption.

    Concatenated gzip members (valid gzip, rarely written) are all decoded. If
    ``expected_size`` is given the output must have exactly that size.
    """
    if not is_gzip(data):
        raise error(f"{context}: not gzip data (starts with {bytes(data[:4])!r})")
    if len(data) < 18:
        raise error(f"{context}: gzip stream truncated ({len(data)} bytes)")
    try:
        out = imagecodecs.gzip_decode(data)
        # libdeflate decodes only the first member; the trailer holds the last member's size.
        multi_member = struct.unpack("<I", data[-4:])[0] != len(out) & 0xFFFFFFFF
    except Exception:  # corrupt, or several members (libdeflate sizes its output by the trailer)
        multi_member = True
    if multi_member:
        out = _decompress_members(data, context, error)
    if expected_size is not None and len(out) != expected_size:
        raise error(f"{context}: gzip data decodes to {len(out)} bytes, expected {expected_size}")
    return out


def _decompress_members(data: bytes, context: str, error: type[ShardvolError]) -> bytes:
    parts = []
    rest = data
    try:
        while rest:
            d = zlib.decompressobj(wbits=31)
            parts.append(d.decompress(rest))
            if not d.eof:
                raise error(f"{context}: gzip stream truncated")
            rest = d.unused_data
            if rest and not is_gzip(rest):
                break  # trailing bytes after the last member are ignored, as gzip(1) does
    except zlib.error as e:
        raise error(f"{context}: corrupt gzip data ({e})") from e
    return b"".join(parts)
