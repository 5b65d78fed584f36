"""gzip for shard indexes, shard data, raw chunks and Zarr codecs (libdeflate via imagecodecs),
and the whole-file compressions CloudVolume stores chunk files in.

Output is a standard single-member gzip stream that any reader accepts.  Zarr's zstd frames
are compressed with one compressor per thread and level (:func:`zstd_compress`).
Decompression errors are raised as the caller's shardvol exception class with
the caller's context (a file name, a chunk key) in the message.

CloudVolume (through cloud-files) compresses a whole chunk file with ``compress=``
``"gzip"``, ``"br"``, ``"zstd"``, ``"xz"`` or ``"bzip2"``: in local files as ``NAME.gz``,
``NAME.br``, ... (:data:`FILE_SUFFIXES`), in object stores as ``NAME`` with that
``Content-Encoding``; :func:`decompress` undoes any of them.
"""

from __future__ import annotations

import bz2
import lzma
import numbers
import struct
import threading
import zlib

import imagecodecs
import zstandard

from shardvol.errors import InvalidArgumentError, ShardvolError

GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_LEVEL = 6
MAX_LEVEL = 12  # libdeflate's levels: 0 stores, 1 is fastest, 9 is zlib's best, 10-12 smaller
_MAX_DEFLATE_RATIO = 1032  # the most a deflate stream inflates (258 bytes per 2 bits)

#: The suffix of a local file compressed whole, by content coding, in the order
#: cloud-files looks for them (a file stored plain is looked for first).
FILE_SUFFIXES: dict[str, str] = {
    "gzip": ".gz", "br": ".br", "zstd": ".zstd", "xz": ".xz", "bzip2": ".bz2",
}
_CODING_ALIASES = {"x-gzip": "gzip", "bz2": "bzip2", "lzma": "xz"}


def is_gzip(data: bytes | memoryview) -> bool:
    """Whether ``data`` starts with the gzip magic bytes."""
    return data[:2] == GZIP_MAGIC


def gzip_compress(data: bytes | memoryview, level: int = DEFAULT_LEVEL) -> bytes:
    """Standard gzip of ``data`` (libdeflate)."""
    out = imagecodecs.gzip_encode(data, level=level)  # type: ignore[arg-type]  # takes any buffer
    return out  # type: ignore[return-value]  # imagecodecs returns bytes without out=


_zstd = threading.local()


def zstd_compress(data: bytes | memoryview, level: int, checksum: bool = False) -> bytes:
    """``data`` as one zstd frame at ``level`` (zstd's levels: negative ones are faster),
    its content size in the header, with a content checksum if ``checksum``.

    Each thread keeps one compressor per level: a compressor made for each chunk (as
    ``ZSTD_compress`` does) maps and zeroes its ~1-2 MiB of work tables each time, which
    made three quarters of the page faults of a copy of a volume to Zarr."""
    compressors: dict[tuple[int, bool], zstandard.ZstdCompressor] | None = getattr(
        _zstd, "compressors", None)
    if compressors is None:
        compressors = _zstd.compressors = {}
    c = compressors.get((level, checksum))
    if c is None:
        c = compressors[(level, checksum)] = zstandard.ZstdCompressor(
            level=level, write_checksum=checksum, write_content_size=True)
    return c.compress(data)


def zstd_bound(size: int) -> int:
    """The most bytes a zstd frame of ``size`` bytes takes (zstd's ZSTD_COMPRESSBOUND)."""
    small = (128 << 10) - size >> 11 if size < 128 << 10 else 0
    return size + (size >> 8) + small


def zstd_compress_into(data: bytes | memoryview, level: int, out: memoryview) -> memoryview | None:
    """``data`` as :func:`zstd_compress` frames it (the same bytes: the same zstd 1.5.7),
    written into ``out`` (at least ``zstd_bound(len(data))`` bytes): the view of ``out``
    it takes.  For levels 1 and above; None for the others (imagecodecs' one-shot call,
    which fills a buffer it is given, makes levels below 1 its default 3)."""
    if level < 1:
        return None
    written = imagecodecs.zstd_encode(data, level=level, out=out)  # type: ignore[arg-type]
    return written  # type: ignore[return-value]  # a view of out, as out is a memoryview


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


def content_coding(value: str | None) -> str | None:
    """The compression a ``Content-Encoding`` value names (a key of :data:`FILE_SUFFIXES`),
    None for none (absent, ``identity``, or ``aws-chunked`` alone, as S3 may report), or
    the value itself when it names another coding (which :func:`decompress` refuses)."""
    codings = [c.strip().lower() for c in (value or "").split(",")]
    codings = [c for c in codings if c not in ("", "identity", "aws-chunked")]
    if not codings:
        return None
    if len(codings) > 1:
        return ", ".join(codings)
    return _CODING_ALIASES.get(codings[0], codings[0])


def decompress(
    data: bytes | memoryview,
    coding: str,
    context: str,
    error: type[ShardvolError],
    max_size: int | None = None,
) -> bytes:
    """``data`` compressed whole with ``coding`` (a key of :data:`FILE_SUFFIXES`), decoded;
    ``error("<context>: ...")`` if it is corrupt, decodes to more than ``max_size`` bytes,
    or ``coding`` is not one of them."""
    if coding == "gzip":
        return gzip_decompress(data, context, error, max_size=max_size)
    if coding not in FILE_SUFFIXES:
        raise error(f"{context}: stored with content coding {coding!r}, which shardvol cannot "
                    f"decode (it reads {', '.join(FILE_SUFFIXES)})")
    if not len(data):
        raise error(f"{context}: {coding} data is empty")
    try:
        if coding == "br":
            out = imagecodecs.brotli_decode(data, out=max_size)  # type: ignore[arg-type]
        elif coding == "zstd":
            out = imagecodecs.zstd_decode(data, out=max_size)  # type: ignore[arg-type]
        else:
            out = _stdlib_decompress(data, coding, max_size)
    except (RuntimeError, lzma.LZMAError, OSError, EOFError, ValueError) as e:
        bound = "" if max_size is None else f", or it decodes to more than {max_size} bytes"
        raise error(f"{context}: corrupt {coding} data{bound} ({e})") from e
    except MemoryError:
        raise error(f"{context}: {coding} data decodes to more bytes than memory holds") from None
    return bytes(out) if not isinstance(out, bytes) else out


def _stdlib_decompress(data: bytes | memoryview, coding: str, max_size: int | None) -> bytes:
    """xz or bzip2 (every stream of the file), at most ``max_size`` bytes (ValueError)."""
    parts: list[bytes] = []
    total = 0
    rest = bytes(data)
    while rest:
        d: lzma.LZMADecompressor | bz2.BZ2Decompressor = (
            lzma.LZMADecompressor() if coding == "xz" else bz2.BZ2Decompressor())
        pending = rest
        while True:
            room = -1 if max_size is None else max_size - total + 1
            part = d.decompress(pending, room)
            parts.append(part)
            total += len(part)
            if max_size is not None and total > max_size:
                raise ValueError("too large")
            pending = b""
            if d.eof or d.needs_input:
                break
        if not d.eof:
            raise EOFError("stream truncated")
        rest = d.unused_data
    return b"".join(parts)
