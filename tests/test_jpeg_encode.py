"""JPEG chunk encoding (csrc/jpeg.c: grayscale rows handed to libjpeg as raw data, RGB rows
interleaved from the chunk's channels): byte for byte what libjpeg-turbo's scanline encoder
makes (imagecodecs' build, a different libjpeg-turbo than the system one shardvol links; RGB
with 4:2:0 chroma subsampling) for any chunk shape, quality and input strides; TensorStore's
bytes are checked in test_codecs_tensorstore.py."""

from __future__ import annotations

import imagecodecs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardvol._ext import _jpeg
from shardvol.errors import ChunkEncodeError, InvalidArgumentError
from shardvol.precomputed.codecs import get_codec


def as_image(chunk: np.ndarray) -> np.ndarray:
    x, y, z, c = chunk.shape
    img = np.ascontiguousarray(chunk.transpose(2, 1, 0, 3)).reshape(y * z, x, c)
    return img[..., 0] if c == 1 else img


@st.composite
def chunks(draw):
    """Smooth or noisy voxels of 1 or 3 channels (noise makes images larger than the first
    output buffer), in a Fortran array, a C-ordered one or a strided view (x step 2, y
    reversed)."""
    channels = draw(st.sampled_from([1, 3]))
    shape = (draw(st.integers(1, 70)), draw(st.integers(1, 20)), draw(st.integers(1, 9)),
             channels)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if draw(st.booleans()):
        g = np.mgrid[0:shape[0], 0:shape[1], 0:shape[2], 0:channels].sum(axis=0)
        voxels = (128 + 100 * np.sin(g * rng.uniform(0.05, 0.5))).astype(np.uint8)
    else:
        voxels = rng.integers(0, 256, shape, dtype=np.uint8)
    layout = draw(st.sampled_from(["fortran", "strided", "c"]))
    if layout == "fortran":
        chunk = np.asfortranarray(voxels)
    elif layout == "c":
        chunk = np.ascontiguousarray(voxels)
    else:
        parent = np.zeros((2 * shape[0], shape[1], shape[2], channels), np.uint8)
        chunk = parent[::2, ::-1]
        chunk[...] = voxels[:, ::-1]
    return chunk, draw(st.integers(0, 100))


@settings(max_examples=300, deadline=None)
@given(chunks())
def test_chunks_encode_as_libjpeg_turbo_scanlines_do(case):
    chunk, quality = case
    expected = imagecodecs.jpeg8_encode(as_image(chunk), level=quality, subsampling="420",
                                        optimize=False)
    assert _jpeg.encode(chunk, quality) == expected
    codec = get_codec("jpeg", dtype="uint8", num_channels=chunk.shape[3], jpeg_quality=quality)
    assert codec.encode(chunk) == expected


def test_too_tall_and_bad_arguments():
    with pytest.raises(ChunkEncodeError, match="65500"):
        _jpeg.encode(np.zeros((1, 300, 300, 1), np.uint8), 75)
    with pytest.raises(ChunkEncodeError, match="65500"):
        _jpeg.encode(np.zeros((65501, 1, 1, 3), np.uint8), 75)
    for bad, quality in [(np.zeros((0, 4, 4, 1), np.uint8), 75),
                         (np.zeros((4, 4, 4, 2), np.uint8), 75),
                         (np.zeros((4, 4, 4, 1), np.uint16), 75),
                         (np.zeros((4, 4, 4), np.uint8), 75),
                         (np.zeros((4, 4, 4, 1), np.uint8), 101)]:
        with pytest.raises(InvalidArgumentError):
            _jpeg.encode(bad, quality)
