"""``shardvol.open(url)``: a precomputed Volume, a ZarrArray or an OmeZarrImage, whichever
is stored there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, overload

from shardvol.errors import InfoError, InvalidArgumentError
from shardvol.jsondoc import load_json
from shardvol.kvstore import KVStore, open_store
from shardvol.kvstore.job_record import JOB_KEY
from shardvol.precomputed.info_file import INFO_KEY, follow
from shardvol.precomputed.volume import URL_PREFIX, Volume

if TYPE_CHECKING:
    from shardvol.zarr3 import OmeZarrImage, ZarrArray

#: Zarr v3's metadata file (shardvol.zarr3.ZARR_JSON: that package is imported where one is
#: found, which reading a precomputed volume needs not)
ZARR_JSON = "zarr.json"

FORMATS = ("precomputed", "zarr3", "ome-zarr")
#: Neuroglancer-style URL prefixes naming the format ("zarr3://gs://bucket/array")
_PREFIXES = {URL_PREFIX: "precomputed", "zarr3://": "zarr3", "zarr://": "zarr3"}


@overload
def split_format(url_or_store: str) -> tuple[str | None, str]: ...
@overload
def split_format(url_or_store: KVStore) -> tuple[None, KVStore]: ...
def split_format(url_or_store: str | KVStore) -> tuple[str | None, str | KVStore]:
    """``(format, rest)`` of a URL with a Neuroglancer-style format prefix, else ``(None, url)``."""
    if isinstance(url_or_store, str):
        for prefix, fmt in _PREFIXES.items():
            if url_or_store.lower().startswith(prefix):
                return fmt, url_or_store[len(prefix) :]
    return None, url_or_store


def detect_format(url_or_store: str | KVStore) -> str | None:
    """The format stored at a URL: "precomputed" (an ``info`` file), "ome-zarr" (a
    ``zarr.json`` of a group with ``ome`` attributes), "zarr3" (any other ``zarr.json``)
    or None if none is there."""
    fmt, rest = split_format(url_or_store)
    keys = {None: [INFO_KEY, ZARR_JSON], "precomputed": [INFO_KEY], "zarr3": [ZARR_JSON]}[fmt]
    found = dict(zip(keys, open_store(rest).get_many(keys), strict=True))  # (one round trip)
    if found.get(INFO_KEY) is not None:
        return "precomputed"
    doc = found.get(ZARR_JSON)
    if doc is not None:
        from shardvol.zarr3.ome import is_ome_group

        return "ome-zarr" if is_ome_group(_parse(doc)) else "zarr3"
    return None


def open(url_or_store: str | KVStore, **kwargs: Any) -> Volume | ZarrArray | OmeZarrImage:
    """Open what is stored at ``url_or_store``: a precomputed volume, a Zarr v3 array or
    an OME-Zarr 0.5 image.

    An ``info`` file makes it a :class:`~shardvol.Volume` (keyword arguments go
    to it: ``mip``, ``fill_value``, ``bounded``, ...); a ``zarr.json`` whose
    ``node_type`` is "array" a :class:`~shardvol.zarr3.ZarrArray` (``mode``,
    ``order``, ``parallel``); a group with ``ome`` attributes an
    :class:`~shardvol.zarr3.OmeZarrImage` (``mip``, ``mode``, ``parallel``,
    ``cache_bytes``).  A ``precomputed://`` or ``zarr3://`` prefix forces the
    format.  InfoError if none is there.
    """
    fmt, rest = split_format(url_or_store)
    kv = open_store(rest)
    doc = None
    if fmt in (None, "precomputed"):  # (what Volume reads, and zarr.json, in one round trip)
        followed = follow(kv, (JOB_KEY, ZARR_JSON) if fmt is None else (JOB_KEY,))
        if followed.values[0] is not None or followed.moved:
            return Volume(followed, **kwargs)
        doc = followed.values[2] if fmt is None else None
    elif fmt == "zarr3":
        doc = kv.get(ZARR_JSON)
    if doc is not None:
        from shardvol.zarr3 import OmeZarrImage
        from shardvol.zarr3 import open as open_zarr
        from shardvol.zarr3.ome import is_ome_group

        source = f"{kv.url}/{ZARR_JSON}"
        parsed = _parse(doc, source)
        if is_ome_group(parsed):
            return OmeZarrImage(kv, **kwargs)
        _check_zarr_array(parsed, source)
        return open_zarr(kv, **kwargs)
    wanted = {
        None: f"a precomputed '{INFO_KEY}' file or a Zarr v3 '{ZARR_JSON}'",
        "precomputed": f"a precomputed '{INFO_KEY}' file",
        "zarr3": f"a Zarr v3 '{ZARR_JSON}'",
    }[fmt]
    hint = " (Zarr v2 '.zarray' found: only Zarr v3 is supported)" if kv.exists(".zarray") else ""
    raise InfoError(f"nothing to open at {kv.url}: looked for {wanted}{hint}")


def _parse(doc: bytes | memoryview, source: str | None = None) -> Any:
    """A ``zarr.json`` parsed (None if it is not JSON and no ``source`` is given to name)."""
    try:
        return load_json(doc, source or ZARR_JSON)
    except InfoError:
        if source is None:
            return None
        raise


def _check_zarr_array(parsed: Any, source: str) -> None:
    node = parsed.get("node_type") if isinstance(parsed, dict) else None
    if node != "array":
        raise InfoError(
            f"{source}: node_type is {node!r}; shardvol.open opens arrays (node_type 'array') "
            "and OME-Zarr images (groups with 'ome' attributes)"
        )


def check_format(fmt: str | None) -> str | None:
    if fmt is not None and fmt not in FORMATS:
        raise InvalidArgumentError(f"format must be one of {FORMATS} or None, got {fmt!r}")
    return fmt
