"""png: uint8/uint16 chunks with 1 to 4 channels as one PNG image (libpng via
imagecodecs), laid out as in :mod:`shardvol.precomputed.codecs._image`."""

from __future__ import annotations

import operator

import imagecodecs
import numpy as np

from shardvol.errors import InvalidArgumentError
from shardvol.precomputed.codecs._image import decode_image, encode_image, png_size
from shardvol.precomputed.codecs.base import ChunkEncoding, Shape4


class PngCodec(ChunkEncoding):
    """The ``png`` encoding (lossless); ``png_level`` is the zlib level 0..9
    (None: the library default, as TensorStore)."""

    encoding = "png"
    options = ("png_level",)

    def __init__(self, dtype, num_channels: int, png_level: int | None = None) -> None:
        super().__init__(dtype, num_channels)
        if png_level is not None:
            try:
                level = operator.index(png_level)
            except TypeError:
                level = -1
            if not 0 <= level <= 9:
                raise InvalidArgumentError(f"png_level must be an integer 0..9, got {png_level!r}")
            png_level = level
        self.png_level = png_level

    @classmethod
    def _supports(cls, dtype: np.dtype, num_channels: int) -> bool:
        return dtype in (np.dtype(np.uint8), np.dtype(np.uint16)) and 1 <= num_channels <= 4

    @classmethod
    def _support_text(cls) -> str:
        return "supported: uint8 or uint16 with 1 to 4 channels"

    def _encode(self, array: np.ndarray) -> bytes:
        if not array.dtype.isnative:
            array = array.astype(self.dtype)
        return encode_image(imagecodecs.png_encode, array, "png", level=self.png_level)

    def _decode(
        self, data: bytes | memoryview, shape: Shape4, out: np.ndarray | None, where: str
    ) -> np.ndarray:
        return decode_image(
            imagecodecs.png_decode,  # type: ignore[arg-type]  # imagecodecs takes any buffer
            data, png_size(data, where), shape, self.dtype, out, "png", where
        )
