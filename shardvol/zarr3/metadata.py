"""Zarr v3 array metadata (``zarr.json``): parse, validate, serialise, create.

Only what shardvol can read and write is accepted: a ``regular`` chunk grid,
the ``default`` and ``v2`` chunk key encodings, numeric and bool data types,
and the codecs registered in :mod:`shardvol.zarr3.codecs` (plus
``sharding_indexed``).  Anything else raises :class:`UnsupportedCodecError`;
missing or malformed fields raise :class:`InfoError` naming the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from shardvol.array.values import cast_scalar
from shardvol.errors import InfoError, InvalidArgumentError, UnsupportedCodecError
from shardvol.jsondoc import load_json
from shardvol.zarr3.codecs import (
    JSON,
    ArrayArrayCodec,
    ArrayBytesCodec,
    BloscCodec,
    BytesCodec,
    ChunkSpec,
    Codec,
    CodecChain,
    ZstdCodec,
    default_codec,
    parse_codec,
    parse_codecs,
)
from shardvol.zarr3.sharding import DEFAULT_INDEX_CODECS, ShardingCodec

#: The metadata document of every Zarr v3 array and group.
ZARR_JSON = "zarr.json"

#: Zarr v3 data type name -> numpy dtype (native byte order)
DATA_TYPES: dict[str, np.dtype] = {
    name: np.dtype(name)
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
}

_REQUIRED = (
    "zarr_format",
    "node_type",
    "shape",
    "data_type",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
    "codecs",
)
_OPTIONAL = ("attributes", "dimension_names", "storage_transformers")


def data_type_name(dtype: Any) -> str:
    """Zarr v3 name of a numpy dtype (any byte order); UnsupportedCodecError if none."""
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise InvalidArgumentError(f"not a data type: {dtype!r}") from e
    name = dt.name if dt.kind != "b" else "bool"
    if name not in DATA_TYPES or dt.newbyteorder("=") != DATA_TYPES[name]:
        raise UnsupportedCodecError(
            f"data type {dt} is not supported by zarr3 (supported: {sorted(DATA_TYPES)})"
        )
    return name


# --------------------------------------------------------------------------- fill values


def _float_from_json(value: JSON, dtype: np.dtype, where: str) -> Any:
    special = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}
    if isinstance(value, str) and value in special:
        return dtype.type(special[value])
    if isinstance(value, str) and value.startswith("0x"):
        digits = value[2:]
        if len(digits) != 2 * dtype.itemsize:
            raise InfoError(
                f"{where}: hex fill_value {value!r} must have {2 * dtype.itemsize} hex digits "
                f"for {dtype}"
            )
        try:
            bits = int(digits, 16)
        except ValueError as e:
            raise InfoError(f"{where}: {value!r} is not a hex number") from e
        return np.array(bits, f"u{dtype.itemsize}").view(dtype)[()]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return dtype.type(value)
    raise InfoError(
        f"{where}: fill_value {value!r} is not a number, 'NaN', 'Infinity', '-Infinity' or '0x...'"
    )


def fill_value_from_json(value: JSON, dtype: np.dtype, where: str = "fill_value") -> Any:
    """The numpy scalar a JSON ``fill_value`` denotes for ``dtype``."""
    if value is None:
        raise InfoError(f"{where}: fill_value is required (got null)")
    kind = dtype.kind
    if kind == "b":
        if isinstance(value, bool) or value in (0, 1):  # zarrita wrote 0/1
            return np.bool_(bool(value))
        raise InfoError(f"{where}: fill_value {value!r} is not a boolean")
    if kind in "iu":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        info = np.iinfo(dtype)
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not info.min <= value <= info.max
        ):
            raise InfoError(
                f"{where}: fill_value {value!r} is not an integer in the range of {dtype}"
            )
        return dtype.type(value)
    if kind == "f":
        return _float_from_json(value, dtype, where)
    if kind == "c":
        if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
            raise InfoError(f"{where}: complex fill_value must be [real, imag], got {value!r}")
        part = np.dtype(f"f{dtype.itemsize // 2}")
        re, im = (_float_from_json(v, part, where) for v in value)
        return dtype.type(complex(re, im))
    raise InfoError(f"{where}: no fill_value encoding for {dtype}")  # pragma: no cover


def _float_to_json(value: Any) -> JSON:
    if np.isnan(value):
        bits = np.array(value).view(f"u{value.itemsize}")[()]
        canonical = np.array(np.nan, value.dtype).view(f"u{value.itemsize}")[()]
        return "NaN" if bits == canonical else f"0x{int(bits):0{2 * value.itemsize}x}"
    if np.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(value)


def fill_value_to_json(value: Any) -> JSON:
    """JSON form of a numpy fill scalar."""
    kind = value.dtype.kind
    if kind == "b":
        return bool(value)
    if kind in "iu":
        return int(value)
    if kind == "f":
        return _float_to_json(value)
    return [_float_to_json(value.real), _float_to_json(value.imag)]


def coerce_fill_value(value: Any, dtype: np.dtype) -> Any:
    """A user-given fill value as a numpy scalar of ``dtype`` (exactly representable);
    strings, lists (complex ``[real, imag]``) and None are read as zarr.json writes them."""
    if value is None or isinstance(value, (str, list, tuple)):
        return fill_value_from_json(list(value) if isinstance(value, tuple) else value, dtype)
    try:
        return cast_scalar(value, dtype)
    except InvalidArgumentError:
        raise InvalidArgumentError(f"fill_value {value!r} does not fit data type {dtype}") from None


# --------------------------------------------------------------------------- chunk keys


@dataclass(frozen=True)
class ChunkKeyEncoding:
    """How chunk grid coordinates name stored keys: ``default`` ("c/1/2") or ``v2`` ("1.2")."""

    name: str = "default"
    separator: str = "/"

    def __post_init__(self) -> None:
        if self.name not in ("default", "v2"):
            raise UnsupportedCodecError(
                f"chunk_key_encoding {self.name!r} is not supported (supported: 'default', 'v2')"
            )
        if self.separator not in ("/", "."):
            raise InfoError(
                f"chunk_key_encoding separator must be '/' or '.', got {self.separator!r}"
            )

    @classmethod
    def from_json(cls, value: JSON, where: str = "chunk_key_encoding") -> ChunkKeyEncoding:
        if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
            raise InfoError(f"{where} must be an object with a 'name', got {value!r}")
        name = value["name"]
        config = value.get("configuration", {})
        if not isinstance(config, Mapping) or set(config) - {"separator"}:
            raise InfoError(f"{where}: configuration must hold only 'separator', got {config!r}")
        return cls(name, config.get("separator", "/" if name == "default" else "."))

    def to_json(self) -> dict[str, JSON]:
        return {"name": self.name, "configuration": {"separator": self.separator}}

    def key(self, coords: Sequence[int]) -> str:
        """Stored key of the chunk at grid ``coords``."""
        parts = [str(int(c)) for c in coords]
        if self.name == "default":
            return self.separator.join(["c", *parts])
        return self.separator.join(parts) or "0"

    def coords(self, key: str, ndim: int) -> tuple[int, ...]:
        """Grid coordinates of a chunk key (inverse of :meth:`key`)."""
        parts = key.split(self.separator)
        if self.name == "default":
            if parts[0] != "c":
                raise InvalidArgumentError(f"chunk key {key!r} does not start with 'c'")
            parts = parts[1:]
        elif ndim == 0 and parts == ["0"]:
            parts = []
        if len(parts) != ndim or not all(p.isdigit() for p in parts):
            raise InvalidArgumentError(f"{key!r} is not the key of a chunk of a {ndim}-d grid")
        return tuple(int(p) for p in parts)


# --------------------------------------------------------------------------- array metadata


@dataclass(frozen=True)
class ArrayMetadata:
    """The contents of an array's ``zarr.json``."""

    shape: tuple[int, ...]
    data_type: str
    chunk_shape: tuple[int, ...]
    fill_value: Any
    codecs: tuple[Codec, ...]
    chunk_key_encoding: ChunkKeyEncoding = ChunkKeyEncoding()
    attributes: Mapping[str, JSON] = field(default_factory=dict)
    dimension_names: tuple[str | None, ...] | None = None
    extra_fields: Mapping[str, JSON] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.data_type not in DATA_TYPES:
            raise UnsupportedCodecError(f"data_type {self.data_type!r} is not supported")
        object.__setattr__(self, "fill_value", coerce_fill_value(self.fill_value, self.dtype))
        if any(s < 0 for s in self.shape) or any(c <= 0 for c in self.chunk_shape):
            raise InfoError(
                f"shape {list(self.shape)} must be >= 0 and "
                f"chunk_shape {list(self.chunk_shape)} > 0"
            )
        if len(self.chunk_shape) != len(self.shape):
            raise InfoError(
                f"chunk_grid chunk_shape {list(self.chunk_shape)} must have one entry per "
                f"dimension of shape {list(self.shape)}"
            )
        for what, extents in (("shape", self.shape), ("chunk_shape", self.chunk_shape)):
            if math.prod(extents) * self.dtype.itemsize >= 1 << 63:
                raise InfoError(
                    f"{what} {list(extents)} of {self.data_type} is 2**63 bytes or more"
                )
        if self.dimension_names is not None and len(self.dimension_names) != len(self.shape):
            raise InfoError(
                f"dimension_names {list(self.dimension_names)} must have one entry per dimension "
                f"of shape {list(self.shape)}"
            )
        self.codec_chain  # noqa: B018 - validates the codecs against the chunk spec

    def __eq__(self, other: object) -> bool:
        """Equal when the documents are (a NaN fill value equals itself)."""
        if not isinstance(other, ArrayMetadata):
            return NotImplemented
        return self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_json(), sort_keys=True))

    # ----------------------------------------------------------------- derived

    @property
    def dtype(self) -> np.dtype:
        return DATA_TYPES[self.data_type]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def chunk_spec(self) -> ChunkSpec:
        """Spec of one chunk of the chunk grid (a whole shard when sharded)."""
        return ChunkSpec(self.chunk_shape, self.dtype, self.fill_value)

    @cached_property
    def codec_chain(self) -> CodecChain:
        """The codecs bound to the chunk grid's chunks."""
        return CodecChain(self.codecs, self.chunk_spec, "codecs")

    @property
    def sharding(self) -> ShardingCodec | None:
        """The sharding codec when the codecs are exactly one ``sharding_indexed``.

        Only then are inner chunks addressable on their own; a sharding codec
        behind a transpose or before compression still works, as whole shards.
        """
        if len(self.codecs) == 1 and isinstance(self.codecs[0], ShardingCodec):
            return self.codecs[0]
        return None

    @property
    def inner_chunk_shape(self) -> tuple[int, ...]:
        """Shape of the smallest independently stored chunk (inner chunk when sharded)."""
        sharding = self.sharding
        return sharding.chunk_shape if sharding else self.chunk_shape

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Number of chunks of the chunk grid (shards when sharded) along each axis."""
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunk_shape))

    def chunk_key(self, coords: Sequence[int]) -> str:
        """Stored key of the chunk grid's chunk at ``coords``."""
        return self.chunk_key_encoding.key(coords)

    # ----------------------------------------------------------------- JSON

    def to_json(self) -> dict[str, JSON]:
        doc: dict[str, JSON] = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": self.data_type,
            "chunk_grid": {
                "name": "regular",
                "configuration": {"chunk_shape": list(self.chunk_shape)},
            },
            "chunk_key_encoding": self.chunk_key_encoding.to_json(),
            "fill_value": fill_value_to_json(self.fill_value),
            "codecs": [c.to_json() for c in self.codecs],
            "attributes": dict(self.attributes),
        }
        if self.dimension_names is not None:
            doc["dimension_names"] = list(self.dimension_names)
        doc.update(self.extra_fields)
        return doc

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), indent=2).encode()

    @classmethod
    def from_json(cls, doc: JSON, source: str = ZARR_JSON) -> ArrayMetadata:
        """Parse a ``zarr.json`` document (dict, str or bytes); ``source`` names it in errors."""
        if isinstance(doc, (bytes, bytearray, memoryview, str)):
            doc = load_json(doc, source)
        if not isinstance(doc, Mapping):
            raise InfoError(f"{source}: must be a JSON object, got {type(doc).__name__}")
        version = doc.get("zarr_format", 3)
        if version != 3 or isinstance(version, bool):
            raise InfoError(f"{source}: 'zarr_format' must be 3, got {version!r}")
        if "node_type" in doc and doc["node_type"] != "array":
            raise InfoError(f"{source}: 'node_type' must be 'array', got {doc['node_type']!r}")
        missing = [k for k in _REQUIRED if k not in doc]
        if missing:
            raise InfoError(f"{source}: required field(s) {missing} missing")
        extra = {}
        for key in set(doc) - set(_REQUIRED) - set(_OPTIONAL):
            value = doc[key]
            if not (isinstance(value, Mapping) and value.get("must_understand") is False):
                raise InfoError(f"{source}: unknown field {key!r} that must be understood")
            extra[key] = value
        shape = _int_list(doc["shape"], 0, f"{source}: 'shape'")
        dtype_name = _parse_data_type(doc["data_type"], source)
        chunk_shape = _parse_chunk_grid(doc["chunk_grid"], source)
        transformers = doc.get("storage_transformers", [])
        if transformers not in ([], None):
            raise UnsupportedCodecError(f"{source}: storage_transformers are not supported")
        attributes = doc.get("attributes", {})
        if not isinstance(attributes, Mapping):
            raise InfoError(f"{source}: 'attributes' must be an object")
        names = doc.get("dimension_names")
        if names is not None:
            if not isinstance(names, list) or not all(
                n is None or isinstance(n, str) for n in names
            ):
                raise InfoError(f"{source}: 'dimension_names' must be a list of strings or nulls")
            names = tuple(names)
        try:
            return cls(
                shape=shape,
                data_type=dtype_name,
                chunk_shape=chunk_shape,
                fill_value=fill_value_from_json(
                    doc["fill_value"], DATA_TYPES[dtype_name], f"{source}: 'fill_value'"
                ),
                codecs=parse_codecs(doc["codecs"], f"{source}: codecs"),
                chunk_key_encoding=ChunkKeyEncoding.from_json(
                    doc["chunk_key_encoding"], f"{source}: 'chunk_key_encoding'"
                ),
                attributes=dict(attributes),
                dimension_names=names,
                extra_fields=extra,
            )
        except (InfoError, UnsupportedCodecError) as e:
            if str(e).startswith(source):
                raise
            raise type(e)(f"{source}: {e}") from e


def _int_list(value: JSON, minimum: int, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value
    ):
        raise InfoError(f"{where} must be a list of integers >= {minimum}, got {value!r}")
    return tuple(value)


def _parse_data_type(value: JSON, source: str) -> str:
    if isinstance(value, Mapping) and isinstance(value.get("name"), str):
        if value.get("configuration") or set(value) - {"name", "configuration"}:
            raise UnsupportedCodecError(
                f"{source}: data_type {value['name']!r} with configuration is not supported"
            )
        value = value["name"]
    if not isinstance(value, str):
        raise InfoError(f"{source}: 'data_type' must be a name, got {value!r}")
    if value not in DATA_TYPES:
        raise UnsupportedCodecError(
            f"{source}: data_type {value!r} is not supported (supported: {sorted(DATA_TYPES)})"
        )
    return value


def _parse_chunk_grid(value: JSON, source: str) -> tuple[int, ...]:
    where = f"{source}: 'chunk_grid'"
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        raise InfoError(f"{where} must be an object with a 'name', got {value!r}")
    if value["name"] != "regular":
        raise UnsupportedCodecError(
            f"{where}: grid {value['name']!r} is not supported (only 'regular')"
        )
    config = value.get("configuration")
    if not isinstance(config, Mapping) or "chunk_shape" not in config:
        raise InfoError(f"{where}: configuration.chunk_shape is required")
    return _int_list(config["chunk_shape"], 1, f"{where} chunk_shape")


# --------------------------------------------------------------------------- create


def _codec_list(
    codecs: Sequence[Codec | JSON] | None, where: str, itemsize: int
) -> tuple[Codec, ...]:
    """Codecs as given (objects, JSON, names), with the ``bytes`` codec if none is, and the
    item size as the typesize of blosc codecs given none (zarr.json must state it)."""
    if codecs is None:
        return (BytesCodec("little"), ZstdCodec())
    parsed = tuple(
        c
        if isinstance(c, Codec)
        else default_codec(c)
        if isinstance(c, str)
        else parse_codec(c, where)
        for c in codecs
    )
    parsed = tuple(
        replace(c, typesize=itemsize) if isinstance(c, BloscCodec) and c.typesize is None else c
        for c in parsed
    )
    if not any(isinstance(c, ArrayBytesCodec) for c in parsed):
        first_bb = next(
            (i for i, c in enumerate(parsed) if not isinstance(c, ArrayArrayCodec)), len(parsed)
        )
        parsed = (*parsed[:first_bb], BytesCodec("little"), *parsed[first_bb:])
    return parsed


def create_metadata(
    shape: Sequence[int],
    dtype: Any,
    chunk_shape: Sequence[int],
    inner_chunk_shape: Sequence[int] | None = None,
    *,
    codecs: Sequence[Codec | JSON] | None = None,
    index_codecs: Sequence[Codec | JSON] | None = None,
    index_location: str = "end",
    fill_value: Any = 0,
    dimension_names: Sequence[str | None] | None = None,
    chunk_key_encoding: str = "default",
    separator: str | None = None,
    attributes: Mapping[str, JSON] | None = None,
) -> ArrayMetadata:
    """Metadata of a new array.

    ``chunk_shape`` is the chunk grid (the shard shape when ``inner_chunk_shape``
    is given: the array is then sharded with inner chunks of that shape).
    ``codecs`` are the (inner) chunk codecs as codec objects, JSON objects or bare
    names ("gzip", "zstd", "blosc", "crc32c", ...); a ``bytes`` little-endian
    codec is added if none is given; default ``bytes`` + ``zstd``.
    ``index_codecs`` default to ``bytes`` + ``crc32c``.
    """
    dtype_name = data_type_name(dtype)
    np_dtype = DATA_TYPES[dtype_name]
    inner = _codec_list(codecs, "codecs", np_dtype.itemsize)
    if inner_chunk_shape is not None:
        if index_location not in ("start", "end"):
            raise InvalidArgumentError(
                f"index_location must be 'start' or 'end', got {index_location!r}"
            )
        index = (
            DEFAULT_INDEX_CODECS
            if index_codecs is None
            else _codec_list(index_codecs, "index_codecs", 8)  # the index is uint64
        )
        inner = (
            ShardingCodec(tuple(int(c) for c in inner_chunk_shape), inner, index, index_location),
        )
    if separator is None:
        separator = "/" if chunk_key_encoding == "default" else "."
    try:
        return ArrayMetadata(
            shape=tuple(int(s) for s in shape),
            data_type=dtype_name,
            chunk_shape=tuple(int(c) for c in chunk_shape),
            fill_value=coerce_fill_value(fill_value, np_dtype),
            codecs=inner,
            chunk_key_encoding=ChunkKeyEncoding(chunk_key_encoding, separator),
            attributes=dict(attributes or {}),
            dimension_names=None if dimension_names is None else tuple(dimension_names),
        )
    except InfoError as e:
        raise InvalidArgumentError(str(e)) from e


__all__ = [
    "DATA_TYPES",
    "ZARR_JSON",
    "ArrayMetadata",
    "ChunkKeyEncoding",
    "coerce_fill_value",
    "create_metadata",
    "data_type_name",
    "fill_value_from_json",
    "fill_value_to_json",
]
