"""Downsampling pyramids, side by side with tinybrain and TensorStore.

- mean of a 512^3 uint8 image over 3 mips of (2, 2, 1);
- mode of a 512x512x128 uint64 segmentation over 3 mips of (2, 2, 1), for
  cells of ~48 voxels (neurite-like) and ~16 voxels (fine, many mixed blocks).

Inputs are Fortran-ordered (x fastest), as precomputed chunks and tinybrain
expect.  Times are best of N wall-clock runs including output allocation, one
thread each (TensorStore with its default context).  The "agree" columns give
the fraction of output voxels equal to ts.downsample(source, 2**k, method):
shardvol is exact; tinybrain floors means, doubles odd edges and takes modes of
modes, so it differs.  Run: python benchmarks/bench_downsample.py [--repeat N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import tensorstore as ts

from shardvol.ops.pooling import downsample_pyramid

try:
    import tinybrain
except ImportError:  # the `bench` extra installs it
    tinybrain = None

FACTOR = (2, 2, 1)
MIPS = 3


def best_of(fn, repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def segmentation(shape, cell: int, seed: int = 0) -> np.ndarray:
    """uint64 labels on a grid of `cell`-voxel cells with smoothly wavy borders."""
    rng = np.random.default_rng(seed)
    x, y, z = (
        np.arange(n).reshape([-1 if i == d else 1 for i in range(3)]) for d, n in enumerate(shape)
    )
    amp = cell / 3
    dx = (amp * np.sin(y / (cell / 2.3) + z / (cell / 1.7))).astype(np.int64)
    dy = (amp * np.cos(x / (cell / 1.9) + z / (cell / 2.9))).astype(np.int64)
    dz = (amp / 2 * np.sin(x / (cell / 2.1) + y / (cell / 1.3))).astype(np.int64)
    labels = rng.integers(1, 2**48, [n // cell + 3 for n in shape], dtype=np.uint64)
    return np.asfortranarray(
        labels[(x + dx + cell) // cell, (y + dy + cell) // cell, (z + dz + cell) // cell]
    )


def tensorstore_pyramid(image: np.ndarray, method: str) -> list[np.ndarray]:
    base = ts.array(image)
    return [
        ts.downsample(base, [f**k for f in FACTOR], method).read().result()
        for k in range(1, MIPS + 1)
    ]


def agreement(mips, oracle) -> str:
    fractions = [
        np.mean(np.asarray(m)[tuple(slice(0, s) for s in o.shape)] == o)
        if np.shape(m) == o.shape
        else 0.0
        for m, o in zip(mips, oracle)
    ]
    return "/".join(f"{f:.3f}" for f in fractions)


def compare(name: str, image: np.ndarray, method: str, peer, repeat: int) -> None:
    t_sv, ours = best_of(lambda: downsample_pyramid(image, FACTOR, MIPS, method), repeat)
    t_ts, oracle = best_of(lambda: tensorstore_pyramid(image, method), max(1, repeat // 3))
    line = (
        f"{name:<44} shardvol {t_sv:7.4f} s (agree {agreement(ours, oracle)})"
        f" | TensorStore {t_ts:7.4f} s (x{t_ts / t_sv:.1f})"
    )
    if peer is not None:
        t_tb, theirs = best_of(lambda: peer(image), repeat)
        line += (
            f" | tinybrain {t_tb:7.4f} s (x{t_tb / t_sv:.2f}, agree {agreement(theirs, oracle)})"
        )
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    if tinybrain is None:
        print("tinybrain not installed (pip install '.[bench]'): comparing with TensorStore only")

    rng = np.random.default_rng(0)
    image = np.asfortranarray(rng.integers(0, 256, (512, 512, 512), dtype=np.uint8))
    mean_peer = mode_peer = None
    if tinybrain is not None:

        def mean_peer(a):
            return tinybrain.downsample_with_averaging(a, FACTOR, num_mips=MIPS)

        def mode_peer(a):
            return tinybrain.downsample_segmentation(a, FACTOR, num_mips=MIPS)

    compare("mean, 512^3 uint8, 3 mips (2,2,1)", image, "mean", mean_peer, args.repeat)
    del image
    for cell in (48, 16):
        seg = segmentation((512, 512, 128), cell)
        compare(
            f"mode, 512x512x128 uint64, cells {cell}, 3 mips", seg, "mode", mode_peer, args.repeat
        )


if __name__ == "__main__":
    main()
