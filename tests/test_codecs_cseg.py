"""compressed_segmentation against the compressed_segmentation package (byte-identical
encoding, decoding of its output), TensorStore's golden chunks, the FIB-25 labels, and
forged / truncated / fuzzed input."""

import json
import struct
from pathlib import Path

import compressed_segmentation as cseg_pkg
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from shardvol._reference import compressed_segmentation_decode as reference_decode
from shardvol.errors import ChunkDecodeError, ChunkEncodeError
from shardvol.precomputed.codecs import get_codec

TESTDATA = Path(__file__).parent / "data" / "testdata"  # copies; see each SOURCE.txt
FIB25 = TESTDATA / "google__neuroglancer__cseg_raw_input" / "64x64x64-raw-uint64-segmentation.dat"


def codec(dtype="uint64", channels=1, block=(8, 8, 8)):
    return get_codec("compressed_segmentation", dtype=dtype, num_channels=channels,
                     compressed_segmentation_block_size=block)


def package_encode(a, block):
    """The package's encoding of a 4-D (x, y, z, c) array, channel by channel.

    The package's own 4-D path crashes (it reads past its input for more than
    one channel), so the multi-channel layout is assembled here from its
    single-channel output (whose first word is its one channel offset): one uint32
    offset per channel, then the channels."""
    parts = [cseg_pkg.compress(np.asfortranarray(a[..., c]), block_size=block, order="F")[4:]
             for c in range(a.shape[3])]
    offsets, pos = [], a.shape[3]
    for p in parts:
        offsets.append(pos)
        pos += len(p) // 4
    return struct.pack(f"<{len(offsets)}I", *offsets) + b"".join(parts)


@pytest.fixture(scope="module")
def fib25():
    return np.fromfile(FIB25, dtype="<u8").reshape((64, 64, 64, 1), order="F")


def blocky(shape, dtype, seed, n_labels=6, cell=(5, 4, 3)):
    """Segmentation-like labels: random ids on boxes of about `cell` voxels."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, np.iinfo(dtype).max, n_labels, dtype=dtype, endpoint=True)
    g = np.mgrid[0:shape[0], 0:shape[1], 0:shape[2]]
    key = sum(rng.integers(0, 1000, 1) * (g[d] // cell[d]) for d in range(3))
    out = ids[(key + rng.integers(0, 3, g[0].shape) * (rng.random(g[0].shape) < 0.02)) % n_labels]
    return np.stack([np.roll(out, c, 0) for c in range(shape[3])], axis=3)


# ---- the compressed_segmentation package as oracle ---------------------------------------------


@pytest.mark.parametrize("block", [(8, 8, 8), (4, 4, 4), (3, 5, 7), (16, 16, 16), (64, 64, 64),
                                   (1, 1, 1), (64, 2, 1)])
@pytest.mark.parametrize("dtype", ["uint64", "uint32"])
def test_fib25_byte_identical_with_package_and_round_trips(fib25, block, dtype):
    a = fib25.astype(dtype)
    c = codec(dtype, 1, block)
    data = c.encode(a)
    assert data == package_encode(a, block)
    np.testing.assert_array_equal(c.decode(data, a.shape, dtype), a)
    pkg = cseg_pkg.decompress(data, (64, 64, 64), np.dtype(dtype), block, order="F")
    np.testing.assert_array_equal(pkg, a[..., 0])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.tuples(st.integers(1, 19), st.integers(1, 19), st.integers(1, 11),
                    st.integers(1, 3)),
    block=st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9)),
    dtype=st.sampled_from(["uint32", "uint64"]),
    n_labels=st.sampled_from([1, 2, 3, 5, 17, 300, 5000]),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_volumes_match_package(shape, block, dtype, n_labels, seed):
    a = blocky(shape, np.dtype(dtype), seed, n_labels)
    c = codec(dtype, shape[3], block)
    data = c.encode(a)
    assert data == package_encode(a, block)
    # x contiguous (Fortran order) takes the encoder's row-at-a-time paths
    assert c.encode(np.asfortranarray(a)) == data
    np.testing.assert_array_equal(c.decode(data, a.shape, dtype), a)


def test_bit_widths_up_to_32_and_full_64_bit_labels():
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 4, 5, 16, 17, 256, 257, 65536, 65537):
        shape = (64, 32, 33) if n > 256 else (8, 8, 8)  # one block holding all n labels
        labels = rng.permutation(np.arange(n, dtype=np.uint64) * 0x0101010101 + 2**63)
        a = np.resize(labels, np.prod(shape)).reshape((*shape, 1), order="F")
        block = shape
        c = codec("uint64", 1, block)
        data = c.encode(a)
        bits = struct.unpack_from("<I", data, 4)[0] >> 24
        assert bits == (0 if n == 1 else next(b for b in (1, 2, 4, 8, 16, 32) if 2**b >= n))
        if n <= 65536:  # the package never returns for more (its bit-width loop overflows)
            assert data == package_encode(a, block)
        np.testing.assert_array_equal(c.decode(data, a.shape, "uint64"), a)


def test_decodes_package_output_into_strided_views(fib25):
    a = fib25[3:50, 10:64, 0:33]
    data = package_encode(a, (8, 8, 8))
    c = codec()
    big = np.zeros((70, 90, 40, 1), np.uint64, order="F")
    c.decode(data, a.shape, "uint64", out=big[11:58, 30:84, 5:38])
    np.testing.assert_array_equal(big[11:58, 30:84, 5:38], a)
    assert big.sum(dtype=np.uint64) == a.sum(dtype=np.uint64)
    rev = np.zeros((1, 40, 60, 50), np.uint64).transpose(3, 2, 1, 0)[49:2:-1, 59:5:-1, 1:34]
    c.decode(data, a.shape, "uint64", out=rev)
    np.testing.assert_array_equal(rev, a)


# ---- TensorStore's golden chunks ------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["uint32", "uint64"])
def test_tensorstore_golden_chunks(dtype):
    d = TESTDATA / f"google__tensorstore__golden_cseg_{dtype}"
    info = json.loads((d / "info").read_text())
    scale = info["scales"][0]
    c = get_codec(scale["encoding"], dtype=info["data_type"], num_channels=info["num_channels"],
                  compressed_segmentation_block_size=scale["compressed_segmentation_block_size"])
    vol = np.zeros((3, 4, 3, 1), dtype, order="F")
    for f in sorted((d / scale["key"]).iterdir()):
        (x0, x1), (y0, y1), (z0, z1) = (tuple(map(int, p.split("-"))) for p in f.name.split("_"))
        data = f.read_bytes()
        out = vol[x0:x1, y0:y1, z0:z1]
        c.decode(data, out.shape, dtype, out=out, context=f.name)
        assert c.encode(out) == data  # byte-identical with TensorStore's writer
    np.testing.assert_array_equal(vol[..., 0], np.load(d / "expected_xyz_x0-3_y0-4_z0-3.npy"))


# ---- bad input ------------------------------------------------------------------------------


def words(*w):
    return struct.pack(f"<{len(w)}I", *w)


# one channel, 2x1x1 volume, block (2, 1, 1); channel words: block header (table at
# word 3, 1 bit; values at word 2), the packed indices, the table [7, 9]
VALID = words(1, 3 | (1 << 24), 2, 0b10, 7, 9)


@pytest.mark.parametrize(
    "data, words_in_message",
    [
        (VALID[:-1], "multiple of 4"),
        (b"", "too short for 1 channel"),
        (words(9) + VALID[4:], "offset 9 is past the end"),
        (VALID[:8], "block headers"),
        (words(1, 3 | (3 << 24), 2, 0b10, 7, 9), "encoded bits 3"),
        (words(1, 3 | (64 << 24), 2, 0b10, 7, 9), "encoded bits 64"),
        (words(1, 3 | (1 << 24), 5, 0b10, 7, 9), "encoded values end at word 6"),
        (words(1, 9 | (1 << 24), 2, 0b10, 7, 9), "lookup table offset 9"),
        (words(1, 4 | (1 << 24), 2, 0b10, 7, 9), "encoded index 1 is past the end"),
        (words(1, 2 | (2 << 24), 2, 0b1100, 7), "encoded index 3"),
        (words(1, 0xFFFFFF, 2, 0b10, 7, 9), "lookup table offset 16777215"),
    ],
)
def test_forged_chunks_are_named_errors(data, words_in_message):
    c = codec("uint32", 1, (2, 1, 1))
    np.testing.assert_array_equal(c.decode(VALID, (2, 1, 1, 1), "uint32")[:, 0, 0, 0], [7, 9])
    with pytest.raises(ChunkDecodeError) as e:
        c.decode(data, (2, 1, 1, 1), "uint32", context="seg/0-2_0-1_0-1")
    assert "seg/0-2_0-1_0-1" in str(e.value) and words_in_message in str(e.value)


def test_uint64_table_entry_must_fit():
    c = codec("uint64", 1, (1, 1, 1))
    ok = words(1, 2, 2, 5, 1)  # bits 0, table at channel word 2 (two words, low first)
    assert c.decode(ok, (1, 1, 1, 1), "uint64")[0, 0, 0, 0] == 5 + 2**32
    with pytest.raises(ChunkDecodeError, match="lookup table offset 3"):
        c.decode(words(1, 3, 2, 5, 1), (1, 1, 1, 1), "uint64")


def test_chunk_too_large_for_24_bit_table_offsets_is_an_encode_error():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2**32, (256, 256, 192, 1), dtype=np.uint32)  # 512 labels per block
    with pytest.raises(ChunkEncodeError, match="24-bit"):
        codec("uint32").encode(a)


def _mutations(draw_data, valid: bytes) -> bytes:
    data = bytearray(valid)
    kind = draw_data.draw(st.sampled_from(["flip", "word", "truncate", "header", "extend"]))
    if kind == "truncate":
        return bytes(data[: draw_data.draw(st.integers(0, len(data)))])
    if kind == "extend":
        return bytes(data) + draw_data.draw(st.binary(max_size=64))
    for _ in range(draw_data.draw(st.integers(1, 6))):
        if kind == "flip":
            i = draw_data.draw(st.integers(0, len(data) - 1))
            data[i] ^= 1 << draw_data.draw(st.integers(0, 7))
        else:  # overwrite a word, in the headers when kind == "header"
            nwords = len(data) // 4
            hi = min(nwords, 80) if kind == "header" else nwords
            i = draw_data.draw(st.integers(0, hi - 1))
            v = draw_data.draw(st.one_of(st.integers(0, 2**32 - 1), st.integers(0, 300),
                                         st.sampled_from([3 << 24, 5 << 24, 64 << 24, 0xFFFFFF])))
            data[4 * i: 4 * i + 4] = struct.pack("<I", v)
    return bytes(data)


_FUZZ_INPUTS = []


def _fuzz_inputs():
    if not _FUZZ_INPUTS:
        rng = np.random.default_rng(11)
        for dtype, shape, block in [("uint64", (16, 12, 10, 1), (8, 8, 8)),
                                    ("uint32", (9, 7, 5, 2), (3, 2, 4)),
                                    ("uint64", (20, 3, 3, 1), (4, 4, 1))]:
            a = blocky(shape, np.dtype(dtype), int(rng.integers(1000)), n_labels=40)
            _FUZZ_INPUTS.append((codec(dtype, shape[3], block), a, codec(dtype, shape[3],
                                                                         block).encode(a)))
    return _FUZZ_INPUTS


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 2), draw_data=st.data())
def test_fuzzed_chunks_decode_or_raise_named_errors(which, draw_data):
    """Mutated valid chunks: the C decoder fails exactly when the pure-numpy reference
    does (with a ChunkDecodeError naming the chunk), and otherwise agrees with it."""
    c, a, valid = _fuzz_inputs()[which]
    bad = _mutations(draw_data, valid)
    block = c.compressed_segmentation_block_size
    try:
        expected = reference_decode(bad, a.shape, block, c.dtype)
    except ValueError:
        expected = None
    event("rejected" if expected is None else "decoded")
    if expected is None:
        with pytest.raises(ChunkDecodeError, match="fuzz/chunk"):
            c.decode(bad, a.shape, c.dtype, context="fuzz/chunk")
    else:
        np.testing.assert_array_equal(c.decode(bad, a.shape, c.dtype, context="fuzz/chunk"),
                                      expected)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_reference_decoder_agrees_on_valid_chunks(which):
    c, a, valid = _fuzz_inputs()[which]
    block = c.compressed_segmentation_block_size
    np.testing.assert_array_equal(reference_decode(valid, a.shape, block, c.dtype), a)
