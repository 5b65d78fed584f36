"""Files CloudVolume stores compressed whole (``NAME.gz``, ``NAME.br``, ``NAME.zstd``,
``NAME.xz``, ``NAME.bz2``): read in place of ``NAME`` when it is absent, seen as ``NAME``
existing, and removed with it, for chunk files, mesh files and skeletons alike."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from shardvol._ext.files import unlink_absent_ok
from shardvol.array.chunkstore import Blob
from shardvol.compression import FILE_SUFFIXES, decompress
from shardvol.errors import ChunkDecodeError
from shardvol.kvstore import KVStore

ALL_SUFFIXES = ("", *FILE_SUFFIXES.values())


def read_copies(kv: KVStore, keys: Sequence[str], name: Callable[[str], str],
                max_size: int | None = None) -> list[bytes | None]:
    """The value of each key from its first compressed copy, decoded (None where it has
    none); ``name(file)`` names a copy that cannot be decoded (a ChunkDecodeError)."""
    return [None if copy is None else decompress(
                copy[2], copy[1], name(copy[0]), ChunkDecodeError, max_size=max_size)
            for copy in _first_copies(kv, keys)]


def read_files(kv: KVStore, keys: Sequence[str], name: Callable[[str], str],
               max_size: int | None = None) -> list[Blob | None]:
    """The value of each key, stored plain or (where it is not) as a compressed copy."""
    blobs: list[Blob | None] = list(kv.get_many(keys))
    missing = [i for i, b in enumerate(blobs) if b is None]
    for i, blob in zip(missing, read_copies(kv, [keys[i] for i in missing], name, max_size)):
        blobs[i] = blob
    return blobs


def without_suffix(name: str) -> str:
    """``name`` without a compressed copy's suffix (``NAME.gz`` -> ``NAME``)."""
    for suffix in FILE_SUFFIXES.values():
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def exists(kv: KVStore, key: str) -> bool:
    """Whether ``key`` is stored plain or as a compressed copy."""
    return any(kv.exists(key + suffix) for suffix in ALL_SUFFIXES)


def delete_copies(kv: KVStore, key: str) -> None:
    """Remove the compressed copies of ``key`` (not ``key`` itself)."""
    path = kv.file_path(key)
    if path is None:  # (remote: all at once)
        kv.delete_many([key + suffix for suffix in FILE_SUFFIXES.values()])
        return
    # local files: a failed unlink each, at most, all with the GIL released once (one
    # hand-off per chunk written instead of five)
    unlink_absent_ok([path + suffix for suffix in FILE_SUFFIXES.values()])


def _first_copies(kv: KVStore, keys: Sequence[str]) -> list[tuple[str, str, Blob] | None]:
    """The first compressed copy found of each key: its name, coding and bytes.  Remote
    stores are asked for every copy at once; local ones one by one."""
    names = [[(key + suffix, coding) for coding, suffix in FILE_SUFFIXES.items()]
             for key in keys]
    if kv.local:
        return [next(((n, c, b) for n, c in each if (b := kv.get(n)) is not None), None)
                for each in names]
    blobs = iter(kv.get_many([n for each in names for n, _ in each]))
    found = [[(n, c, next(blobs)) for n, c in each] for each in names]
    return [next(((n, c, b) for n, c, b in each if b is not None), None) for each in found]
