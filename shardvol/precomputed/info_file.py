"""The ``info`` file of a precomputed volume in its store: read (following ``redirect``),
and written whole, checked first, under the store's lock on it.

An info file holding ``"redirect": URL`` (CloudVolume's and Neuroglancer's way of moving a
volume) stands for the volume at ``URL``: readers follow it, at most :data:`MAX_REDIRECTS`
times, and a chain that comes back to a volume it passed is an InfoError naming it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from shardvol.errors import InfoError
from shardvol.jsondoc import load_json
from shardvol.kvstore import KVStore, open_store
from shardvol.precomputed.info import VolumeInfo

INFO_KEY = "info"
MAX_REDIRECTS = 10


def read_info(kv: KVStore) -> VolumeInfo:
    """Parse and validate the info file of the volume at ``kv`` (not following a redirect:
    see :func:`follow`)."""
    return parse_info(kv, kv.get(INFO_KEY))


def parse_info(kv: KVStore, raw: bytes | memoryview | None) -> VolumeInfo:
    """The validated info of the volume at ``kv`` whose info file holds ``raw``."""
    if raw is None:
        raise InfoError(f"no precomputed volume at {kv.url}: it has no 'info' file")
    doc = load_json(raw, f"{kv.url}/{INFO_KEY}")
    if isinstance(doc, dict) and "redirect" in doc:
        raise InfoError(f"{kv.url}/{INFO_KEY} redirects to {doc['redirect']!r}: open it with "
                        "Volume, which follows redirects")
    return VolumeInfo.from_dict(doc)


class Followed(NamedTuple):
    """Where :func:`follow` ended: the store, and the values read there (the info file's
    first); ``moved``: whether a redirect was followed."""

    kv: KVStore
    values: list[Any]
    moved: bool


def follow(kv: KVStore, also: tuple[str, ...] = ()) -> Followed:
    """The store of the volume ``kv`` stands for (itself, or where its ``redirect`` chain
    ends) and the values of its ``info`` and of the keys ``also`` there (read together,
    in one round trip per hop)."""
    seen = [kv.url]
    while True:
        values = list(kv.get_many([INFO_KEY, *also]))
        raw = values[0]
        target = _redirect(kv, raw)
        if target is None:
            return Followed(kv, values, len(seen) > 1)
        kv = open_store(target)
        if kv.url in seen:
            raise InfoError(f"info redirects loop: {' -> '.join([*seen, kv.url])}")
        if len(seen) > MAX_REDIRECTS:
            raise InfoError(f"info redirects more than {MAX_REDIRECTS} times: "
                            f"{' -> '.join(seen)}")
        seen.append(kv.url)


def _redirect(kv: KVStore, raw: bytes | memoryview | None) -> str | None:
    """The URL an info file redirects to, or None (also for what is not a redirect)."""
    if raw is None or b"redirect" not in bytes(raw):
        return None
    doc = load_json(raw, f"{kv.url}/{INFO_KEY}")
    if not isinstance(doc, dict) or "redirect" not in doc:
        return None
    target = doc["redirect"]
    if not isinstance(target, str) or not target:
        raise InfoError(f"{kv.url}/{INFO_KEY}: 'redirect' must be a URL, got {target!r}")
    return target.removeprefix("precomputed://")


def write_info(kv: KVStore, meta: VolumeInfo) -> None:
    """Write ``meta`` as the info file (the caller holds the store's lock on it)."""
    kv.set(INFO_KEY, meta.to_json().encode())
