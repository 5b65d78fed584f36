"""shardvol: Neuroglancer precomputed volumes (sharded or not) and Zarr v3 sharded arrays.

What users type is here: :class:`Volume`, :class:`ZarrArray`, :class:`OmeZarrImage`,
:func:`open`, :func:`downsample`, :func:`copy`, :func:`to_dask`, :func:`from_dask`,
:func:`io_limit`, the objects of a segmentation (:class:`Mesh`, :class:`Skeleton`,
:class:`SegmentProperties`) and :class:`Annotations`, the ``zarr3`` and ``sharding``
packages, ``errors``.
The kernels stay in their modules (``shardvol._ext.morton``, ``shardvol._ext.hashing``,
``shardvol.ops.pooling``).  See README.md for a tour and the package layout.
"""

from typing import TYPE_CHECKING, Any

from shardvol import errors, sharding
from shardvol.errors import ShardvolError
from shardvol.formats import open
from shardvol.kvstore import KVStore, open_store
from shardvol.kvstore.limits import io_limit
from shardvol.precomputed.volume import Volume

if TYPE_CHECKING:
    from shardvol import zarr3
    from shardvol.ops.convert import copy
    from shardvol.ops.dask import from_dask, to_dask
    from shardvol.ops.downsample import downsample
    from shardvol.precomputed.annotations import Annotations
    from shardvol.precomputed.meshes import Mesh
    from shardvol.precomputed.segment_properties import SegmentProperties
    from shardvol.precomputed.skeletons import Skeleton
    from shardvol.zarr3 import OmeZarrImage, ZarrArray

#: Names imported at their first use (module, attribute): Zarr v3, the operations and a
#: segmentation's objects are some 80 ms of a fresh process's imports, which reading a
#: precomputed volume needs not.
_LAZY = {
    "zarr3": ("shardvol.zarr3", None),
    "ZarrArray": ("shardvol.zarr3", "ZarrArray"),
    "OmeZarrImage": ("shardvol.zarr3", "OmeZarrImage"),
    "copy": ("shardvol.ops.convert", "copy"),
    "downsample": ("shardvol.ops.downsample", "downsample"),
    "from_dask": ("shardvol.ops.dask", "from_dask"),
    "to_dask": ("shardvol.ops.dask", "to_dask"),
    "Annotations": ("shardvol.precomputed.annotations", "Annotations"),
    "Mesh": ("shardvol.precomputed.meshes", "Mesh"),
    "SegmentProperties": ("shardvol.precomputed.segment_properties", "SegmentProperties"),
    "Skeleton": ("shardvol.precomputed.skeletons", "Skeleton"),
}


def __getattr__(name: str) -> Any:
    import importlib

    if name not in _LAZY:
        raise AttributeError(f"module 'shardvol' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = importlib.import_module(module)
    value = value if attribute is None else getattr(value, attribute)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "Annotations",
    "KVStore",
    "Mesh",
    "OmeZarrImage",
    "SegmentProperties",
    "ShardvolError",
    "Skeleton",
    "Volume",
    "ZarrArray",
    "__version__",
    "copy",
    "downsample",
    "errors",
    "from_dask",
    "io_limit",
    "open",
    "open_store",
    "sharding",
    "to_dask",
    "zarr3",
]
