"""compressed_segmentation: Neuroglancer's block-wise lookup-table encoding of
uint32/uint64 labels (C encoder and decoder in csrc/cseg.c; format in csrc/cseg.h)."""

from __future__ import annotations

import operator

import numpy as np

from shardvol._ext import cseg as _cseg
from shardvol.errors import InvalidArgumentError
from shardvol.precomputed.codecs.base import ChunkEncoding, Shape4, fortran_empty

LABEL_DTYPES = frozenset((np.dtype(np.uint32), np.dtype(np.uint64)))


class CompressedSegmentationCodec(ChunkEncoding):
    """The ``compressed_segmentation`` encoding; every channel is encoded separately
    with the same ``compressed_segmentation_block_size`` (x, y, z).

    Encoding is byte-identical to TensorStore's and the compressed_segmentation
    package's.  A chunk whose lookup tables would start beyond word 2**24 (the
    format's 24-bit offsets; e.g. 256x256x192 random labels) raises
    ChunkEncodeError, where TensorStore writes a chunk it cannot read back.
    """

    encoding = "compressed_segmentation"
    options = ("compressed_segmentation_block_size",)

    def __init__(self, dtype, num_channels: int, compressed_segmentation_block_size=None) -> None:
        super().__init__(dtype, num_channels)
        self.compressed_segmentation_block_size = _block_size(compressed_segmentation_block_size)

    @classmethod
    def _supports(cls, dtype: np.dtype, num_channels: int) -> bool:
        return dtype in LABEL_DTYPES

    @classmethod
    def _support_text(cls) -> str:
        return "supported: uint32, uint64"

    def _encode(self, array: np.ndarray) -> bytes:
        if not array.dtype.isnative:
            array = array.astype(self.dtype)
        elif array.strides and any(s % array.itemsize for s in array.strides):
            array = np.asfortranarray(array)
        return _cseg.encode(array, self.compressed_segmentation_block_size)

    def _decode(
        self, data: bytes | memoryview, shape: Shape4, out: np.ndarray | None, where: str
    ) -> np.ndarray:
        target = fortran_empty(shape, self.dtype) if out is None else out
        self._decode_into(data, target, where)
        return target

    def _decode_region(
        self, data: bytes | memoryview, shape: Shape4, origin: Shape4, out: np.ndarray, where: str
    ) -> None:
        """Only the blocks that meet the region are decoded."""
        self._decode_into(data, out, where, shape=shape, origin=origin)

    def _decode_into(
        self, data: bytes | memoryview, target: np.ndarray, where: str, **region
    ) -> None:
        """Decode into ``target``; ``region``: the chunk's ``shape`` and the box's ``origin``."""
        if any(s % target.itemsize for s in target.strides):  # exotic view: decode, then copy
            tmp = fortran_empty(target.shape, self.dtype)
            _cseg.decode(data, self.compressed_segmentation_block_size, tmp, where, **region)
            np.copyto(target, tmp)
        else:
            _cseg.decode(data, self.compressed_segmentation_block_size, target, where, **region)


def _block_size(value) -> tuple[int, int, int]:
    if value is None:
        raise InvalidArgumentError(
            "compressed_segmentation needs compressed_segmentation_block_size (x, y, z)")
    try:
        bs = tuple(operator.index(v) for v in value)
    except TypeError:
        bs = ()
    if len(bs) != 3 or min(bs) < 1 or bs[0] * bs[1] * bs[2] > 2**32:
        raise InvalidArgumentError(
            f"compressed_segmentation_block_size must be 3 positive integers, got {value!r}")
    return bs
