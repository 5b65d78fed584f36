"""gzip helpers against Python's gzip module (an independent implementation)."""

import gzip

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardvol.compression import gzip_compress, gzip_decompress, is_gzip
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
