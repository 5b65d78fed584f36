"""Store wrappers for tests: delegate to a real store and record what was asked of it."""

from __future__ import annotations

import hashlib
import json
import os
import threading

from shardvol.kvstore import KVStore, PrefixStore
from shardvol.kvstore.fsspec_store import FsspecStore

# HTTP reads go through shardvol's client, or fsspec's aiohttp session when the filesystem
# is configured with options that client does not take (here: client_kwargs)
TRANSPORTS = {"direct": {}, "aiohttp": {"client_kwargs": {"read_bufsize": 1 << 16}}}


def http_store(url: str, transport: str, **kw) -> FsspecStore:
    """A store of an HTTP URL whose reads go through ``transport``."""
    store = FsspecStore(url, skip_instance_cache=True, **TRANSPORTS[transport], **kw)
    assert type(store._gets.transport).__name__.lower().endswith(transport)
    return store


# S3 reads and writes go through shardvol's client (signed with SigV4), or through botocore
# when the filesystem is configured with options that client does not follow (here: a
# config_kwargs of its own; requests tried once, as the store's own would be)
S3_TRANSPORTS = {"direct": {}, "botocore": {"config_kwargs": {
    "retries": {"total_max_attempts": 1}, "tcp_keepalive": True}}}


def s3_store(url: str, transport: str, **kw) -> FsspecStore:
    """A store of an ``s3://`` URL whose reads and writes go through ``transport``."""
    store = FsspecStore(url, skip_instance_cache=True, **S3_TRANSPORTS[transport], **kw)
    assert type(store._gets).__name__ == ("S3Reads" if transport == "direct"
                                          else "S3ConditionalObjects")
    return store


def stored_files(root: str) -> dict[str, bytes]:
    """The bytes of every file under ``root``, by path relative to it; of a provenance
    file, the tasks of the steps it records (not their dates, hosts or plans)."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    if "provenance" in out:
        steps = json.loads(out["provenance"])["processing"]
        out["provenance"] = json.dumps([s["method"]["task"] for s in steps]).encode()
    return out


class Recording(KVStore):
    """Every request passed to get / get_many, one list per call; may claim not to be local
    (as a remote store is) so readers take their remote-store paths."""

    def __init__(self, base: KVStore, local: bool | None = None) -> None:
        self.base, self.url, self.calls = base, base.url, []
        self.local = base.local if local is None else local
        self.conditional_writes = base.conditional_writes

    @property
    def gets(self) -> list[str]:
        """Keys requested, in order."""
        return [key for call in self.calls for key, _ in call]

    def requests(self) -> list[tuple]:
        return [r for call in self.calls for r in call]

    def get(self, key, byte_range=None):
        self.calls.append([(key, byte_range)])
        return self.base.get(key, byte_range)

    def get_many(self, requests):
        reqs = [r if isinstance(r, tuple) else (r, None) for r in requests]
        self.calls.append(reqs)
        return [self.base.get(k, r) for k, r in reqs]

    def get_many_versioned(self, requests):
        reqs = [r if isinstance(r, tuple) else (r, None) for r in requests]
        self.calls.append(reqs)
        return self.base.get_many_versioned(reqs)

    def set(self, key, value):
        self.base.set(key, value)

    def set_if(self, key, value, version):
        return self.base.set_if(key, value, version)

    def delete(self, key):
        self.base.delete(key)

    def delete_if(self, key, version):
        return self.base.delete_if(key, version)

    def list(self, prefix=""):
        return self.base.list(prefix)

    def size(self, key):
        return self.base.size(key)

    def version(self, key):
        return self.base.version(key)


class Conditional(KVStore):
    """``base`` with compare-and-swap writes, as S3 has them: a value's version is the MD5
    of its bytes (as an ETag is), and set_if / delete_if compare it atomically."""

    conditional_writes = True

    def __init__(self, base: KVStore) -> None:
        self.base, self.url, self.local = base, base.url, base.local
        self._guard = threading.Lock()

    def get(self, key, byte_range=None):
        return self.base.get(key, byte_range)

    def get_many(self, requests):
        return self.base.get_many(requests)

    def version(self, key):
        value = self.base.get(key)
        return None if value is None else hashlib.md5(bytes(value)).hexdigest()

    def get_many_versioned(self, requests):
        reqs = [r if isinstance(r, tuple) else (r, None) for r in requests]
        with self._guard:  # (each value with the version it has)
            return [(v, self.version(k)) for (k, _), v in zip(reqs, self.base.get_many(reqs))]

    def set(self, key, value):
        with self._guard:
            self.base.set(key, value)

    def set_if(self, key, value, version):
        with self._guard:
            current = self.base.get(key)
            if self.version(key) != version and (current is None or current != bytes(value)):
                return False
            self.base.set(key, bytes(value))
            return True

    def delete(self, key):
        with self._guard:
            self.base.delete(key)

    def delete_if(self, key, version):
        with self._guard:
            now = self.version(key)
            if version is None or now is None:
                return True
            if now != version:
                return False
            self.base.delete(key)
            return True

    def list(self, prefix=""):
        return self.base.list(prefix)

    def size(self, key):
        return self.base.size(key)


class AnotherProcess(PrefixStore):
    """``base`` below ``prefix`` as a store object of another process has it: its writers'
    in-process locks are its own (keyed by ``name``), so that threads writing through
    different such views are ordered by the store alone, as processes are."""

    write_lock = KVStore.write_lock  # (not PrefixStore's, which takes the base's lock)

    def __init__(self, base: KVStore, prefix: str, name: str) -> None:
        super().__init__(base, prefix)
        self.url = f"{self.url}#{name}"


def rewrite_after_index_read(base: type[KVStore]) -> type[KVStore]:
    """A ``base`` store class whose ``hook`` (another writer replacing a shard) runs once,
    right after the next versioned read returns (or, streamed, yields its last value): the
    read of a shard index."""

    class RewriteAfterIndexRead(base):  # type: ignore[valid-type,misc]
        hook = None

        def _after(self):
            hook, self.hook = self.hook, None
            if hook is not None:
                hook()

        def get_many_versioned(self, requests):
            out = super().get_many_versioned(requests)
            self._after()
            return out

        def iter_get_many_versioned(self, requests, window=256 << 20, sizes=None):
            out = list(super().iter_get_many_versioned(requests, window, sizes))
            self._after()
            yield from out

    return RewriteAfterIndexRead


def race_zarr3_shard_rewrite(base: type[KVStore], url: str, index_location: str = "end"):
    """Read part of a one-shard Zarr array at ``url`` while another writer replaces the shard
    between the reads of its index and of its chunks (every chunk moves in the new shard).
    Returns (what the read of [4:8, 4:8] got, the old array, the new one, the ZarrArray)."""
    import numpy as np

    import shardvol.zarr3 as z

    store = rewrite_after_index_read(base)(url)
    arr = z.create(store, (16, 16), "uint16", (16, 16), (4, 4), codecs=["bytes"],
                   index_location=index_location, overwrite=True)
    old = np.arange(256, dtype=np.uint16).reshape(16, 16)
    arr[...] = old
    new = old + 1000
    new[:4] = 0  # a row of absent inner chunks: every other chunk moves in the shard

    def rewrite():
        z.open(base(url))[...] = new

    store.hook = rewrite
    got = arr[4:8, 4:8]
    assert store.hook is None  # the race happened
    return got, old, new, arr
