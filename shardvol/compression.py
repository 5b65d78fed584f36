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
_MAX_DEFLATE_RATIO = 1032  # the most a deflate stream inflates (258 bytes per 2 bits)


def is_gzip(data: bytes | memoryview) -> bool:
    """Whether ``data`` starts with the gzip magic bytes."""
    return data[:2] == GZIP_MAGIC


def gzip_compress(data: bytes | memoryview, level: int = DEFAULT_LEVEL) -> bytes:
    """Standard gzip of ``data`` (libdeflate)."""
    out = imagecodecs.gzip_encode(data, level=level)  # type: ignore[arg-type]  # takes any buffer
    return out  # type: ignore[return-value]  # imagecodecs returns bytes without out=


def check_level(level: object) -> int:
    """``level`` (a ``compress_level`` option) as a gzip level in [0, MAX_LEVEL]."""
    if isinstance(level, bool) or not isinstance(level, numbers.Integral) or not (
        0 <= int(level) <= MAX_LEVEL
    ):
        raise InvalidArgumentError(
            f"compress_level must be an integer in [0, {MAX_LEVEL}], got {level!r}")
    return int(level)


def gzip_decompress(
    data: bytes | memoryview,
    context: str,
    error: type[ShardvolError],
    expected_size: int | None = None,
    max_size: int | None = None,
) -> bytes:
    """Decompress a gzip stream, raising ``error("<context>: ...")`` on any corruption.

    Concatenated gzip members (valid gzip, rarely written) are all decoded. If
    ``expected_size`` is given the output must have exactly that size; ``max_size``
    bounds it.  Inflating stops as soon as the output outgrows either, so a small
    stream that would inflate to gigabytes (a "gzip bomb") is an error, not an
    allocation of that size.
    """
    if not is_gzip(data):
        raise error(f"{context}: not gzip data (starts with {bytes(data[:4])!r})")
    if len(data) < 18:
        raise error(f"{context}: gzip stream truncated ({len(data)} bytes)")
    limit = expected_size if expected_size is not None else max_size
    # the trailer gives the size of the last member (mod 2**32); deflate cannot
    # inflate more than 1032-fold, so a larger size means corrupt data or several members
    trailer = struct.unpack("<I", data[-4:])[0]
    out = None
    if trailer <= len(data) * _MAX_DEFLATE_RATIO and (limit is None or trailer <= limit):
        try:
            # (sized by the trailer)
            out = imagecodecs.gzip_decode(data)  # type: ignore[arg-type]  # takes any buffer
        except Exception:  # corrupt, or several members
            out = None
    # libdeflate decodes only the first member: several members are decoded again
    if out is None or trailer != len(out) & 0xFFFFFFFF or (limit is not None and len(out) > limit):
        out = _decompress_members(data, context, error, limit)
    if expected_size is not None and len(out) != expected_size:
        raise error(f"{context}: gzip data decodes to {len(out)} bytes, expected {expected_size}")
    return out  # type: ignore[return-value]  # imagecodecs returns bytes without out=


def _decompress_members(
    data: bytes | memoryview, context: str, error: type[ShardvolError], limit: int | None
) -> bytes:
    """Every member of a gzip stream, inflated at most ``limit`` bytes (+1, to tell)."""
    parts = []
    total = 0
    rest = data
    try:
        while rest:
            d = zlib.decompressobj(wbits=31)
            pending = rest
            while True:
                room = 0 if limit is None else limit - total + 1  # (0: no bound)
                part = d.decompress(pending, room)
                parts.append(part)
                total += len(part)
                if limit is not None and total > limit:
                    raise error(f"{context}: gzip data decodes to more than {limit} bytes")
                pending = d.unconsumed_tail
                if d.eof or not pending:
                    break
            if not d.eof:
                raise error(f"{context}: gzip stream truncated")
            rest = d.unused_data
            if rest and not is_gzip(rest):
                break  # trailing bytes after the last member are ignored, as gzip(1) does
    except zlib.error as e:
        raise error(f"{context}: corrupt gzip data ({e})") from e
    except MemoryError:
        raise error(f"{context}: gzip data decodes to more bytes than memory holds") from None
    return b"".join(parts)
