"""Precomputed annotation collections (``neuroglancer_annotations_v1``), read and written.

Example::

    w = Annotations.create("file:///data/syn", annotation_type="point",
                           dimensions={"x": [4e-9, "m"], "y": [4e-9, "m"], "z": [40e-9, "m"]},
                           lower_bound=[0, 0, 0], upper_bound=[1000, 1000, 100],
                           properties=[{"id": "score", "type": "float32"}],
                           relationships=["pre", "post"])
    ann = w.write(ids, points, properties={"score": s}, relationships={"pre": pre, "post": post})
    ann.get(17); ann.in_region([0, 0, 0], [100, 100, 10]); ann.by_relationship("pre", 5)

The by-id index, one related-object index per relationship and the spatial index levels are
each sharded (``neuroglancer_uint64_sharded_v1``) or one file per key, as the info says.
Index ``key`` paths may climb out of the collection's directory with ``..`` (read only).
"""

from __future__ import annotations

import json
import math
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from shardvol.errors import AlreadyExistsError, InfoError, InvalidArgumentError
from shardvol.jsondoc import load_json, plain
from shardvol.kvstore import KVStore, PrefixStore, open_store
from shardvol.kvstore.base import io_pool
from shardvol.precomputed.annotation_index import (
    ANNOTATIONS_TYPE,
    GEOMETRY,
    AnnotationInfo,
    IndexSpec,
    PropertySpec,
    SpatialLevel,
    bounds,
    cell_name,
    cell_range,
    decode_multiple,
    decode_single,
    encode_multiple,
    encode_single,
    intersects,
    morton_cells,
    morton_codes,
    record_dtype,
)
from shardvol.precomputed.file_copies import read_files, without_suffix
from shardvol.precomputed.info_file import INFO_KEY
from shardvol.sharding import ShardingSpec, ShardReader, write_shards
from shardvol.sharding.spec import as_keys

DEFAULT_LIMIT = 1000
#: automatic spatial levels stop refining at this many levels or cells a level
MAX_AUTO_LEVELS = 32
MAX_AUTO_CELLS = 1 << 24
#: an annotation meeting more cells than this of the next level is emitted in this one
MAX_SPAN_CELLS = 64
#: a region spanning more cells of a level than this reads the level's stored cells instead
MAX_ENUMERATED_CELLS = 1 << 16


@dataclass
class Annotation:
    """One annotation: geometry (float32: a point, two points, or center and radii),
    property values by id, and related ids (uint64 arrays) by relationship."""

    id: int
    geometry: np.ndarray
    properties: dict[str, Any]
    relationships: dict[str, np.ndarray]


@dataclass
class AnnotationColumns:
    """Annotations as columns: ``ids`` (N,) uint64, ``geometry`` (N, rank or 2 * rank)
    float32, ``properties`` {id: (N,) array, (N, 3|4) uint8 for rgb|rgba} and
    ``relationships`` {id: N uint64 arrays} (empty when read from an index that does not
    carry them: the spatial and related-object indexes)."""

    ids: np.ndarray
    geometry: np.ndarray
    properties: dict[str, np.ndarray]
    relationships: dict[str, list[np.ndarray]]

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, index: Any) -> AnnotationColumns:
        """The annotations at ``index`` (integer array or boolean mask)."""
        rows = np.arange(len(self.ids))[index]
        return AnnotationColumns(
            self.ids[rows], self.geometry[rows], {k: v[rows] for k, v in self.properties.items()},
            {k: [v[i] for i in rows.tolist()] for k, v in self.relationships.items()})


def _view(store: KVStore, key: str, where: str) -> KVStore:
    """The store of an index ``key``, relative to the collection's directory (``..`` climbs
    out of it through the store's URL, never above its root: ``/`` of local files, the
    bucket or host of the other schemes)."""
    inside = posixpath.normpath(key.strip("/"))
    if inside != ".." and not inside.startswith("../"):
        return store if inside == "." else PrefixStore(store, inside)
    scheme, _, path = store.url.rpartition("://")
    local = scheme in ("", "file")
    root, _, rest = ("", "", path) if local else path.partition("/")
    parts = [p for p in rest.split("/") if p not in ("", ".")]
    for segment in key.split("/"):
        if segment == "..":
            if not parts:
                raise InfoError(f"{where}: key {key!r} climbs above the root of {store.url}")
            parts.pop()
        elif segment not in ("", "."):
            parts.append(segment)
    if not parts:
        raise InfoError(f"{where}: key {key!r} climbs to the root of {store.url}")
    target = "/" + "/".join(parts) if local else f"{root}/{'/'.join(parts)}"
    return open_store(f"{scheme}://{target}" if scheme else target)


def _columns(ids: np.ndarray, records: np.ndarray, info: AnnotationInfo,
             related: dict[str, list[np.ndarray]] | None = None) -> AnnotationColumns:
    return AnnotationColumns(
        ids.astype(np.uint64),
        np.array(records[GEOMETRY], np.float32).reshape(len(ids), info.geometry_size),
        {p.id: np.array(records[p.id]) for p in info.properties}, related or {})


class _Uint64Index:
    """A by-id or related-object index: encoded values by uint64 key, sharded or not."""

    def __init__(self, store: KVStore, spec: IndexSpec, where: str) -> None:
        self.where = f"{where} {spec.key}"
        self.store = _view(store, spec.key, where)
        self.reader = None if spec.sharding is None else ShardReader(self.store, spec.sharding)

    def get_many(self, keys: np.ndarray) -> dict[int, bytes | memoryview]:
        if self.reader is not None:
            return dict(self.reader.get_data_many(keys))
        names = [str(k) for k in keys.tolist()]
        blobs = read_files(self.store, names, lambda name: f"{self.where}/{name}")
        return {int(k): v for k, v in zip(names, blobs) if v is not None}


class _SpatialIndex:
    """One spatial index level: encoded annotation lists by grid cell."""

    def __init__(self, store: KVStore, level: SpatialLevel, where: str) -> None:
        self.level = level
        self.where = f"{where} {level.key}"
        self.store = _view(store, level.key, where)
        self.reader = (None if level.sharding is None
                       else ShardReader(self.store, level.sharding))

    def read(self, cells: np.ndarray) -> list[tuple[str, bytes | memoryview]]:
        """(label, value) of each stored cell among ``cells`` (M, rank)."""
        if self.reader is not None:
            codes = morton_codes(cells, self.level.grid_shape)
            found = self.reader.get_data_many(codes)
            return [(f"{self.where} cell {cell_name(c)} (code {k})", found[k])
                    for c, k in zip(cells, codes.tolist()) if k in found]
        names = [cell_name(c) for c in cells]
        blobs = read_files(self.store, names, lambda name: f"{self.where}/{name}")
        return [(f"{self.where}/{n}", v) for n, v in zip(names, blobs) if v is not None]

    def stored_cells(self) -> np.ndarray:
        """Every cell (M, rank) that has a stored value."""
        grid = np.asarray(self.level.grid_shape)
        if self.reader is not None:
            cells = morton_cells(self.reader.all_labels(), self.level.grid_shape)
        else:
            names = {without_suffix(n) for n in self.store.list() if "/" not in n}
            parts = [n.split("_") for n in sorted(names)]
            cells = np.array([[int(v) for v in p] for p in parts
                              if len(p) == len(grid) and all(v.isdigit() for v in p)],
                             np.int64).reshape(-1, len(grid))
        return cells[np.all(cells < grid, axis=1)]


class Annotations:
    """A precomputed annotation collection: open by URL, path or store (reads ``info``)."""

    def __init__(self, url_or_kv: str | KVStore, source: str = "") -> None:
        self.store = open_store(url_or_kv)
        self.source = source or self.store.url
        raw = self.store.get(INFO_KEY)
        if raw is None:
            raise InfoError(f"no annotations at {self.source}: it has no 'info' file")
        where = f"{self.source}/{INFO_KEY}"
        self.info = AnnotationInfo.from_dict(load_json(raw, where), where)
        self.dtype = record_dtype(self.info)
        self._by_id = _Uint64Index(self.store, self.info.by_id, self.source)
        self._related = {r.id: _Uint64Index(self.store, r, self.source)
                         for r in self.info.relationships}
        self._spatial = [_SpatialIndex(self.store, s, self.source) for s in self.info.spatial]

    def __repr__(self) -> str:
        return f"Annotations({self.source!r}, {self.type})"

    type = property(lambda self: self.info.annotation_type,
                    doc="``point``, ``line``, ``axis_aligned_bounding_box`` or ``ellipsoid``")
    rank = property(lambda self: self.info.rank)
    properties = property(lambda self: self.info.properties, doc="the PropertySpecs")
    relationships = property(lambda self: tuple(r.id for r in self.info.relationships))

    @classmethod
    def create(
        cls,
        url_or_kv: str | KVStore,
        *,
        annotation_type: str,
        dimensions: Mapping[str, Sequence[Any]],
        lower_bound: Sequence[float],
        upper_bound: Sequence[float],
        properties: Iterable[PropertySpec | Mapping[str, Any]] = (),
        relationships: Iterable[str] = (),
        by_id_sharding: ShardingSpec | Mapping[str, Any] | None = None,
        relationship_sharding: ShardingSpec | Mapping[str, Any] | None = None,
        spatial: str | Sequence[Mapping[str, Any]] = "auto",
        spatial_limit: int = DEFAULT_LIMIT,
        spatial_sharding: ShardingSpec | Mapping[str, Any] | None = None,
        overwrite: bool = False,
    ) -> AnnotationWriter:
        """A writer of a new collection at ``url_or_kv``.

        ``spatial``: ``"auto"`` (levels as the spec describes, from one cell down to cells
        of about ``spatial_limit`` annotations, each sharded with ``spatial_sharding`` if
        given) or levels coarse to fine, each ``{"chunk_size", "limit"}`` with optional
        ``"grid_shape"`` and ``"sharding"`` (the finest level takes every annotation left).
        Sharding specs: ShardingSpec or its JSON object; ``relationship_sharding`` applies
        to every relationship.
        """
        store = open_store(url_or_kv)
        if store.exists(INFO_KEY) and not overwrite:
            raise AlreadyExistsError(f"{store.url} holds an 'info' already (overwrite=True "
                                     "replaces it)")

        def sharding(s: ShardingSpec | Mapping[str, Any]) -> dict:
            return s.to_dict() if isinstance(s, ShardingSpec) else plain(dict(s))

        rels = list(relationships)
        doc: dict[str, Any] = {
            "@type": ANNOTATIONS_TYPE, "dimensions": plain(dict(dimensions)),
            "lower_bound": plain(list(lower_bound)), "upper_bound": plain(list(upper_bound)),
            "annotation_type": annotation_type,
            "properties": [p.to_dict() if isinstance(p, PropertySpec) else plain(dict(p))
                           for p in properties],
            "relationships": [{"id": r, "key": _relationship_key(r, i)}
                              for i, r in enumerate(rels)],
            "by_id": {"key": "by_id"}, "spatial": [],
        }
        for index, spec in ([doc["by_id"], by_id_sharding],
                            *([r, relationship_sharding] for r in doc["relationships"])):
            if spec is not None:
                index["sharding"] = sharding(spec)
        info = AnnotationInfo.from_dict(doc, "Annotations.create")
        if spatial == "auto":
            levels = None
        elif isinstance(spatial, str):
            raise InvalidArgumentError(f"spatial must be 'auto' or levels, got {spatial!r}")
        else:
            levels = [_explicit_level(info, i, s) for i, s in enumerate(spatial)]
            if not levels:
                raise InvalidArgumentError("spatial needs at least one level")
        span = np.subtract(info.upper_bound, info.lower_bound)
        if levels is None and np.any(span <= 0):
            raise InvalidArgumentError(f"upper_bound {list(info.upper_bound)} must exceed "
                                       f"lower_bound {list(info.lower_bound)}")
        auto_sharding = None if spatial_sharding is None else ShardingSpec.from_dict(
            sharding(spatial_sharding))
        return AnnotationWriter(store, info, levels, int(spatial_limit), auto_sharding,
                                overwrite)

    # -- reading ---------------------------------------------------------------------------

    def get(self, annotation_id: int) -> Annotation | None:
        """The annotation with this id (from the by-id index), or None if there is none."""
        cols = self.get_many([annotation_id])
        if not len(cols):
            return None
        return Annotation(int(cols.ids[0]), cols.geometry[0],
                          {k: v[0] for k, v in cols.properties.items()},
                          {k: v[0] for k, v in cols.relationships.items()})

    def get_many(self, ids: Iterable[int] | np.ndarray) -> AnnotationColumns:
        """The annotations with these ids, with their relationships, in the order asked
        (ids with no annotation are left out)."""
        keys = as_keys(ids)
        found = self._by_id.get_many(keys)
        rows = [k for k in keys.tolist() if k in found]
        records = np.zeros(len(rows), self.dtype)
        related: dict[str, list[np.ndarray]] = {r: [] for r in self.relationships}
        for i, k in enumerate(rows):
            records[i], lists = decode_single(found[k], self.dtype, len(related),
                                              f"{self._by_id.where} id {k}")
            for name, ids_ in zip(related, lists):
                related[name].append(ids_)
        return _columns(np.array(rows, np.uint64), records, self.info, related)

    def by_relationship(self, name: str, segment_id: int) -> AnnotationColumns:
        """The annotations related to ``segment_id`` through relationship ``name``."""
        if name not in self._related:
            raise InvalidArgumentError(f"{self.source} has no relationship {name!r} (it has "
                                       f"{list(self._related)})")
        index = self._related[name]
        key = int(as_keys(segment_id)[0])
        value = index.get_many(np.array([key], np.uint64)).get(key)
        if value is None:
            return _columns(np.zeros(0, np.uint64), np.zeros(0, self.dtype), self.info)
        ids, records = decode_multiple(value, self.dtype, f"{index.where} id {key}")
        return _columns(ids, records, self.info)

    def in_region(self, lower: Sequence[float], upper: Sequence[float]) -> AnnotationColumns:
        """The annotations whose geometry meets the closed box ``[lower, upper]``, from
        every spatial index level, each once, by ascending id."""
        lo, hi = (np.asarray(v, np.float64).reshape(-1) for v in (lower, upper))
        if (lo.shape != (self.rank,) or hi.shape != (self.rank,) or np.any(lo > hi)
                or not (np.isfinite(lo).all() and np.isfinite(hi).all())):
            raise InvalidArgumentError(f"region [{lower}, {upper}] must be two corners of "
                                       f"{self.rank} finite numbers, lower <= upper")
        cells = []
        origin = np.asarray(self.info.lower_bound)
        for index in self._spatial:
            first, last = cell_range(index.level, origin, lo, hi)
            if np.prod(last - first + 1, dtype=np.float64) > MAX_ENUMERATED_CELLS:
                stored = index.stored_cells()
                cells.append(stored[np.all((stored >= first) & (stored <= last), axis=1)])
            else:
                grid = np.indices(tuple(last - first + 1)).reshape(self.rank, -1).T
                cells.append(grid + first)
        found = self._read_spatial(cells)
        keep = intersects(self.type, found.geometry, self.rank, lo, hi)
        return found.take(keep)

    def all(self) -> AnnotationColumns:
        """Every annotation of the spatial index, each once, by ascending id."""
        return self._read_spatial([index.stored_cells() for index in self._spatial])

    def _read_spatial(self, cells: list[np.ndarray]) -> AnnotationColumns:
        values = [v for index, c in zip(self._spatial, cells) for v in index.read(c)]
        parts = [decode_multiple(v, self.dtype, where) for where, v in values]
        ids = np.concatenate([np.zeros(0, np.uint64), *(p[0] for p in parts)])
        records = np.concatenate([np.zeros(0, self.dtype), *(p[1] for p in parts)])
        ids, first = np.unique(ids, return_index=True)
        return _columns(ids, records[first], self.info)


def _relationship_key(name: str, i: int) -> str:
    safe = name.replace("_", "").replace("-", "").isalnum() and name.isascii()
    return f"rel_{name}" if safe else f"rel{i}"


def _explicit_level(info: AnnotationInfo, i: int, doc: Mapping[str, Any]) -> SpatialLevel:
    """A spatial level from ``{"chunk_size", "limit"[, "grid_shape", "sharding"]}``."""
    d = dict(doc)
    if "grid_shape" not in d:
        span = np.subtract(info.upper_bound, info.lower_bound)
        size = np.asarray(d.get("chunk_size"), np.float64)
        d["grid_shape"] = np.maximum(1, np.ceil(span / size)).astype(int).tolist()
    if isinstance(d.get("sharding"), ShardingSpec):
        d["sharding"] = d["sharding"].to_dict()
    level = AnnotationInfo.from_dict(
        {**info.to_dict(), "spatial": [{"key": f"spatial{i}", **plain(d)}]},
        f"spatial[{i}]").spatial[0]
    return level


def _uniform(ids: np.ndarray, salt: int) -> np.ndarray:
    """A pseudo-random number in [0, 1) for each id (splitmix64 of id and ``salt``)."""
    z = ids.astype(np.uint64) + np.full(len(ids), (salt + 1) * 0x9E3779B97F4A7C15 % 2**64,
                                        np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return ((z ^ (z >> np.uint64(31))) >> np.uint64(11)).astype(np.float64) / 2.0**53


def _pairs(level: SpatialLevel, origin: np.ndarray, lo: np.ndarray,
           hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(annotation row, cell) of every cell of ``level`` meeting each box ``[lo, hi]``."""
    first, last = cell_range(level, origin, lo, hi)
    sizes = last - first + 1
    counts = np.prod(sizes, axis=1)
    rows = np.repeat(np.arange(len(lo)), counts)
    local = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    cells = np.empty((len(rows), lo.shape[1]), np.int64)
    for d in reversed(range(lo.shape[1])):
        cells[:, d] = first[rows, d] + local % sizes[rows, d]
        local //= sizes[rows, d]
    return rows, cells


class AnnotationWriter:
    """Writes a new collection from columns in one go (see :meth:`Annotations.create`)."""

    def __init__(self, store: KVStore, info: AnnotationInfo,
                 levels: list[SpatialLevel] | None, limit: int,
                 sharding: ShardingSpec | None, overwrite: bool) -> None:
        if limit < 1:
            raise InvalidArgumentError(f"spatial_limit must be positive, got {limit}")
        self.store, self.info, self.levels = store, info, levels
        self.limit, self.sharding, self.overwrite = limit, sharding, overwrite
        self.dtype = record_dtype(info)

    def write(
        self,
        ids: Sequence[int] | np.ndarray,
        geometry: np.ndarray | Sequence[Sequence[float]],
        properties: Mapping[str, Any] | None = None,
        relationships: Mapping[str, Sequence[Any]] | None = None,
    ) -> Annotations:
        """Write every index and then the info; returns the collection opened.

        ``geometry`` (N, rank) for points, else (N, 2 * rank); ``properties``: a column of
        N values (N x 3|4 for rgb|rgba) for every property; ``relationships``: for each
        relationship, N lists (or arrays) of related ids (left out: none)."""
        if self.store.get(INFO_KEY) is not None and not self.overwrite:
            raise AlreadyExistsError(f"{self.store.url} holds an 'info' already")
        ids_ = as_keys(ids)
        n, info = len(ids_), self.info
        if len(np.unique(ids_)) != n:
            raise InvalidArgumentError("annotation ids must be unique")
        geom = np.asarray(geometry, np.float64)
        if geom.shape != (n, info.geometry_size) or not np.isfinite(geom).all():
            raise InvalidArgumentError(f"geometry must be {n} x {info.geometry_size} finite "
                                       f"numbers, got shape {geom.shape}")
        records = np.zeros(n, self.dtype)
        records[GEOMETRY] = geom
        props = dict(properties or {})
        for p in info.properties:
            records[p.id] = _property_column(p, props.pop(p.id, None), n)
        rels = dict(relationships or {})
        related = [_related_column(r.id, rels.pop(r.id, None), n) for r in info.relationships]
        if props or rels:
            raise InvalidArgumentError(f"unknown properties or relationships {[*props, *rels]}")
        # every value is encoded before the old collection is cleared (nothing is lost to
        # a failure on the way); the info is written last
        # (rows as bytes: indexing a structured array leaves its padding bytes undefined)
        rows = records.view(np.uint8).reshape(n, self.dtype.itemsize)
        puts: list[tuple[IndexSpec | SpatialLevel, dict[Any, bytes]]] = [
            (info.by_id, {k: encode_single(rows[i].tobytes(), [r[i] for r in related])
                          for i, k in enumerate(ids_.tolist())})]
        puts += [(spec, _by_segment(lists, ids_, rows))
                 for spec, lists in zip(info.relationships, related)]
        spatial = self._plan_spatial(ids_, rows, *bounds(info.annotation_type, geom, info.rank))
        self._clear()
        for spec, values in [*puts, *spatial]:
            self._put(spec, values)
        done = replace(info, spatial=tuple(level for level, _ in spatial))
        self.store.set(INFO_KEY, json.dumps(done.to_dict()).encode())
        return Annotations(self.store)

    def _clear(self) -> None:
        """With overwrite: empty the index directories of this and any previous info."""
        keys = [self.info.by_id.key, *(r.key for r in self.info.relationships)]
        raw = self.store.get(INFO_KEY)
        if raw is not None:
            try:
                old = Annotations(self.store)
                keys += [old.info.by_id.key, *(r.key for r in old.info.relationships),
                         *(s.key for s in old.info.spatial)]
            except (InfoError, ValueError):
                pass
            self.store.delete(INFO_KEY)
        keys += [f"spatial{i}" for i in range(len(self.levels or ()))]
        self.store.delete_many([
            name for key in {posixpath.normpath(k.strip("/")) for k in keys}
            if key != "." and not key.startswith("..") for name in self.store.list(key + "/")])

    def _put(self, spec: IndexSpec | SpatialLevel, values: Mapping[Any, bytes]) -> None:
        view = PrefixStore(self.store, spec.key)
        if spec.sharding is not None:
            write_shards(view, spec.sharding, dict(values))
        else:
            list(io_pool().map(lambda kv: view.set(str(kv[0]), kv[1]), values.items()))

    def _next_level(self, i: int, previous: SpatialLevel | None) -> SpatialLevel | None:
        """Level ``i``: the given one, or automatic (None: past the last)."""
        if self.levels is not None:
            return self.levels[i] if i < len(self.levels) else None
        info = self.info
        span = np.subtract(info.upper_bound, info.lower_bound)
        grid = np.ones(info.rank, np.int64)
        if previous is not None:
            grid = np.asarray(previous.grid_shape)
            scales = np.array([s for s, _ in info.dimensions.values()])
            phys = span / grid * scales
            grid = grid * np.where(phys > phys.max() / math.sqrt(2), 2, 1)
            if i >= MAX_AUTO_LEVELS or np.prod(grid, dtype=np.float64) > MAX_AUTO_CELLS:
                return None
        return SpatialLevel(f"spatial{i}", tuple(grid.tolist()),
                            tuple((span / grid).tolist()), self.limit, self.sharding)

    def _plan_spatial(self, ids: np.ndarray, rows: np.ndarray, lo: np.ndarray,
                      hi: np.ndarray) -> list[tuple[SpatialLevel, dict[Any, bytes]]]:
        """Levels as the spec describes: each annotation is emitted, with probability
        limit / (most annotations left in a cell), in every cell of a level it meets, or
        left for the next; the last level takes every annotation left, and a level takes
        those that would meet more than MAX_SPAN_CELLS cells of the next."""
        origin = np.asarray(self.info.lower_bound)
        remaining = np.arange(len(ids))
        written: list[tuple[SpatialLevel, dict[Any, bytes]]] = []
        level = self._next_level(0, None)
        while level is not None:
            following = self._next_level(len(written) + 1, level)
            owner, cells = _pairs(level, origin, lo[remaining], hi[remaining])
            _, counts = np.unique(cells, axis=0, return_counts=True)
            most = int(counts.max(initial=0))
            chance = 1.0 if following is None else min(1.0, level.limit / max(most, 1))
            emit = _uniform(ids[remaining], len(written)) < chance
            if following is not None:  # too big for the next level's cells: emitted here
                first, last = cell_range(following, origin, lo[remaining], hi[remaining])
                emit |= np.prod(last - first + 1, axis=1) > MAX_SPAN_CELLS
            pick = emit[owner]
            members = remaining[owner[pick]]
            order = np.lexsort((_uniform(ids[members], -1), *cells[pick].T[::-1]))
            members, cells = members[order], cells[pick][order]
            starts = np.flatnonzero(np.r_[True, np.any(cells[1:] != cells[:-1], axis=1)])
            groups = np.split(members, starts[1:]) if len(members) else []
            if groups and following is None:
                level = replace(level, limit=max(level.limit, max(map(len, groups))))
            heads = cells[starts] if len(members) else cells[:0]
            keys: list[Any] = (morton_codes(heads, level.grid_shape).tolist()
                               if level.sharding is not None else [cell_name(c) for c in heads])
            written.append((level, {k: encode_multiple(rows[g], ids[g])
                                    for k, g in zip(keys, groups)}))
            remaining = remaining[~emit]
            if not len(remaining) and self.levels is None:
                break
            level = following
        return written


def _property_column(p: PropertySpec, values: Any, n: int) -> np.ndarray:
    if values is None:
        raise InvalidArgumentError(f"property {p.id!r} has no values")
    a = np.asarray(values)
    shape = (n, *p.dtype.shape)
    base = p.dtype.base
    if a.shape != shape:
        raise InvalidArgumentError(f"property {p.id!r} must have shape {shape}, got {a.shape}")
    if base.kind in "iu":
        if a.size and (a.dtype.kind not in "iub" or a.min() < np.iinfo(base).min
                       or a.max() > np.iinfo(base).max):
            raise InvalidArgumentError(f"property {p.id!r} ({p.type}) has values that are not "
                                       f"{base} integers")
    elif a.dtype.kind not in "iuf":
        raise InvalidArgumentError(f"property {p.id!r} must be numbers, got {a.dtype}")
    return a.astype(base)


def _related_column(name: str, lists: Sequence[Any] | None, n: int) -> list[np.ndarray]:
    if lists is None:
        return [np.zeros(0, np.uint64)] * n
    if len(lists) != n:
        raise InvalidArgumentError(f"relationship {name!r} must have {n} id lists, got "
                                   f"{len(lists)}")
    return [as_keys(v) for v in lists]


def _by_segment(lists: list[np.ndarray], ids: np.ndarray, rows: np.ndarray) -> dict[int, bytes]:
    """The related-object index of one relationship: {segment: encoded annotations}."""
    owner = np.repeat(np.arange(len(lists)), [len(v) for v in lists])
    segments = np.concatenate([np.zeros(0, np.uint64), *lists])
    pairs = np.unique(np.stack([segments, owner.astype(np.uint64)], axis=1), axis=0)
    starts = np.flatnonzero(np.r_[True, pairs[1:, 0] != pairs[:-1, 0]])
    out = {}
    for group in np.split(pairs, starts[1:]) if len(pairs) else []:
        members = group[:, 1].astype(np.int64)
        out[int(group[0, 0])] = encode_multiple(rows[members], ids[members])
    return out
