"""neuroglancer_uint64_sharded_v1: shardvol vs TensorStore vs CloudVolume, in one run.

Data: 20,000 random uint64 keys, values of 200-4000 bytes, murmurhash3_x86_128,
minishard_bits 6, shard_bits 3, gzip minishard indexes and data, local files
(page cache warm).  Values are random bytes (the issue's setting; gzip stores
them) and then, with ``--compressible``, bytes drawn from 16 symbols (gzip
halves them, and decoding literals is the slowest case of inflate).

Reads: 5,000 random present keys.
  cold = a fresh reader (no cached index) per repetition;
  warm = the same reader again (shard + minishard indexes cached).  TensorStore
  caches indexes only with a cache pool, so its warm figure uses one (64 MB);
  the minishard index caches of shardvol and CloudVolume are sized 1024 for the
  warm figures (the default 128 is below the 512 minishards read here).
  Every reader reads the same files (written by TensorStore, then by shardvol).
Writes: all keys; shardvol write_shards and TensorStore (one transaction) write
  files into a fresh directory; CloudVolume synthesize_shards only builds them in
  memory (shardvol's synthesize_shards is shown for that comparison).

Times are the best of several repetitions, the implementations interleaved so
they share the machine's load; ratios are peer time / shardvol time.
Run: python benchmarks/bench_sharding.py [--compressible]
"""

from __future__ import annotations

import os
import shutil
import struct
import sys
import tempfile
import time

import numpy as np
import tensorstore as ts

from shardvol.kvstore import FileStore

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from shardvol.sharding import ShardingSpec, ShardReader, synthesize_shards, write_shards
from tests.oracles import cv_shard_reader

N_KEYS = 20_000
N_READ = 5_000
SPEC = ShardingSpec(
    hash="murmurhash3_x86_128",
    preshift_bits=0,
    minishard_bits=6,
    shard_bits=3,
    minishard_index_encoding="gzip",
    data_encoding="gzip",
)


def best_times(fns: dict, repeat: int = 7, setup: dict | None = None) -> dict[str, float]:
    """Best time of each function; repetitions interleave them so they share the machine's load."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            if setup and name in setup:
                setup[name]()
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def make_data(symbols: int = 256) -> dict[int, bytes]:
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(0, 2**64, N_KEYS * 2, dtype=np.uint64))[:N_KEYS]
    rng.shuffle(keys)
    sizes = rng.integers(200, 4001, len(keys))
    blob = rng.integers(0, symbols, int(sizes.sum()), dtype=np.uint8).tobytes()
    ends = np.cumsum(sizes)
    return {int(k): blob[e - s : e] for k, s, e in zip(keys, sizes, ends)}


# -- TensorStore ---------------------------------------------------------------------------


def ts_kvstore(path: str, cache_bytes: int = 0) -> ts.KvStore:
    spec = {
        "driver": "neuroglancer_uint64_sharded",
        "base": {"driver": "file", "path": path + "/"},
        "metadata": SPEC.to_dict(),
    }
    context = ts.Context({"cache_pool": {"total_bytes_limit": cache_bytes}})
    return ts.KvStore.open(spec, context=context).result()


def ts_write(path: str, data: dict[int, bytes]) -> None:
    kv = ts_kvstore(path)
    txn = ts.Transaction()
    kvt = kv.with_transaction(txn)
    for k, v in data.items():
        kvt[struct.pack(">Q", k)] = v
    txn.commit_async().result()


def ts_read(kv: ts.KvStore, keys: list[int]) -> dict[int, bytes]:
    futures = [kv.read(struct.pack(">Q", k)) for k in keys]
    return {k: f.result().value for k, f in zip(keys, futures)}


# -- CloudVolume ---------------------------------------------------------------------------


def cv_reader(path: str, minishard_cache: int = 128):
    return cv_shard_reader(path, SPEC.to_dict(), minishard_cache)


def cv_spec():
    from cloudvolume.datasource.precomputed.sharding import ShardingSpecification

    return ShardingSpecification.from_dict(SPEC.to_dict())


# -- report --------------------------------------------------------------------------------


def fresh_dir(d: str):
    def setup() -> None:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)

    return setup


def line(name: str, ours: float, peers: dict[str, float]) -> None:
    text = f"{name:<44} shardvol {ours * 1e3:8.1f} ms"
    for peer, t in peers.items():
        text += f" | {peer} {t * 1e3:8.1f} ms (x{t / ours:.2f})"
    print(text)


def main() -> None:
    import sys

    for symbols in (256, 16) if "--compressible" in sys.argv else (256,):
        run(make_data(symbols), "random bytes" if symbols == 256 else "16-symbol bytes")


def run(data: dict[int, bytes], kind: str) -> None:
    keys = list(data)
    rng = np.random.default_rng(1)
    read_keys = [keys[i] for i in rng.choice(len(keys), N_READ, replace=False)]
    root = tempfile.mkdtemp(prefix="bench-sharding-")
    try:
        print(
            f"== {N_KEYS} keys, {sum(map(len, data.values())) / 1e6:.1f} MB of {kind} values, "
            f"{SPEC.to_json()}; {os.cpu_count()} CPUs; times are noisy on a shared machine\n"
        )
        sv_dir, ts_dir = os.path.join(root, "sv"), os.path.join(root, "ts")
        cvs = cv_spec()
        t = best_times(
            {
                "sv write": lambda: write_shards(FileStore(sv_dir), SPEC, data),
                "ts write": lambda: ts_write(ts_dir, data),
                "sv synth": lambda: synthesize_shards(SPEC, data),
                "cv synth": lambda: cvs.synthesize_shards(data),
            },
            repeat=3,
            setup={"sv write": fresh_dir(sv_dir), "ts write": fresh_dir(ts_dir)},
        )
        line("write all keys to files", t["sv write"], {"TensorStore": t["ts write"]})
        line("synthesize all shards in memory", t["sv synth"], {"CloudVolume": t["cv synth"]})
        for label, d in (("TensorStore-written", ts_dir), ("shardvol-written", sv_dir)):
            print(f"\nread {N_READ} random keys, {label} files")
            read_figures(d, read_keys, {k: data[k] for k in read_keys})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()


def read_figures(d: str, read_keys: list[int], expected: dict[int, bytes]) -> None:
    assert ShardReader(d, SPEC).get_data_many(read_keys) == expected
    assert ts_read(ts_kvstore(d), read_keys) == expected
    assert cv_reader(d).get_data(read_keys) == expected
    t = best_times(
        {
            "sv": lambda: ShardReader(d, SPEC).get_data_many(read_keys),
            "ts": lambda: ts_read(ts_kvstore(d), read_keys),
            "cv": lambda: cv_reader(d).get_data(read_keys),
        }
    )
    line("  cold (fresh reader)", t["sv"], {"TensorStore": t["ts"], "CloudVolume": t["cv"]})
    sv = ShardReader(d, SPEC, minishard_index_cache_size=1024)
    kv = ts_kvstore(d, 64 << 20)
    cv = cv_reader(d, minishard_cache=1024)
    t = best_times(
        {
            "sv": lambda: sv.get_data_many(read_keys),
            "ts": lambda: ts_read(kv, read_keys),
            "cv": lambda: cv.get_data(read_keys),
        },
        repeat=8,  # the first round fills the caches
    )
    line("  warm (indexes cached)", t["sv"], {"TensorStore": t["ts"], "CloudVolume": t["cv"]})


if __name__ == "__main__":
    main()
