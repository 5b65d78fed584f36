"""raw: little-endian voxels in [x, y, z, channel] Fortran order, no header.

Chunks stored gzip-compressed (a gzip header where raw voxels are expected) are
decompressed first.
"""

from __future__ import annotations

import math

import numpy as np

from shardvol._ext import transpose
from shardvol.compression import gzip_decompress, is_gzip
from shardvol.errors import ChunkDecodeError
from shardvol.precomputed.codecs.base import ChunkEncoding, Shape4, fortran_empty

RAW_DTYPES = frozenset(
    np.dtype(t)
    for t in ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
              "float32", "float64")
)


class RawCodec(ChunkEncoding):
    """The ``raw`` encoding: any numeric precomputed data type, any channel count."""

    encoding = "raw"

    @classmethod
    def _supports(cls, dtype: np.dtype, num_channels: int) -> bool:
        return dtype in RAW_DTYPES

    @classmethod
    def _support_text(cls) -> str:
        return "supported: " + ", ".join(sorted(d.name for d in RAW_DTYPES))

    def _encode(self, array: np.ndarray) -> bytes:
        stored = np.asarray(array, dtype=self.dtype.newbyteorder("<"))
        return transpose.fortran_bytes(stored)  # (one copy, whatever the layout)

    def _decode(
        self, data: bytes | memoryview, shape: Shape4, out: np.ndarray | None, where: str
    ) -> np.ndarray:
        voxels = self._voxels(data, shape, where)
        if out is None:  # always a copy: never alias the caller's buffer
            out = fortran_empty(shape, self.dtype)
        np.copyto(out, voxels, casting="equiv")
        return out

    def _decode_region(
        self, data: bytes | memoryview, shape: Shape4, origin: Shape4, out: np.ndarray, where: str
    ) -> None:
        box = tuple(slice(o, o + n) for o, n in zip(origin, out.shape))
        np.copyto(out, self._voxels(data, shape, where)[box], casting="equiv")

    def _voxels(self, data: bytes | memoryview, shape: Shape4, where: str) -> np.ndarray:
        """A read-only (x, y, z, channel) view of the chunk's voxels in ``data``."""
        expected = math.prod(shape) * self.dtype.itemsize
        if is_gzip(data):
            data = _gunzip_or_raw(data, expected, where)
        if len(data) != expected:
            raise ChunkDecodeError(
                f"{where}: raw chunk of shape {shape[:3]} x {shape[3]} channel(s) of "
                f"{self.dtype.name} needs {expected} bytes, got {len(data)}")
        return np.frombuffer(data, dtype=self.dtype.newbyteorder("<")).reshape(shape, order="F")


def _gunzip_or_raw(data: bytes | memoryview, expected: int, where: str) -> bytes | memoryview:
    """Gunzip a chunk that starts with the gzip magic; raw voxels that merely start
    with those two bytes (and have the exact raw size) are returned unchanged."""
    try:
        return gzip_decompress(data, where, ChunkDecodeError, expected_size=expected)
    except ChunkDecodeError:
        if len(data) == expected:
            return data
        raise
