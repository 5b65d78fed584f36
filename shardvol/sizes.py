"""Byte sizes given as numbers or strings ("2GB", "512 MiB", "800k")."""

from __future__ import annotations

import numbers
import os
import re

from shardvol.errors import InvalidArgumentError

_SIZE = re.compile(r"\s*([\d.]+)\s*([KMGT]?)(I?)B?\s*", re.IGNORECASE)


def parse_bytes(value: int | str, name: str, allow_zero: bool = False) -> int:
    """``value`` as bytes: an integer, or a string like ``"2GB"``, ``"512 MiB"``, ``"800k"``
    (powers of 1000; of 1024 with an ``i``).  InvalidArgumentError naming ``name`` for
    anything else, negative sizes, and zero unless ``allow_zero``."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        n = int(value)
    else:
        m = _SIZE.fullmatch(str(value)) if isinstance(value, str) else None
        if not m:
            raise InvalidArgumentError(
                f"{name} must be a size in bytes like '2GB' or 512_000_000, got {value!r}")
        power = " KMGT".index(m.group(2).upper() or " ")
        n = int(float(m.group(1)) * (1024 if m.group(3) else 1000) ** power)
    if n < 0 or (n == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise InvalidArgumentError(f"{name} must be a {kind} size, got {value!r}")
    return n


def physical_memory() -> int | None:
    """Bytes of memory of this machine, if the system says."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
