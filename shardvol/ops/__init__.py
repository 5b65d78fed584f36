"""Operations over whole volumes and arrays, built on the formats.

``downsample`` (new scales of a precomputed volume, shard-aligned tasks), ``pooling``
(the mean and mode kernels it runs), ``convert`` (``copy`` between formats, re-chunking
and re-encoding, over the common frame of ``geometry``), ``tasks`` (running planned
tasks on any Executor), ``serve`` (an HTTP server of a directory of volumes for
Neuroglancer) and ``dask`` (``to_dask`` and ``from_dask``).
"""
