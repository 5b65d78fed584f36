"""Precomputed meshes (a segmentation's ``mesh`` directory), legacy and multi-resolution.

Example::

    meshes = Meshes.create(open_store("memory://m"), multires=True)
    meshes[7] = Mesh(vertices, faces)        # nanometres
    meshes[7].vertices                       # LOD 0, after quantization
    meshes.get(7, lod=1)

*Legacy* meshes (no ``info``, or ``{"@type": "neuroglancer_legacy_mesh"}``): a JSON manifest
``<label>:0`` lists fragment files (``uint32`` vertex count, ``float32`` xyz, ``uint32``
triangles; Draco-encoded fragments are read too); writing stores one fragment
``<label>:0:1`` as CloudVolume does.  Files CloudVolume stored compressed whole
(``NAME.gz``, ...) are read.  The spec gives legacy meshes no sharded form: an info
combining them with ``sharding`` is an InfoError.

*Multi-resolution* meshes (``neuroglancer_multilod_draco``): see
:mod:`shardvol.precomputed.multires_mesh`; ``<label>.index`` + ``<label>``, or sharded by
label with each manifest stored as the key's value and its fragment data just before it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardvol.errors import (
    AlreadyExistsError,
    ByteRangeError,
    ChunkDecodeError,
    InfoError,
    InvalidArgumentError,
    InvalidKeyError,
    MissingChunkError,
    UnsupportedCodecError,
)
from shardvol.jsondoc import load_json
from shardvol.kvstore import KVStore
from shardvol.kvstore.base import io_pool
from shardvol.kvstore.shards import ATTEMPTS, RangeReader, Stale, conflict
from shardvol.precomputed import file_copies
from shardvol.precomputed.file_copies import delete_copies, read_files, without_suffix
from shardvol.precomputed.info_file import INFO_KEY
from shardvol.precomputed.multires_mesh import (
    MULTIRES_TYPE,
    Manifest,
    MultiresInfo,
    data_start,
    decode_fragment,
    encode_mesh,
    fragment_ranges,
    to_model,
)
from shardvol.precomputed.transform import IDENTITY, invert
from shardvol.sharding import ShardingSpec, ShardReader, update_shard
from shardvol.sharding.format import decode_values
from shardvol.sharding.spec import as_keys

LEGACY_TYPE = "neuroglancer_legacy_mesh"
DRACO_MAGIC = b"DRACO"
_LEGACY_MANIFEST = re.compile(r"^(\d+):0$")
_INDEX = re.compile(r"^(\d+)\.index$")


@dataclass(frozen=True, eq=False)
class Mesh:
    """A triangle mesh: ``vertices`` float32 ``(N, 3)`` in nanometres, ``faces`` uint32
    ``(M, 3)`` indexing them, optional per-vertex ``normals`` float32 ``(N, 3)``."""

    vertices: np.ndarray
    faces: np.ndarray
    normals: np.ndarray | None = None

    def __post_init__(self) -> None:
        v = np.ascontiguousarray(self.vertices, dtype=np.float32)
        f = np.asarray(self.faces)
        if f.size and f.dtype.kind not in "iu":
            raise InvalidArgumentError(f"mesh faces must be integers, got dtype {f.dtype}")
        if v.size == 0:
            v = v.reshape(0, 3)
        if f.size == 0:
            f = f.reshape(0, 3)
        if v.ndim != 2 or v.shape[1] != 3 or f.ndim != 2 or f.shape[1] != 3:
            raise InvalidArgumentError(f"mesh vertices and faces must be (N, 3) and (M, 3), got "
                                       f"{v.shape} and {f.shape}")
        if f.size and (int(f.min()) < 0 or int(f.max()) >= len(v)):
            raise InvalidArgumentError(f"mesh face indices must be in [0, {len(v)}), got "
                                       f"[{int(f.min())}, {int(f.max())}]")
        object.__setattr__(self, "vertices", v)
        object.__setattr__(self, "faces", np.ascontiguousarray(f, dtype=np.uint32))
        if self.normals is not None:
            n = np.ascontiguousarray(self.normals, dtype=np.float32)
            if n.shape != v.shape:
                raise InvalidArgumentError(f"mesh normals must be {v.shape}, got {n.shape}")
            object.__setattr__(self, "normals", n)

    @classmethod
    def concatenate(cls, *meshes: Mesh) -> Mesh:
        """One mesh of all the vertices and faces of ``meshes`` (normals if all have them)."""
        if not meshes:
            return cls(np.zeros((0, 3)), np.zeros((0, 3)))
        starts = np.cumsum([0] + [len(m.vertices) for m in meshes[:-1]])
        normals = [m.normals for m in meshes if m.normals is not None]
        return cls(np.concatenate([m.vertices for m in meshes]),
                   np.concatenate([m.faces.astype(np.int64) + s for m, s in zip(meshes, starts)]),
                   np.concatenate(normals) if len(normals) == len(meshes) else None)

    @classmethod
    def from_trimesh(cls, obj: Any) -> Mesh:
        """A mesh from any object with ``vertices`` and ``faces`` arrays (a trimesh.Trimesh)."""
        return cls(np.asarray(obj.vertices), np.asarray(obj.faces))

    def to_trimesh(self) -> Any:
        """This mesh as a ``trimesh.Trimesh`` (vertices and faces as they are; needs the
        trimesh package)."""
        try:
            import trimesh
        except ImportError as e:
            raise UnsupportedCodecError("Mesh.to_trimesh needs the trimesh package: "
                                        "pip install trimesh") from e
        return trimesh.Trimesh(vertices=self.vertices, faces=self.faces,
                               vertex_normals=self.normals, process=False)


def encode_legacy(mesh: Mesh) -> bytes:
    """A legacy fragment file: vertex count, float32 xyz, uint32 triangles (little-endian)."""
    return b"".join([np.uint32(len(mesh.vertices)).astype("<u4").tobytes(),
                     mesh.vertices.astype("<f4").tobytes(), mesh.faces.astype("<u4").tobytes()])


def decode_legacy(data: bytes | memoryview, name: str) -> Mesh:
    """A legacy fragment file (or a Draco one); ChunkDecodeError naming ``name`` if corrupt."""
    buf = memoryview(data).cast("B")
    if bytes(buf[:5]) == DRACO_MAGIC:
        return Mesh(*decode_fragment(buf, name))
    if len(buf) < 4:
        raise ChunkDecodeError(f"{name}: {len(buf)} bytes, too short for a vertex count")
    n = int(np.frombuffer(buf, "<u4", 1)[0])
    rest = len(buf) - 4 - 12 * n
    if rest < 0:
        raise ChunkDecodeError(f"{name}: {n} vertices need {4 + 12 * n} bytes, the fragment "
                               f"has {len(buf)}")
    if rest % 12:
        raise ChunkDecodeError(f"{name}: {rest} bytes of triangles are not a multiple of 12")
    vertices = np.frombuffer(buf, "<f4", 3 * n, 4).reshape(n, 3)
    faces = np.frombuffer(buf, "<u4", rest // 4, 4 + 12 * n).reshape(-1, 3)
    if faces.size and int(faces.max()) >= n:
        raise ChunkDecodeError(f"{name}: face index {int(faces.max())} is past the {n} vertices")
    return Mesh(vertices, faces)


class Meshes:
    """The meshes of one mesh directory ``kv``, by uint64 label (see the module doc)."""

    def __init__(self, kv: KVStore, source: str = "") -> None:
        self.kv = kv
        self.source = source or kv.url
        raw = kv.get(INFO_KEY)
        info = {"@type": LEGACY_TYPE} if raw is None else load_json(raw, f"{self.source}/info")
        if not isinstance(info, dict):
            raise InfoError(f"{self.source}/info: must be a JSON object, got "
                            f"{type(info).__name__}")
        kind = info.get("@type", LEGACY_TYPE)
        if kind not in (LEGACY_TYPE, MULTIRES_TYPE):
            raise InfoError(f"{self.source}/info: @type must be {LEGACY_TYPE!r} or "
                            f"{MULTIRES_TYPE!r}, got {kind!r}")
        props = info.get("segment_properties")
        if props is not None and not isinstance(props, str):
            raise InfoError(f"{self.source}/info: segment_properties must be a string, got "
                            f"{props!r}")
        self.info: dict = info
        self.multires: MultiresInfo | None = None
        self._reader: ShardReader | None = None
        if kind == MULTIRES_TYPE:
            self.multires = MultiresInfo.from_dict(info, f"{self.source}/info")
            if self.multires.sharding is not None:
                self._reader = ShardReader(kv, self.multires.sharding)
        elif info.get("sharding") is not None:
            raise InfoError(f"{self.source}/info: legacy meshes have no sharded format (the "
                            f"spec's sharding is for {MULTIRES_TYPE!r} only)")

    @classmethod
    def create(cls, kv: KVStore, *, multires: bool = False,
               sharding: dict | ShardingSpec | None = None, vertex_quantization_bits: int = 16,
               lod_scale_multiplier: float = 1.0, transform: Sequence[float] | None = None,
               segment_properties: str | None = None, overwrite: bool = False) -> Meshes:
        """Write a mesh directory's ``info`` (AlreadyExistsError if there is one, unless
        ``overwrite``: then the directory's meshes are deleted too, as they would not read
        under the new info) and open it.  ``transform``: 12 numbers, stored model ->
        nanometres."""
        if kv.get(INFO_KEY) is not None and not overwrite:
            raise AlreadyExistsError(f"{kv.url}/info exists (pass overwrite=True to replace it)")
        info: dict
        if multires:
            spec = sharding.to_dict() if isinstance(sharding, ShardingSpec) else sharding
            info = {"@type": MULTIRES_TYPE, "vertex_quantization_bits": vertex_quantization_bits,
                    "transform": list(IDENTITY if transform is None else transform),
                    "lod_scale_multiplier": lod_scale_multiplier}
            if spec is not None:
                info["sharding"] = spec
            try:
                parsed = MultiresInfo.from_dict(info, "mesh info")
            except InfoError as e:
                raise InvalidArgumentError(str(e)) from None
            invert(parsed.matrix, f"mesh transform {list(parsed.transform)}",
                   InvalidArgumentError)
            info = parsed.to_dict()
        else:
            if sharding is not None:
                raise InvalidArgumentError("legacy meshes have no sharded format; pass "
                                           "multires=True to shard meshes")
            info = {"@type": LEGACY_TYPE}
        if segment_properties is not None:
            if not isinstance(segment_properties, str):
                raise InvalidArgumentError("segment_properties must be a directory name, got "
                                           f"{segment_properties!r}")
            info["segment_properties"] = segment_properties
        if overwrite:
            kv.delete_many([k for k in kv.list() if k != INFO_KEY])
        kv.set(INFO_KEY, json.dumps(info, indent=2).encode())
        return cls(kv)

    # -- properties ------------------------------------------------------------------------

    @property
    def kind(self) -> str:
        """``"legacy"`` or ``"multires"``."""
        return "legacy" if self.multires is None else "multires"

    @property
    def sharded(self) -> bool:
        return self._reader is not None

    def __repr__(self) -> str:
        return f"Meshes({self.source!r}, {self.kind}{', sharded' if self.sharded else ''})"

    # -- reading ---------------------------------------------------------------------------

    def __getitem__(self, label: int) -> Mesh:
        return self.get(label)

    def get(self, label: int, lod: int = 0) -> Mesh:
        """The mesh of ``label`` at ``lod`` (legacy: all fragments; multires: all fragments
        of that LOD, in nanometres); MissingChunkError if there is none."""
        key = _label(label)
        return self.get_many([key], lod)[key]

    def get_many(self, labels: Iterable[int], lod: int = 0) -> dict[int, Mesh]:
        """``{label: mesh}`` of several labels, read together (see :meth:`get`)."""
        keys = list(dict.fromkeys(_label(x) for x in labels))
        if self.multires is None:
            if lod != 0:
                raise InvalidArgumentError(f"legacy meshes have only lod 0, got {lod}")
            return self._legacy_many(keys)
        return {k: Mesh.concatenate(*(m for _, m in frags))
                for k, frags in self._multires_many(keys, lod).items()}

    def get_fragments(self, label: int, lod: int = 0) -> list[tuple[tuple[int, int, int], Mesh]]:
        """The non-empty fragments of a multi-resolution mesh's LOD: (octree node position,
        mesh in nanometres), in the manifest's order."""
        key = _label(label)
        if self.multires is None:
            raise InvalidArgumentError(f"{self.source}: legacy meshes have no octree fragments")
        return self._multires_many([key], lod)[key]

    def manifest(self, label: int) -> Manifest:
        """The multi-resolution manifest of ``label``."""
        key = _label(label)
        if self.multires is None:
            raise InvalidArgumentError(f"{self.source}: legacy meshes have no binary manifest")
        return self._locate([key])[key][0]

    def __contains__(self, label: object) -> bool:
        key = _label(label)
        if self._reader is not None:
            return self._reader.exists(key) is not None
        name = f"{key}.index" if self.multires is not None else f"{key}:0"
        return self.kv.exists(name) if self.multires is not None else file_copies.exists(
            self.kv, name)

    def labels(self) -> list[int]:
        """Every label with a mesh, ascending (lists the directory, or every shard)."""
        if self._reader is not None:
            return self._reader.all_labels().tolist()
        pattern = _INDEX if self.multires is not None else _LEGACY_MANIFEST
        out = set()
        for name in self.kv.list():
            plain = name if self.multires is not None else without_suffix(name)
            if m := pattern.match(plain):
                out.add(int(m.group(1)))
        return sorted(out)

    # -- writing ---------------------------------------------------------------------------

    def __setitem__(self, label: int, mesh: Mesh | Sequence[Mesh]) -> None:
        self.put_many({label: mesh})

    def put_many(self, meshes: Mapping[int, Mesh | Sequence[Mesh]], *,
                 chunk_shape: Sequence[float] | None = None,
                 lod_scales: Sequence[float] | None = None) -> None:
        """Store meshes by label: a Mesh, or (multi-resolution) a list of one Mesh per LOD,
        finest first, in nanometres.  ``chunk_shape`` (LOD 0 octree node, stored model
        units) and ``lod_scales``: see :func:`~shardvol.precomputed.multires_mesh.encode_mesh`."""
        lods = {_label(k): [v] if isinstance(v, Mesh) else list(v) for k, v in meshes.items()}
        for k, ms in lods.items():
            if not ms or not all(isinstance(m, Mesh) for m in ms):
                raise InvalidArgumentError(f"mesh of label {k}: expected a Mesh or a list of "
                                           f"Meshes, got {meshes[k]!r}")
        if self.multires is None:
            if any(len(ms) != 1 for ms in lods.values()):
                raise InvalidArgumentError("legacy meshes have one level of detail")
            self._put_legacy({k: ms[0] for k, ms in lods.items()})
            return
        bits, matrix = self.multires.vertex_quantization_bits, self.multires.matrix
        shape = None if chunk_shape is None else np.asarray(chunk_shape, dtype=np.float64)
        encoded = {}
        for k, ms in lods.items():
            scales = None if lod_scales is None else np.asarray(lod_scales, dtype=np.float32)
            if scales is not None and scales.shape != (len(ms),):
                raise InvalidArgumentError(f"label {k}: {len(ms)} LODs but lod_scales "
                                           f"{scales.tolist()}")
            data, manifest = encode_mesh([(m.vertices, m.faces) for m in ms], bits, matrix,
                                         shape, scales)
            encoded[k] = (data, manifest.encode())
        if self._reader is not None:
            self._update_shards(encoded, set())
            return
        for k, (data, manifest_bytes) in encoded.items():
            self.kv.set(str(k), data)  # the data first: a manifest never points at nothing
            self.kv.set(f"{k}.index", manifest_bytes)

    def __delitem__(self, label: int) -> None:
        key = _label(label)
        if key not in self:
            raise MissingChunkError(f"{self.source}: no mesh for label {key}")
        if self._reader is not None:
            self._update_shards({}, {key})
        elif self.multires is not None:
            self.kv.delete(f"{key}.index")
            self.kv.delete(str(key))
        else:
            names = self._legacy_manifests([key], missing_ok=True).get(key) or []
            for name in [f"{key}:0", *_own_fragments(key, names)]:
                self.kv.delete(name)
                delete_copies(self.kv, name)

    # -- legacy ----------------------------------------------------------------------------

    def _read_files(self, keys: Sequence[str]) -> list[bytes | memoryview | None]:
        """Values of ``keys``, or of their whole-file compressed copies (``NAME.gz``...)."""
        return read_files(self.kv, keys, lambda name: f"{self.source}/{name}")

    def _legacy_manifests(self, keys: list[int], missing_ok: bool = False
                          ) -> dict[int, list[str] | None]:
        out: dict[int, list[str] | None] = {}
        for k, raw in zip(keys, self._read_files([f"{k}:0" for k in keys])):
            name = f"{self.source}/{k}:0 (mesh of label {k})"
            if raw is None:
                if not missing_ok:
                    raise MissingChunkError(f"{self.source}: no mesh for label {k} ({k}:0 is "
                                            "missing)")
                out[k] = None
                continue
            doc = load_json(raw, name)
            frags = doc.get("fragments") if isinstance(doc, dict) else None
            if not isinstance(frags, list) or not all(isinstance(f, str) and f for f in frags):
                raise InfoError(f"{name}: must be an object whose 'fragments' is a list of "
                                f"file names, got {doc!r}"[:300])
            out[k] = frags
        return out

    def _legacy_many(self, keys: list[int]) -> dict[int, Mesh]:
        manifests = self._legacy_manifests(keys)
        wanted = [(k, f) for k in keys for f in manifests[k] or []]
        try:
            blobs = self._read_files([f for _, f in wanted])
        except InvalidKeyError as e:  # a fragment name that is no store key
            raise InfoError(f"{self.source}: a mesh manifest of labels {keys} names a bad "
                            f"fragment: {e}") from None
        parts: dict[int, list[Mesh]] = {k: [] for k in keys}
        for (k, f), blob in zip(wanted, blobs):
            name = f"{self.source}/{f} (mesh of label {k})"
            if blob is None:
                raise ChunkDecodeError(f"{name}: listed in {k}:0 but missing")
            parts[k].append(decode_legacy(blob, name))
        return {k: Mesh.concatenate(*ms) for k, ms in parts.items()}

    def _put_legacy(self, meshes: dict[int, Mesh]) -> None:
        old = self._legacy_manifests(list(meshes), missing_ok=True)

        def put(k: int) -> None:  # (the fragment first: a manifest never names a missing one)
            frag = f"{k}:0:1"
            self.kv.set(frag, encode_legacy(meshes[k]))
            self.kv.set(f"{k}:0", json.dumps({"fragments": [frag]}).encode())
            for name in (frag, f"{k}:0"):  # compressed copies would be read instead
                if self.kv.local:
                    delete_copies(self.kv, name)
            for name in set(_own_fragments(k, old[k] or [])) - {frag}:
                self.kv.delete(name)
                delete_copies(self.kv, name)

        list(io_pool().map(put, meshes))

    # -- multi-resolution ------------------------------------------------------------------

    def _locate(self, keys: list[int]) -> dict[int, tuple[Manifest, str, int, Hashable | None]]:
        """(manifest, the file holding its fragment data, where that data starts, the
        file's version: None if unchecked) by label."""
        out: dict[int, tuple[Manifest, str, int, Hashable | None]] = {}
        if self._reader is None:
            for k, raw in zip(keys, self.kv.get_many([f"{k}.index" for k in keys])):
                if raw is None:
                    raise MissingChunkError(f"{self.source}: no mesh for label {k} ({k}.index "
                                            "is missing)")
                out[k] = (Manifest.decode(raw, f"{self.source}/{k}.index (mesh of label {k})"),
                          str(k), 0, None)
            return out
        where = self._reader.locate(keys)
        absent = [k for k in keys if k not in where]
        if absent:
            raise MissingChunkError(f"{self.source}: no mesh for label(s) {absent[:10]}")
        # the manifests read at the versions their shard indexes were read at
        stored = self._read_spans(
            [(where[k][0], where[k][1], where[k][1] + where[k][2]) for k in keys],
            {file: version for file, _, _, version in where.values()})
        for k, raw in zip(keys, stored):
            file, start, _, version = where[k]
            name = f"{self.source}/{file} (mesh of label {k})"
            manifest = Manifest.decode(self._reader.decode_value(raw, name), name)
            out[k] = (manifest, file, data_start(start, manifest, name), version)
        return out

    def _multires_many(self, keys: list[int], lod: int
                       ) -> dict[int, list[tuple[tuple[int, int, int], Mesh]]]:
        """The fragments of ``lod`` of each label: its manifest and fragment data read at
        one version of its shard (read again if the shard is replaced meanwhile)."""
        for _ in range(ATTEMPTS):
            try:
                return self._multires_once(keys, lod)
            except Stale:
                assert self._reader is not None  # (only sharded reads are versioned)
                self._reader.invalidate()
        raise conflict(f"{self.source}: the shards of the meshes of labels {keys[:10]}")

    def _multires_once(self, keys: list[int], lod: int
                       ) -> dict[int, list[tuple[tuple[int, int, int], Mesh]]]:
        assert self.multires is not None
        located = self._locate(keys)
        requests = []
        versions: dict[str, Hashable | None] = {}
        for k, (manifest, file, begin, version) in located.items():
            if not 0 <= lod < manifest.num_lods:
                raise InvalidArgumentError(f"{self.source}: mesh of label {k} has LODs 0 to "
                                           f"{manifest.num_lods - 1}, not {lod}")
            a, b = manifest.lod_range(lod)
            requests.append((file, (begin + a, begin + b)))
            versions[file] = version
        blobs = (self._read_ranges(requests, keys) if self._reader is None else
                 self._read_spans([(f, a, b) for f, (a, b) in requests], versions))
        bits, matrix = self.multires.vertex_quantization_bits, self.multires.matrix
        out = {}
        for k, blob in zip(keys, blobs):
            manifest, file, _, _ = located[k]
            frags = []
            for pos, (a, b) in zip(manifest.positions[lod], fragment_ranges(manifest, lod)):
                if a == b:
                    continue
                name = (f"{self.source}/{file} (mesh of label {k}, lod {lod}, fragment "
                        f"{pos.tolist()})")
                points, faces = decode_fragment(blob[a:b], name)
                frags.append((tuple(pos.tolist()),
                              Mesh(to_model(points, manifest, lod, pos, bits, matrix), faces)))
            out[k] = frags
        return out

    def _read_spans(self, spans: list[tuple[str, int, int]],
                    versions: dict[str, Hashable | None]) -> list[memoryview]:
        """The ``(file, start, stop)`` spans of shard files, coalesced, each file read at
        ``versions[file]`` (else Stale); a span past a file's end is a ShardFormatError."""
        assert self._reader is not None
        reader = RangeReader(self.kv, self._reader.coalesce_gap, self._reader.max_read)
        out = [memoryview(b"")] * len(spans)
        asked = [i for i, (_, a, b) in enumerate(spans) if b > a]
        for j, blob in reader.read([spans[i] for i in asked], versions):
            out[asked[j]] = memoryview(blob).cast("B")
        return out

    def _read_ranges(self, requests: list[tuple[str, tuple[int, int]]],
                     keys: list[int]) -> list[memoryview]:
        """The byte ranges of unsharded files (empty ones without a request);
        ChunkDecodeError naming the label whose fragment data is missing or shorter than its
        manifest says."""
        asked = [i for i, (_, (a, b)) in enumerate(requests) if b > a]
        try:
            got = list(self.kv.get_many([requests[i] for i in asked]))
        except ByteRangeError:
            got = []
            for i in asked:
                try:
                    got.append(self.kv.get(*requests[i]))
                except ByteRangeError as e:
                    raise ChunkDecodeError(f"{self.source}: fragment data of label {keys[i]} "
                                           f"is shorter than its manifest says ({e})") from None
        out = [memoryview(b"")] * len(requests)
        for i, blob in zip(asked, got):
            if blob is None:
                raise ChunkDecodeError(f"{self.source}/{requests[i][0]}: fragment data of label "
                                       f"{keys[i]} is missing")
            out[i] = memoryview(blob).cast("B")
        return out

    def _update_shards(self, puts: dict[int, tuple[bytes, bytes]], gone: set[int]) -> None:
        """Read-modify-write of the shards holding ``puts`` (label: (fragment data, manifest))
        and ``gone``, keeping the other labels' fragment data."""
        assert self._reader is not None
        spec = self._reader.spec

        def fragment_start(label: int, stored: memoryview, start: int, fn: str) -> int:
            name = f"{self.source}/{fn} (mesh of label {label})"
            (raw,) = decode_values(spec, [stored], functools.partial(_same, name))
            return data_start(start, Manifest.decode(raw, name), name)

        update_shard(self.kv, spec, {k: manifest for k, (_, manifest) in puts.items()}, gone,
                     self._reader, prefixes={k: data for k, (data, _) in puts.items()},
                     prefix_start=fragment_start)


def _same(name: str, _: int) -> str:
    return name


def _own_fragments(label: int, names: list[str]) -> list[str]:
    """The fragment files a legacy manifest of ``label`` names that are the label's own
    (``{label}:...``, in any directory): the only ones replacing or deleting it removes."""
    return [n for n in names if n.rsplit("/", 1)[-1].startswith(f"{label}:")]


def _label(label: object) -> int:
    return int(as_keys(label)[0])
