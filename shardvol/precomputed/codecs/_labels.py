"""What the compresso and crackle encodings share: one channel of unsigned labels, and a
PyPI package (the ``segmentation`` extra) that encodes them."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from shardvol.errors import ChunkDecodeError, ChunkEncodeError
from shardvol.precomputed.codecs.base import ChunkEncoding, Shape4

LABEL_DTYPES = frozenset(np.dtype(t) for t in ("uint8", "uint16", "uint32", "uint64"))


class LabelCodec(ChunkEncoding):
    """One channel of uint8/16/32/64 labels, as CloudVolume stores compresso and crackle."""

    #: Largest chunk extent along an axis the stream's header can hold.
    max_axis: ClassVar[int]

    @classmethod
    def _supports(cls, dtype: np.dtype, num_channels: int) -> bool:
        return dtype in LABEL_DTYPES and num_channels == 1

    @classmethod
    def _support_text(cls) -> str:
        return "supported: one channel of uint8, uint16, uint32 or uint64"

    def _check_extent(self, array: np.ndarray) -> None:
        """Raise ChunkEncodeError if the chunk is larger than the format's header holds."""
        if max(array.shape[:3]) > self.max_axis:
            raise ChunkEncodeError(
                f"{self.encoding}: a chunk of shape {array.shape[:3]} is too large; the format "
                f"holds at most {self.max_axis} voxels per axis")

    def _check_decoded(self, labels: np.ndarray, shape: Shape4, where: str) -> np.ndarray:
        """``labels`` (what a package decoded) as the chunk's (x, y, z, 1) array."""
        if labels.shape != shape[:3] or labels.dtype != self.dtype:
            raise ChunkDecodeError(
                f"{where}: {self.encoding} data decodes to {labels.dtype} of shape "
                f"{labels.shape}, the chunk is {self.dtype} of shape {shape[:3]}")
        return labels[..., None]
