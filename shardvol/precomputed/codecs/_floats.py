"""What the fpzip, kempressed and zfpc encodings share: float32 or float64 chunks, and a
PyPI package (the ``floats`` extra) that encodes them."""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar

import numpy as np

from shardvol.precomputed.codecs._packages import import_package
from shardvol.precomputed.codecs.base import ChunkEncoding

FLOAT_DTYPES = frozenset(np.dtype(t) for t in ("float32", "float64"))


class FloatCodec(ChunkEncoding):
    """float32 or float64 chunks with any number of channels, encoded by ``package``."""

    #: The module (and PyPI distribution) that encodes the chunks.
    package: ClassVar[str]

    @classmethod
    def _supports(cls, dtype: np.dtype, num_channels: int) -> bool:
        return dtype in FLOAT_DTYPES

    @classmethod
    def _support_text(cls) -> str:
        return "supported: float32 or float64"

    def ensure_encoder(self) -> None:
        self.encoder()

    def encoder(self) -> ModuleType:
        """The package, or UnsupportedCodecError naming the extra that installs it."""
        return import_package(self.package, self.package, self.encoding, "floats")
