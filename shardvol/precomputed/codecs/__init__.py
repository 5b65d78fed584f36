"""Chunk codecs of the Neuroglancer precomputed format, by the info's ``encoding``.

Example::

    codec = get_codec("compressed_segmentation", dtype="uint64", num_channels=1,
                      compressed_segmentation_block_size=(8, 8, 8))
    data = codec.encode(chunk)                  # chunk: (x, y, z, channel)
    codec.decode(data, chunk.shape, "uint64", out=volume[0:64, 0:64, 0:64, :])
"""

from __future__ import annotations

from shardvol.errors import UnsupportedCodecError
from shardvol.precomputed.codecs.base import ChunkEncoding
from shardvol.precomputed.codecs.compresso import CompressoCodec
from shardvol.precomputed.codecs.crackle import CrackleCodec
from shardvol.precomputed.codecs.cseg import CompressedSegmentationCodec
from shardvol.precomputed.codecs.jpeg import DEFAULT_JPEG_QUALITY, JpegCodec
from shardvol.precomputed.codecs.png import PngCodec
from shardvol.precomputed.codecs.raw import RawCodec

CODECS: dict[str, type[ChunkEncoding]] = {
    cls.encoding: cls
    for cls in (RawCodec, CompressedSegmentationCodec, JpegCodec, PngCodec, CompressoCodec,
                CrackleCodec)
}


def get_codec(
    encoding: str,
    *,
    dtype,
    num_channels: int,
    compressed_segmentation_block_size=None,
    jpeg_quality: int | None = None,
    png_level: int | None = None,
) -> ChunkEncoding:
    """The codec for an info file's ``encoding``, data type and channel count.

    Options that do not belong to ``encoding`` are ignored.  Raises
    UnsupportedCodecError for an unknown encoding or a data type / channel count
    the encoding cannot store, InvalidArgumentError for a bad option value.
    """
    cls = CODECS.get(encoding)
    if cls is None:
        raise UnsupportedCodecError(
            f"unknown chunk encoding {encoding!r}; supported: {', '.join(sorted(CODECS))}")
    given = {
        "compressed_segmentation_block_size": compressed_segmentation_block_size,
        "jpeg_quality": jpeg_quality,
        "png_level": png_level,
    }
    return cls(dtype, num_channels, **{k: given[k] for k in cls.options})


__all__ = [
    "CODECS",
    "DEFAULT_JPEG_QUALITY",
    "ChunkEncoding",
    "CompressedSegmentationCodec",
    "CompressoCodec",
    "CrackleCodec",
    "JpegCodec",
    "PngCodec",
    "RawCodec",
    "get_codec",
]
