"""The main job of `make demo`: exercise shardvol end to end and say what it did.

Run as ``python -m shardvol.demo [WORKDIR]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import shardvol
from shardvol import _reference


def run(workdir: str) -> None:
    grid = (40, 37, 25)
    coords = np.stack(
        np.meshgrid(*[np.arange(g, dtype=np.uint64) for g in grid], indexing="ij"), axis=-1
    ).reshape(-1, 3)
    t0 = time.perf_counter()
    codes = shardvol.compressed_morton_code(coords, grid)
    hashes = shardvol.murmurhash3_x86_128_u64(codes)
    dt = time.perf_counter() - t0
    bits, total = shardvol.morton_bits(grid)
    print(f"grid {grid}: {len(codes)} compressed Morton codes ({bits} bits per axis, {total} total)")
    print(f"  codes + murmurhash3 in {dt * 1e3:.2f} ms; max code {int(codes.max())}")
    assert np.array_equal(codes, _reference.compressed_morton_code(coords, grid))
    assert np.array_equal(hashes, _reference.murmurhash3_x86_128_u64(codes))
    assert np.array_equal(shardvol.decode_morton_code(codes, grid), coords)
    print("  checked against the pure-numpy reference and inverted back to coordinates: OK")

    store = shardvol.open_store(os.path.join(workdir, "demo-store"))
    payload = hashes.tobytes()
    store.set("hashes/all.bin", payload)
    back = store.get("hashes/all.bin")
    part = store.get("hashes/all.bin", (8 * 100, 8 * 110))
    assert back == payload and part == payload[800:880]
    print(f"store {store.url}: wrote {len(payload)} bytes atomically, read them back "
          f"whole and as a byte range: OK")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("workdir", nargs="?", help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
        run(args.workdir)
    else:
        with tempfile.TemporaryDirectory() as d:
            run(d)
    print(f"shardvol {shardvol.__version__} demo finished")


if __name__ == "__main__":
    main()
