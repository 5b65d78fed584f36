"""``s3://`` through s3fs, set up for FsspecStore.

- Each request is tried once by botocore and by s3fs: the store's retries are the only ones
  (its policy: backoff, Retry-After, attempts, deadline; see :mod:`shardvol.kvstore.retry`).
- botocore keeps as many connections as the store may have requests in flight.
- The models botocore reads for every new session (the S3 API, its endpoint rules: some
  200 ms of JSON parsing) are parsed once per process: each filesystem's session (and the
  botocore session of shardvol's S3 reads, see s3_reads) reads them through one loader per
  data path, so opening another S3 store costs no more than its client.
"""

from __future__ import annotations

from typing import Any

import fsspec

from shardvol.kvstore.retry import RetryPolicy

_LOADERS: dict[Any, Any] = {}  # botocore's loaders, by data path


def filesystem(url: str, policy: RetryPolicy, connections: int,
               **storage_options: Any) -> tuple[Any, str]:
    """The s3fs filesystem of an ``s3://`` URL for a store with the retry ``policy`` and
    up to ``connections`` requests in flight, and the URL's path in it (as
    ``fsspec.core.url_to_fs``)."""
    if "config_kwargs" not in storage_options:
        storage_options["config_kwargs"] = {
            "retries": {"total_max_attempts": 1}, "max_pool_connections": connections,
            "read_timeout": policy.stall, "connect_timeout": policy.stall,
        }
    fs, root = fsspec.core.url_to_fs(url, **storage_options)
    fs.retries = 1  # (s3fs's own retry loop of its calls)
    if fs.session is None:  # (as s3fs would make it, with the process's loader)
        from aiobotocore.session import AioSession

        fs.session = share_models(AioSession(**fs.kwargs))
    return fs, root


def share_models(session: Any) -> Any:
    """The botocore ``session``, reading its models through the process's loader for its
    data path (parsed once per process)."""
    from botocore.loaders import create_loader

    path = session.get_config_variable("data_path")
    loader = _LOADERS.get(path) or _LOADERS.setdefault(path, create_loader(path))
    session.register_component("data_loader", loader)
    return session
