"""``gs://`` through gcsfs, each request tried once: the store's retries are the only ones.

gcsfs retries every request itself, up to 6 times, after waits of 0.5-1.5 s, then 1.5-2.5 s
and longer, inside each of the store's attempts: one 503 cost over a second, and a store
that kept failing ran its whole ``timeout`` out in the first attempt.  The filesystem
here is gcsfs's with its request undecorated, so each attempt is one request and the
store's policy (backoff from 50 ms, Retry-After, its attempts and deadline) applies alone.
It is a class of its own, so fsspec caches its instances apart from gcsfs's: other users of
gcsfs in the process keep gcsfs's retries.

The class is gcsfs's core one, whatever ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` says
(``gcsfs.GCSFileSystem`` is its experimental subclass unless that is "false"): the
subclass asks GCS's storage-control API (gRPC) for each bucket's layout before its
operations, and where that cannot be asked (anonymous access to public data, no
application default credentials) it logs a warning and asks again at the next operation.
shardvol's reads speak the JSON API (see :mod:`shardvol.kvstore.gcs_reads`), as the core
class does.

gcsfs is an optional dependency: this module is imported for ``gs://`` URLs only (an
ImportError without gcsfs).
"""

from __future__ import annotations

from typing import Any

from gcsfs.core import GCSFileSystem


class OneAttemptGCSFileSystem(GCSFileSystem):
    """gcsfs whose requests are not retried (gcsfs decorates ``_request`` with its retry
    loop; this is the function it decorates).  At module level, so that stores holding
    one pickle (Dask ships them to its workers)."""

    _request = GCSFileSystem._request.__wrapped__


def filesystem(url: str, **storage_options: Any) -> tuple[Any, str]:
    """The filesystem of a ``gs://`` URL whose requests are tried once, and the URL's path
    in it (as ``fsspec.core.url_to_fs``)."""
    cls = OneAttemptGCSFileSystem
    fs = cls(**{**cls._get_kwargs_from_urls(url), **storage_options})
    return fs, fs._strip_protocol(url)
