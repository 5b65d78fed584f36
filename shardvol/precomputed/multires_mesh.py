"""The ``neuroglancer_multilod_draco`` multi-resolution mesh format, as bytes (no I/O).

A segment's meshes are an octree per level of detail (LOD): its *manifest* lists, per LOD,
the octree nodes (fragments) in Z-curve order and the byte size of each Draco-encoded
fragment; the *fragment data* is those fragments concatenated, LOD 0 first.  A fragment's
vertex positions are integers in ``[0, 2**vertex_quantization_bits)`` relative to its
node's box (Draco's own quantization is left out: its step is 1 and its origin 0).

Writing splits each LOD's mesh on a grid: LOD ``L``'s nodes are ``chunk_shape * 2**L``
boxes, and for ``L > 0`` triangles are also cut at the ``2x2x2`` sub-grid of each node, as
Neuroglancer requires.  Parents of every node of LOD ``L - 1`` are listed at LOD ``L``
(empty where that LOD has no triangles there), so the octree is connected.
"""

from __future__ import annotations

import importlib
import struct
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from shardvol._ext.morton import compressed_morton_code
from shardvol.errors import (
    ChunkDecodeError,
    InfoError,
    InvalidArgumentError,
    UnsupportedCodecError,
)
from shardvol.jsondoc import finite_number
from shardvol.precomputed.transform import apply, invert
from shardvol.sharding import ShardingSpec

MULTIRES_TYPE = "neuroglancer_multilod_draco"
#: Fragments along an axis at LOD 0 a write may cut a mesh into (each grid plane is one
#: pass over the triangles).
MAX_NODES_PER_AXIS = 4096
#: Levels of detail a manifest may have (LOD k's nodes are 2**k chunks wide: beyond this
#: their size overflows float32).
MAX_LODS = 64
_F32 = np.dtype("<f4")
_U32 = np.dtype("<u4")

Arrays = tuple[np.ndarray, np.ndarray]  # (vertices (N, 3) float, faces (M, 3) uint32)


# -- info ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MultiresInfo:
    """The members of a multi-resolution mesh ``info`` that reading and writing use."""

    vertex_quantization_bits: int
    transform: tuple[float, ...]  # 12 numbers: a row-major 3x4 stored model -> model matrix
    lod_scale_multiplier: float
    sharding: ShardingSpec | None

    @classmethod
    def from_dict(cls, info: dict, source: str) -> MultiresInfo:
        """Parse and check an info object; InfoError naming ``source`` and the member."""
        bits = info.get("vertex_quantization_bits")
        if bits not in (10, 16) or isinstance(bits, bool):
            raise InfoError(f"{source}: vertex_quantization_bits must be 10 or 16, got {bits!r}")
        transform = info.get("transform")
        if (not isinstance(transform, list) or len(transform) != 12
                or not all(finite_number(x) for x in transform)):
            raise InfoError(f"{source}: transform must be a list of 12 finite numbers, got "
                            f"{transform!r}")
        multiplier: Any = info.get("lod_scale_multiplier")
        if not finite_number(multiplier):
            raise InfoError(f"{source}: lod_scale_multiplier must be a finite number, got "
                            f"{multiplier!r}")
        spec = ShardingSpec.member(info, source)
        return cls(int(bits), tuple(float(x) for x in transform), float(multiplier), spec)

    def to_dict(self) -> dict:
        out: dict = {"@type": MULTIRES_TYPE,
                     "vertex_quantization_bits": self.vertex_quantization_bits,
                     "transform": list(self.transform),
                     "lod_scale_multiplier": self.lod_scale_multiplier}
        if self.sharding is not None:
            out["sharding"] = self.sharding.to_dict()
        return out

    @property
    def matrix(self) -> np.ndarray:
        """The transform as a (3, 4) float64 matrix."""
        return np.array(self.transform, dtype=np.float64).reshape(3, 4)




# -- manifest --------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Manifest:
    """A segment's ``<segment-id>.index`` manifest (stored model coordinates)."""

    chunk_shape: np.ndarray  # (3,) float32
    grid_origin: np.ndarray  # (3,) float32
    lod_scales: np.ndarray  # (num_lods,) float32
    vertex_offsets: np.ndarray  # (num_lods, 3) float32
    positions: list[np.ndarray]  # per LOD: (n, 3) uint32 node positions, Z-curve order
    sizes: list[np.ndarray]  # per LOD: (n,) uint32 bytes of each fragment

    @property
    def num_lods(self) -> int:
        return len(self.lod_scales)

    @property
    def data_size(self) -> int:
        """Bytes of the whole fragment data."""
        return sum(int(s.sum(dtype=np.uint64)) for s in self.sizes)

    def lod_range(self, lod: int) -> tuple[int, int]:
        """``[start, stop)`` of LOD ``lod``'s fragments in the fragment data."""
        start = sum(int(s.sum(dtype=np.uint64)) for s in self.sizes[:lod])
        return start, start + int(self.sizes[lod].sum(dtype=np.uint64))

    def encode(self) -> bytes:
        parts = [self.chunk_shape.astype(_F32).tobytes(), self.grid_origin.astype(_F32).tobytes(),
                 struct.pack("<I", self.num_lods), self.lod_scales.astype(_F32).tobytes(),
                 self.vertex_offsets.astype(_F32).tobytes(),
                 np.array([len(p) for p in self.positions], dtype=_U32).tobytes()]
        for pos, size in zip(self.positions, self.sizes):
            parts += [pos.T.astype(_U32).tobytes(), size.astype(_U32).tobytes()]
        return b"".join(parts)

    @classmethod
    def decode(cls, data: bytes | memoryview, name: str) -> Manifest:
        """Parse a manifest; ChunkDecodeError naming ``name`` if its sizes do not add up."""
        buf = memoryview(data).cast("B")
        if len(buf) < 28:
            raise ChunkDecodeError(f"{name}: manifest of {len(buf)} bytes is shorter than its "
                                   "28-byte header")
        (num_lods,) = struct.unpack_from("<I", buf, 24)
        if not 1 <= num_lods <= MAX_LODS:
            raise ChunkDecodeError(f"{name}: manifest has {num_lods} LODs, not 1 to {MAX_LODS}")
        header = 28 + 20 * num_lods
        if len(buf) < header:
            raise ChunkDecodeError(f"{name}: manifest of {len(buf)} bytes is too short for "
                                   f"{num_lods} LODs ({header} bytes of header)")
        head = np.frombuffer(buf, _F32, 6)
        scales = np.frombuffer(buf, _F32, num_lods, 28)
        offsets = np.frombuffer(buf, _F32, 3 * num_lods, 28 + 4 * num_lods)
        counts = np.frombuffer(buf, _U32, num_lods, 28 + 16 * num_lods).astype(np.int64)
        expected = header + 16 * int(counts.sum())
        if len(buf) != expected:
            raise ChunkDecodeError(
                f"{name}: manifest has {len(buf)} bytes, but {num_lods} LODs of "
                f"{counts.tolist()} fragments need {expected}")
        positions, sizes, offset = [], [], header
        for n in counts.tolist():
            positions.append(np.frombuffer(buf, _U32, 3 * n, offset).reshape(3, n).T)
            sizes.append(np.frombuffer(buf, _U32, n, offset + 12 * n))
            offset += 16 * n
        return cls(head[0:3], head[3:6], scales, offsets.reshape(num_lods, 3), positions, sizes)


# -- reading ---------------------------------------------------------------------------------


def decode_fragment(data: bytes | memoryview, name: str) -> Arrays:
    """A Draco fragment's (quantized float32 positions, uint32 faces); ChunkDecodeError
    naming ``name`` if it is not a valid Draco mesh."""
    draco = _dracopy()
    try:
        mesh = draco.decode(bytes(data))
        points = np.asarray(mesh.points, dtype=np.float32).reshape(-1, 3)
        faces = np.asarray(getattr(mesh, "faces", None), dtype=np.uint32).reshape(-1, 3)
    except Exception as e:  # DracoPy raises ValueError and its own exception types
        raise ChunkDecodeError(f"{name}: not a valid Draco mesh ({e})") from None
    if faces.size and int(faces.max()) >= len(points):
        raise ChunkDecodeError(f"{name}: face index {int(faces.max())} is past the "
                               f"{len(points)} vertices")
    return points, faces


def _dracopy() -> Any:
    """The DracoPy module (Draco mesh fragments); UnsupportedCodecError if not installed."""
    try:
        return importlib.import_module("DracoPy")
    except ImportError:
        raise UnsupportedCodecError("Draco mesh fragments need the DracoPy package "
                                    "(pip install DracoPy)") from None


def to_model(points: np.ndarray, manifest: Manifest, lod: int, position: np.ndarray,
             bits: int, matrix: np.ndarray) -> np.ndarray:
    """Quantized fragment positions to model coordinates (float64), as the spec defines."""
    scale = manifest.chunk_shape * np.float32(2**lod)
    local = points / np.float32(2**bits - 1)
    stored = (manifest.grid_origin + manifest.vertex_offsets[lod]) + scale * (
        position.astype(np.float64) + local)
    return stored if np.array_equal(matrix, np.eye(3, 4)) else apply(matrix, stored)


def fragment_ranges(manifest: Manifest, lod: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each fragment of ``lod`` relative to the LOD's first byte."""
    ends = np.cumsum(manifest.sizes[lod], dtype=np.int64).tolist()
    return list(pairwise([0, *ends]))


# -- writing ---------------------------------------------------------------------------------


def encode_mesh(lods: list[Arrays], bits: int, matrix: np.ndarray,
                chunk_shape: np.ndarray | None = None,
                lod_scales: np.ndarray | None = None) -> tuple[bytes, Manifest]:
    """(fragment data, manifest) of per-LOD meshes in model coordinates.

    ``chunk_shape``: LOD 0's node size in stored model units (default: the bounding box of
    all LODs divided by ``2**(num_lods - 1)``, so the coarsest LOD is one node).
    ``lod_scales``: default ``2**lod``.
    """
    draco = _dracopy()
    inverse = invert(matrix, f"mesh transform {matrix.ravel().tolist()}", InvalidArgumentError)
    if not all(np.isfinite(v).all() for v, _ in lods):
        raise InvalidArgumentError("mesh vertices must be finite numbers")
    stored = [(apply(inverse, v), f) for v, f in lods]
    origin, chunk = _grid(stored, chunk_shape)
    extent = np.max([v[f.ravel()].max(axis=0) for v, f in stored if len(f)], axis=0) - origin
    if (np.ceil(extent / chunk.astype(np.float64)) > MAX_NODES_PER_AXIS).any():
        raise InvalidArgumentError(
            f"chunk_shape {chunk.tolist()} cuts the mesh into more than {MAX_NODES_PER_AXIS} "
            "fragments along an axis at LOD 0")
    n = len(stored)
    scales = (np.float32(2) ** np.arange(n, dtype=np.float32) if lod_scales is None
              else np.asarray(lod_scales, dtype=np.float32).reshape(n))
    qmax = 2**bits - 1
    positions: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    blobs: list[bytes] = []
    for lod, (vertices, faces) in enumerate(stored):
        size = chunk.astype(np.float64) * 2**lod
        tris = _slice_on_grid(vertices[faces.astype(np.int64)], origin,
                              size if lod == 0 else size / 2)
        cells = np.floor((tris.mean(axis=1) - origin) / size).astype(np.int64)
        occupied, which = _unique_rows(np.clip(cells, 0, None))
        by_cell = np.argsort(which.ravel(), kind="stable")
        cuts = np.searchsorted(which.ravel()[by_cell], np.arange(len(occupied) + 1))
        groups = {tuple(c): tris[by_cell[a:b]]
                  for c, (a, b) in zip(occupied.tolist(), pairwise(cuts.tolist()))}
        parents = positions[-1] // 2 if positions else np.zeros((0, 3), np.int64)
        nodes = _unique_rows(np.concatenate([occupied, parents]).astype(np.int64))[0]
        nodes = nodes[np.argsort(compressed_morton_code(nodes, (nodes.max(axis=0) + 1).tolist())
                                 if len(nodes) else [], kind="stable")]
        encoded = []
        for node in nodes:
            mine = groups.get(tuple(node.tolist()))
            if mine is None:
                encoded.append(b"")
                continue
            q = np.rint(((mine.reshape(-1, 3) - origin) / size - node) * qmax)
            ints, inv = _unique_rows(np.clip(q, 0, qmax).astype(np.int64))
            verts = ints.astype(np.float64)
            tri_idx = inv.reshape(-1, 3)
            keep = ((tri_idx[:, 0] != tri_idx[:, 1]) & (tri_idx[:, 1] != tri_idx[:, 2])
                    & (tri_idx[:, 0] != tri_idx[:, 2]))
            encoded.append(bytes(draco.encode(
                verts, tri_idx[keep].astype(np.uint32), quantization_bits=bits,
                quantization_range=qmax, quantization_origin=[0.0, 0.0, 0.0])))
        positions.append(nodes)
        sizes.append(np.array([len(b) for b in encoded], dtype=np.uint32))
        blobs += encoded
    manifest = Manifest(chunk, origin.astype(np.float32), scales,
                        np.zeros((n, 3), np.float32),
                        [p.astype(np.uint32) for p in positions], sizes)
    return b"".join(blobs), manifest


def _unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct rows, sorted, and each row's index in them) of an (N, 3) array of
    integers in [0, 2**21): ``np.unique(rows, axis=0, return_inverse=True)``, on packed
    keys (several times faster than on rows)."""
    if len(rows) and (rows.min() < 0 or rows.max() >= 1 << 21):
        raise InvalidArgumentError("mesh grid positions must be below 2**21")
    keys = (rows[:, 0] << 42) | (rows[:, 1] << 21) | rows[:, 2]
    unique, inverse = np.unique(keys, return_inverse=True)
    mask = (1 << 21) - 1
    return np.stack([unique >> 42, (unique >> 21) & mask, unique & mask], 1), inverse.ravel()


def _grid(stored: list[Arrays], chunk_shape: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(grid origin exactly representable in float32, as float64; chunk shape float32)."""
    used = [v[f.ravel().astype(np.int64)] for v, f in stored if len(f)]
    if not used:
        raise InvalidArgumentError("a multi-resolution mesh needs at least one triangle")
    everything = np.concatenate(used)
    lo, hi = everything.min(axis=0), everything.max(axis=0)
    origin = lo.astype(np.float32)
    origin = np.where(origin > lo, np.nextafter(origin, np.float32(-np.inf)), origin)
    if chunk_shape is not None:
        chunk = np.asarray(chunk_shape, dtype=np.float32).reshape(3)
        if not (np.isfinite(chunk).all() and (chunk > 0).all()):
            raise InvalidArgumentError(f"chunk_shape must be 3 positive numbers, got {chunk}")
        return origin.astype(np.float64), chunk
    top = 2 ** (len(stored) - 1)
    extent = np.maximum(hi - origin.astype(np.float64), 1e-3)
    chunk = (extent / top).astype(np.float32)
    while (origin + chunk.astype(np.float64) * top < hi).any():
        chunk = np.where(origin + chunk.astype(np.float64) * top < hi,
                         np.nextafter(chunk, np.float32(np.inf)), chunk)
    return origin.astype(np.float64), chunk


def _slice_on_grid(tris: np.ndarray, origin: np.ndarray, spacing: np.ndarray) -> np.ndarray:
    """Triangles ``(T, 3, 3)`` cut along the planes ``origin + k * spacing`` of every axis,
    so that none crosses one (each lies in one closed grid cell); orientation is kept."""
    for axis in range(3):
        rel = (tris[:, :, axis] - origin[axis]) / spacing[axis]
        first = int(np.floor(rel.min())) + 1 if len(tris) else 0
        last = int(np.ceil(rel.max())) - 1 if len(tris) else -1
        for k in range(first, last + 1):
            plane = origin[axis] + k * spacing[axis]
            d = tris[:, :, axis] - plane
            crossing = (d.min(axis=1) < 0) & (d.max(axis=1) > 0)
            if crossing.any():
                tris = np.concatenate([tris[~crossing],
                                       _split(tris[crossing], axis, plane)])
    return tris


def _split(tris: np.ndarray, axis: int, plane: float) -> np.ndarray:
    """Triangles that cross ``plane`` (on ``axis``) cut into pieces on either side of it."""
    sign = np.sign(tris[:, :, axis] - plane).astype(np.int64)
    on_plane = sign == 0
    # the lone vertex: on the plane (one vertex) or alone on its side (none on the plane)
    alone = np.where(on_plane.any(axis=1, keepdims=True), on_plane,
                     sign != np.roll(sign, 1, axis=1))
    alone &= np.where(on_plane.any(axis=1, keepdims=True), True,
                      sign != np.roll(sign, -1, axis=1))
    first = np.argmax(alone, axis=1)
    order = (first[:, None] + np.arange(3)) % 3
    t = np.take_along_axis(tris, order[:, :, None], axis=1)
    a, b, c = t[:, 0], t[:, 1], t[:, 2]
    touch = on_plane.any(axis=1)
    out = []
    if touch.any():  # a on the plane: cut edge bc
        p = _cut(b[touch], c[touch], axis, plane)
        out += [np.stack([a[touch], b[touch], p], axis=1),
                np.stack([a[touch], p, c[touch]], axis=1)]
    lone = ~touch
    if lone.any():  # a alone on its side: cut edges ab and ac
        aa, bb, cc = a[lone], b[lone], c[lone]
        pab, pac = _cut(aa, bb, axis, plane), _cut(aa, cc, axis, plane)
        out += [np.stack([aa, pab, pac], axis=1), np.stack([pab, bb, cc], axis=1),
                np.stack([pab, cc, pac], axis=1)]
    return np.concatenate(out)


def _cut(p: np.ndarray, q: np.ndarray, axis: int, plane: float) -> np.ndarray:
    """Where segments ``p``-``q`` (on opposite sides) meet the plane; the same point whichever
    end comes first, so that triangles sharing an edge share the cut."""
    swap = (p[:, axis] > q[:, axis])[:, None]
    lo, hi = np.where(swap, q, p), np.where(swap, p, q)
    t = (plane - lo[:, axis]) / (hi[:, axis] - lo[:, axis])
    out = lo + (hi - lo) * t[:, None]
    out[:, axis] = plane
    return out


# -- sharded storage -------------------------------------------------------------------------


def data_start(start: int, manifest: Manifest, name: str) -> int:
    """Where the fragment data of a sharded manifest stored at ``start`` of its shard file
    begins (just before it); ChunkDecodeError naming ``name`` if that is before the file."""
    begin = start - manifest.data_size
    if begin < 0:
        raise ChunkDecodeError(f"{name}: manifest lists {manifest.data_size} bytes of fragments "
                               f"but is stored {start} bytes into its shard file")
    return begin
