"""Zarr v3 codecs and the per-chunk codec pipeline.

A Zarr v3 array lists its codecs in ``zarr.json``: zero or more array -> array
codecs (``transpose``), exactly one array -> bytes codec (``bytes`` or
``sharding_indexed``), then zero or more bytes -> bytes codecs (``gzip``,
``zstd``, ``blosc``, ``crc32c``).  Encoding applies them in that order,
decoding in reverse.  Each codec here is a small frozen object built from its
JSON ``configuration`` (``from_config``) and written back with ``to_json``;
:class:`CodecChain` binds a codec list to one chunk shape, data type and fill
value and encodes / decodes whole chunks.

Compression comes from well-kept libraries: gzip from :mod:`shardvol.compression`
(libdeflate), zstd and blosc from imagecodecs, crc32c from the ``crc32c`` package.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any, ClassVar, Literal

import crc32c as _crc32c
import imagecodecs
import numpy as np

from shardvol._ext import hugeblock, transpose
from shardvol._ext.staging import staging_buffer
from shardvol.array.values import is_fill
from shardvol.compression import (
    gzip_compress,
    gzip_decompress,
    is_gzip,
    zstd_bound,
    zstd_compress,
    zstd_compress_into,
)
from shardvol.errors import (
    ChecksumError,
    ChunkDecodeError,
    ChunkEncodeError,
    InfoError,
    InvalidArgumentError,
    UnsupportedCodecError,
)

JSON = Any

@dataclass(frozen=True)
class ChunkSpec:
    """What a codec chain encodes: arrays of ``shape`` and ``dtype``; ``fill_value`` for gaps."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fill_value: Any

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.dtype.itemsize


class Codec(ABC):
    """One entry of a ``codecs`` list."""

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def from_config(cls, config: Mapping[str, JSON], where: str) -> Codec:
        """Build from the JSON ``configuration`` (raise InfoError naming ``where``)."""

    @abstractmethod
    def to_json(self) -> dict[str, JSON]:
        """The ``{"name": ..., "configuration": ...}`` object of this codec."""


class ArrayArrayCodec(Codec):
    """Maps an array to another array (same elements, new layout)."""

    @abstractmethod
    def resolve(self, spec: ChunkSpec, where: str) -> ChunkSpec:
        """The spec of the encoded array for input ``spec``; InfoError if not applicable."""

    @abstractmethod
    def encode(self, array: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def decode(self, array: np.ndarray) -> np.ndarray: ...


class ArrayBytesCodec(Codec):
    """Serialises an array to bytes."""

    @abstractmethod
    def validate(self, spec: ChunkSpec, where: str) -> None:
        """Raise InfoError if this codec cannot encode arrays of ``spec``."""

    @abstractmethod
    def encoded_size(self, spec: ChunkSpec) -> int | None:
        """Exact encoded size for ``spec``, or None if it varies."""

    @abstractmethod
    def encode(self, array: np.ndarray, spec: ChunkSpec) -> Any:
        """Bytes-like encoding (bytes, or a contiguous uint8 buffer)."""

    @abstractmethod
    def decode(
        self,
        data: bytes | memoryview,
        spec: ChunkSpec,
        context: str,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Decode into ``out`` (shape/dtype of ``spec``, C-contiguous) if given, else a new
        array."""


class BytesBytesCodec(Codec):
    """Transforms bytes (compression, checksums)."""

    #: bytes added by encoding when that is a constant, else None
    fixed_overhead: ClassVar[int | None] = None

    def validate(self, spec: ChunkSpec, where: str) -> BytesBytesCodec:
        """Check against the array spec; return the codec with defaults filled in."""
        return self

    @abstractmethod
    def encode(self, data: Any) -> bytes:
        """Encode a bytes-like (bytes, memoryview or contiguous uint8 array)."""

    def bound(self, size: int) -> int | None:
        """The most bytes :meth:`encode_into` writes for ``size`` bytes; None if it does not."""
        return None

    def encode_into(self, data: Any, out: memoryview) -> memoryview | None:
        """:meth:`encode`'s bytes written into ``out`` (at least :meth:`bound` bytes), as
        the view of ``out`` they take; None where this codec does not (then encode)."""
        return None

    @abstractmethod
    def decode(
        self,
        data: bytes | memoryview,
        context: str,
        size: int | None = None,
        out: np.ndarray | None = None,
    ) -> Any:
        """Decoded bytes-like of exactly ``size`` bytes when that is known (else ChunkDecodeError).

        Forged size fields never make a codec allocate more than ``size``.  With
        ``out`` (a uint8 array of ``size`` bytes) the codec may decode into it and
        return it (or a view of it).
        """


# --------------------------------------------------------------------------- registry

_REGISTRY: dict[str, type[Codec]] = {}


def register_codec(cls: type[Codec]) -> type[Codec]:
    """Make ``cls`` parseable by its ``name`` in codec lists."""
    _REGISTRY[cls.name] = cls
    return cls


def parse_codec(entry: JSON, where: str) -> Codec:
    """One codec from its JSON (``{"name", "configuration"}`` or a bare name string)."""
    name: object
    if isinstance(entry, str):
        name, config = entry, {}
    elif isinstance(entry, Mapping):
        name = entry.get("name")
        config = entry.get("configuration", {})
        if not isinstance(name, str):
            raise InfoError(f"{where}: codec entry {entry!r} has no string 'name'")
        if not isinstance(config, Mapping):
            raise InfoError(f"{where}: 'configuration' of codec {name!r} must be an object")
        extra = set(entry) - {"name", "configuration"}
        if extra:
            raise InfoError(f"{where}: codec {name!r} has unknown members {sorted(extra)}")
    else:
        raise InfoError(f"{where}: codec entry must be an object or a name, got {entry!r}")
    cls = _REGISTRY.get(name)
    if cls is None:
        raise UnsupportedCodecError(
            f"{where}: codec {name!r} is not supported (supported: {sorted(_REGISTRY)})"
        )
    return cls.from_config(config, f"{where}: codec {name!r}")


def default_codec(name: str) -> Codec:
    """The codec ``name`` with its default configuration (e.g. "zstd", "gzip", "crc32c")."""
    cls = _REGISTRY.get(name)
    if cls is None:
        raise UnsupportedCodecError(
            f"codec {name!r} is not supported (supported: {sorted(_REGISTRY)})"
        )
    try:
        return cls()
    except TypeError as e:
        raise InvalidArgumentError(f"codec {name!r} needs a configuration") from e


def parse_codecs(entries: JSON, where: str) -> tuple[Codec, ...]:
    """A codec list from JSON."""
    if not isinstance(entries, Sequence) or isinstance(entries, str) or not entries:
        raise InfoError(f"{where} must be a non-empty list of codecs, got {entries!r}")
    return tuple(parse_codec(e, f"{where}[{i}]") for i, e in enumerate(entries))


def check_config_keys(config: Mapping[str, JSON], allowed: set[str], where: str) -> None:
    extra = set(config) - allowed
    if extra:
        raise InfoError(f"{where}: unknown configuration members {sorted(extra)}")


def _int_param(
    config: Mapping[str, JSON], key: str, default: int | None, lo: int, hi: int, where: str
) -> int:
    value = config.get(key, default)
    if value is None:
        raise InfoError(f"{where}: configuration member {key!r} is required")
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InfoError(f"{where}: {key!r} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def _config(**items: JSON) -> dict[str, JSON]:
    return {k: v for k, v in items.items() if v is not None}


# --------------------------------------------------------------------------- array -> array


@register_codec
@dataclass(frozen=True)
class TransposeCodec(ArrayArrayCodec):
    """Permutes the axes: encoded axis ``i`` is input axis ``order[i]``."""

    name: ClassVar[str] = "transpose"
    #: a permutation, or "C"/"F" (older metadata) until resolved
    order: tuple[int, ...] | Literal["C", "F"]

    @classmethod
    def from_config(cls, config: Mapping[str, JSON], where: str) -> TransposeCodec:
        check_config_keys(config, {"order"}, where)
        order = config.get("order")
        if order in ("C", "F"):
            return cls(order)
        if (
            not isinstance(order, Sequence)
            or isinstance(order, str)
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in order)
        ):
            raise InfoError(f"{where}: 'order' must be a list of axis numbers, got {order!r}")
        return cls(tuple(order))

    def to_json(self) -> dict[str, JSON]:
        order = self.order if isinstance(self.order, str) else list(self.order)
        return {"name": self.name, "configuration": {"order": order}}

    def permutation(self, ndim: int) -> tuple[int, ...]:
        if self.order == "C":
            return tuple(range(ndim))
        if self.order == "F":
            return tuple(range(ndim - 1, -1, -1))
        return tuple(self.order)

    def resolve(self, spec: ChunkSpec, where: str) -> ChunkSpec:
        perm = self.permutation(len(spec.shape))
        if sorted(perm) != list(range(len(spec.shape))):
            raise InfoError(
                f"{where}: order {list(perm)} is not a permutation of the "
                f"{len(spec.shape)} axes of chunks of shape {list(spec.shape)}"
            )
        return ChunkSpec(tuple(spec.shape[i] for i in perm), spec.dtype, spec.fill_value)

    def encode(self, array: np.ndarray) -> np.ndarray:
        return array.transpose(self.permutation(array.ndim))

    def decode(self, array: np.ndarray) -> np.ndarray:
        return array.transpose(np.argsort(self.permutation(array.ndim)))


# --------------------------------------------------------------------------- array -> bytes


@register_codec
@dataclass(frozen=True)
class BytesCodec(ArrayBytesCodec):
    """The elements in C order, little- or big-endian (endian optional for 1-byte types)."""

    name: ClassVar[str] = "bytes"
    endian: str | None = "little"

    @classmethod
    def from_config(cls, config: Mapping[str, JSON], where: str) -> BytesCodec:
        check_config_keys(config, {"endian"}, where)
        endian = config.get("endian")
        if endian not in ("little", "big", None):
            raise InfoError(f"{where}: 'endian' must be 'little' or 'big', got {endian!r}")
        return cls(endian)

    def to_json(self) -> dict[str, JSON]:
        if self.endian is None:
            return {"name": self.name}
        return {"name": self.name, "configuration": {"endian": self.endian}}

    def stored_dtype(self, dtype: np.dtype) -> np.dtype:
        if dtype.itemsize == 1:
            return dtype
        return dtype.newbyteorder("<" if self.endian == "little" else ">")

    def validate(self, spec: ChunkSpec, where: str) -> None:
        if self.endian is None and spec.dtype.itemsize > 1:
            raise InfoError(f"{where}: 'endian' is required for data type {spec.dtype}")

    def encoded_size(self, spec: ChunkSpec) -> int:
        return spec.nbytes

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        """The stored bytes: a view of ``array`` when laid out already, else of this
        thread's staging buffer (valid until the thread's next use of it)."""
        stored_dtype = self.stored_dtype(spec.dtype)
        if array.flags.c_contiguous and array.dtype == stored_dtype:
            return array.reshape(-1).view(np.uint8)
        n = array.size * stored_dtype.itemsize
        stored = staging_buffer(n)[:n].view(stored_dtype).reshape(array.shape)
        transpose.copyto(stored, array, casting="unsafe")  # (F-ordered values: tile by tile)
        return stored.reshape(-1).view(np.uint8)

    def decode(
        self,
        data: bytes | memoryview,
        spec: ChunkSpec,
        context: str,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        if len(data) != spec.nbytes:
            raise ChunkDecodeError(
                f"{context}: raw chunk has {len(data)} bytes, expected {spec.nbytes} "
                f"for shape {list(spec.shape)} of {spec.dtype}"
            )
        if out is None:
            out = np.empty(spec.shape, spec.dtype)
        if spec.dtype == bool:
            np.not_equal(np.frombuffer(data, np.uint8).reshape(spec.shape), 0, out=out)
        else:
            transpose.copyto(out, np.frombuffer(data, self.stored_dtype(spec.dtype)).reshape(
                spec.shape), casting="same_kind")
        return out


# --------------------------------------------------------------------------- bytes -> bytes


@register_codec
@dataclass(frozen=True)
class GzipCodec(BytesBytesCodec):
    """The ``gzip`` bytes-to-bytes codec; ``level`` 0..9 (6)."""

    name: ClassVar[str] = "gzip"
    level: int = 6

    @classmethod
    def from_config(cls, config: Mapping[str, JSON], where: str) -> GzipCodec:
        check_config_keys(config, {"level"}, where)
        return cls(_int_param(config, "level", None, 0, 9, where))

    def to_json(self) -> dict[str, JSON]:
        return {"name": self.name, "configuration": {"level": self.level}}

    def encode(self, data: bytes) -> bytes:
        return gzip_compress(data, self.level)

    def decode(
        self,
        data: bytes | memoryview,
        context: str,
        size: int | None = None,
        out: np.ndarray | None = None,
    ) -> Any:
        if size is not None and len(data) >= 4:
            # the trailer sizes the decoder's output: check it before trusting it
            trailer = struct.unpack("<I", data[-4:])[0]
            if trailer != size & 0xFFFFFFFF:
                raise ChunkDecodeError(
                    f"{context}: gzip trailer says {trailer} bytes, expected {size}"
                )
        if out is not None and size is not None and len(data) >= 18 and is_gzip(data):
            try:  # straight into the caller's buffer (libdeflate)
                result = imagecodecs.gzip_decode(
                    data, out=out  # type: ignore[arg-type]  # imagecodecs takes any buffer
                )
                if len(result) == size:
                    return result
            except Exception:
                pass
        return gzip_decompress(bytes(data), context, ChunkDecodeError, size)


@register_codec
@dataclass(frozen=True)
class ZstdCodec(BytesBytesCodec):
    """The ``zstd`` bytes-to-bytes codec; ``level`` (3) and an optional content ``checksum``."""

    name: ClassVar[str] = "zstd"
    level: int = 3
    checksum: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, JSON], where: str) -> ZstdCodec:
        check_config_keys(config, {"level", "checksum"}, where)
        checksum = config.get("checksum", False)
        if not isinstance(checksum, bool):
            raise InfoError(f"{where}: 'checksum' must be true or false, got {checksum!r}")
        return cls(_int_param(config, "level", 0, -131072, 22, where), checksum)

    def to_json(self) -> dict[str, JSON]:
        return {
            "name": self.name,
            "configuration": {"level": self.level, "checksum": self.checksum},
        }

    def encode(self, data: bytes) -> bytes:
        return zstd_compress(data, self.level, self.checksum)

    def bound(self, size: int) -> int | None:
        return zstd_bound(size)

    def encode_into(self, data: Any, out: memoryview) -> memoryview | None:
        return None if self.checksum else zstd_compress_into(data, self.level, out)

    def decode(
        self,
        data: bytes | memoryview,
        context: str,
        size: int | None = None,
        out: np.ndarray | None = None,
    ) -> Any:
        if size is not None and out is None:
            out = np.empty(size, np.uint8)  # bounds the output whatever the frame header says
        try:
            result = imagecodecs.zstd_decode(
                data, out=out  # type: ignore[arg-type]  # imagecodecs takes any buffer
            )
        except Exception as e:  # imagecodecs.ZstdError, or a too-small out buffer
            raise ChunkDecodeError(f"{context}: corrupt zstd data ({e})") from e
        if size is not None and len(result) != size:
            raise ChunkDecodeError(
                f"{context}: zstd data decodes to {len(result)} bytes, expected {size}"
            )
        return result


_BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
_BLOSC_CNAMES = ("blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd")


@register_codec
@dataclass(frozen=True)
class BloscCodec(BytesBytesCodec):
    """The ``blosc`` bytes-to-bytes codec (``cname``, ``clevel``, ``shuffle``, ``typesize``,
    ``blocksize`` as the Zarr v3 spec names them)."""

    name: ClassVar[str] = "blosc"
    cname: str = "zstd"
    clevel: int = 5
    shuffle: str = "noshuffle"
    typesize: int | None = None
    blocksize: int = 0

    @classmethod
    def from_config(cls, config: Mapping[str, JSON], where: str) -> BloscCodec:
        check_config_keys(config, {"cname", "clevel", "shuffle", "typesize", "blocksize"}, where)
        cname = config.get("cname", "lz4")
        if cname not in _BLOSC_CNAMES:
            raise InfoError(f"{where}: 'cname' must be one of {list(_BLOSC_CNAMES)}, got {cname!r}")
        shuffle = config.get("shuffle", "noshuffle")
        if not isinstance(shuffle, str) or shuffle not in _BLOSC_SHUFFLE:
            raise InfoError(
                f"{where}: 'shuffle' must be one of {list(_BLOSC_SHUFFLE)}, got {shuffle!r}"
            )
        typesize = config.get("typesize")
        if typesize is not None:
            typesize = _int_param(config, "typesize", None, 1, 255, where)
        return cls(
            cname,
            _int_param(config, "clevel", 5, 0, 9, where),
            shuffle,
            typesize,
            _int_param(config, "blocksize", 0, 0, 2**31 - 1, where),
        )

    def to_json(self) -> dict[str, JSON]:
        return {
            "name": self.name,
            "configuration": _config(
                cname=self.cname,
                clevel=self.clevel,
                shuffle=self.shuffle,
                typesize=self.typesize,
                blocksize=self.blocksize,
            ),
        }

    def validate(self, spec: ChunkSpec, where: str) -> BloscCodec:
        if self.typesize is None:
            return BloscCodec(
                self.cname, self.clevel, self.shuffle, spec.dtype.itemsize, self.blocksize
            )
        return self

    def encode(self, data: bytes) -> bytes:
        encoded = imagecodecs.blosc_encode(
            data,
            level=self.clevel,
            compressor=self.cname,
            shuffle=_BLOSC_SHUFFLE[self.shuffle],
            typesize=self.typesize or 1,
            blocksize=self.blocksize,
            numthreads=1,
        )
        return encoded  # type: ignore[return-value]  # imagecodecs returns bytes without out=

    def decode(
        self,
        data: bytes | memoryview,
        context: str,
        size: int | None = None,
        out: np.ndarray | None = None,
    ) -> Any:
        if len(data) < 16:
            raise ChunkDecodeError(f"{context}: blosc data truncated ({len(data)} bytes)")
        nbytes, _, cbytes = struct.unpack_from("<III", data, 4)
        if cbytes != len(data) or (size is not None and nbytes != size):
            raise ChunkDecodeError(
                f"{context}: blosc header says {nbytes} bytes from {cbytes} compressed, "
                f"got {len(data)} compressed"
                + ("" if size is None else f" and expected {size} decoded")
            )
        try:
            return imagecodecs.blosc_decode(
                data, numthreads=1, out=out  # type: ignore[arg-type]  # takes any buffer
            )
        except Exception as e:
            raise ChunkDecodeError(f"{context}: corrupt blosc data ({e})") from e


@register_codec
@dataclass(frozen=True)
class Crc32cCodec(BytesBytesCodec):
    """Appends the CRC32C (Castagnoli) of the data, 4 bytes little-endian."""

    name: ClassVar[str] = "crc32c"
    fixed_overhead: ClassVar[int | None] = 4

    @classmethod
    def from_config(cls, config: Mapping[str, JSON], where: str) -> Crc32cCodec:
        check_config_keys(config, set(), where)
        return cls()

    def to_json(self) -> dict[str, JSON]:
        return {"name": self.name}

    def encode(self, data: bytes) -> bytes:
        return b"".join((data, struct.pack("<I", _crc32c.crc32c(data))))

    def decode(
        self,
        data: bytes | memoryview,
        context: str,
        size: int | None = None,
        out: np.ndarray | None = None,
    ) -> Any:
        if len(data) < 4:
            raise ChecksumError(f"{context}: {len(data)} bytes cannot hold a crc32c checksum")
        body = memoryview(data)[:-4]
        stored = struct.unpack("<I", data[-4:])[0]
        actual = _crc32c.crc32c(body)
        if stored != actual:
            raise ChecksumError(
                f"{context}: crc32c checksum mismatch "
                f"(stored {stored:#010x}, computed {actual:#010x})"
            )
        if size is not None and len(body) != size:
            raise ChunkDecodeError(f"{context}: {len(body)} bytes, expected {size}")
        return body


# --------------------------------------------------------------------------- the pipeline


def _through(codecs: Sequence[BytesBytesCodec], data: Any) -> Any:
    """``data`` encoded by each of ``codecs`` in turn."""
    for codec in codecs:
        data = codec.encode(data)
    return data


def _owned(data: Any) -> bytes:
    """``data`` as bytes of its own (the array -> bytes codec may give a staging view)."""
    return data if isinstance(data, bytes) else bytes(data)


class CodecChain:
    """A codec list bound to one chunk spec: encodes and decodes whole chunks."""

    def __init__(self, codecs: Sequence[Codec], spec: ChunkSpec, where: str = "codecs") -> None:
        self.spec = spec
        self.codecs = tuple(codecs)
        aa: list[ArrayArrayCodec] = []
        ab: ArrayBytesCodec | None = None
        bb: list[BytesBytesCodec] = []
        current = spec
        for i, codec in enumerate(self.codecs):
            here = f"{where}[{i}] ({codec.name})"
            if isinstance(codec, ArrayArrayCodec):
                if ab is not None:
                    raise InfoError(f"{here}: array -> array codec after the array -> bytes codec")
                aa.append(codec)
                current = codec.resolve(current, here)
            elif isinstance(codec, ArrayBytesCodec):
                if ab is not None:
                    raise InfoError(f"{here}: only one array -> bytes codec is allowed")
                codec.validate(current, here)
                ab = codec
            elif isinstance(codec, BytesBytesCodec):
                if ab is None:
                    raise InfoError(f"{here}: bytes -> bytes codec before the array -> bytes codec")
                bb.append(codec.validate(current, here))
            else:  # pragma: no cover - registry only holds the three kinds
                raise InfoError(f"{here}: unknown codec kind")
        if ab is None:
            raise InfoError(f"{where}: an array -> bytes codec (e.g. 'bytes') is required")
        self._aa = aa
        self._ab = ab
        self._ab_spec = current
        self._bb = bb
        #: Whether chunks decode straight into an array of the chunk's shape, C order and
        #: native byte order (no array -> array codec, the stored items as they are).
        self.decodes_in_place = (
            not aa
            and isinstance(ab, BytesCodec)
            and spec.dtype != bool  # stored bytes other than 0/1 must be normalised
            and ab.stored_dtype(spec.dtype) == spec.dtype.newbyteorder("=")
        )

    def encoded_size(self) -> int | None:
        """Exact encoded size of every chunk, or None if it varies (compression)."""
        size = self._ab.encoded_size(self._ab_spec)
        for codec in self._bb:
            if size is None or codec.fixed_overhead is None:
                return None
            size += codec.fixed_overhead
        return size

    def encode(self, array: np.ndarray) -> bytes:
        """Encoded bytes of one full chunk (``array`` has the chunk's shape)."""
        return _owned(_through(self._bb, self._ab_encoded(array)))

    def encoded_bound(self) -> int | None:
        """The bytes :meth:`encode_into` needs of its buffer; None if the chain does not
        encode into one (its last bytes -> bytes codec cannot)."""
        size = self._ab.encoded_size(self._ab_spec)
        for bb in self._bb:
            size = None if size is None else bb.bound(size)
        return size if self._bb else None

    def encode_into(self, array: np.ndarray, out: memoryview) -> bytes | memoryview:
        """:meth:`encode`'s bytes, written into ``out`` (:meth:`encoded_bound` bytes, so a
        chain with one) where the chain's last codec can: the view of ``out`` they take;
        else new bytes."""
        *inner, last = self._bb
        data = _through(inner, self._ab_encoded(array))
        written = last.encode_into(data, out)
        return written if written is not None else _owned(last.encode(data))

    def _ab_encoded(self, array: np.ndarray) -> Any:
        """The chunk through the array -> array codecs and the array -> bytes codec."""
        if tuple(array.shape) != self.spec.shape:
            raise ChunkEncodeError(
                f"chunk array has shape {list(array.shape)}, expected {list(self.spec.shape)}"
            )
        for aa in self._aa:
            array = aa.encode(array)
        return self._ab.encode(array, self._ab_spec)

    def decode(
        self,
        data: bytes | memoryview,
        shape: Sequence[int] | None = None,
        dtype: Any = None,
        out: np.ndarray | None = None,
        context: str = "chunk",
    ) -> np.ndarray:
        """Decode one chunk into ``out`` (the chunk's shape, any layout) or a new C-ordered array.

        ``shape`` and ``dtype``, if given, must be the chunk's (Zarr chunks are
        never clipped); they are accepted so that this object serves as the
        slicing layer's chunk codec.  Corrupt data raises ChunkDecodeError /
        ChecksumError naming ``context``.
        """
        try:
            return self._decode(data, shape, dtype, out, context)
        except MemoryError:  # such as a chunk_shape far larger than the stored chunks
            raise ChunkDecodeError(
                f"{context}: no memory for a chunk of shape {list(self.spec.shape)} "
                f"({self.spec.nbytes} bytes of {self.spec.dtype})"
            ) from None

    def _decode(
        self,
        data: bytes | memoryview,
        shape: Sequence[int] | None,
        dtype: Any,
        out: np.ndarray | None,
        context: str,
    ) -> np.ndarray:
        spec = self.spec
        if shape is not None and tuple(shape) != spec.shape:
            raise ChunkDecodeError(
                f"{context}: Zarr chunks have shape {list(spec.shape)}, not {list(shape)}"
            )
        if dtype is not None and np.dtype(dtype) != spec.dtype:
            raise ChunkDecodeError(f"{context}: the array's data type is {spec.dtype}, not {dtype}")
        if out is not None and tuple(out.shape) != spec.shape:
            raise ChunkDecodeError(
                f"{context}: output has shape {list(out.shape)}, expected {list(spec.shape)}"
            )
        # only the first bytes -> bytes codec has a known decoded size (the array's bytes)
        size = self._ab.encoded_size(self._ab_spec)
        if self.decodes_in_place:
            if out is not None and out.flags.c_contiguous and out.dtype == spec.dtype:
                result = out
            elif out is not None:  # decode next to it, then one strided copy into it
                raw_nbytes = staging_buffer(spec.nbytes)[: spec.nbytes]
                result = raw_nbytes.view(spec.dtype).reshape(spec.shape)
            else:  # (a large one in a block: its pages reused, see fortran_empty)
                result = hugeblock.empty(spec.shape, spec.dtype)
            raw = result.reshape(-1).view(np.uint8)
            for i, codec in enumerate(reversed(self._bb)):
                first = i == len(self._bb) - 1
                data = codec.decode(data, context, size if first else None, raw if first else None)
            if not (isinstance(data, np.ndarray) and np.may_share_memory(data, raw)):
                self._ab.decode(data, spec, context, result)
        else:
            for i, codec in enumerate(reversed(self._bb)):
                data = codec.decode(data, context, size if i == len(self._bb) - 1 else None)
            result = self._ab.decode(data, self._ab_spec, context)
            for aa in reversed(self._aa):
                result = aa.decode(result)
        if out is not None and result is not out:
            np.copyto(out, result)
            return out
        return result

    def is_fill(self, array: np.ndarray) -> bool:
        """Whether every element equals the fill value (such chunks need not be stored)."""
        return is_fill(array, self.spec.fill_value)
