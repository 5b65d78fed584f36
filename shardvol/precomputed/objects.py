"""The objects a segmentation's info points to: its ``mesh``, ``skeletons`` and
``segment_properties`` directories, opened below the volume's store and linked from its
info when created."""

from __future__ import annotations

from typing import Any

from shardvol.errors import InfoError, InvalidArgumentError, InvalidKeyError
from shardvol.kvstore import KVStore, PrefixStore, check_key
from shardvol.precomputed.info import VolumeInfo
from shardvol.precomputed.info_file import INFO_KEY, read_info, write_info

#: What each object is called in messages, by its info key.
OBJECTS = {"mesh": "meshes", "skeletons": "skeletons", "segment_properties": "segment properties"}


def object_store(kv: KVStore, meta: VolumeInfo, key: str) -> KVStore:
    """The directory the info's ``key`` names, below ``kv``; InfoError if it names none."""
    name = meta.extra.get(key)
    if name is None:
        raise InfoError(f"{kv.url}/info names no {OBJECTS[key]} directory (no {key!r}); "
                        f"create one with create_{key.replace('mesh', 'meshes')}()")
    return PrefixStore(kv, _directory(name, f"{kv.url}/info: {key!r}", InfoError))


def new_object_store(kv: KVStore, key: str, directory: str) -> KVStore:
    """The store of a new ``key`` directory ``directory`` below ``kv`` (checked)."""
    return PrefixStore(kv, _directory(directory, f"the {OBJECTS[key]} directory",
                                      InvalidArgumentError))


def link_object(kv: KVStore, key: str, directory: str) -> VolumeInfo:
    """Name ``directory`` as the volume's ``key`` directory in its info (under the info's
    lock); the new info."""
    name = _directory(directory, f"the {OBJECTS[key]} directory", InvalidArgumentError)
    with kv.lock(INFO_KEY):
        doc = read_info(kv).to_dict()
        doc[key] = name
        meta = VolumeInfo.from_dict(doc)
        write_info(kv, meta)
    return meta


def directory_name(name: Any) -> str | None:
    """``name`` as a directory below the one it is named in (a relative store key: no
    ``..``, not absolute), or None if it is none."""
    if isinstance(name, str):
        try:
            return check_key(name.strip("/"))
        except InvalidKeyError:
            pass
    return None


def _directory(name: Any, what: str, error: type[Exception]) -> str:
    """``name`` as a relative directory of the volume, else ``error`` naming ``what``."""
    checked = directory_name(name)
    if checked is None:
        raise error(f"{what} must name a directory below the volume, got {name!r}")
    return checked
