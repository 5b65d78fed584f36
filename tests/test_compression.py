"""gzip helpers against Python's gzip module (an independent implementation)."""

import gzip
import tracemalloc
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardvol.compression import gzip_compress, gzip_decompress, is_gzip, zstd_compress
from shardvol.errors import ChunkDecodeError


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=5000), st.integers(1, 9))
def test_roundtrip_with_python_gzip(data, level):
    packed = gzip_compress(data, level)
    assert is_gzip(packed) and gzip.decompress(packed) == data
    assert gzip_decompress(gzip.compress(data), "x", ChunkDecodeError) == data


def test_multi_member_streams_are_fully_decoded():
    data = gzip.compress(b"a" * 100) + gzip.compress(b"bc" * 7)
    assert gzip_decompress(data, "x", ChunkDecodeError) == b"a" * 100 + b"bc" * 7


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"plain bytes",
        gzip.compress(b"hello world" * 50)[:-5],
        gzip.compress(b"hello world" * 50)[:20],
        b"\x1f\x8b\x08" + b"\0" * 30,
    ],
)
def test_corrupt_gzip_is_a_named_error(bad):
    with pytest.raises(ChunkDecodeError, match="chunk 1-2_3-4_5-6"):
        gzip_decompress(bad, "chunk 1-2_3-4_5-6", ChunkDecodeError)


def test_expected_size_is_enforced():
    with pytest.raises(ChunkDecodeError, match="expected 11"):
        gzip_decompress(gzip.compress(b"0123456789"), "c", ChunkDecodeError, expected_size=11)


def _bomb(members: int, member_bytes: int = 16 << 20) -> bytes:
    """A multi-member gzip stream of ``members`` * ``member_bytes`` zeros, then b"x"."""
    zeros = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = zeros.compress(bytes(member_bytes)) + zeros.flush()
    return member * members + gzip.compress(b"x")


@pytest.mark.parametrize("bound", ["expected_size", "max_size"])
def test_inflating_stops_once_the_output_outgrows_its_bound(bound):
    bomb = _bomb(64)  # 1 GiB of zeros in 1 MB; its trailer says 1 byte
    tracemalloc.start()
    with pytest.raises(ChunkDecodeError, match="decodes to more than 512 bytes"):
        gzip_decompress(bomb, "c", ChunkDecodeError, **{bound: 512})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 << 20  # never more than a few MB, not the GiB
    big = gzip.compress(bytes(1000))  # a single member, over the bound
    with pytest.raises(ChunkDecodeError, match="more than 999 bytes"):
        gzip_decompress(big, "c", ChunkDecodeError, max_size=999)
    assert gzip_decompress(big, "c", ChunkDecodeError, max_size=1000) == bytes(1000)
    two = _bomb(2, 300)
    assert gzip_decompress(two, "c", ChunkDecodeError, max_size=601) == bytes(600) + b"x"
    with pytest.raises(ChunkDecodeError, match="more than 600 bytes"):
        gzip_decompress(two, "c", ChunkDecodeError, max_size=600)


def test_a_trailer_claiming_more_than_deflate_can_hold_is_not_trusted():
    forged = bytearray(gzip.compress(b"abc"))
    forged[-4:] = (0xFFFFFFF0).to_bytes(4, "little")  # ISIZE: 4 GiB from 23 bytes
    tracemalloc.start()
    with pytest.raises(ChunkDecodeError, match="c: "):
        gzip_decompress(bytes(forged), "c", ChunkDecodeError)
    assert tracemalloc.get_traced_memory()[1] < 1 << 20  # no 4 GiB output buffer
    tracemalloc.stop()


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_streams_never_crash(data):
    good = bytearray(gzip.compress(bytes(range(256)) * 8))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(good) - 1))
        good[i] = data.draw(st.integers(0, 255))
    try:
        out = gzip_decompress(bytes(good), "m", ChunkDecodeError)
    except ChunkDecodeError:
        return
    assert isinstance(out, bytes)


@pytest.mark.parametrize("level", [-5, 0, 1, 3, 19])
@pytest.mark.parametrize("checksum", [False, True])
def test_zstd_frames_decode_elsewhere_and_say_what_they_hold(level, checksum):
    """Frames from the per-thread compressors: numcodecs and imagecodecs (other zstd builds)
    decode them; the header holds the content size and, if asked, the checksum flag; a
    negative level is zstd's fast mode, not the default."""
    import imagecodecs
    import numcodecs
    import numpy as np

    rng = np.random.default_rng(level + 10)
    data = (rng.integers(0, 8, 300_000, dtype=np.uint8) * 17).tobytes()
    frame = zstd_compress(data, level, checksum)
    assert numcodecs.Zstd().decode(frame) == data
    assert imagecodecs.zstd_decode(frame) == data
    descriptor = frame[4]
    assert bool(descriptor & 0x04) == checksum  # Content_Checksum_flag
    assert descriptor >> 6 == 2  # Frame_Content_Size_flag: a 4-byte size
    assert int.from_bytes(frame[5:9], "little") == len(data)
    if level < 0:
        assert len(frame) > len(zstd_compress(data, 3))
    if checksum:  # a flipped byte of the content is caught by the checksum
        bad = bytearray(frame)
        bad[len(bad) // 2] ^= 0xFF
        with pytest.raises(RuntimeError, match=r"checksum|corrupt"):
            numcodecs.Zstd().decode(bytes(bad))


def test_zstd_compressors_are_one_per_thread():
    """Threads compressing at once, each with its own compressor, give each its frame."""
    from concurrent.futures import ThreadPoolExecutor

    import numcodecs
    import numpy as np

    blobs = [np.random.default_rng(i).integers(0, 4, 200_000 + i, dtype=np.uint8).tobytes()
             for i in range(64)]
    with ThreadPoolExecutor(8) as pool:
        frames = list(pool.map(lambda b: zstd_compress(b, 3), blobs))
    assert [numcodecs.Zstd().decode(f) for f in frames] == blobs
