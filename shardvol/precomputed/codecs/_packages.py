"""The optional PyPI packages some chunk encodings need, imported when first used."""

from __future__ import annotations

import importlib
from types import ModuleType

from shardvol.errors import UnsupportedCodecError


def import_package(module: str, distribution: str, encoding: str, extra: str) -> ModuleType:
    """The package ``module``, or UnsupportedCodecError naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise UnsupportedCodecError(
            f"the {encoding!r} chunk encoding needs the {distribution} package: "
            f"pip install shardvol[{extra}] (or pip install {distribution})"
        ) from e
