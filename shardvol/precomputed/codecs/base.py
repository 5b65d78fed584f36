"""The chunk codec contract shared by every precomputed chunk encoding.

A codec turns one chunk's array, shaped ``(x, y, z, channel)``, into the bytes of
a chunk file and back.  Chunks at the upper edge of a volume are clipped, so the
shape is given on every call rather than fixed in the codec.
"""

from __future__ import annotations

import operator
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from shardvol._ext import hugeblock
from shardvol.errors import ChunkEncodeError, InvalidArgumentError, UnsupportedCodecError

Shape4 = tuple[int, int, int, int]


class ChunkEncoding(ABC):
    """One chunk encoding for one data type and channel count.

    ``encode(array)`` accepts an ``(x, y, z, channel)`` array of the codec's
    dtype in any memory order.  ``decode(data, shape, dtype, out=None,
    context="")`` returns a Fortran-ordered ``(x, y, z, channel)`` array, or
    fills ``out`` (any writable view of exactly ``shape``, typically a strided
    slice of a larger array) and returns it.  ``decode_region`` decodes only a
    box of the chunk into ``out``.  ``context`` (a chunk key or shard name) is
    named in every ChunkDecodeError.
    """

    encoding: ClassVar[str]
    #: The info-file fields (keyword arguments of ``__init__``) this encoding uses.
    options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, dtype, num_channels: int) -> None:
        try:
            self.dtype = np.dtype(dtype).newbyteorder("=")
        except TypeError as e:
            raise UnsupportedCodecError(f"{self.encoding}: unknown data type {dtype!r}") from e
        try:
            self.num_channels = operator.index(num_channels)
        except TypeError as e:
            raise InvalidArgumentError(
                f"num_channels must be an integer, got {num_channels!r}"
            ) from e
        if self.num_channels < 1:
            raise InvalidArgumentError(f"num_channels must be positive, got {num_channels}")
        if not self._supports(self.dtype, self.num_channels):
            raise UnsupportedCodecError(
                f"{self.encoding!r} encoding does not support data type {self.dtype.name} with "
                f"{self.num_channels} channel(s); {self._support_text()}"
            )

    @classmethod
    @abstractmethod
    def _supports(cls, dtype: np.dtype, num_channels: int) -> bool:
        """Whether this encoding can store ``dtype`` with ``num_channels`` channels."""

    @classmethod
    @abstractmethod
    def _support_text(cls) -> str:
        """What the encoding supports, for error messages."""

    def __repr__(self) -> str:
        opts = "".join(f", {k}={getattr(self, k)!r}" for k in self.options)
        name = type(self).__name__
        return f"{name}(dtype={self.dtype.name!r}, num_channels={self.num_channels}{opts})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self), self._key()))

    def _key(self) -> tuple:
        return (self.dtype, self.num_channels, *(getattr(self, k) for k in self.options))

    def ensure_encoder(self) -> None:
        """Raise UnsupportedCodecError if this process cannot encode chunks of this encoding
        (an optional package is missing); every encoder that needs none can."""
        return

    # ---- the contract ------------------------------------------------------------------------

    def encode(self, array: np.ndarray) -> bytes:
        """Chunk file bytes of ``array`` shaped (x, y, z, channel)."""
        return self._encode(self._check_encode_input(array))

    def decode(
        self,
        data: bytes | memoryview,
        shape: tuple[int, ...],
        dtype=None,
        out: np.ndarray | None = None,
        context: str = "",
    ) -> np.ndarray:
        """Decode chunk bytes ``data`` of ``shape`` (x, y, z, channel).

        ``dtype`` (optional) must be the codec's.  Returns ``out`` if given,
        else a new Fortran-ordered array.  Raises ChunkDecodeError naming
        ``context`` if the data is corrupt or does not match ``shape``.
        """
        shape = self._check_shape(shape)
        if dtype is not None and np.dtype(dtype).newbyteorder("=") != self.dtype:
            raise InvalidArgumentError(
                f"{self.encoding} codec for {self.dtype.name} asked to decode "
                f"{np.dtype(dtype).name}"
            )
        if out is not None:
            self._check_out(out, shape)
        return self._decode(_byte_buffer(data), shape, out, context or "chunk")

    def decode_region(
        self,
        data: bytes | memoryview,
        shape: tuple[int, ...],
        region: tuple[slice, ...],
        out: np.ndarray,
        context: str = "",
    ) -> np.ndarray:
        """Decode the box ``region`` (4 slices of step 1) of a chunk of ``shape`` into ``out``.

        ``out`` (any writable view) has the box's shape; returns it.  The data is
        checked as by :meth:`decode`, except that encodings which skip the parts
        of the chunk outside the box may not look at those parts' values.
        """
        shape = self._check_shape(shape)
        origin = _region_origin(region, shape)
        self._check_out(out, tuple(s.stop - s.start for s in region))
        self._decode_region(_byte_buffer(data), shape, origin, out, context or "chunk")
        return out

    def _decode_region(
        self, data: bytes | memoryview, shape: Shape4, origin: Shape4, out: np.ndarray, where: str
    ) -> None:
        """Decode the box of ``out.shape`` at ``origin`` (checked); by default the whole chunk
        is decoded and the box copied."""
        chunk = self._decode(data, shape, None, where)
        np.copyto(out, chunk[tuple(slice(o, o + n) for o, n in zip(origin, out.shape))])

    @abstractmethod
    def _encode(self, array: np.ndarray) -> bytes:
        """Encode a checked 4-D array of the codec's dtype (any strides, any byte order)."""

    @abstractmethod
    def _decode(
        self, data: bytes | memoryview, shape: Shape4, out: np.ndarray | None, where: str
    ) -> np.ndarray:
        """Decode ``data`` (bytes or a flat byte memoryview) into ``out`` (checked) or a new
        Fortran-ordered array."""

    # ---- shared checks -----------------------------------------------------------------------

    def _check_encode_input(self, array) -> np.ndarray:
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)
        if array.ndim != 4:
            raise ChunkEncodeError(
                f"{self.encoding}: chunk arrays are (x, y, z, channel), got shape {array.shape}"
            )
        if array.shape[3] != self.num_channels:
            raise ChunkEncodeError(
                f"{self.encoding}: chunk has {array.shape[3]} channels, the volume "
                f"{self.num_channels}"
            )
        if array.dtype.newbyteorder("=") != self.dtype:
            raise ChunkEncodeError(
                f"{self.encoding}: chunk has dtype {array.dtype.name}, the volume {self.dtype.name}"
            )
        return array

    def _check_shape(self, shape) -> Shape4:
        try:
            s = tuple(operator.index(v) for v in shape)
        except TypeError:
            s = ()
        if len(s) != 4 or min(s) < 0:
            raise InvalidArgumentError(
                f"chunk shape must be 4 non-negative integers, got {shape!r}"
            )
        if s[3] != self.num_channels:
            raise InvalidArgumentError(
                f"chunk shape {s} has {s[3]} channels, the codec {self.num_channels}"
            )
        return s

    def _check_out(self, out: np.ndarray, shape: Shape4) -> None:
        if not isinstance(out, np.ndarray):
            raise InvalidArgumentError(f"out must be a numpy array, got {type(out).__name__}")
        if out.shape != shape:
            raise InvalidArgumentError(f"out has shape {out.shape}, the chunk {shape}")
        if out.dtype != self.dtype:
            raise InvalidArgumentError(f"out has dtype {out.dtype}, the chunk {self.dtype}")
        if not out.flags.writeable:
            raise InvalidArgumentError("out is read-only")


def _byte_buffer(data) -> bytes | memoryview:
    """``data`` as bytes or a flat memoryview of bytes, without copying."""
    if isinstance(data, bytes):
        return data
    try:
        view = memoryview(data)
    except TypeError:
        view = None
    if view is None or not view.c_contiguous:
        raise InvalidArgumentError(
            f"chunk data must be a contiguous bytes-like object, got {type(data).__name__}"
        )
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _region_origin(region: tuple[slice, ...], shape: Shape4) -> Shape4:
    """First index of each axis of ``region``: 4 slices of step 1 within ``shape``."""
    if len(region) != 4 or not all(isinstance(s, slice) for s in region):
        raise InvalidArgumentError(f"region must be 4 slices, got {region!r}")
    origin = []
    for s, n in zip(region, shape):
        if (
            s.step not in (None, 1)
            or s.start is None
            or s.stop is None
            or not (0 <= s.start <= s.stop <= n)
        ):
            raise InvalidArgumentError(
                f"region {region!r} is not a box of step-1 slices inside the chunk shape {shape}"
            )
        origin.append(s.start)
    return tuple(origin)


def fortran_empty(shape: Shape4, dtype: np.dtype) -> np.ndarray:
    """A new uninitialised Fortran-ordered array; a large one in a block of hugeblock's
    cache (decoded chunks come and go by the hundred: their pages are reused, not faulted
    in anew; 24 remote cutouts took 12 thousand faults a round in new arrays)."""
    return hugeblock.empty(shape, dtype, order="F")


def deliver(decoded: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """Copy ``decoded`` into ``out`` if given, else return it Fortran-ordered (and writable)."""
    if out is not None:
        np.copyto(out, decoded, casting="equiv")
        return out
    if decoded.flags.f_contiguous and decoded.flags.writeable and decoded.dtype.isnative:
        return decoded
    return np.array(decoded, dtype=decoded.dtype.newbyteorder("="), order="F")
