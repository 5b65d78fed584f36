"""The main job of `make demo`: create, write, read and check volumes, and say what it did.

Run as ``python -m shardvol.demo [WORKDIR]``.  Every step is checked against a
numpy model of the data and, when the ``tensorstore`` package is installed
(``make demo`` installs it), against TensorStore reading the same files.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Literal

import numpy as np

import shardvol
from shardvol.kvstore import open_store
from shardvol.ops.ts_spec import tensorstore_kvstore, within_timeout


def _timed(label: str, fn, nbytes: int):
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    print(f"  {label:<44} {dt * 1e3:8.1f} ms  {nbytes / dt / 1e6:8.0f} MB/s")
    return out


def _tensorstore_read(path: str, scale_index: int = 0) -> np.ndarray | None:
    try:
        import tensorstore as ts
    except ImportError:
        return None
    spec = {"driver": "neuroglancer_precomputed", "scale_index": scale_index,
            "kvstore": tensorstore_kvstore(open_store(path))}
    return within_timeout(within_timeout(ts.open(spec).result, "open the volume").read().result,
                          "read the volume")


#: tensorstore.downsample's methods
_Method = Literal["stride", "median", "mode", "mean", "min", "max"]


def _tensorstore_downsample(path: str, factor, method: _Method) -> np.ndarray | None:
    try:
        import tensorstore as ts
    except ImportError:
        return None
    spec = {"driver": "neuroglancer_precomputed", "kvstore": tensorstore_kvstore(open_store(path))}
    opened = within_timeout(ts.open(spec).result, "open the volume")
    return within_timeout(ts.downsample(opened, [*factor, 1], method).read().result,
                          "downsample the volume")


def _check_pyramid(path: str, mips, factor, method: _Method) -> None:
    for k, mip in enumerate(mips, start=1):
        f = [v**k for v in factor]
        ours = mip[...]
        theirs = _tensorstore_downsample(path, f, method)
        if theirs is None:
            print(f"  mip {k} {mip.scale.key}: {ours.shape[:3]} (TensorStore not installed)")
            continue
        assert np.array_equal(ours, theirs), f"mip {k} differs from tensorstore.downsample"
        print(f"  mip {k} {mip.scale.key}: {ours.shape[:3]}, equal to "
              f"tensorstore.downsample(mip 0, {f}, {method!r}): OK")


def _check(name: str, ours: np.ndarray, model: np.ndarray, path: str, scale_index: int = 0) -> None:
    assert np.array_equal(ours, model), f"{name}: shardvol read differs from what was written"
    theirs = _tensorstore_read(path, scale_index)
    if theirs is None:
        print(f"  {name}: equal to the numpy model (TensorStore not installed: not cross-checked)")
        return
    assert np.array_equal(theirs, model), f"{name}: TensorStore reads something else"
    print(f"  {name}: equal to the numpy model and to TensorStore's read of the same files: OK")


def image_demo(workdir: str) -> None:
    path = os.path.join(workdir, "image")
    size = (256, 256, 128)
    print(f"image: uint8 {size}, 64^3 chunks, raw, sharding='auto', voxel_offset (100, 0, -20)")
    vol = shardvol.Volume.create(path, size=size, voxel_offset=(100, 0, -20), resolution=(8, 8, 40),
                                 chunk_size=(64, 64, 64), data_type="uint8", sharding="auto",
                                 overwrite=True)
    shape = vol.shard_shape
    assert vol.sharding is not None  # (sharding="auto" always shards)
    print(f"  auto sharding: {vol.sharding.to_dict()} -> shards of {shape} voxels")
    x, y, z = np.meshgrid(*(np.arange(n) for n in size), indexing="ij")
    rng = np.random.default_rng(0)
    model = ((x + 2 * y + 3 * z) % 200 + rng.integers(0, 50, size)).astype(np.uint8)[..., None]
    _timed("write the whole volume", lambda: vol.__setitem__(np.s_[...], model), model.nbytes)
    patch = rng.integers(0, 255, (37, 50, 11, 1), dtype=np.uint8)
    vol[130:167, 10:60, -5:6] = patch  # unaligned, read-modify-write of the shard
    model[30:67, 10:60, 15:26] = patch
    print("  overwrote an unaligned 37x50x11 region spanning several chunks")
    out = _timed("read the whole volume", lambda: vol[...], model.nbytes)
    _check("image", out, model, path)
    cut = vol[150:200, 20:90, 0:10]
    assert np.array_equal(cut, model[50:100, 20:90, 20:30])
    print(
        f"  cutout vol[150:200, 20:90, 0:10] -> {cut.shape} {cut.dtype} (x, y, z, c), Fortran order"
    )
    mips = _timed(
        "downsample: 3 mips (2, 2, 1), mean, sharded",
        lambda: shardvol.downsample(vol, (2, 2, 1), 3, progress=False),
        model.nbytes,
    )
    _check_pyramid(path, mips, (2, 2, 1), "mean")


def segmentation_demo(workdir: str) -> None:
    path = os.path.join(workdir, "segmentation")
    size = (192, 160, 64)
    print(f"segmentation: uint64 {size}, compressed_segmentation 8^3 blocks, murmurhash sharding")
    spec = {
        "@type": "neuroglancer_uint64_sharded_v1",
        "hash": "murmurhash3_x86_128",
        "preshift_bits": 0,
        "minishard_bits": 3,
        "shard_bits": 2,
        "minishard_index_encoding": "gzip",
        "data_encoding": "gzip",
    }
    vol = shardvol.Volume.create(
        path,
        type="segmentation",
        size=size,
        data_type="uint64",
        chunk_size=(64, 64, 32),
        encoding="compressed_segmentation",
        sharding=spec,
        overwrite=True,
    )
    rng = np.random.default_rng(1)
    labels = rng.integers(1, 2**63, 300, dtype=np.uint64)
    blocks = rng.integers(0, 300, (24, 20, 8))
    model = labels[blocks].repeat(8, 0).repeat(8, 1).repeat(8, 2)[..., None]
    _timed("write the whole volume", lambda: vol.__setitem__(np.s_[...], model), model.nbytes)
    out = _timed("read the whole volume", lambda: vol[...], model.nbytes)
    _check("segmentation", out, model, path)
    mips = _timed(
        "downsample: 2 mips (2, 2, 2), mode",
        lambda: shardvol.downsample(vol, (2, 2, 2), 2, sharding=None, progress=False),
        model.nbytes,
    )
    _check_pyramid(path, mips, (2, 2, 2), "mode")


def run(workdir: str) -> None:
    image_demo(workdir)
    segmentation_demo(workdir)


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
    print(f"shardvol {shardvol.__version__} demo finished: every check passed")


if __name__ == "__main__":
    main()
