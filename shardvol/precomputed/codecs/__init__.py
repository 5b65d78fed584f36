"""Chunk codecs of the Neuroglancer precomputed format, by the info's ``encoding``.

Example::

    codec = get_codec("compressed_segmentation", dtype="uint64", num_channels=1,
                      compressed_segmentation_block_size=(8, 8, 8))
    data = codec.encode(chunk)                  # chunk: (x, y, z, channel)
    codec.decode(data, chunk.shape, "uint64", out=volume[0:64, 0:64, 0:64, :])
"""

from __future__ import annotations

from typing import Any

from shardvol.errors import UnsupportedCodecError
from shardvol.precomputed.codecs.base import ChunkEncoding
from shardvol.precomputed.codecs.compresso import CompressoCodec
from shardvol.precomputed.codecs.crackle import CrackleCodec
from shardvol.precomputed.codecs.cseg import CompressedSegmentationCodec
from shardvol.precomputed.codecs.fpzip import FpzipCodec, KempressedCodec
from shardvol.precomputed.codecs.jpeg import DEFAULT_JPEG_QUALITY, JpegCodec
from shardvol.precomputed.codecs.png import PngCodec
from shardvol.precomputed.codecs.raw import RawCodec
from shardvol.precomputed.codecs.zfpc import ZfpcCodec

CODECS: dict[str, type[ChunkEncoding]] = {
    cls.encoding: cls
    for cls in (RawCodec, CompressedSegmentationCodec, JpegCodec, PngCodec, CompressoCodec,
                CrackleCodec, FpzipCodec, KempressedCodec, ZfpcCodec)
}


def get_codec(encoding: str, *, dtype, num_channels: int, **options: Any) -> ChunkEncoding:
    """The codec for an info file's ``encoding``, data type and channel count.

    ``options`` are a scale's fields (``jpeg_quality``, ``png_level``,
    ``compressed_segmentation_block_size``, ``fpzip_precision``, ``zfpc_rate``, ...); those
    that do not belong to ``encoding``, and None values, are ignored.  Raises
    UnsupportedCodecError for an unknown encoding or a data type / channel count the
    encoding cannot store, InvalidArgumentError for a bad option value.
    """
    cls = CODECS.get(encoding)
    if cls is None:
        raise UnsupportedCodecError(
            f"unknown chunk encoding {encoding!r}; supported: {', '.join(sorted(CODECS))}")
    return cls(dtype, num_channels,
               **{k: options[k] for k in cls.options if options.get(k) is not None})


__all__ = [
    "CODECS",
    "DEFAULT_JPEG_QUALITY",
    "ChunkEncoding",
    "CompressedSegmentationCodec",
    "CompressoCodec",
    "CrackleCodec",
    "FpzipCodec",
    "JpegCodec",
    "KempressedCodec",
    "PngCodec",
    "RawCodec",
    "ZfpcCodec",
    "get_codec",
]
