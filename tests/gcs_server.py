"""A GCS server for tests: gcp-storage-emulator's, on 127.0.0.1, in memory.

Clients find it through ``STORAGE_EMULATOR_HOST`` (gcsfs and google-cloud-storage read
it), which subprocesses inherit.  The emulator serves the JSON API's objects, media
downloads with ranges, uploads and listings; it ignores preconditions
(``ifGenerationMatch``), so conditional requests cannot be tested against it.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import fsspec

# gcsfs's experimental bucket-type probe speaks gRPC, which the emulator does not: off
# (it is read when gcsfs is first imported)
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


@contextmanager
def gcs_server() -> Iterator[str]:
    """Run the emulator and point the environment at it; yields its endpoint URL."""
    from gcp_storage_emulator.server import create_server

    logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    fsspec.filesystem("gs", token="anon").clear_instance_cache()
    try:
        yield endpoint
    finally:
        server.stop()
        if saved is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = saved
        fsspec.filesystem("gs", token="anon").clear_instance_cache()


def new_bucket() -> str:
    """A fresh, empty bucket's URL."""
    name = f"b{uuid.uuid4().hex[:20]}"
    fsspec.filesystem("gs", token="anon").mkdir(name)
    return f"gs://{name}"
