"""Store wrappers for tests: delegate to a real store and record what was asked of it."""

from __future__ import annotations

import os

from shardvol.kvstore import KVStore


def stored_files(root: str) -> dict[str, bytes]:
    """The bytes of every file under ``root``, by path relative to it."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


class Recording(KVStore):
    """Every request passed to get / get_many, one list per call; may claim not to be local
    (as a remote store is) so readers take their remote-store paths."""

    def __init__(self, base: KVStore, local: bool | None = None) -> None:
        self.base, self.url, self.calls = base, base.url, []
        self.local = base.local if local is None else local

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

    def set(self, key, value):
        self.base.set(key, value)

    def delete(self, key):
        self.base.delete(key)

    def list(self, prefix=""):
        return self.base.list(prefix)

    def size(self, key):
        return self.base.size(key)

    def version(self, key):
        return self.base.version(key)


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
