"""JSON metadata documents (``info``, ``zarr.json``, sharding specs) parsed with one rule:
anything that is not a JSON document, however it fails, is an InfoError naming its source."""

from __future__ import annotations

import json
import math
from typing import Any

from shardvol.errors import InfoError


def load_json(text: str | bytes | bytearray | memoryview, source: str) -> Any:
    """``text`` parsed; InfoError ``"<source>: ..."`` if it is not JSON, is not UTF-8, or
    nests deeper than the parser can follow (100,000 ``[``: a RecursionError otherwise)."""
    try:
        return json.loads(bytes(text) if isinstance(text, (bytearray, memoryview)) else text)
    except RecursionError:
        raise InfoError(f"{source}: not valid JSON (nested too deeply to parse)") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise InfoError(f"{source}: not valid JSON ({e})") from e


def plain(value: Any) -> Any:
    """``value`` as the plain JSON it is written as (tuples as lists, numpy numbers and
    arrays as Python's); TypeError names a value that has no JSON form."""
    def convert(o: Any) -> Any:
        if hasattr(o, "tolist"):  # (numpy numbers and arrays)
            return o.tolist()
        raise TypeError(f"a value of type {type(o).__name__} has no JSON form")

    return json.loads(json.dumps(value, default=convert))


def finite_number(value: Any) -> bool:
    """Whether ``value`` is a JSON number (an int or float, not a bool) of finite float
    value (an integer too large for a float is not: it would overflow every use)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
