"""``shardvol.to_dask`` and ``shardvol.from_dask``: volumes and Zarr arrays as Dask arrays.

The graphs are built by :mod:`shardvol.array.dask` (through ``Volume.to_dask`` /
``write_dask`` and their ``ZarrArray`` twins); these functions open or create what they
read or write.  Dask (``pip install shardvol[dask]``) is imported only when called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from shardvol.errors import AlreadyExistsError, InvalidArgumentError
from shardvol.formats import open as open_any
from shardvol.kvstore import KVStore, open_store
from shardvol.kvstore.job_record import read_job, within_job
from shardvol.precomputed.info_file import INFO_KEY
from shardvol.precomputed.volume import Volume
from shardvol.zarr3 import ZarrArray
from shardvol.zarr3.ome import OmeZarrImage

if TYPE_CHECKING:
    import dask.array

#: what from_dask takes from the array rather than from its keyword arguments
_FROM_ARRAY = ("size", "data_type", "num_channels")


def to_dask(
    url_or_volume: str | KVStore | Volume | ZarrArray,
    mip: int | str | Sequence[float] | None = None,
    *,
    chunks: Any = None,
    order: Literal["C", "F"] | None = None,
    **kwargs: Any,
) -> dask.array.Array:
    """A lazy ``dask.array`` of a precomputed scale (``mip``, default 0; axes x, y, z,
    channel, index 0 at ``voxel_offset``), of a Zarr v3 array, or of an OME-Zarr image's
    level (``mip``; the array's own axes, as ome-zarr-py gives them: c, z, y, x).

    ``url_or_volume``: a URL or store (opened with ``kwargs``, see :func:`shardvol.open`),
    or an open Volume (``mip`` picks another of its scales) or ZarrArray.  ``chunks``:
    see :meth:`Volume.to_dask` (default: whole shards or chunks, up to about 32 MiB).
    ``order``: of the blocks (default: Fortran for volumes, the array's for Zarr).
    """
    arr: Volume | ZarrArray
    if isinstance(url_or_volume, (Volume, ZarrArray)):
        if kwargs:
            raise InvalidArgumentError(
                f"{', '.join(kwargs)}: options of an opened volume are set when it is opened"
            )
        arr = url_or_volume
        if mip is not None:
            if not isinstance(arr, Volume):
                raise InvalidArgumentError(f"{arr.url} is a Zarr array: it has no mip {mip!r}")
            arr = arr.mip(mip)
    else:
        opened = open_any(url_or_volume, **kwargs, **({} if mip is None else {"mip": mip}))
        arr = opened.array if isinstance(opened, OmeZarrImage) else opened
    if isinstance(arr, Volume):
        return arr.to_dask(chunks, order or "F")
    return arr.to_dask(chunks, order)


def from_dask(
    array: dask.array.Array,
    url: str | KVStore,
    *,
    progress: bool = True,
    **create: Any,
) -> Volume:
    """Create a precomputed volume holding ``array`` and write it (see
    :meth:`Volume.write_dask`); returns the volume.

    A 3-D array has one channel, a 4-D one is ``(x, y, z, channel)``; ``size``,
    ``data_type`` and ``num_channels`` come from it, the other arguments of
    :meth:`Volume.create` from ``create`` (``type`` "image" unless given; e.g.
    ``resolution``, ``voxel_offset``, ``chunk_size``, ``encoding``, ``sharding``).
    Nothing is created when the array cannot be written.  Run again after an interruption,
    it finishes the write (see :meth:`Volume.write_dask`).
    """
    import dask.array as da

    if not isinstance(array, da.Array):
        raise InvalidArgumentError(f"expected a dask.array.Array, got {type(array).__name__}")
    given = [k for k in _FROM_ARRAY if k in create]
    if given:
        raise InvalidArgumentError(f"{', '.join(given)}: taken from the array, not given")
    if array.ndim not in (3, 4):
        raise InvalidArgumentError(
            f"a volume is (x, y, z) or (x, y, z, channel); the array has shape {array.shape}"
        )
    if any(n != n for n in array.shape):  # NaN: unknown chunk sizes
        raise InvalidArgumentError(
            f"the Dask array's shape {array.shape} is not known: call compute_chunk_sizes() first"
        )
    size = [int(n) for n in array.shape[:3]]
    channels = int(array.shape[3]) if array.ndim == 4 else 1
    if 0 in size or channels == 0:
        raise InvalidArgumentError(f"cannot make a volume of the empty shape {array.shape}")
    kv = open_store(url)
    if read_job(kv) is not None and kv.exists(INFO_KEY):  # (this write, interrupted: resumed)
        with within_job():
            vol = Volume(kv)
        if (vol.shape, vol.dtype) != ((*size, channels), array.dtype):
            raise AlreadyExistsError(
                f"{kv.url} holds an unfinished write of a {vol.shape} {vol.dtype} volume, not "
                f"of this {(*size, channels)} {array.dtype} array")
    else:
        vol = Volume.create(kv, size=size, data_type=array.dtype.name, num_channels=channels,
                            **create)
    vol.write_dask(array, progress=progress)
    return vol


__all__ = ["from_dask", "to_dask"]
