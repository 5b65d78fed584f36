"""jpeg: uint8 chunks with 1 or 3 channels as one JPEG image, laid out as in
:mod:`shardvol.precomputed.codecs._image`.  Encoded and decoded by csrc/jpeg.c over the system
libjpeg: encoded from the chunk's own memory, decoded straight into the output and only as far
as a box needs."""

from __future__ import annotations

import operator

import numpy as np

from shardvol._ext import _jpeg
from shardvol.errors import InvalidArgumentError
from shardvol.precomputed.codecs._image import check_image_size, jpeg_size
from shardvol.precomputed.codecs.base import ChunkEncoding, Shape4, fortran_empty

#: TensorStore's default; it also writes this value into the info file.
DEFAULT_JPEG_QUALITY = 75


class JpegCodec(ChunkEncoding):
    """The ``jpeg`` encoding (lossy).  Encoding matches TensorStore byte for byte:
    baseline JPEG at ``jpeg_quality``, 4:2:0 chroma subsampling for RGB."""

    encoding = "jpeg"
    options = ("jpeg_quality",)

    def __init__(self, dtype, num_channels: int, jpeg_quality: int | None = None) -> None:
        super().__init__(dtype, num_channels)
        if jpeg_quality is None:
            jpeg_quality = DEFAULT_JPEG_QUALITY
        try:
            q = operator.index(jpeg_quality)
        except TypeError:
            q = -1
        if not 0 <= q <= 100:
            raise InvalidArgumentError(
                f"jpeg_quality must be an integer 0..100, got {jpeg_quality!r}"
            )
        self.jpeg_quality = q

    @classmethod
    def _supports(cls, dtype: np.dtype, num_channels: int) -> bool:
        return dtype == np.uint8 and num_channels in (1, 3)

    @classmethod
    def _support_text(cls) -> str:
        return "supported: uint8 with 1 or 3 channels"

    def _encode(self, array: np.ndarray) -> bytes:
        return _jpeg.encode(array, self.jpeg_quality)  # (from the array's own memory)

    def _decode(
        self, data: bytes | memoryview, shape: Shape4, out: np.ndarray | None, where: str
    ) -> np.ndarray:
        target = fortran_empty(shape, self.dtype) if out is None else out
        self._decode_region(data, shape, (0, 0, 0, 0), target, where)
        return target

    def _decode_region(
        self, data: bytes | memoryview, shape: Shape4, origin: Shape4, out: np.ndarray, where: str
    ) -> None:
        """Bit-identical to decoding the whole image and slicing (libjpeg-turbo, as imagecodecs
        and TensorStore decode); rows after the last one the box needs are not read, so damage
        there goes unnoticed."""
        check_image_size("jpeg", jpeg_size(data, where), shape, where)
        _jpeg.decode(data, shape, origin, out, where)
