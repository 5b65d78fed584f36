"""Chunk files CloudVolume stored compressed whole (its ``compress=`` option): read exactly,
in local files (``NAME.br``, ``NAME.zstd``, ...) and in S3 (``NAME`` with a
``Content-Encoding``); a copy shardvol cannot decode is an error, never the fill value.

CloudVolume writes every volume here; numpy holds what it was given.
"""

from __future__ import annotations

import bz2
import lzma
import os
import warnings

import brotli
import numpy as np
import pytest
import zstandard

from shardvol import Volume
from shardvol.compression import FILE_SUFFIXES, content_coding, decompress
from shardvol.errors import ChunkDecodeError, MissingChunkError, StoreError

from .s3_server import new_bucket, public_http_url

COMPRESS = ["gzip", "br", "zstd", "xz", "bzip2"]


def _cloudvolume(url: str, encoding: str, compress: str | None, dtype: str = "uint32",
                 seed: int = 0) -> np.ndarray:
    """A 2x2x2-chunk volume at ``url`` written by CloudVolume with ``compress``; its data."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from cloudvolume import CloudVolume

        layer = "image" if encoding == "raw" else "segmentation"
        info = CloudVolume.create_new_info(1, layer, dtype, encoding, [4, 4, 40], [3, 0, 0],
                                           [40, 32, 20], chunk_size=[20, 16, 10])
        cv = CloudVolume(url, info=info, compress=compress, progress=False, cache=False)
        cv.commit_info()
        data = np.random.default_rng(seed).integers(0, 9, (40, 32, 20, 1)).astype(dtype)
        cv[3:43, 0:32, 0:20] = data
    return data


def _cv_read(url: str) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from cloudvolume import CloudVolume

        cv = CloudVolume(url, progress=False, cache=False, fill_missing=False)
        return np.asarray(cv[3:43, 0:32, 0:20])


@pytest.mark.parametrize("compress", COMPRESS)
@pytest.mark.parametrize("encoding", ["raw", "compressed_segmentation"])
def test_reads_local_chunk_files_cloudvolume_compressed(tmp_path, encoding, compress):
    data = _cloudvolume(f"file://{tmp_path}", encoding, compress)
    files = os.listdir(tmp_path / "4_4_40")
    assert files and all(f.endswith(FILE_SUFFIXES[compress]) for f in files)
    vol = Volume(str(tmp_path), fill_missing=False)
    np.testing.assert_array_equal(vol[...], data)
    np.testing.assert_array_equal(vol[10:30, 5:20, 8:12], data[7:27, 5:20, 8:12])
    assert all(vol.exists().values()) and len(vol.exists()) == 8


def test_writes_over_compressed_chunks_replace_them(tmp_path):
    """A partial write merges into the brotli chunk, stores NAME and drops NAME.br, so
    CloudVolume (which may look for NAME.br first) reads the new data too."""
    data = _cloudvolume(f"file://{tmp_path}", "compressed_segmentation", "br")
    vol = Volume(str(tmp_path))
    patch = np.random.default_rng(1).integers(100, 200, (7, 9, 4, 1)).astype(np.uint32)
    vol[10:17, 12:21, 8:12] = patch
    data[7:14, 12:21, 8:12] = patch
    np.testing.assert_array_equal(vol[...], data)
    names = os.listdir(tmp_path / "4_4_40")
    touched = {"3-23_0-16_0-10", "3-23_16-32_0-10", "3-23_0-16_10-20", "3-23_16-32_10-20"}
    assert touched <= set(names) and not {n + ".br" for n in touched} & set(names)
    np.testing.assert_array_equal(_cv_read(f"file://{tmp_path}"), data)
    vol.delete(np.s_[3:23, 0:16, 0:10])
    vol.delete(np.s_[23:43, 0:16, 0:10])  # (stored as NAME.br only)
    assert not {"3-23_0-16_0-10", "23-43_0-16_0-10.br"} & set(os.listdir(tmp_path / "4_4_40"))
    assert not vol[3:43, 0:16, 0:10].any()


@pytest.mark.parametrize("compress", ["br", "zstd", "xz"])
def test_corrupt_compressed_chunk_is_an_error_not_fill(tmp_path, compress):
    _cloudvolume(f"file://{tmp_path}", "raw", compress)
    name = tmp_path / "4_4_40" / f"3-23_0-16_0-10{FILE_SUFFIXES[compress]}"
    name.write_bytes(name.read_bytes()[:-7] + b"garbage")
    for vol in (Volume(str(tmp_path)), Volume(str(tmp_path), fill_missing=False)):
        with pytest.raises(ChunkDecodeError, match=rf"3-23_0-16_0-10\{FILE_SUFFIXES[compress]}"):
            vol[3:10, 0:5, 0:5]
    name.unlink()
    assert not Volume(str(tmp_path))[3:10, 0:5, 0:5].any()
    with pytest.raises(MissingChunkError):
        Volume(str(tmp_path), fill_missing=False)[3:10, 0:5, 0:5]


def test_compression_bombs_are_bounded(tmp_path):
    """A small brotli file that decodes to far more than a chunk is corrupt, not an
    allocation of its size."""
    _cloudvolume(f"file://{tmp_path}", "raw", "br", dtype="uint8")
    name = tmp_path / "4_4_40" / "3-23_0-16_0-10.br"
    name.write_bytes(brotli.compress(bytes(1 << 30), quality=1))
    with pytest.raises(ChunkDecodeError, match="more than"):
        Volume(str(tmp_path))[3:10, 0:5, 0:5]


@pytest.mark.parametrize("coding", COMPRESS)
def test_decompress_against_each_codings_own_package(coding):
    raw = np.random.default_rng(5).integers(0, 4, 300_000, dtype=np.uint8).tobytes()
    packed = {"gzip": lambda b: __import__("gzip").compress(b),
              "br": brotli.compress,
              "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
              "xz": lzma.compress,
              "bzip2": bz2.compress}[coding](raw)
    assert decompress(packed, coding, "x", ChunkDecodeError) == raw
    assert decompress(packed, coding, "x", ChunkDecodeError, max_size=len(raw)) == raw
    with pytest.raises(ChunkDecodeError, match="x: "):
        decompress(packed, coding, "x", ChunkDecodeError, max_size=len(raw) - 1)
    with pytest.raises(ChunkDecodeError, match="x: "):
        decompress(packed[: len(packed) // 2], coding, "x", ChunkDecodeError)


def test_content_coding_names():
    assert [content_coding(v) for v in (None, "", "identity", "aws-chunked", "x-gzip",
                                        "BR", "bz2", "aws-chunked,gzip", "compress")] == [
        None, None, None, None, "gzip", "br", "bzip2", "gzip", "compress"]
    with pytest.raises(ChunkDecodeError, match="compress"):
        decompress(b"abc", "compress", "x", ChunkDecodeError)


@pytest.mark.parametrize(("encoding", "compress"), [
    ("compressed_segmentation", None),  # CloudVolume's default for segmentation: gzip
    ("compressed_segmentation", "br"),
    ("raw", "zstd"),
    ("raw", "xz"),
])
def test_reads_s3_objects_with_content_encoding(s3, monkeypatch, encoding, compress):
    # (cloud-files takes credentials from the environment only with a session token)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "")
    """Also over plain HTTP (moto's answers carry the objects' Content-Encoding)."""
    bucket = new_bucket()
    data = _cloudvolume(f"{bucket}/v", encoding, compress, seed=3)
    for url in (f"{bucket}/v", f"{public_http_url(s3, bucket)}/v"):
        vol = Volume(url, cache_bytes=0, fill_missing=False)
        np.testing.assert_array_equal(vol[...], data)
        np.testing.assert_array_equal(vol[4:30, 1:31, 2:19], data[1:27, 1:31, 2:19])
        key = f"{vol.scale.key}/3-23_0-16_0-10"
        with pytest.raises(StoreError, match=r"Content-Encoding .*byte range"):
            vol.store.get(key, (0, 10))


def test_copies_are_unlinked_in_one_call(tmp_path):
    """unlink_absent_ok removes what exists, passes over what does not, and names the first
    path it could not remove."""
    from shardvol._ext.files import unlink_absent_ok

    (tmp_path / "a.gz").write_bytes(b"x")
    (tmp_path / "dir.br").mkdir()
    unlink_absent_ok([str(tmp_path / "a.gz"), str(tmp_path / "absent.br"),
                      str(tmp_path / "a.gz" / "below")])
    assert not (tmp_path / "a.gz").exists()
    with pytest.raises(OSError, match=r"dir\.br"):
        unlink_absent_ok([str(tmp_path / "absent.gz"), str(tmp_path / "dir.br")])
