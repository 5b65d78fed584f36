"""Opening volumes with the oracle libraries (TensorStore, CloudVolume)."""

from __future__ import annotations

import os
import types
import warnings

import numpy as np
import tensorstore as ts
from hypothesis import strategies as st

# A copy of the project's shared/testdata (written by other implementations; see each SOURCE.txt)
TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "testdata")


def data_path(*parts: str) -> str:
    return os.path.join(TESTDATA, *parts)


#: Hypothesis strategies of a random volume: data type, channels, shape, chunk size,
#: voxel offset and the seed of its values (see random_values).
RANDOM_VOLUMES = {
    "dtype": st.sampled_from(["uint8", "int16", "uint32", "float32", "uint64"]),
    "channels": st.integers(1, 3),
    "shape": st.tuples(st.integers(1, 40), st.integers(1, 40), st.integers(1, 30)),
    "chunk": st.tuples(st.integers(1, 17), st.integers(1, 17), st.integers(1, 9)),
    "offset": st.tuples(st.integers(-20, 20), st.integers(-20, 20), st.integers(-20, 20)),
    "seed": st.integers(0, 2**32 - 1),
}


def random_values(shape, dtype, rng: np.random.Generator) -> np.ndarray:
    """Random values over the whole range of ``dtype`` (normal ones for floats)."""
    if np.dtype(dtype).kind == "f":
        return rng.normal(size=shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def ts_open(path: str, scale_index: int = 0, **extra) -> ts.TensorStore:
    """TensorStore view of a local precomputed volume (domain in global voxel coordinates)."""
    spec = {
        "driver": "neuroglancer_precomputed",
        "kvstore": {"driver": "file", "path": path},
        "scale_index": scale_index,
        **extra,
    }
    return ts.open(spec).result()


def ts_read(path: str, scale_index: int = 0) -> np.ndarray:
    return ts_open(path, scale_index).read().result()


def ts_create(path: str, *, data_type: str, num_channels: int, type: str = "image",
              **scale_metadata) -> ts.TensorStore:
    spec = {
        "driver": "neuroglancer_precomputed",
        "kvstore": {"driver": "file", "path": path},
        "create": True,
        "multiscale_metadata": {"data_type": data_type, "num_channels": num_channels, "type": type},
        "scale_metadata": scale_metadata,
    }
    return ts.open(spec).result()


def cv_read(path: str, mip: int = 0) -> np.ndarray:
    """The whole scale read by CloudVolume (x, y, z, c)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from cloudvolume import CloudVolume

        vol = CloudVolume(f"file://{path}", mip=mip, fill_missing=True, progress=False,
                          bounded=True, cache=False, parallel=1)
        bbox = vol.meta.bounds(mip)
        return np.asarray(vol[bbox.minpt.x:bbox.maxpt.x, bbox.minpt.y:bbox.maxpt.y,
                              bbox.minpt.z:bbox.maxpt.z])


def cv_shard_reader(path: str, spec: dict, minishard_index_cache_size: int = 128):
    """CloudVolume's sharded ShardReader on a local directory, its disk cache disabled."""
    from cloudvolume.cacheservice import CacheService
    from cloudvolume.cloudvolume import SharedConfiguration
    from cloudvolume.datasource.precomputed.sharding import ShardingSpecification, ShardReader

    config = SharedConfiguration(
        cdn_cache=False, compress=None, compress_level=None, green=False, mip=0, parallel=1,
        progress=False, secrets=None, spatial_index_db=None, cache_locking=False,
        codec_threads=1,
    )
    url = "file://" + path
    cache = CacheService(cloudpath=os.path.join(path, "unused-cache"), enabled=False,
                         config=config, meta=types.SimpleNamespace(cloudpath=url))
    return ShardReader(url, cache, ShardingSpecification.from_dict(spec),
                       minishard_index_cache_size=minishard_index_cache_size)
