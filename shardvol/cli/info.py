"""``shardvol info URL``: what a volume is and what is stored of it."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from shardvol.cli.common import command, human_bytes
from shardvol.errors import InfoError, StoreError
from shardvol.formats import split_format
from shardvol.jsondoc import load_json
from shardvol.kvstore import KVStore, PrefixStore, open_store, url_scheme
from shardvol.kvstore.job_record import job_status
from shardvol.precomputed.annotation_index import ANNOTATIONS_TYPE
from shardvol.precomputed.annotations import Annotations
from shardvol.precomputed.codecs import CODECS
from shardvol.precomputed.info import VolumeInfo
from shardvol.precomputed.info_file import INFO_KEY, follow, read_info
from shardvol.precomputed.meshes import Meshes
from shardvol.precomputed.objects import OBJECTS, object_store
from shardvol.precomputed.segment_properties import read_segment_properties
from shardvol.precomputed.skeletons import Skeletons
from shardvol.sharding import ShardingSpec, shard_shape
from shardvol.zarr3 import ZARR_JSON, ArrayMetadata, OmeZarrImage
from shardvol.zarr3.ome import is_ome_group

SHARD_SUFFIX = ".shard"
UNLISTABLE = ("http", "https")  # plain HTTP servers cannot list a directory


def register(subparsers: Any) -> None:
    p = command(subparsers, "info", run, help="describe a volume: format, scales, sharding, files",
                description=__doc__)
    p.add_argument("url", help="volume path or URL (file, http(s), gs, s3, memory)")
    p.add_argument("--json", action="store_true", help="print the description as JSON")
    p.add_argument("--no-count", dest="count", action="store_false",
                   help="do not list the stored files (listing can be slow on big volumes)")


def run(args: argparse.Namespace) -> int:
    desc = describe(args.url, count=args.count)
    print(json.dumps(desc, indent=2) if args.json else render(desc))
    return 0


# ------------------------------------------------------------------ describe
def describe(url: str, count: bool = True) -> dict[str, Any]:
    """A JSON-able description of the precomputed volume, Zarr v3 array or OME-Zarr image
    at ``url``."""
    fmt, rest = split_format(url)  # (a precomputed:// or zarr3:// prefix names the format)
    kv = open_store(rest)
    info = kv.get(INFO_KEY) if fmt in (None, "precomputed") else None
    if info is not None and _is_annotations(info, kv.url):
        return _describe_annotations(kv, count)
    if info is not None:
        target = follow(kv).kv  # (an info file that redirects stands for another volume)
        desc = _with_job(target, _describe_precomputed(target, count))
        if target.url != kv.url:
            desc["redirected_from"] = kv.url
        return desc
    raw = kv.get(ZARR_JSON) if fmt in (None, "zarr3") else None
    if raw is not None:
        return _with_job(kv, _describe_zarr3(kv, raw, count))
    wanted = {None: "neither an 'info' nor a 'zarr.json' file", "precomputed": "no 'info' file",
              "zarr3": "no 'zarr.json' file"}[fmt]
    raise InfoError(f"no volume at {kv.url}: {wanted}")


def _is_annotations(info: bytes | memoryview, url: str) -> bool:
    """Whether the ``info`` at ``url`` is an annotation collection's."""
    doc = load_json(info, f"{url}/{INFO_KEY}")
    return isinstance(doc, dict) and doc.get("@type") == ANNOTATIONS_TYPE


def _describe_annotations(kv: KVStore, count: bool) -> dict[str, Any]:
    notes = Annotations(kv)
    desc: dict[str, Any] = {
        "url": kv.url, "format": ANNOTATIONS_TYPE, "annotation_type": notes.type,
        "rank": notes.rank, "properties": [p.id for p in notes.properties],
        "relationships": list(notes.relationships),
        "spatial_levels": len(notes.info.spatial),
    }
    if count:
        desc["annotations"] = len(notes.all())
    return desc


def _with_job(kv: KVStore, desc: dict[str, Any]) -> dict[str, Any]:
    """``desc`` with the unfinished job writing there, if any (``incomplete``)."""
    status = job_status(kv)
    if status is not None:
        r = status.record
        desc["incomplete"] = {"summary": str(status), "job": r.kind, "done": status.done,
                              "tasks": r.tasks, "started": r.started, "host": r.host,
                              "targets": list(r.targets) or None}
    return desc


def _count_files(kv: KVStore) -> dict[str, int] | None:
    """Number and total size of the files below ``kv`` (None if the store cannot list)."""
    if url_scheme(kv.url) in UNLISTABLE:
        return None
    try:
        keys = kv.list()
        sizes = [kv.size(k) or 0 for k in keys]
    except (StoreError, OSError, NotImplementedError):
        return None
    return {"count": len(keys), "bytes": sum(sizes),
            "shards": sum(k.endswith(SHARD_SUFFIX) for k in keys)}


def _describe_precomputed(kv: KVStore, count: bool) -> dict[str, Any]:
    meta = read_info(kv)
    scales = []
    for scale in meta.scales:
        grid = scale.grid_size
        d: dict[str, Any] = {
            "key": scale.key,
            "size": list(scale.size),
            "voxel_offset": list(scale.voxel_offset),
            "resolution": list(scale.resolution),
            "chunk_size": list(scale.chunk_size),
            "grid_size": list(grid),
            "chunks": math.prod(grid),
            "encoding": scale.encoding,
        }
        if scale.compressed_segmentation_block_size is not None:
            d["compressed_segmentation_block_size"] = list(scale.compressed_segmentation_block_size)
        for name in CODECS[scale.encoding].options:
            if name in scale.extra:
                d[name] = scale.extra[name]
        d["sharding"] = scale.sharding
        if scale.sharding is not None:
            shape = shard_shape(ShardingSpec.from_dict(scale.sharding), grid, scale.chunk_size)
            d["shard_shape"] = list(shape) if shape else None
            if shape:
                d["shards"] = math.prod(-(-s // n) for s, n in zip(scale.size, shape))
        if count:
            d["stored"] = _count_files(PrefixStore(kv, scale.key.strip("/")))
        scales.append(d)
    desc = {
        "url": kv.url,
        "format": "neuroglancer_precomputed",
        "type": meta.type,
        "data_type": meta.data_type,
        "num_channels": meta.num_channels,
        "scales": scales,
    }
    for key in OBJECTS:
        if key in meta.extra:
            desc[key] = _describe_object(kv, meta, key, count)
    return desc


def _describe_object(kv: KVStore, meta: VolumeInfo, key: str, count: bool) -> dict[str, Any]:
    """The meshes, skeletons or segment properties the info's ``key`` names."""
    d: dict[str, Any] = {"directory": meta.extra[key]}
    try:
        store = object_store(kv, meta, key)
        if key == "segment_properties":
            props = read_segment_properties(store)
            d["segments"] = len(props.ids)
            d["properties"] = [p["id"] for p in props.properties]
            return d
        objects: Meshes | Skeletons
        if key == "mesh":
            objects = Meshes(store)
            d["kind"] = objects.kind
        else:
            objects = Skeletons(store)
            d["vertex_attributes"] = [a.id for a in objects.vertex_attributes]
        d["sharded"] = objects.sharded if isinstance(objects, Meshes) else (
            objects.sharding is not None)
        if count and url_scheme(kv.url) not in UNLISTABLE:
            d["labels"] = len(objects.labels())
    except (InfoError, StoreError) as e:
        d["error"] = str(e)
    return d


def _describe_zarr3(kv: KVStore, raw: bytes, count: bool) -> dict[str, Any]:
    try:
        doc = load_json(raw, ZARR_JSON)
    except InfoError:
        doc = None  # ArrayMetadata.from_json names the problem
    if is_ome_group(doc):
        return _describe_ome(kv, count)
    if isinstance(doc, dict) and doc.get("node_type") == "group":
        return {"url": kv.url, "format": "zarr3", "node_type": "group",
                "attributes": sorted(doc.get("attributes", {}))}
    meta = ArrayMetadata.from_json(raw, f"{kv.url}/{ZARR_JSON}")
    d: dict[str, Any] = {
        "url": kv.url,
        "format": "zarr3",
        "node_type": "array",
        "shape": list(meta.shape),
        "data_type": meta.data_type,
        "dimension_names": list(meta.dimension_names) if meta.dimension_names else None,
        "chunk_shape": list(meta.chunk_shape),
        "sharded": meta.sharding is not None,
        "inner_chunk_shape": list(meta.inner_chunk_shape),
        "grid_shape": list(meta.grid_shape),
        "fill_value": meta.to_json()["fill_value"],
        "codecs": meta.to_json()["codecs"],
    }
    if count:
        stored = _count_files(kv)
        if stored is not None:
            stored = {"count": stored["count"] - 1, "bytes": stored["bytes"] - len(raw)}
        d["stored"] = stored
    return d


def _describe_ome(kv: KVStore, count: bool) -> dict[str, Any]:
    img = OmeZarrImage(kv, mode="r")
    levels = []
    for k, level in enumerate(img.mips):
        at = img.mip(k)
        raw = at.array.store.get(ZARR_JSON) or b""
        levels.append({
            "path": level.path, "size": list(at.size), "voxel_offset": list(level.voxel_offset),
            "resolution_nm": list(level.resolution),
            "array": _describe_zarr3(at.array.store, raw, count),
        })  # fmt: skip
    return {"url": kv.url, "format": "ome-zarr", "version": "0.5",
            "axes": list(img.multiscale.names), "data_type": img.dtype.name,
            "num_channels": img.num_channels, "levels": levels}  # fmt: skip


# -------------------------------------------------------------------- render
def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _xyz(v: list[Any] | None) -> str:
    return "x".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v) if v else "-"


def _stored(d: dict[str, Any], sharded: bool) -> str:
    stored = d.get("stored", "not counted")
    if stored is None:
        return "unknown (the store cannot list files)"
    if isinstance(stored, str):
        return stored
    if sharded:
        total = d.get("shards")
        of = f" of {total}" if total is not None else ""
        return f"{stored['shards']}{of} shard files, {human_bytes(stored['bytes'])}"
    return f"{stored['count']} of {d['chunks']} chunk files, {human_bytes(stored['bytes'])}"


def render(desc: dict[str, Any]) -> str:
    """The description as text for a terminal."""
    text = _render(desc)
    job = desc.get("incomplete")
    if job is None:
        return text
    first, _, rest = text.partition("\n")
    targets = f" (writes {', '.join(job['targets'])})" if job["targets"] else ""
    return (f"{first}\n  INCOMPLETE: {job['summary']}{targets}; run the job again to "
            f"finish it\n{rest}")


def _render(desc: dict[str, Any]) -> str:
    if desc["format"] == ANNOTATIONS_TYPE:
        kind = desc["annotation_type"]
        lines = [desc["url"],
                 f"  format:        neuroglancer precomputed annotations ({kind})",
                 f"  rank:          {desc['rank']}",
                 f"  properties:    {', '.join(desc['properties']) or 'none'}",
                 f"  relationships: {', '.join(desc['relationships']) or 'none'}",
                 f"  spatial index: {_plural(desc['spatial_levels'], 'level')}"]
        if "annotations" in desc:
            lines.append(f"  stored:        {_plural(desc['annotations'], 'annotation')}")
        return "\n".join(lines)
    if desc["format"] == "zarr3":
        return _render_zarr3(desc)
    if desc["format"] == "ome-zarr":
        return _render_ome(desc)
    lines = [
        f"{desc['url']}",
        f"  format:   neuroglancer precomputed ({_plural(len(desc['scales']), 'scale')})",
        f"  type:     {desc['type']}",
        f"  dtype:    {desc['data_type']}",
        f"  channels: {desc['num_channels']}",
    ]
    for i, s in enumerate(desc["scales"]):
        enc = s["encoding"]
        if "compressed_segmentation_block_size" in s:
            enc += f" (blocks {_xyz(s['compressed_segmentation_block_size'])})"
        if "jpeg_quality" in s:
            enc += f" (quality {s['jpeg_quality']})"
        lines += [
            f"  scale {i}: {s['key']}",
            f"    size:        {_xyz(s['size'])} voxels at offset {_xyz(s['voxel_offset'])}",
            f"    resolution:  {_xyz(s['resolution'])}",
            (f"    chunk size:  {_xyz(s['chunk_size'])} (grid {_xyz(s['grid_size'])}, "
             f"{s['chunks']} chunks)"),
            f"    encoding:    {enc}",
        ]
        if s["sharding"] is None:
            lines.append("    sharding:    none")
        else:
            shape = s.get("shard_shape")
            where = (f"{_xyz(shape)} voxels per shard" if shape
                     else "shards are not spatial blocks (hashed or partial Morton bits)")
            lines += [f"    sharding:    {json.dumps(s['sharding'], separators=(',', ':'))}",
                      f"    shard shape: {where}"]
        lines.append(f"    stored:      {_stored(s, s['sharding'] is not None)}")
    for key, what in OBJECTS.items():
        if key in desc:
            lines.append(f"  {what + ':':<9} {_object_line(desc[key])}")
    return "\n".join(lines)


def _object_line(d: dict[str, Any]) -> str:
    parts = [d["directory"] + "/"]
    if "error" in d:
        return f"{parts[0]} (unreadable: {d['error']})"
    if "kind" in d:
        parts.append({"legacy": "legacy", "multires": "multi-resolution"}[d["kind"]])
    if "sharded" in d:
        parts.append("sharded" if d["sharded"] else "unsharded")
    if d.get("vertex_attributes"):
        parts.append("attributes " + ", ".join(d["vertex_attributes"]))
    if "labels" in d:
        parts.append(_plural(d["labels"], "label"))
    if "segments" in d:
        parts.append(f"{_plural(d['segments'], 'segment')}, properties "
                     f"{', '.join(d['properties']) or 'none'}")
    return ", ".join(parts)


def _render_ome(d: dict[str, Any]) -> str:
    lines = [
        d["url"],
        f"  format:   OME-Zarr {d['version']} image ({_plural(len(d['levels']), 'level')}), "
        f"axes {', '.join(d['axes'])}",
        f"  dtype:    {d['data_type']}",
        f"  channels: {d['num_channels']}",
    ]
    for i, lv in enumerate(d["levels"]):
        array = _render_zarr3(lv["array"]).splitlines()[2:]  # without its URL and format
        lines += [
            f"  level {i}: {lv['path']}",
            f"    size:        {_xyz(lv['size'])} voxels at offset {_xyz(lv['voxel_offset'])}",
            f"    resolution:  {_xyz(lv['resolution_nm'])} nm",
            *("  " + line for line in array),
        ]
    return "\n".join(lines)


def _render_zarr3(d: dict[str, Any]) -> str:
    if d["node_type"] == "group":
        return f"{d['url']}\n  format:   zarr v3 group (attributes: {', '.join(d['attributes'])})"
    names = f" ({', '.join(str(n) for n in d['dimension_names'])})" if d["dimension_names"] else ""
    lines = [
        f"{d['url']}",
        "  format:      zarr v3 array",
        f"  shape:       {_xyz(d['shape'])}{names}",
        f"  dtype:       {d['data_type']} (fill value {d['fill_value']})",
        f"  chunk shape: {_xyz(d['chunk_shape'])} (grid {_xyz(d['grid_shape'])})",
    ]
    if d["sharded"]:
        lines.append(f"  sharded:     inner chunks {_xyz(d['inner_chunk_shape'])}")
    lines.append(f"  codecs:      {json.dumps(d['codecs'], separators=(',', ':'))}")
    stored = d.get("stored", "not counted")
    if isinstance(stored, dict):
        stored = f"{stored['count']} files, {human_bytes(stored['bytes'])}"
    lines.append(f"  stored:      {stored if stored is not None else 'unknown'}")
    return "\n".join(lines)
