"""Files CloudVolume stored compressed whole (``NAME.gz``, ``NAME.br``, ``NAME.zstd``), as the
server answers a request for ``NAME``: whole with that ``Content-Encoding`` when the client
accepts it, else (gzip only) inflated as it is sent, in pieces of bounded size.

The inflated size, which the ``Content-Length`` (and a range's ``Content-Range``) needs, is
counted by a first pass over the stream that keeps nothing: a file inflating to a gigabyte
costs a second of CPU, never a gigabyte of memory.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

from shardvol.compression import FILE_SUFFIXES
from shardvol.kvstore.base import pieces_in_range

#: The codings of sibling files the server serves, in the order it looks for them (those a
#: browser can decode: Neuroglancer reads them as they are).
SERVED_CODINGS = ("gzip", "br", "zstd")
_READ = 1 << 16  # bytes of the file read at a time
_PIECE = 1 << 20  # inflated bytes produced (and sent) at a time, at most


class CorruptFile(Exception):
    """A compressed file that does not inflate (the server answers 500 or ends the body)."""


def siblings(path: str) -> Iterator[tuple[str, str]]:
    """``(coding, path + suffix)`` of each compressed copy a request of ``path`` may find."""
    for coding in SERVED_CODINGS:
        yield coding, path + FILE_SUFFIXES[coding]


def accepts(header: str, coding: str) -> bool:
    """Whether an ``Accept-Encoding`` header accepts ``coding``: with q > 0, named (gzip
    also as x-gzip) or else through ``*`` (RFC 9110 12.5.3)."""
    weights: dict[str, float] = {}
    for item in header.lower().split(","):
        name, _, params = item.partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        weights[name.strip()] = q
    names = (coding, "x-gzip") if coding == "gzip" else (coding,)
    named = [weights[c] for c in names if c in weights]
    return max(named) > 0 if named else weights.get("*", 0.0) > 0


def inflate(f: BinaryIO) -> Iterator[bytes]:
    """The inflated bytes of the gzip file ``f`` (every member), in pieces of at most
    1 MiB; CorruptFile if it is not gzip, is corrupt or ends early."""
    f.seek(0)
    d = zlib.decompressobj(wbits=31)
    started = False
    try:
        while True:
            data = f.read(_READ)
            if not data:
                break
            started = True
            while data:
                piece = d.decompress(data, _PIECE)
                if piece:
                    yield piece
                data = d.unconsumed_tail
                if d.eof:  # (unused_data holds all the input after the member)
                    rest = d.unused_data
                    if not rest.startswith(b"\x1f\x8b"):
                        return  # trailing bytes after the last member are ignored, as gzip(1)
                    d = zlib.decompressobj(wbits=31)
                    data = rest
    except zlib.error as e:
        raise CorruptFile(f"corrupt gzip data ({e})") from e
    if not started or not d.eof:
        raise CorruptFile("gzip stream truncated")


def inflated_size(f: BinaryIO) -> int:
    """How many bytes :func:`inflate` gives (CorruptFile if it fails)."""
    return sum(len(piece) for piece in inflate(f))


def send_range(f: BinaryIO, start: int, stop: int, write: Callable[[bytes], object]) -> None:
    """Write inflated bytes ``[start, stop)`` of the gzip file ``f``, piece by piece."""
    for piece in pieces_in_range(inflate(f), start, stop):
        write(piece)
