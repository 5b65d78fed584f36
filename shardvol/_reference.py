"""Pure-numpy versions of shardvol's C kernels: the readable spec and a test oracle.

These are deliberately simple and slow; nothing in the library calls them.
"""

from __future__ import annotations

import numpy as np

_M32 = np.uint64(0xFFFFFFFF)


def compressed_morton_code(grid_coords: np.ndarray, grid_size) -> np.ndarray:
    """Compressed Morton code, bit by bit, exactly as the precomputed spec words it."""
    coords = np.asarray(grid_coords, dtype=np.uint64).reshape(-1, 3)
    size = [int(s) for s in grid_size]
    out = np.zeros(len(coords), dtype=np.uint64)
    j = 0
    for i in range(64):
        for dim in range(3):
            if 2**i < size[dim]:
                bit = (coords[:, dim] >> np.uint64(i)) & np.uint64(1)
                out |= bit << np.uint64(j)
                j += 1
    if j > 64:
        raise OverflowError(f"grid {size} needs {j} bits")
    return out


def _rotl32(x: np.ndarray, r: int) -> np.ndarray:
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & _M32


def _fmix32(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(16))
    h = (h * np.uint64(0x85EBCA6B)) & _M32
    h = h ^ (h >> np.uint64(13))
    h = (h * np.uint64(0xC2B2AE35)) & _M32
    return h ^ (h >> np.uint64(16))


def murmurhash3_x86_128_u64(keys: np.ndarray) -> np.ndarray:
    """Low 64 bits of murmurhash3_x86_128(seed=0) of each key's 8 little-endian bytes."""
    keys = np.asarray(keys, dtype=np.uint64)
    c1, c2, c3 = np.uint64(0x239B961B), np.uint64(0xAB0E9789), np.uint64(0x38B34AE5)
    k1 = keys & _M32
    k2 = keys >> np.uint64(32)
    h1 = _rotl32((k1 * c1) & _M32, 15) * c2 & _M32
    h2 = _rotl32((k2 * c2) & _M32, 16) * c3 & _M32
    h3 = np.zeros_like(keys)
    h4 = np.zeros_like(keys)
    h1, h2, h3, h4 = (h ^ np.uint64(8) for h in (h1, h2, h3, h4))
    h1 = (h1 + h2 + h3 + h4) & _M32
    h2, h3, h4 = ((h + h1) & _M32 for h in (h2, h3, h4))
    h1, h2, h3, h4 = (_fmix32(h) for h in (h1, h2, h3, h4))
    h1 = (h1 + h2 + h3 + h4) & _M32
    h2 = (h2 + h1) & _M32
    return h1 | (h2 << np.uint64(32))


def compressed_segmentation_decode(data: bytes, shape, block_size, dtype) -> np.ndarray:
    """Decode compressed_segmentation ``data`` of ``shape`` (x, y, z, channel), block by block,
    as csrc/cseg.h words the format; raises ValueError wherever the data is invalid
    (same validity rules as the C decoder: every offset, bit width and index checked)."""
    dtype = np.dtype(dtype)
    wpl = dtype.itemsize // 4
    if len(data) % 4:
        raise ValueError("length not a multiple of 4")
    words = np.frombuffer(data, dtype="<u4").astype(np.uint64)
    out = np.zeros(shape, dtype=dtype, order="F")
    bs = [int(b) for b in block_size]
    grid = [-(-int(shape[d]) // bs[d]) for d in range(3)]
    if len(words) < shape[3]:
        raise ValueError("too short for the channel offsets")
    for c in range(shape[3]):
        if int(words[c]) > len(words):
            raise ValueError(f"channel {c} offset past the end")
        cw = words[int(words[c]):]
        if 2 * grid[0] * grid[1] * grid[2] > len(cw):
            raise ValueError("too short for the block headers")
        for bz in range(grid[2]):
            for by in range(grid[1]):
                for bx in range(grid[0]):
                    i = 2 * (bx + grid[0] * (by + grid[1] * bz))
                    toff, bits, voff = int(cw[i]) & 0xFFFFFF, int(cw[i]) >> 24, int(cw[i + 1])
                    if bits not in (0, 1, 2, 4, 8, 16, 32):
                        raise ValueError(f"bad bit width {bits}")
                    if voff + -(-bits * bs[0] * bs[1] * bs[2] // 32) > len(cw):
                        raise ValueError("encoded values past the end")
                    if toff + wpl > len(cw):
                        raise ValueError("table offset past the end")
                    n_table = (len(cw) - toff) // wpl
                    tw = cw[toff: toff + n_table * wpl].reshape(n_table, wpl)
                    table = tw[:, 0] | (tw[:, 1] << np.uint64(32)) if wpl == 2 else tw[:, 0]
                    lo = (bx * bs[0], by * bs[1], bz * bs[2])
                    hi = [min(lo[d] + bs[d], int(shape[d])) for d in range(3)]
                    xx, yy, zz = np.meshgrid(*(np.arange(hi[d] - lo[d]) for d in range(3)),
                                             indexing="ij")
                    pos = (xx + bs[0] * (yy + bs[1] * zz)).astype(np.uint64) * np.uint64(bits)
                    if bits:
                        word = cw[voff + (pos >> np.uint64(5)).astype(np.int64)]
                        idx = (word >> (pos & np.uint64(31))) & np.uint64((1 << bits) - 1)
                    else:
                        idx = np.zeros(pos.shape, np.uint64)
                    if idx.size and int(idx.max()) >= n_table:
                        raise ValueError("table index past the end of the table")
                    out[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2], c] = table[idx.astype(np.int64)]
    return out


def minishard_index_decode(buf: bytes, base: int) -> tuple[list[int], list[int], list[int]]:
    """(keys, data starts, data sizes) of a raw minishard index, in Python integers, as the
    sharded format words it; ValueError("duplicate" | "key overflow" | "offset overflow",
    entry) where a key repeats or a sum passes 2**64 - 1."""
    n = len(buf) // 24
    words = [int.from_bytes(buf[8 * i : 8 * i + 8], "little") for i in range(3 * n)]
    keys, starts, sizes = [], [], []
    key, end = 0, base
    for i in range(n):
        if i and words[i] == 0:
            raise ValueError("duplicate", i)
        key += words[i]
        start = end + words[n + i]
        end = start + words[2 * n + i]
        if key >= 2**64:
            raise ValueError("key overflow", i)
        if end >= 2**64:
            raise ValueError("offset overflow", i)
        keys.append(key)
        starts.append(start)
        sizes.append(words[2 * n + i])
    return keys, starts, sizes


def downsample(array: np.ndarray, factor, method: str, phase=(0, 0, 0)) -> np.ndarray:
    """Pool a 4-D (x, y, z, c) array block by block, as ``ts.downsample`` defines it.

    ``phase`` is the global coordinate of array[0, 0, 0]; blocks are aligned to
    multiples of ``factor`` in that frame and edge blocks pool only the voxels
    present.  Integer means round half to even; float means add the block's
    voxels in x-fastest order in the element type; modes break ties towards
    the smallest value; stride takes the first voxel present.
    """
    factor = [int(f) for f in factor]
    phase = [int(p) % f for p, f in zip(phase, factor)]
    shape = [-(-(p + n) // f) if n else 0 for n, f, p in zip(array.shape[:3], factor, phase)]
    out = np.empty((*shape, array.shape[3]), dtype=array.dtype, order="F")
    for o in np.ndindex(*shape):
        block = array[
            tuple(slice(max(0, i * f - p), (i + 1) * f - p) for i, f, p in zip(o, factor, phase))
        ]
        for c in range(array.shape[3]):
            at = (*o, c)  # (star unpacking inside [...] needs Python 3.11)
            out[at] = _pool_block(block[..., c].ravel(order="F"), method)
    return out


def _pool_block(values: np.ndarray, method: str):
    if method == "stride":
        return values[0]
    if method in ("min", "max"):
        if values.dtype.kind == "f":
            kept = values[~np.isnan(values)]
            if not len(kept):
                return np.inf if method == "min" else -np.inf
            # the first of equal values wins (matters for -0.0 / +0.0)
            best = kept.min() if method == "min" else kept.max()
            return kept[np.flatnonzero(kept == best)[0]]
        return values.min() if method == "min" else values.max()
    if method == "mode":
        uniq, counts = np.unique(values, return_counts=True)
        return uniq[np.argmax(counts)]  # unique is sorted: the first maximum is the smallest
    if values.dtype.kind == "f":
        acc = values.dtype.type(0)
        for v in values:
            acc = values.dtype.type(acc + v)
        return values.dtype.type(acc / values.dtype.type(len(values)))
    total, n = sum(int(v) for v in values), len(values)
    q, r = divmod(total, n)  # floor division: r >= 0
    return q + (2 * r > n or (2 * r == n and q % 2 == 1))
