"""TensorStore key-value store specs of shardvol's stores, for the commands that check
shardvol against TensorStore (``verify``, the demo): TensorStore then reads the same
objects through the same endpoint and credentials as shardvol, not the defaults of its own
(it reads neither ``AWS_ENDPOINT_URL`` nor ``STORAGE_EMULATOR_HOST``).

TensorStore's calls are given :data:`TIMEOUT` seconds: an endpoint it cannot reach is an
error naming it, never a wait without end.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from shardvol.errors import ShardvolError
from shardvol.kvstore import FileStore, KVStore, url_scheme

T = TypeVar("T")
TIMEOUT = 30.0  # seconds for one TensorStore call (an open, a read of a region)


def tensorstore_kvstore(store: KVStore, path: str = "") -> dict[str, Any]:
    """The TensorStore kvstore spec of ``store`` (below ``path`` in it)."""
    suffix = f"{path.strip('/')}/" if path.strip("/") else ""
    if isinstance(store, FileStore):
        return {"driver": "file", "path": os.path.join(store.root, suffix)}
    url = store.url.rstrip("/")
    scheme = url_scheme(url)
    rest = url.split("://", 1)[1]
    bucket, _, prefix = rest.partition("/")
    key = f"{prefix}/{suffix}" if prefix else suffix
    if scheme in ("s3", "s3a"):
        spec: dict[str, Any] = {"driver": "s3", "bucket": bucket, "path": key}
        endpoint, region = _s3_endpoint(store)
        if endpoint:
            spec["endpoint"] = endpoint
        if region:
            spec["aws_region"] = region
        return spec
    if scheme in ("gs", "gcs"):
        emulator = os.environ.get("STORAGE_EMULATOR_HOST")
        if emulator and "TENSORSTORE_GCS_HTTP_URL" not in os.environ:
            os.environ["TENSORSTORE_GCS_HTTP_URL"] = (
                emulator if "://" in emulator else f"http://{emulator}")
        return {"driver": "gcs", "bucket": bucket, "path": key}
    if scheme in ("http", "https"):
        return {"driver": "http", "base_url": f"{url}/{suffix}"}
    raise ShardvolError(f"TensorStore cannot read {store.url} (a {scheme}:// store)")


def _s3_endpoint(store: KVStore) -> tuple[str | None, str | None]:
    """The endpoint and region shardvol's S3 requests go to (its filesystem's options, else
    the AWS environment botocore reads)."""
    fs = getattr(store, "fs", None)
    options = dict(getattr(fs, "client_kwargs", None) or {})
    endpoint = (options.get("endpoint_url") or getattr(fs, "endpoint_url", None)
                or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))
    region = (options.get("region_name") or os.environ.get("AWS_REGION")
              or os.environ.get("AWS_DEFAULT_REGION"))
    return endpoint, region


def within_timeout(call: Callable[[float], T], what: str) -> T:
    """``call(TIMEOUT)`` (a TensorStore future's ``result``), its timeout a ShardvolError
    naming ``what``."""
    try:
        return call(TIMEOUT)
    except TimeoutError:
        raise ShardvolError(f"TensorStore did not {what} within {TIMEOUT:g} s (is its "
                            "endpoint reachable?)") from None
