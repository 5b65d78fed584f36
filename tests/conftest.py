"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest

from .s3_server import s3_server
from .stores import S3_TRANSPORTS, TRANSPORTS


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server for the module's tests (its endpoint URL; see s3_server)."""
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture(params=list(TRANSPORTS))
def transport(request):
    """The way HTTP reads are sent (tests/stores.py's TRANSPORTS)."""
    return request.param


@pytest.fixture(params=list(S3_TRANSPORTS))
def s3_transport(request):
    """The way S3 reads are sent (tests/stores.py's S3_TRANSPORTS)."""
    return request.param
