"""What the jpeg and png chunk encodings share (Neuroglancer / TensorStore layout).

A chunk (x, y, z, channel) is stored as one image x pixels wide and y*z pixels
high whose pixels hold the channels interleaved: image row y + Y*z, column x is
voxel (x, y, z).  Readers accept any width and height whose product is x*y*z,
since the concatenated rows are the same Fortran-order voxel sequence.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shardvol._ext import transpose
from shardvol._ext.staging import staging_buffer
from shardvol.errors import ChunkDecodeError, ChunkEncodeError
from shardvol.precomputed.codecs.base import Shape4, deliver


def to_image(array: np.ndarray) -> np.ndarray:
    """(x, y, z, c) array -> C-contiguous image (y*z, x) or (y*z, x, c): the array itself
    when it is laid out so (a Fortran-order chunk), else a copy in this thread's staging
    buffer, valid until the thread's next use of it (a chunk cut from a larger array: numpy's
    copy into a fresh array took as long as half a JPEG encoding).  ``array`` must not be
    a view of that buffer itself."""
    x, y, z, c = array.shape
    img = array.transpose(2, 1, 0, 3)
    if not img.flags.c_contiguous:
        staged = staging_buffer(array.nbytes)[: array.nbytes].view(array.dtype)
        transpose.copyto(staged.reshape(z, y, x, c), img)
        img = staged
    img = img.reshape(z * y, x, c)
    return img[..., 0] if c == 1 else img


def encode_image(
    encoder: Callable[..., bytes | bytearray], array: np.ndarray, name: str, **kwargs
) -> bytes:
    """Encode ``array`` as a ``name`` image with ``encoder`` (an imagecodecs function)."""
    try:
        encoded = encoder(to_image(array), **kwargs)
        return encoded  # type: ignore[return-value]  # imagecodecs returns bytes without out=
    except Exception as e:  # imagecodecs raises its own RuntimeError subclasses
        raise ChunkEncodeError(
            f"{name}: cannot encode a chunk of shape {array.shape} as a {array.shape[0]} x "
            f"{array.shape[1] * array.shape[2]} image: {e}") from e


def check_image_size(name: str, image_size: tuple[int, int], shape: Shape4, where: str) -> None:
    """Refuse an image of ``image_size`` (width, height) that cannot hold a chunk of ``shape``."""
    x, y, z, _ = shape
    width, height = image_size
    if width * height != x * y * z:
        raise ChunkDecodeError(
            f"{where}: {name} image is {width} x {height} = {width * height} pixels, the chunk "
            f"{x} x {y} x {z} needs {x * y * z}")


def decode_image(
    decoder: Callable[[bytes | memoryview], np.ndarray],
    data: bytes | memoryview,
    image_size: tuple[int, int],
    shape: Shape4,
    dtype: np.dtype,
    out: np.ndarray | None,
    name: str,
    where: str,
) -> np.ndarray:
    """Decode an image chunk whose header announced ``image_size`` (width, height).

    The size is checked against ``shape`` before decoding, so a forged header
    cannot make the decoder allocate more than the chunk's own size.
    """
    x, y, z, c = shape
    check_image_size(name, image_size, shape, where)
    try:
        img = decoder(data)
    except Exception as e:  # imagecodecs raises its own RuntimeError subclasses
        raise ChunkDecodeError(f"{where}: corrupt {name} data: {e}") from e
    channels = 1 if img.ndim == 2 else img.shape[2]
    if img.shape[0] * img.shape[1] != x * y * z or channels != c:
        raise ChunkDecodeError(
            f"{where}: {name} image decodes to shape {img.shape}, the chunk {shape} needs "
            f"{x * y * z} pixels of {c} channel(s)")
    if img.dtype != dtype:
        raise ChunkDecodeError(
            f"{where}: {name} image has {img.dtype.itemsize * 8}-bit samples, the volume is "
            f"{dtype.name}")
    return deliver(img.reshape(z, y, x, c).transpose(2, 1, 0, 3), out)


def _be16(data: bytes | memoryview, i: int) -> int:
    return data[i] << 8 | data[i + 1]


#: JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic ...).
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def jpeg_size(data: bytes | memoryview, where: str) -> tuple[int, int]:
    """(width, height) from a JPEG's frame header, without decoding."""
    if not isinstance(data, bytes):  # (a view of the header's bytes: no copy of the image)
        data = memoryview(data).cast("B")
    if data[:2] != b"\xff\xd8":
        raise ChunkDecodeError(f"{where}: not JPEG data (starts with {bytes(data[:4])!r})")
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            break
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            i += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image / start of scan before any frame
            break
        length = _be16(data, i + 2)
        if marker in _SOF_MARKERS:
            if length < 8 or i + 2 + length > len(data):
                break
            height, width = _be16(data, i + 5), _be16(data, i + 7)
            if height == 0:
                raise ChunkDecodeError(f"{where}: JPEG without a height in its frame header")
            return width, height
        i += 2 + length
    raise ChunkDecodeError(f"{where}: corrupt or truncated JPEG data (no frame header found)")


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes | memoryview, where: str) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, without decoding."""
    head = bytes(data[:24])
    if head[:8] != _PNG_SIGNATURE:
        raise ChunkDecodeError(f"{where}: not PNG data (starts with {head[:8]!r})")
    if len(head) < 24 or head[12:16] != b"IHDR":
        raise ChunkDecodeError(f"{where}: corrupt or truncated PNG data (no IHDR header)")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
