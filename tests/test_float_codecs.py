"""The float encodings CloudVolume writes for affinities and fields: fpzip, kempressed and
zfpc.  CloudVolume writes, shardvol reads the same values; shardvol writes, CloudVolume
reads the same values; damaged chunks are ChunkDecodeErrors (the fpzip package crashes on
them: shardvol decodes it in a process of its own)."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from shardvol import Volume
from shardvol.errors import ChunkDecodeError, InfoError, InvalidArgumentError
from shardvol.precomputed.codecs import get_codec

SIZE, CHUNK = (40, 32, 20), (20, 16, 10)
CASES = [  # encoding, the scale's options
    ("fpzip", {}),
    ("fpzip", {"fpzip_precision": 18}),
    ("kempressed", {}),
    ("zfpc", {}),
    ("zfpc", {"zfpc_tolerance": 0.01, "zfpc_correlated_dims": [True, True, True, False]}),
    ("zfpc", {"zfpc_rate": 8.0}),
]


def _field(dtype: str, channels: int, seed: int = 0) -> np.ndarray:
    """A smooth random field (what these encodings are for), (x, y, z, channel)."""
    rng = np.random.default_rng(seed)
    steps = rng.normal(size=(*SIZE, channels))
    return np.asfortranarray((steps.cumsum(0) + steps.cumsum(1)).astype(dtype) / 8)


def _cloudvolume(url: str, encoding: str, options: dict, data: np.ndarray | None = None,
                 dtype: str = "float32"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from cloudvolume import CloudVolume

        if data is None:
            return CloudVolume(url, progress=False, cache=False, fill_missing=False)
        info = CloudVolume.create_new_info(data.shape[3], "image", dtype, encoding,
                                           [4, 4, 40], [3, 0, 0], list(SIZE), chunk_size=CHUNK)
        info["scales"][0].update(options)
        cv = CloudVolume(url, info=info, progress=False, cache=False)
        cv.commit_info()
        cv[3:43, 0:32, 0:20] = data
        return cv


@pytest.mark.parametrize(("encoding", "options"), CASES)
def test_reads_what_cloudvolume_writes(tmp_path, encoding, options):
    data = _field("float32", 3)
    cv = _cloudvolume(f"file://{tmp_path}", encoding, options, data)
    expected = np.asarray(cv[3:43, 0:32, 0:20])
    if encoding == "fpzip" and not options:
        np.testing.assert_array_equal(expected, data)  # (lossless)
    got = Volume(str(tmp_path), fill_missing=False)[3:43, 0:32, 0:20]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("sharding", [None, "auto"])
@pytest.mark.parametrize(("encoding", "options"), CASES)
def test_cloudvolume_reads_what_shardvol_writes(tmp_path, encoding, options, sharding):
    data = _field("float32", 2, seed=1)
    vol = Volume.create(str(tmp_path), size=SIZE, data_type="float32", num_channels=2,
                        resolution=(4, 4, 40), voxel_offset=(3, 0, 0), chunk_size=CHUNK,
                        encoding=encoding, encoding_options=options, sharding=sharding)
    vol[3:43, 0:32, 0:20] = data
    assert {k: vol.info["scales"][0][k] for k in options} == options
    ours = vol[3:43, 0:32, 0:20]
    theirs = np.asarray(_cloudvolume(f"file://{tmp_path}", encoding, options)[3:43, 0:32, 0:20])
    np.testing.assert_array_equal(ours, theirs)
    if encoding != "kempressed" and not options:
        np.testing.assert_array_equal(ours, data)  # (lossless)
    if "zfpc_tolerance" in options:
        assert np.abs(ours - data).max() <= options["zfpc_tolerance"]


@pytest.mark.parametrize("encoding", ["fpzip", "zfpc"])
def test_float64_lossless_roundtrip_matches_the_packages(encoding):
    import fpzip
    import zfpc

    data = _field("float64", 2, seed=2)
    codec = get_codec(encoding, dtype="float64", num_channels=2)
    encoded = codec.encode(data)
    np.testing.assert_array_equal(codec.decode(encoded, data.shape), data)
    theirs = (fpzip.decompress(encoded, order="F") if encoding == "fpzip"
              else zfpc.decompress(encoded))  # (zfpc's own reader returns float32)
    np.testing.assert_array_equal(theirs, data.astype(theirs.dtype))


@pytest.mark.parametrize("encoding", ["fpzip", "kempressed", "zfpc"])
def test_damaged_chunks_are_errors_not_crashes(tmp_path, encoding):
    data = _field("float32", 1, seed=3)
    vol = Volume.create(str(tmp_path), size=SIZE, data_type="float32", chunk_size=CHUNK,
                        encoding=encoding, resolution=(4, 4, 40))
    vol[...] = data
    before = vol[0:20, 0:16, 0:10]
    name = os.path.join(tmp_path, "4_4_40", "0-20_0-16_0-10")
    with open(name, "rb") as f:
        whole = f.read()
    rng = np.random.default_rng(4)
    damaged = [whole[: len(whole) // 2], whole[:20], b"\x00" * len(whole)]
    if encoding != "zfpc":  # (zfp streams have no checksums: a flipped bit is other values)
        flipped = bytearray(whole)
        flipped[rng.integers(40, len(whole))] ^= 0x10
        damaged.append(bytes(flipped))
    for stored in damaged:
        with open(name, "wb") as f:
            f.write(stored)
        try:
            got = vol[0:20, 0:16, 0:10]
        except ChunkDecodeError as e:
            assert "0-20_0-16_0-10" in str(e) and encoding.replace("kempressed", "fpzip") in str(e)
        else:  # a bit flip that fpzip decodes without a crash: other values, not a fill
            assert stored is damaged[-1] and not np.array_equal(got, before)
    with open(name, "wb") as f:
        f.write(whole)
    np.testing.assert_array_equal(vol[0:20, 0:16, 0:10], before)  # (decodes again)


def test_a_chunk_of_another_shape_or_type_is_an_error():
    data = _field("float32", 1)
    for encoding in ("fpzip", "zfpc"):
        codec = get_codec(encoding, dtype="float32", num_channels=1)
        encoded = codec.encode(data[:20, :16, :10])
        with pytest.raises(ChunkDecodeError, match="shape"):
            codec.decode(encoded, (20, 16, 9, 1))
        with pytest.raises(ChunkDecodeError, match="float32"):
            get_codec(encoding, dtype="float64", num_channels=1).decode(encoded, (20, 16, 10, 1))


def test_options_are_checked_before_anything_is_written(tmp_path):
    def create(**kw):
        return Volume.create(str(tmp_path), size=SIZE, data_type=kw.pop("data_type", "float32"),
                             chunk_size=CHUNK, **kw)

    for encoding, options in [("zfpc", {"zfpc_rate": 8, "zfpc_tolerance": 0.1}),
                              ("zfpc", {"zfpc_correlated_dims": [False] * 4}),
                              ("fpzip", {"fpzip_precision": 40}),
                              ("fpzip", {"zfpc_rate": 8.0})]:
        with pytest.raises(InvalidArgumentError):
            create(encoding=encoding, encoding_options=options)
    with pytest.raises(InfoError, match="float32/float64"):
        create(encoding="fpzip", data_type="uint8")
    assert os.listdir(tmp_path) == []


def test_downsampled_scales_keep_the_encoding_options(tmp_path):
    import shardvol

    vol = Volume.create(str(tmp_path), size=SIZE, data_type="float32", chunk_size=CHUNK,
                        encoding="zfpc", encoding_options={"zfpc_tolerance": 0.001})
    vol[...] = _field("float32", 1, seed=5)
    shardvol.downsample(vol, num_mips=1, factor=(2, 2, 1), progress=False)
    scales = Volume(str(tmp_path)).info["scales"]
    assert [s.get("zfpc_tolerance") for s in scales] == [0.001, 0.001]
    half = Volume(str(tmp_path), mip=1)[...]
    expected = vol[...].reshape(20, 2, 16, 2, 20, 1).mean(axis=(1, 3))
    assert np.abs(half - expected).max() <= 0.002


def test_kempressed_signaling_nans_decode_without_a_floating_point_warning():
    # what a damaged stream can decode to (fpzip has no checksum): stored values that are
    # signaling NaNs come back as NaNs, the others less 2, with no warning (warnings are
    # errors in this suite)
    stored = np.asfortranarray(np.random.default_rng(5).normal(size=(4, 3, 1, 5)), np.float32)
    bits = stored.view(np.uint32)
    bits[1, 2, 0, 3] = 0x7F800001  # signaling NaN
    bits[3, 0, 0, 1] = 0xFF800123
    data = get_codec("fpzip", dtype="float32", num_channels=5).encode(stored)
    got = get_codec("kempressed", dtype="float32", num_channels=1).decode(data, (4, 3, 5, 1))
    nans = np.zeros(stored.shape, bool)
    nans[1, 2, 0, 3] = nans[3, 0, 0, 1] = True
    nans = np.swapaxes(nans, 2, 3)
    np.testing.assert_array_equal(np.isnan(got), nans)
    values = np.swapaxes(stored, 2, 3)[~nans]
    np.testing.assert_array_equal(got[~nans], values - np.float32(2))


@pytest.mark.parametrize("encoding", ["fpzip", "kempressed"])
def test_every_cut_short_stream_is_an_error(encoding):
    # fpzip streams carry no length: the package decodes a cut-short one on into whatever
    # memory follows it, which gave other values silently when the process did not crash
    codec = get_codec(encoding, dtype="float32", num_channels=1)
    data = _field("float32", 1, seed=6)[:20, :16, :10]
    whole = codec.encode(data)
    np.testing.assert_allclose(codec.decode(whole, data.shape), data, atol=1e-5)  # (v+2)-2
    for cut in range(40, len(whole) - 8, max(1, (len(whole) - 48) // 25)):
        with pytest.raises(ChunkDecodeError, match="chunk x"):
            codec.decode(whole[:cut], data.shape, context="chunk x")
