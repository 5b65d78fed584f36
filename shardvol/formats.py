"""``shardvol.open(url)``: a precomputed Volume or a ZarrArray, whichever is stored there."""

from __future__ import annotations

import json
from typing import Any, overload

from shardvol.errors import InfoError, InvalidArgumentError
from shardvol.kvstore import KVStore, open_store
from shardvol.precomputed.volume import INFO_KEY, Volume
from shardvol.zarr3 import ZARR_JSON, ZarrArray
from shardvol.zarr3 import open as open_zarr

FORMATS = ("precomputed", "zarr3")
#: Neuroglancer-style URL prefixes naming the format ("zarr3://gs://bucket/array")
_PREFIXES = {"precomputed://": "precomputed", "zarr3://": "zarr3", "zarr://": "zarr3"}


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
    """The format stored at a URL: "precomputed" (an ``info`` file), "zarr3" (a ``zarr.json``)
    or None if neither is there."""
    fmt, rest = split_format(url_or_store)
    kv = open_store(rest)
    if fmt is not None:
        return fmt if kv.exists(INFO_KEY if fmt == "precomputed" else ZARR_JSON) else None
    if kv.exists(INFO_KEY):
        return "precomputed"
    if kv.exists(ZARR_JSON):
        return "zarr3"
    return None


def open(url_or_store: str | KVStore, **kwargs: Any) -> Volume | ZarrArray:
    """Open what is stored at ``url_or_store``: a precomputed volume or a Zarr v3 array.

    An ``info`` file makes it a :class:`~shardvol.Volume` (keyword arguments go
    to it: ``mip``, ``fill_value``, ``bounded``, ...); a ``zarr.json`` whose
    ``node_type`` is "array" a :class:`~shardvol.zarr3.ZarrArray` (``mode``,
    ``order``, ``parallel``).  A ``precomputed://`` or ``zarr3://`` prefix
    forces the format.  InfoError if neither is there.
    """
    fmt, rest = split_format(url_or_store)
    kv = open_store(rest)
    if fmt in (None, "precomputed") and kv.exists(INFO_KEY):
        return Volume(kv, **kwargs)
    if fmt in (None, "zarr3"):
        doc = kv.get(ZARR_JSON)
        if doc is not None:
            _check_zarr_array(doc, f"{kv.url}/{ZARR_JSON}")
            return open_zarr(kv, **kwargs)
    wanted = {
        None: f"a precomputed '{INFO_KEY}' file or a Zarr v3 '{ZARR_JSON}'",
        "precomputed": f"a precomputed '{INFO_KEY}' file",
        "zarr3": f"a Zarr v3 '{ZARR_JSON}'",
    }[fmt]
    hint = " (Zarr v2 '.zarray' found: only Zarr v3 is supported)" if kv.exists(".zarray") else ""
    raise InfoError(f"nothing to open at {kv.url}: looked for {wanted}{hint}")


def _check_zarr_array(doc: bytes, source: str) -> None:
    try:
        parsed = json.loads(doc)
    except (ValueError, UnicodeDecodeError) as e:
        raise InfoError(f"{source}: not valid JSON ({e})") from e
    node = parsed.get("node_type") if isinstance(parsed, dict) else None
    if node != "array":
        raise InfoError(
            f"{source}: node_type is {node!r}; shardvol.open opens arrays (node_type 'array')"
        )


def check_format(fmt: str | None) -> str | None:
    if fmt is not None and fmt not in FORMATS:
        raise InvalidArgumentError(f"format must be one of {FORMATS} or None, got {fmt!r}")
    return fmt
