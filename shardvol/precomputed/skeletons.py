"""Neuroglancer precomputed skeletons: a directory with an ``info`` (``@type``
``neuroglancer_skeletons``) and the encoded skeleton of each segment, one file per label
(unsharded) or the value of the label's key in ``neuroglancer_uint64_sharded_v1`` shards.

An encoded skeleton is, little-endian: uint32 vertex count N, uint32 edge count M, N x 3
float32 positions, M x 2 uint32 vertex indices, then each vertex attribute of the info in
order (N x num_components values of its data type).  Decoding checks every size and index:
a skeleton that does not match its info is a ChunkDecodeError naming the label.

Example::

    skels = Skeletons.create(open_store("memory://s"), transform=[4, 0, 0, 0,
                             0, 4, 0, 0, 0, 0, 40, 0])
    skels[5] = Skeleton(vertices, edges, {"radius": radii})
    skels[5].radius
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardvol.errors import (
    AlreadyExistsError,
    ChunkDecodeError,
    InfoError,
    InvalidArgumentError,
    MissingChunkError,
)
from shardvol.jsondoc import finite_number, load_json, plain
from shardvol.kvstore import KVStore, PrefixStore, open_store
from shardvol.kvstore.base import io_pool
from shardvol.precomputed import file_copies
from shardvol.precomputed.file_copies import delete_copies, read_files, without_suffix
from shardvol.precomputed.info_file import INFO_KEY
from shardvol.precomputed.objects import directory_name
from shardvol.precomputed.segment_properties import SegmentProperties, read_segment_properties
from shardvol.precomputed.transform import IDENTITY, apply, invert
from shardvol.sharding import ShardingSpec, ShardReader, update_shard
from shardvol.sharding.reader import delete_shards, shard_files

SKELETONS_TYPE = "neuroglancer_skeletons"
DATA_TYPES = ("float32", "int8", "uint8", "int16", "uint16", "int32", "uint32")
DEFAULT_ATTRIBUTES = ({"id": "radius", "data_type": "float32", "num_components": 1},)
#: A CloudVolume skeleton file compressed whole (``LABEL.gz``, ...) decoding to more bytes
#: than this is corrupt.
MAX_SKELETON_BYTES = 1 << 32
_HEADER = struct.Struct("<II")
_MAX_COUNT = (1 << 32) - 1


@dataclass(frozen=True)
class VertexAttribute:
    """One per-vertex attribute declared in the info."""

    id: str
    data_type: str
    num_components: int = 1

    @property
    def dtype(self) -> np.dtype:
        """The stored (little-endian) dtype."""
        return np.dtype(self.data_type).newbyteorder("<")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "data_type": self.data_type,
                "num_components": self.num_components}


@dataclass(eq=False)
class Skeleton:
    """One segment's skeleton.

    ``vertices``: float32 (N, 3) positions in the model space, nanometres: the stored
    positions mapped through the info's ``transform`` (identity: as stored).
    ``edges``: uint32 (M, 2) vertex indices.  ``attributes``: per-vertex arrays by the
    info's attribute ids, (N,) for one component and (N, C) for more, as stored (a
    ``radius`` stays in stored units, as the specification has it).  ``skel.radius`` and
    ``skel["radius"]`` read an attribute.
    """

    vertices: np.ndarray
    edges: np.ndarray
    attributes: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        v = np.asarray(self.vertices)
        if v.dtype.kind not in "fiu" or v.ndim != 2 or v.shape[1] != 3:
            raise InvalidArgumentError(
                f"skeleton vertices must be a numeric (N, 3) array, got {v.dtype} {v.shape}")
        e = np.asarray(self.edges)
        if e.size == 0:  # (an empty list is float64)
            e = np.zeros((0, 2), dtype=np.uint32)
        if e.dtype.kind not in "iu" or e.ndim != 2 or e.shape[1] != 2:
            raise InvalidArgumentError(
                f"skeleton edges must be an integer (M, 2) array, got {e.dtype} {e.shape}")
        if e.size and (int(e.min()) < 0 or int(e.max()) > _MAX_COUNT):
            raise InvalidArgumentError("skeleton edges must be vertex indices in [0, 2**32)")
        self.vertices = np.ascontiguousarray(v, dtype=np.float32)
        self.edges = np.ascontiguousarray(e, dtype=np.uint32)
        self.attributes = {str(k): np.asarray(a) for k, a in dict(self.attributes).items()}

    def __getattr__(self, name: str) -> np.ndarray:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            attributes = object.__getattribute__(self, "attributes")
        except AttributeError:
            raise AttributeError(name) from None
        if name in attributes:
            return attributes[name]
        raise AttributeError(f"skeleton has no attribute {name!r} (its vertex attributes: "
                             f"{sorted(attributes)})")

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.attributes:
            raise KeyError(f"skeleton has no vertex attribute {name!r} (it has "
                           f"{sorted(self.attributes)})")
        return self.attributes[name]

    def __repr__(self) -> str:
        return (f"Skeleton({len(self.vertices)} vertices, {len(self.edges)} edges, "
                f"attributes {sorted(self.attributes)})")

    @classmethod
    def from_osteoid(cls, obj: Any, attributes: Iterable[str] | None = None) -> Skeleton:
        """The skeleton of an osteoid (or CloudVolume) ``Skeleton``, or of anything with its
        ``vertices``, ``edges`` and ``extra_attributes``: vertices in voxel ``space`` are
        mapped to nanometres with its ``transform``.  ``attributes``: the ids to take
        (default: every one of ``extra_attributes`` it holds)."""
        vertices = np.asarray(obj.vertices)
        transform = getattr(obj, "transform", None)
        if getattr(obj, "space", "physical") == "voxel" and transform is not None:
            matrix = np.asarray(transform, dtype=np.float64).reshape(3, 4)
            vertices = apply(matrix, vertices).astype(np.float32)
        declared = [a["id"] for a in getattr(obj, "extra_attributes", None) or ()]
        names = declared if attributes is None else list(attributes)
        taken = {}
        for name in names:
            value = getattr(obj, name, None)
            if value is None:
                if attributes is not None:
                    raise InvalidArgumentError(f"{type(obj).__name__} has no attribute {name!r}")
                continue
            taken[name] = np.asarray(value)
        return cls(vertices, obj.edges, taken)

    def to_osteoid(self, segid: int | None = None) -> Any:
        """An ``osteoid.Skeleton`` (CloudVolume's) in physical space with these vertices,
        edges and attributes (each an ``extra_attributes`` entry and a property)."""
        import osteoid

        extra = [{"id": name, "data_type": a.dtype.name,
                  "num_components": 1 if a.ndim == 1 else int(a.shape[1])}
                 for name, a in self.attributes.items()]
        out = osteoid.Skeleton(self.vertices.copy(), self.edges.copy(), segid=segid,
                               space="physical", extra_attributes=extra,
                               default_attributes=False)
        for name, a in self.attributes.items():
            if hasattr(out, name):
                raise InvalidArgumentError(
                    f"vertex attribute {name!r} would replace osteoid.Skeleton.{name}")
            setattr(out, name, a.copy())
        return out


@dataclass(frozen=True)
class SkeletonInfo:
    """A parsed skeleton ``info``; ``extra`` keeps members this library does not use
    (CloudVolume's ``spatial_index``, ``mip``)."""

    transform: tuple[float, ...] = IDENTITY
    vertex_attributes: tuple[VertexAttribute, ...] = ()
    sharding: ShardingSpec | None = None
    segment_properties: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, doc: Any, source: str) -> SkeletonInfo:
        """Parse an info document (InfoError naming ``source``); as in Neuroglancer, a
        missing ``transform`` is the identity and missing ``vertex_attributes`` none."""
        if not isinstance(doc, dict):
            raise InfoError(f"{source}: must be a JSON object, got {type(doc).__name__}")
        if doc.get("@type") != SKELETONS_TYPE:
            raise InfoError(f"{source}: @type must be {SKELETONS_TYPE!r}, got "
                            f"{doc.get('@type')!r}")
        spec = ShardingSpec.member(doc, source)
        props = doc.get("segment_properties")
        if props is not None and directory_name(props) is None:
            raise InfoError(f"{source}: segment_properties must be a directory name, got "
                            f"{props!r}")
        known = ("@type", "transform", "vertex_attributes", "sharding", "segment_properties")
        return cls(_transform(doc.get("transform", IDENTITY), source),
                   _attributes(doc.get("vertex_attributes", []), source), spec, props,
                   {k: v for k, v in doc.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "@type": SKELETONS_TYPE,
            "transform": [int(x) if x.is_integer() else x for x in self.transform],
            "vertex_attributes": [a.to_dict() for a in self.vertex_attributes]}
        if self.sharding is not None:
            out["sharding"] = self.sharding.to_dict()
        if self.segment_properties is not None:
            out["segment_properties"] = self.segment_properties
        return {**self.extra, **out}

    @property
    def matrix(self) -> np.ndarray:
        """The transform as a float64 (3, 4) matrix."""
        return np.array(self.transform, dtype=np.float64).reshape(3, 4)


class Skeletons:
    """The skeletons of one precomputed skeleton directory ``kv``, by uint64 label.

    ``source`` names the directory in errors (default: the store's URL).  Reads are
    ``skels[label]`` (MissingChunkError if absent), :meth:`get` (None if absent) and
    :meth:`get_many`; writes ``skels[label] = skeleton`` and :meth:`put_many` (sharded:
    merged into the existing shards).  Unsharded files that CloudVolume stored
    compressed whole (``LABEL.gz``, ...) are read too.
    """

    def __init__(self, kv: KVStore | str, source: str = "") -> None:
        kv = open_store(kv)
        self.kv = kv
        self.source = source or kv.url
        raw = kv.get(INFO_KEY)
        if raw is None:
            raise InfoError(f"no skeletons at {self.source}: it has no 'info' file")
        name = f"{self.source}/{INFO_KEY}"
        self.info = SkeletonInfo.from_dict(load_json(raw, name), name)
        self._reader = None if self.info.sharding is None else ShardReader(
            kv, self.info.sharding, max_value_size=MAX_SKELETON_BYTES)

    def __repr__(self) -> str:
        return f"Skeletons({self.source!r})"

    @property
    def transform(self) -> np.ndarray:
        """Stored model -> model (nanometre) space, a (3, 4) matrix."""
        return self.info.matrix

    @property
    def vertex_attributes(self) -> tuple[VertexAttribute, ...]:
        return self.info.vertex_attributes

    @property
    def sharding(self) -> ShardingSpec | None:
        return self.info.sharding

    @property
    def segment_properties(self) -> str | None:
        """The info's ``segment_properties`` directory name, if any."""
        return self.info.segment_properties

    def properties(self) -> SegmentProperties | None:
        """The segment properties the info names (None if it names none)."""
        name = self.info.segment_properties
        if name is None:
            return None
        return read_segment_properties(PrefixStore(self.kv, name.strip("/")),
                                       f"{self.source}/{name.strip('/')}")

    @classmethod
    def create(
        cls,
        kv: KVStore | str,
        *,
        vertex_attributes: Sequence[Mapping[str, Any]] | Mapping[str, Any] = DEFAULT_ATTRIBUTES,
        sharding: Mapping[str, Any] | ShardingSpec | None = None,
        transform: Any = None,
        segment_properties: str | None = None,
        overwrite: bool = False,
    ) -> Skeletons:
        """Write the info of a new skeleton directory at ``kv`` and open it.

        ``vertex_attributes``: the info's list of ``{"id", "data_type", "num_components"}``,
        or ``{id: data_type}`` / ``{id: (data_type, num_components)}``.  ``sharding``: a
        sharding spec (dict or ShardingSpec) for sharded storage.  ``transform``: 12 numbers
        or a (3, 4) matrix, stored model -> nanometres (default identity).  With
        ``overwrite`` an existing skeleton directory's info is replaced and its skeletons
        deleted; otherwise an existing info is an AlreadyExistsError.
        """
        kv = open_store(kv)
        if isinstance(vertex_attributes, Mapping):
            vertex_attributes = [_attribute_entry(k, v) for k, v in vertex_attributes.items()]
        doc: dict[str, Any] = {
            "@type": SKELETONS_TYPE,
            "transform": IDENTITY if transform is None else _plain_list(transform),
            "vertex_attributes": plain(list(vertex_attributes)),
        }
        if sharding is not None:
            doc["sharding"] = (sharding.to_dict() if isinstance(sharding, ShardingSpec)
                               else dict(sharding))
        if segment_properties is not None:
            doc["segment_properties"] = segment_properties
        info = SkeletonInfo.from_dict(doc, f"{kv.url}/{INFO_KEY}")
        invert(info.matrix, f"{kv.url}/{INFO_KEY}: the info's transform", InfoError)
        with kv.lock(INFO_KEY):
            if kv.get(INFO_KEY) is not None:
                if not overwrite:
                    raise AlreadyExistsError(f"{kv.url} already holds an info file; pass "
                                             "overwrite=True to replace it")
                kv.delete_many([key for key in kv.list("")
                                if "/" not in key and _label_file(key) is not None])
                delete_shards(kv, shard_files(kv))
            kv.set(INFO_KEY, json.dumps(info.to_dict(), allow_nan=False).encode())
        return cls(kv)

    # -- reading -------------------------------------------------------------------------

    def __getitem__(self, label: int) -> Skeleton:
        key = _label(label)
        found = self.get_many([key])
        if key not in found:
            raise MissingChunkError(f"{self.source} has no skeleton of label {key}")
        return found[key]

    def get(self, label: int, default: Skeleton | None = None) -> Skeleton | None:
        """The skeleton of ``label``, or ``default`` if it has none."""
        key = _label(label)
        return self.get_many([key]).get(key, default)

    def get_many(self, labels: Iterable[int]) -> dict[int, Skeleton]:
        """``{label: skeleton}`` of the labels that have one (absent ones left out)."""
        keys = list(dict.fromkeys(_label(x) for x in labels))
        raw = self._read(keys)
        return {k: self.decode(v, k) for k, v in raw.items()}

    def decode(self, data: bytes | memoryview, label: int) -> Skeleton:
        """The skeleton encoded in ``data`` (the stored value of ``label``)."""
        return decode_skeleton(data, self.info, f"{self.source}: skeleton {label}")

    def __contains__(self, label: object) -> bool:
        key = _label(label)
        if self._reader is not None:
            return self._reader.exists(key) is not None
        return file_copies.exists(self.kv, str(key))

    def labels(self) -> np.ndarray:
        """Every label that has a skeleton, ascending (uint64)."""
        if self._reader is not None:
            return self._reader.all_labels()
        keys = [k for k in self.kv.list("") if "/" not in k]
        found = {n for n in map(_label_file, keys) if n is not None}
        return np.array(sorted(found), dtype=np.uint64)

    def _read(self, keys: list[int]) -> dict[int, bytes | memoryview]:
        if self._reader is not None:
            return dict(self._reader.get_data_many(keys))
        blobs = read_files(self.kv, [str(k) for k in keys],
                           lambda name: f"{self.source}: skeleton {name}", MAX_SKELETON_BYTES)
        return {k: v for k, v in zip(keys, blobs) if v is not None}

    # -- writing -------------------------------------------------------------------------

    def __setitem__(self, label: int, skeleton: Skeleton) -> None:
        self.put_many({label: skeleton})

    def put_many(self, skeletons: Mapping[int, Skeleton]) -> None:
        """Store each skeleton under its label (all are encoded, and so checked, before
        anything is written); sharded: merged into the shards, replacing those labels."""
        data = {}
        for label, skel in skeletons.items():
            key = _label(label)
            data[key] = encode_skeleton(skel, self.info, f"{self.source}: skeleton {key}")
        if self._reader is not None:
            update_shard(self.kv, self._reader.spec, data, reader=self._reader)
            return
        kv = self.kv

        def put(item: tuple[int, bytes]) -> None:
            name = str(item[0])
            kv.set(name, item[1])
            if kv.local:  # a stale compressed copy would be listed and read if NAME went
                delete_copies(kv, name)

        list(io_pool().map(put, data.items()))


# -- encoding ------------------------------------------------------------------------------


def encode_skeleton(skel: Skeleton, info: SkeletonInfo, where: str) -> bytes:
    """The encoded skeleton of ``skel`` (vertices in nanometres, stored through the inverse
    of the info's transform); InvalidArgumentError naming ``where`` if it does not fit
    the info."""
    if not isinstance(skel, Skeleton):
        raise InvalidArgumentError(f"{where}: expected a Skeleton, got {type(skel).__name__} "
                                   "(convert osteoid skeletons with Skeleton.from_osteoid)")
    n, m = len(skel.vertices), len(skel.edges)
    if n > _MAX_COUNT or m > _MAX_COUNT:
        raise InvalidArgumentError(f"{where}: {n} vertices and {m} edges; at most 2**32 - 1")
    if m and int(skel.edges.max()) >= n:
        raise InvalidArgumentError(f"{where}: an edge refers to vertex {int(skel.edges.max())}"
                                   f" but there are {n} vertices")
    declared = {a.id for a in info.vertex_attributes}
    extra = sorted(set(skel.attributes) - declared)
    if extra:
        raise InvalidArgumentError(f"{where}: attributes {extra} are not in the info's "
                                   f"vertex_attributes {sorted(declared)}")
    vertices = skel.vertices
    if info.transform != IDENTITY:
        inverse = invert(info.matrix, f"{where}: the info's transform", InfoError)
        vertices = apply(inverse, vertices).astype(np.float32)
    parts = [_HEADER.pack(n, m), vertices.astype("<f4").tobytes(),
             skel.edges.astype("<u4").tobytes()]
    parts.extend(_attribute_bytes(skel, a, n, where) for a in info.vertex_attributes)
    return b"".join(parts)


def _attribute_bytes(skel: Skeleton, a: VertexAttribute, n: int, where: str) -> bytes:
    if a.id not in skel.attributes:
        raise InvalidArgumentError(f"{where}: attribute {a.id!r} of the info is missing")
    arr = skel.attributes[a.id]
    shape = (n,) if a.num_components == 1 else (n, a.num_components)
    if arr.shape != shape and arr.shape != (n, a.num_components):
        raise InvalidArgumentError(f"{where}: attribute {a.id!r} has shape {arr.shape}, "
                                   f"expected {shape}")
    if arr.dtype.kind not in "biuf":
        raise InvalidArgumentError(f"{where}: attribute {a.id!r} is not numeric ({arr.dtype})")
    out = arr.astype(a.dtype)
    if a.data_type != "float32" and not np.array_equal(out, arr):
        raise InvalidArgumentError(f"{where}: attribute {a.id!r} has values that are not "
                                   f"{a.data_type}")
    return out.tobytes()


def decode_skeleton(data: bytes | memoryview, info: SkeletonInfo, where: str) -> Skeleton:
    """The skeleton encoded in ``data`` (vertices mapped to nanometres with the info's
    transform); ChunkDecodeError naming ``where`` if its sizes or indices are wrong."""
    size = len(data)
    if size < _HEADER.size:
        raise ChunkDecodeError(f"{where}: {size} bytes, fewer than the 8-byte header")
    n, m = _HEADER.unpack_from(data)
    geometry = _HEADER.size + 12 * n + 8 * m
    attr_bytes = [n * a.num_components * a.dtype.itemsize for a in info.vertex_attributes]
    expected = geometry + sum(attr_bytes)
    if size < geometry:
        raise ChunkDecodeError(f"{where}: its counts ({n} vertices, {m} edges) need "
                               f"{geometry} bytes, but it has {size}")
    if size != expected:
        ids = [a.id for a in info.vertex_attributes]
        raise ChunkDecodeError(f"{where}: {size - geometry} bytes after the edges, but the "
                               f"info's vertex attributes {ids} take {expected - geometry}")
    stored = np.frombuffer(data, "<f4", 3 * n, _HEADER.size).reshape(n, 3)
    edges = np.frombuffer(data, "<u4", 2 * m, _HEADER.size + 12 * n).reshape(m, 2)
    if m and int(edges.max()) >= n:
        bad = int(np.argmax((edges >= n).any(axis=1)))
        raise ChunkDecodeError(f"{where}: edge {bad} {edges[bad].tolist()} refers to a "
                               f"vertex past the {n} it has")
    vertices = (stored.astype(np.float32) if info.transform == IDENTITY
                else apply(info.matrix, stored).astype(np.float32))
    attributes = {}
    offset = geometry
    for a, nbytes in zip(info.vertex_attributes, attr_bytes):
        arr = np.frombuffer(data, a.dtype, n * a.num_components, offset)
        arr = arr.astype(a.dtype.newbyteorder("="))
        attributes[a.id] = arr if a.num_components == 1 else arr.reshape(n, a.num_components)
        offset += nbytes
    return Skeleton(vertices, edges.astype(np.uint32), attributes)


# -- info members --------------------------------------------------------------------------


def _transform(value: Any, source: str) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)) or len(value) != 12 or not all(
            map(finite_number, value)):
        raise InfoError(f"{source}: transform must be an array of 12 finite numbers, got "
                        f"{value!r}")
    return tuple(float(x) for x in value)


def _attributes(value: Any, source: str) -> tuple[VertexAttribute, ...]:
    if not isinstance(value, list):
        raise InfoError(f"{source}: vertex_attributes must be an array, got {value!r}")
    out: list[VertexAttribute] = []
    for i, a in enumerate(value):
        where = f"{source}: vertex_attributes[{i}]"
        if not isinstance(a, dict):
            raise InfoError(f"{where} must be a JSON object, got {a!r}")
        aid, dtype, comps = a.get("id"), a.get("data_type"), a.get("num_components")
        if not isinstance(aid, str) or not aid:
            raise InfoError(f"{where}: id must be a non-empty string, got {aid!r}")
        if any(b.id == aid for b in out):
            raise InfoError(f"{where}: id {aid!r} is used twice")
        if dtype not in DATA_TYPES:
            raise InfoError(f"{where} ({aid!r}): data_type must be one of {DATA_TYPES}, got "
                            f"{dtype!r}")
        if isinstance(comps, bool) or not isinstance(comps, int) or comps < 1:
            raise InfoError(f"{where} ({aid!r}): num_components must be a positive integer, "
                            f"got {comps!r}")
        out.append(VertexAttribute(aid, dtype, comps))
    return tuple(out)


def _attribute_entry(name: str, value: Any) -> dict[str, Any]:
    """``{id: data_type}`` or ``{id: (data_type, num_components)}`` as an info entry."""
    dtype, comps = (value, 1) if not isinstance(value, (tuple, list)) else value
    return {"id": name, "data_type": np.dtype(dtype).name if not isinstance(dtype, str)
            else dtype, "num_components": comps}


def _plain_list(transform: Any) -> list[float]:
    arr = np.asarray(transform, dtype=np.float64)
    if arr.shape not in ((12,), (3, 4)):
        raise InfoError(f"transform must be 12 numbers or a (3, 4) matrix, got shape "
                        f"{arr.shape}")
    return arr.reshape(-1).tolist()


def _label(label: object) -> int:
    if isinstance(label, bool) or not isinstance(label, (int, np.integer)):
        raise InvalidArgumentError(f"a skeleton label must be an integer, got {label!r}")
    key = int(label)
    if not 0 <= key < 1 << 64:
        raise InvalidArgumentError(f"skeleton label {key} is outside the uint64 range")
    return key


def _label_file(key: str) -> int | None:
    """The label of an unsharded skeleton file name (``123``, ``123.gz``...), else None."""
    key = without_suffix(key)
    if key.isascii() and key.isdigit() and int(key) < 1 << 64:
        return int(key)
    return None
