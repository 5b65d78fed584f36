"""Throughput of the chunk-id kernels, side by side with the peers' implementations.

Compressed Morton codes: shardvol vs CloudVolume's numpy version.
murmurhash3_x86_128 low 64 bits of uint64 keys: shardvol vs the `mmh3` package
(a C extension called per key, as CloudVolume's sharding does).
Single-threaded; prints M keys/s and ratios.  Run: python benchmarks/bench_kernels.py
"""

from __future__ import annotations

import numpy as np
from _timing import best_of  # benchmarks/ is on sys.path when a script runs

from shardvol._ext.hashing import murmurhash3_x86_128_u64
from shardvol._ext.morton import compressed_morton_code


def report(name: str, n: int, ours: float, peers: dict[str, float]) -> None:
    line = f"{name:<34} shardvol {n / ours / 1e6:8.1f} M keys/s"
    for peer, t in peers.items():
        line += f" | {peer} {n / t / 1e6:7.2f} M keys/s (x{t / ours:.0f})"
    print(line)


def main() -> None:
    rng = np.random.default_rng(0)
    n = 10_000_000
    grid = (2048, 2048, 1024)
    coords = np.stack([rng.integers(0, g, n, dtype=np.uint64) for g in grid], axis=1)
    keys = rng.integers(0, 2**64, n, dtype=np.uint64)

    t_morton = best_of(lambda: compressed_morton_code(coords, grid))
    peers = {}
    try:
        from cloudvolume.datasource.precomputed.common import compressed_morton_code as cv_morton

        m = 1_000_000
        t_cv = best_of(lambda: cv_morton(coords[:m], grid), repeat=2) * (n / m)
        peers["CloudVolume"] = t_cv
    except ImportError:
        pass
    report(f"compressed Morton code {grid}", n, t_morton, peers)

    t_hash = best_of(lambda: murmurhash3_x86_128_u64(keys))
    peers = {}
    try:
        import mmh3

        m = 200_000
        sub = [int(k).to_bytes(8, "little") for k in keys[:m]]

        def mmh3_loop():
            for b in sub:
                mmh3.hash64(b, 0, False)

        peers["mmh3 per key"] = best_of(mmh3_loop, repeat=2) * (n / m)
    except ImportError:
        pass
    report("murmurhash3_x86_128 (low 64 bits)", n, t_hash, peers)


if __name__ == "__main__":
    main()
