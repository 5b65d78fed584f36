"""fpzip and kempressed: CloudVolume's lossless (or precision-truncated) encodings of float32
and float64 chunks, through the fpzip package (``pip install shardvol[floats]``).

An fpzip stream is a range-coded header (magic, version, type, precision, four extents)
and the values.  The header is decoded here and checked against the chunk before anything
is allocated; the values are decoded by the package in a worker process of its own
(:mod:`._isolated`), because the package reads a stream without its length and crashes on
a damaged one.  ``kempressed`` is CloudVolume's fpzip of ``2 + chunk`` with the z and
channel axes swapped.
"""

from __future__ import annotations

import functools
import operator
import os
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from shardvol.errors import ChunkDecodeError, ChunkEncodeError, InvalidArgumentError
from shardvol.precomputed.codecs._floats import FloatCodec
from shardvol.precomputed.codecs.base import Shape4, deliver

if TYPE_CHECKING:
    from shardvol.precomputed.codecs._isolated import IsolatedDecoder


@functools.cache
def _decoder() -> IsolatedDecoder:
    """The pool of processes decoding fpzip streams (its module, which starts processes, is
    imported at the first fpzip chunk)."""
    from shardvol.precomputed.codecs._isolated import IsolatedDecoder

    return IsolatedDecoder(os.path.join(os.path.dirname(__file__), "_fpzip_worker.py"), "fpzip")


_MASK = 0xFFFFFFFF


class FpzipCodec(FloatCodec):
    """The ``fpzip`` encoding; ``fpzip_precision`` is the number of bits kept per value
    (0, the default: all of them, lossless)."""

    encoding = "fpzip"
    package = "fpzip"
    options: ClassVar[tuple[str, ...]] = ("fpzip_precision",)

    def __init__(self, dtype, num_channels: int, fpzip_precision: int | None = None) -> None:
        super().__init__(dtype, num_channels)
        bits = 8 * self.dtype.itemsize
        try:
            precision = operator.index(0 if fpzip_precision is None else fpzip_precision)
        except TypeError:
            precision = -1
        if isinstance(fpzip_precision, bool) or not (precision == 0 or 2 <= precision <= bits):
            raise InvalidArgumentError(
                f"fpzip_precision must be 0 (lossless) or an integer 2..{bits} for "
                f"{self.dtype.name}, got {fpzip_precision!r}")
        self.fpzip_precision = precision

    def _stored(self, array: np.ndarray) -> np.ndarray:
        """The (x, y, z, channel) chunk as the stream holds it."""
        return array

    def _stored_shape(self, shape: Shape4) -> Shape4:
        """The shape of :meth:`_stored` of a chunk of ``shape``."""
        return shape

    def _restored(self, stored: np.ndarray) -> np.ndarray:
        """The chunk of what the stream holds."""
        return stored

    def _encode(self, array: np.ndarray) -> bytes:
        fpzip = self.encoder()
        stored = np.asfortranarray(self._stored(array), dtype=self.dtype)
        try:
            return bytes(fpzip.compress(stored, order="F", precision=self.fpzip_precision))
        except Exception as e:  # the package's FpzipWriteError, ValueError, ...
            raise ChunkEncodeError(f"{self.encoding}: cannot encode a chunk: {e}") from e

    def _decode(
        self, data: bytes | memoryview, shape: Shape4, out: np.ndarray | None, where: str
    ) -> np.ndarray:
        self.encoder()  # (the worker needs it)
        stored_shape = self._stored_shape(shape)
        is_double, extents = read_header(data, where)
        if np.dtype(np.float64 if is_double else np.float32) != self.dtype or \
                extents != stored_shape:
            raise ChunkDecodeError(
                f"{where}: {self.encoding} stream holds {'float64' if is_double else 'float32'} "
                f"of shape {extents}, the chunk is {self.dtype.name} of shape {stored_shape}")
        nbytes = int(np.prod(stored_shape)) * self.dtype.itemsize
        values = _decoder().decode(data, nbytes, where)
        stored = np.frombuffer(values, self.dtype).reshape(stored_shape, order="F")
        return deliver(self._restored(stored), out)


class KempressedCodec(FpzipCodec):
    """CloudVolume's ``kempressed`` encoding (affinities): fpzip of ``2 + chunk`` with the
    z and channel axes swapped; decoding subtracts the 2 again (so values are as exact as
    float arithmetic lets ``(v + 2) - 2`` be)."""

    encoding = "kempressed"
    options = ()

    def _stored(self, array: np.ndarray) -> np.ndarray:
        return np.swapaxes(array, 2, 3) + self.dtype.type(2)

    def _stored_shape(self, shape: Shape4) -> Shape4:
        return (shape[0], shape[1], shape[3], shape[2])

    def _restored(self, stored: np.ndarray) -> np.ndarray:
        # a damaged stream (fpzip has no checksum) can decode to signaling NaNs: other
        # values, as any undetected damage gives, not a floating-point warning
        with np.errstate(invalid="ignore"):
            return np.swapaxes(stored, 3, 2) - self.dtype.type(2)


def read_header(data: bytes | memoryview, where: str) -> tuple[bool, Shape4]:
    """(whether the values are float64, their four extents) of an fpzip stream's header;
    ChunkDecodeError if ``data`` does not start with one."""
    decoder = _RangeDecoder(bytes(data[:32]))
    try:
        magic = [decoder.bits(8) for _ in range(4)]
        if magic != list(b"fpz\0") or len(data) < 24:
            raise ValueError
        decoder.bits(16), decoder.bits(8)  # the codec version
        is_double = bool(decoder.bits(1))
        decoder.bits(7)  # the precision
        extents = tuple(decoder.bits(32) for _ in range(4))
    except ValueError:
        raise ChunkDecodeError(f"{where}: corrupt fpzip chunk: no fpzip header") from None
    return is_double, extents  # type: ignore[return-value]  # 4 values


class _RangeDecoder:
    """fpzip's range decoder, for the header's fixed-width fields only."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 4
        self.code, self.low, self.range = int.from_bytes(data[:4], "big"), 0, _MASK

    def bits(self, n: int) -> int:
        """The next ``n``-bit field (n <= 32)."""
        if n > 16:
            low = self._shift(16)
            return low + (self._shift(n - 16) << 16)
        return self._shift(n)

    def _shift(self, n: int) -> int:
        self.range >>= n
        if not self.range:
            raise ValueError("not a range-coded stream")
        s = ((self.code - self.low) & _MASK) // self.range
        self.low = (self.low + self.range * s) & _MASK
        while not ((self.low ^ (self.low + self.range)) & _MASK) >> 24:
            self._get(1)
            self.range = (self.range << 8) & _MASK
        if not self.range >> 16:
            self._get(2)
            self.range = -self.low & _MASK
        return s

    def _get(self, n: int) -> None:
        for _ in range(n):
            byte = self.data[self.pos] if self.pos < len(self.data) else 0
            self.code = ((self.code << 8) | byte) & _MASK
            self.low = (self.low << 8) & _MASK
            self.pos += 1
