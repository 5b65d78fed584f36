"""Chunk codec throughput: shardvol vs the compressed_segmentation package (the C++ codec
CloudVolume uses), plus raw / jpeg / png decode for reference.

compressed_segmentation on
  - a blocky uint64 segmentation of 512 x 512 x 128 voxels in 64^3 chunks, 8^3 blocks;
  - the 64^3 FIB-25 ground-truth labels (shared/testdata), 8^3 blocks.
MB/s count decoded (raw uint64) bytes.  Decoding into a new array per chunk compares
like with like; "into volume" decodes each chunk straight into its strided place in the
whole (268 MB) volume, as the volume layer does, against the package's new array plus
the copy a reader then needs.  jpeg: a 64^3 chunk decoded whole into a volume view and
as a cutout box, against imagecodecs.jpeg8_decode plus the copy.  Best of several runs,
single thread unless noted; the figures move with the machine's load.
Run: python benchmarks/bench_codecs.py
"""

from __future__ import annotations

import os
import platform
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import compressed_segmentation as cseg_pkg
import imagecodecs
import numpy as np
from _timing import best_of  # benchmarks/ is on sys.path when a script runs

from shardvol.precomputed.codecs import get_codec

FIB25 = (Path(__file__).resolve().parents[1] / "tests" / "data" / "testdata"
         / "google__neuroglancer__cseg_raw_input" / "64x64x64-raw-uint64-segmentation.dat")
CHUNK = 64
BLOCK = (8, 8, 8)


def blocky_segmentation(shape=(512, 512, 128), seed=0) -> np.ndarray:
    """Irregular cells of 10-40 voxels with wavy boundaries and random uint64 ids."""
    rng = np.random.default_rng(seed)
    x, y, z = (np.arange(s, dtype=np.float32) for s in shape)
    X, Y, Z = x[:, None, None], y[None, :, None], z[None, None, :]
    cx = np.floor((X + 4 * np.sin(Y / 9 + Z / 13)) / 23)
    cy = np.floor((Y + 5 * np.sin(X / 11 - Z / 7)) / 31)
    cz = np.floor((Z + 3 * np.sin(X / 17 + Y / 5)) / 17)
    cell = (cx.astype(np.int64) * 7919 + cy.astype(np.int64) * 104729
            + cz.astype(np.int64) * 1299709)
    ids = rng.integers(1, 2**63, 4096, dtype=np.uint64)
    return np.asfortranarray(ids[cell % len(ids)])[..., None]


def chunk_slices(shape):
    for z in range(0, shape[2], CHUNK):
        for y in range(0, shape[1], CHUNK):
            for x in range(0, shape[0], CHUNK):
                yield (slice(x, x + CHUNK), slice(y, y + CHUNK), slice(z, z + CHUNK))


def bench_cseg(name: str, volume: np.ndarray) -> None:
    codec = get_codec("compressed_segmentation", dtype="uint64", num_channels=1,
                      compressed_segmentation_block_size=BLOCK)
    slices = list(chunk_slices(volume.shape))
    chunks = [np.asfortranarray(volume[s]) for s in slices]
    chunks3 = [c[..., 0] for c in chunks]
    encoded = [codec.encode(c) for c in chunks]
    assert encoded[0] == cseg_pkg.compress(chunks3[0], block_size=BLOCK, order="F")
    nbytes = volume.nbytes
    shape3 = (CHUNK, CHUNK, CHUNK)
    out = np.zeros_like(volume, order="F")
    out[...] = 1  # touch every page before timing
    repeat = 7 if len(chunks) < 8 else 3

    def ours_new():
        for e, c in zip(encoded, chunks):
            codec.decode(e, c.shape, "uint64")

    def ours_into():
        for e, s, c in zip(encoded, slices, chunks):
            codec.decode(e, c.shape, "uint64", out=out[s])

    def pkg_decode():
        for e in encoded:
            cseg_pkg.decompress(e, shape3, np.uint64, BLOCK, order="F")

    def pkg_decode_copy():  # how a volume reader would have to use the package
        for e, s in zip(encoded, slices):
            out[s][..., 0] = cseg_pkg.decompress(e, shape3, np.uint64, BLOCK, order="F")

    inner = max(1, 64 // len(chunks))  # repeat small inputs to time something measurable

    def times(fn):
        return best_of(lambda: [fn() for _ in range(inner)], repeat) / inner

    t_new, t_into, t_pkg = times(ours_new), times(ours_into), times(pkg_decode)
    t_pkg_copy = times(pkg_decode_copy)
    ours_into()
    np.testing.assert_array_equal(out, volume)

    def ours_enc():
        for c in chunks:
            codec.encode(c)

    def pkg_enc():
        for c in chunks3:
            cseg_pkg.compress(c, block_size=BLOCK, order="F")

    t_enc, t_pkg_enc = times(ours_enc), times(pkg_enc)
    mb = nbytes / 1e6
    ratio = sum(map(len, encoded)) / nbytes
    print(f"\ncompressed_segmentation, {name} ({len(chunks)} chunks, encoded/raw {ratio:.4f})")
    print(f"  decode  shardvol new array   {mb / t_new:9.0f} MB/s  "
          f"(x{t_pkg / t_new:.2f} vs package)")
    print(f"  decode  package new array    {mb / t_pkg:9.0f} MB/s")
    print(f"  decode  shardvol into volume {mb / t_into:9.0f} MB/s  "
          f"(x{t_pkg_copy / t_into:.2f} vs package + copy)")
    print(f"  decode  package + copy       {mb / t_pkg_copy:9.0f} MB/s")
    print(f"  encode  shardvol             {mb / t_enc:9.0f} MB/s  "
          f"(x{t_pkg_enc / t_enc:.2f} vs package)")
    print(f"  encode  package              {mb / t_pkg_enc:9.0f} MB/s")
    if len(chunks) >= 8:
        bufs = [np.empty(chunks[0].shape, np.uint64, order="F") for _ in range(2)]

        def half(i):  # each thread decodes every other chunk into its own buffer
            for e, c in zip(encoded[i::2], chunks[i::2]):
                codec.decode(e, c.shape, "uint64", out=bufs[i])

        t1 = best_of(lambda: (half(0), half(1)), repeat)
        with ThreadPoolExecutor(2) as pool:
            t2 = best_of(lambda: list(pool.map(half, (0, 1))), repeat)
        print(f"  decode  shardvol 2 threads   {mb / t2:9.0f} MB/s  (x{t1 / t2:.2f} vs 1 thread:"
              " the GIL is released; 2 cores shared with other work)")


def bench_reference_codec(label: str, encoding: str, a: np.ndarray) -> None:
    codec = get_codec(encoding, dtype=a.dtype, num_channels=a.shape[3])
    data = codec.encode(a)
    out = np.zeros((100, 100, 100, a.shape[3]), a.dtype, order="F")[10:74, 20:84, 30:94]
    n = 20

    def loop(fn):  # results are dropped at once, as a reader's would be
        def run():
            for _ in range(n):
                fn()
        return best_of(run) / n

    t_new = loop(lambda: codec.decode(data, a.shape, a.dtype))
    t_into = loop(lambda: codec.decode(data, a.shape, a.dtype, out=out))
    t_enc = loop(lambda: codec.encode(a))
    mb = a.nbytes / 1e6
    print(f"  {label:<20} decode {mb / t_new:7.0f} MB/s new, {mb / t_into:7.0f} MB/s into view;"
          f" encode {mb / t_enc:6.0f} MB/s; {len(data) / a.nbytes:.3f} of raw")


def bench_reference_codecs() -> None:
    print("\nother encodings, 64^3 chunks (for reference)")
    rng = np.random.default_rng(1)
    g = np.mgrid[0:CHUNK, 0:CHUNK, 0:CHUNK].astype(np.float32)
    smooth = (128 + 80 * np.sin(g[0] / 7 + g[1] / 11) * np.cos(g[2] / 5)).astype(np.uint8)
    bench_reference_codec("raw uint64", "raw",
                          rng.integers(0, 2**63, (CHUNK,) * 3 + (1,), dtype=np.uint64))
    bench_reference_codec("raw uint8", "raw", smooth[..., None])
    bench_reference_codec("jpeg uint8 1ch q75", "jpeg", smooth[..., None])
    bench_reference_codec("jpeg uint8 3ch q75", "jpeg",
                          np.stack([smooth, smooth[::-1], smooth.T], 3))
    bench_reference_codec("png uint8 1ch", "png", smooth[..., None])
    bench_reference_codec("png uint16 1ch", "png", smooth[..., None].astype(np.uint16) * 200)


def bench_jpeg() -> None:
    """csrc/jpeg.c (straight into the output, only the rows and columns a box needs) against
    imagecodecs.jpeg8_decode of the whole image plus the copy a reader then needs."""
    print("\njpeg 64^3 chunk, q75 (TensorStore's encoding), noisy smooth image:"
          " shardvol vs imagecodecs.jpeg8_decode + copy")
    rng = np.random.default_rng(2)
    g = np.mgrid[0:CHUNK, 0:CHUNK, 0:CHUNK].astype(np.float32)
    smooth = np.clip(128 + 80 * np.sin(g[0] / 7 + g[1] / 11) * np.cos(g[2] / 5)
                     + rng.normal(0, 8, g[0].shape), 0, 255).astype(np.uint8)
    cutout = (slice(20, 64), slice(0, 40), slice(30, 64))
    for label, a in (("1ch", smooth[..., None]),
                     ("3ch", np.stack([smooth, smooth[::-1], smooth.transpose(1, 0, 2)], 3))):
        c = a.shape[3]
        codec = get_codec("jpeg", dtype="uint8", num_channels=c)
        data = codec.encode(a)
        volume = np.zeros((100, 100, 100, c), np.uint8, order="F")
        whole_view = volume[10:74, 20:84, 30:94]
        box = (*cutout, slice(0, c))
        box_view = volume[:44, :40, :34]

        # The closures run within this iteration; the defaults bind this iteration's values.
        def full_reference(data=data, whole_view=whole_view, c=c):
            img = imagecodecs.jpeg8_decode(data)
            whole_view[...] = img.reshape(CHUNK, CHUNK, CHUNK, c).transpose(2, 1, 0, 3)

        def box_reference(data=data, box_view=box_view, c=c, box=box):
            img = imagecodecs.jpeg8_decode(data)
            box_view[...] = img.reshape(CHUNK, CHUNK, CHUNK, c).transpose(2, 1, 0, 3)[box]

        runs = {
            "full": (lambda codec=codec, data=data, a=a, whole_view=whole_view:
                     codec.decode(data, a.shape, out=whole_view), full_reference),
            "cutout [20:64, 0:40, 30:64]": (
                lambda codec=codec, data=data, a=a, box=box, box_view=box_view:
                codec.decode_region(data, a.shape, box, box_view), box_reference),
        }
        for name, (ours, ref) in runs.items():
            t_ours, t_ref = (best_of(lambda f=f: [f() for _ in range(20)], 9) / 20
                             for f in (ours, ref))
            print(f"  {label} {name:<28} shardvol {t_ours * 1e3:6.3f} ms, imagecodecs + copy "
                  f"{t_ref * 1e3:6.3f} ms (x{t_ref / t_ours:.2f})")


def main() -> None:
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{platform.python_implementation()} {platform.python_version()}, numpy {np.__version__}")
    bench_cseg("blocky uint64 512x512x128", blocky_segmentation())
    fib = np.fromfile(FIB25, dtype="<u8").reshape((64, 64, 64, 1), order="F")
    bench_cseg("FIB-25 labels 64^3", fib)
    bench_reference_codecs()
    bench_jpeg()


if __name__ == "__main__":
    main()
