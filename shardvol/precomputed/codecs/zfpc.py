"""zfpc: CloudVolume's container of zfp streams for float32 and float64 chunks (lossless, or
lossy with a rate, precision or tolerance), written by the zfpc package and read here
(``pip install shardvol[floats]``).

A container is a 23-byte header (``zfpc``, version 0, type and mode, four extents, which
axes are correlated), an index (the offset of the first stream, then each stream's
length) and the zfp streams: one per hyperplane of the correlated axes, the uncorrelated
ones varying (w slowest, x fastest).  The container is checked here against the chunk
(type, extents, every length and offset) and each stream's zfp header against its
hyperplane before zfpy decodes it; zfp reads a stream's bits without its length, so each
stream is handed over with room for the most bits its blocks can hold.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Iterator, Sequence

import numpy as np

from shardvol.errors import ChunkDecodeError, ChunkEncodeError, InvalidArgumentError
from shardvol.precomputed.codecs._floats import FloatCodec
from shardvol.precomputed.codecs._packages import import_package
from shardvol.precomputed.codecs.base import Shape4, fortran_empty

_HEADER = 23
#: zfpc's type codes of float32 and float64
_TYPES: dict[int, np.dtype] = {3: np.dtype(np.float32), 4: np.dtype(np.float64)}


class ZfpcCodec(FloatCodec):
    """The ``zfpc`` encoding.  At most one of ``zfpc_rate`` (bits per value),
    ``zfpc_precision`` (bits per coefficient) and ``zfpc_tolerance`` (largest absolute
    error) is set (>= 0); none: lossless.  ``zfpc_correlated_dims``: which of the x, y, z
    and channel axes vary smoothly (the rest are compressed one plane at a time)."""

    encoding = "zfpc"
    package = "zfpc"
    options = ("zfpc_rate", "zfpc_precision", "zfpc_tolerance", "zfpc_correlated_dims")

    def __init__(
        self, dtype, num_channels: int, zfpc_rate: float | None = None,
        zfpc_precision: float | None = None, zfpc_tolerance: float | None = None,
        zfpc_correlated_dims: Sequence[bool] | None = None,
    ) -> None:
        super().__init__(dtype, num_channels)
        given = {"zfpc_rate": zfpc_rate, "zfpc_precision": zfpc_precision,
                 "zfpc_tolerance": zfpc_tolerance}
        for name, value in given.items():
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, numbers.Real)
                                      or not math.isfinite(value)):
                raise InvalidArgumentError(f"{name} must be a number, got {value!r}")
        if sum(v is not None and v >= 0 for v in given.values()) > 1:
            raise InvalidArgumentError(
                "at most one of zfpc_rate, zfpc_precision and zfpc_tolerance may be set (>= 0)")
        self.zfpc_rate = -1.0 if zfpc_rate is None else float(zfpc_rate)
        self.zfpc_precision = -1.0 if zfpc_precision is None else float(zfpc_precision)
        self.zfpc_tolerance = -1.0 if zfpc_tolerance is None else float(zfpc_tolerance)
        dims = (True,) * 4 if zfpc_correlated_dims is None else zfpc_correlated_dims
        if (not isinstance(dims, (list, tuple)) or len(dims) != 4
                or not all(isinstance(d, bool) for d in dims) or not any(dims)):
            raise InvalidArgumentError(
                "zfpc_correlated_dims must be 4 booleans (x, y, z, channel), at least one "
                f"true, got {zfpc_correlated_dims!r}")
        self.zfpc_correlated_dims = tuple(dims)

    def _encode(self, array: np.ndarray) -> bytes:
        zfpc = self.encoder()
        try:
            return bytes(zfpc.compress(
                np.asfortranarray(array, dtype=self.dtype), rate=self.zfpc_rate,
                precision=self.zfpc_precision, tolerance=self.zfpc_tolerance,
                correlated_dims=list(self.zfpc_correlated_dims)))
        except Exception as e:  # zfpy's and zfpc's ValueError, RuntimeError, ...
            raise ChunkEncodeError(f"zfpc: cannot encode a chunk: {e}") from e

    def _decode(
        self, data: bytes | memoryview, shape: Shape4, out: np.ndarray | None, where: str
    ) -> np.ndarray:
        zfpy = import_package("zfpy", "zfpy", self.encoding, "floats")

        def corrupt(why: str) -> ChunkDecodeError:
            return ChunkDecodeError(f"{where}: corrupt zfpc chunk: {why}")

        n = len(data)
        if n < _HEADER or bytes(data[:4]) != b"zfpc":
            raise corrupt("no zfpc header")
        if data[4] != 0:
            raise corrupt(f"format version {data[4]}; only version 0 is read")
        dtype = _TYPES.get(data[5] & 7)
        extents = tuple(int(v) for v in np.frombuffer(data[6:22], "<u4"))
        if dtype != self.dtype or extents != shape:
            raise corrupt(f"it holds {dtype.name if dtype else 'an unknown type'} of shape "
                          f"{extents}, the chunk is {self.dtype.name} of shape {shape}")
        correlated = tuple(bool(data[22] >> i & 1) for i in range(4))
        planes = list(_hyperplanes(shape, correlated))
        index_end = _HEADER + 8 * (1 + len(planes))
        if n < index_end:
            raise corrupt(f"{n} bytes, too short for the index of {len(planes)} streams")
        index = np.frombuffer(data[_HEADER:index_end], "<u8")
        if int(index[0]) != index_end or index_end + int(index[1:].sum()) != n:
            raise corrupt(f"its index places {len(planes)} streams at byte {int(index[0])}, "
                          f"{int(index[1:].sum())} bytes long, in {n} bytes")
        target = fortran_empty(shape, self.dtype) if out is None else out
        plane_shape = tuple(s for s, c in zip(shape, correlated) if c)
        at = index_end
        for plane, size in zip(planes, index[1:].tolist()):
            stream = bytes(data[at:at + size])
            at += size
            try:
                target[plane] = _decode_stream(zfpy, stream, plane_shape, self.dtype)
            except (ValueError, MemoryError, RuntimeError) as e:
                raise corrupt(f"stream {plane}: {e}") from None
        return target


def _hyperplanes(shape: Shape4, correlated: tuple[bool, ...]) -> Iterator[tuple]:
    """The index of each stream's hyperplane, in the container's order: the uncorrelated
    axes take each of their values (w slowest, x fastest), the correlated ones are whole."""
    ranges = [[slice(None)] if c else range(s) for s, c in zip(shape, correlated)]
    for w, z, y, x in itertools.product(*reversed(ranges)):
        yield (x, y, z, w)


def _decode_stream(zfpy, stream: bytes, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A zfp stream (with its header) of an array of ``shape``, checked before decoding;
    ValueError says what does not match."""
    values = math.prod(shape)
    # zfp reads 64-bit words and trusts the stream's bit counts: leave room for the most
    # bits a stream of this many values can take (its header; a block's bits exceed its
    # values' by a few per value at worst)
    padded = stream + bytes(2 * values * dtype.itemsize + 64)
    header = zfpy.header(padded)
    dims = tuple(header[k] for k in ("nx", "ny", "nz", "nw"))
    expected = (*reversed(shape), 0, 0, 0)[:4]
    if dims != expected or header["type"] is not dtype.type:
        raise ValueError(f"its zfp header holds {header['type'].__name__} of extents "
                         f"{dims}, the container {dtype.name} of {expected}")
    return zfpy.decompress_numpy(padded)
