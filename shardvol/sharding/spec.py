"""The ``neuroglancer_uint64_sharded_v1`` sharding specification: keys -> shard, minishard, file.

A uint64 key is shifted right by ``preshift_bits``, hashed (identity or the low
64 bits of murmurhash3_x86_128 of its 8 little-endian bytes), and the hash's
bits ``[0, minishard_bits)`` give the minishard number and the next
``shard_bits`` bits the shard number.  Shard ``n`` lives in the file
``<n as lowercase hex, zero padded to ceil(shard_bits / 4) digits>.shard``.
"""

from __future__ import annotations

import functools
import json
import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from shardvol._ext.hashing import murmurhash3_x86_128_u64
from shardvol.errors import InfoError, InvalidArgumentError
from shardvol.jsondoc import load_json

#: The ``@type`` of a sharding spec.
SHARDING_TYPE = "neuroglancer_uint64_sharded_v1"
HASHES = ("identity", "murmurhash3_x86_128")
ENCODINGS = ("raw", "gzip")
# 2**32 minishards already make a 64 GiB shard index; TensorStore has the same limit.
MAX_MINISHARD_BITS = 32
_REQUIRED = ("@type", "preshift_bits", "hash", "minishard_bits", "shard_bits")
_OPTIONAL = ("minishard_index_encoding", "data_encoding")


def as_keys(keys: Any) -> np.ndarray:
    """``keys`` (an int, an iterable of ints or an integer array) as a 1-D uint64 array."""
    if isinstance(keys, np.ndarray):
        if keys.size and keys.dtype.kind not in "iu":
            raise InvalidArgumentError(f"keys must be integers, got dtype {keys.dtype}")
        if keys.dtype.kind == "i" and keys.size and int(keys.min()) < 0:
            raise InvalidArgumentError(f"keys must be non-negative, got {int(keys.min())}")
        return np.ascontiguousarray(keys, dtype=np.uint64).reshape(-1)
    if isinstance(keys, (numbers.Integral, str, bytes)):
        keys = [keys]
    lst = list(keys)
    try:
        if set(map(type, lst)) <= {int}:
            return np.array(lst, dtype=np.uint64)
        return np.array([_as_key(k) for k in lst], dtype=np.uint64)
    except (TypeError, OverflowError, ValueError) as e:
        raise InvalidArgumentError(f"keys must be integers in [0, 2**64): {e}") from None


def _as_key(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"{k!r} is not an integer")
    k = int(k)
    if not 0 <= k < 1 << 64:
        raise OverflowError(f"{k} is outside [0, 2**64)")
    return k


@dataclass(frozen=True)
class ShardingSpec:
    """Parameters of a ``neuroglancer_uint64_sharded_v1`` key-value store (immutable)."""

    preshift_bits: int = 0
    hash: str = "identity"
    minishard_bits: int = 0
    shard_bits: int = 0
    minishard_index_encoding: str = "raw"
    data_encoding: str = "raw"

    def __post_init__(self) -> None:
        for name, hi in (
            ("preshift_bits", 64),
            ("minishard_bits", MAX_MINISHARD_BITS),
            ("shard_bits", 64),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise InfoError(f"sharding.{name} must be an integer, got {value!r}")
            if not 0 <= int(value) <= hi:
                raise InfoError(f"sharding.{name} must be in [0, {hi}], got {int(value)}")
            object.__setattr__(self, name, int(value))
        total = self.preshift_bits + self.minishard_bits + self.shard_bits
        if total > 64:
            raise InfoError(
                "sharding: preshift_bits + minishard_bits + shard_bits must be <= 64, got "
                f"{self.preshift_bits} + {self.minishard_bits} + {self.shard_bits} = {total}"
            )
        if self.hash not in HASHES:
            raise InfoError(f"sharding.hash must be one of {HASHES}, got {self.hash!r}")
        for name in _OPTIONAL:
            if getattr(self, name) not in ENCODINGS:
                raise InfoError(
                    f"sharding.{name} must be one of {ENCODINGS}, got {getattr(self, name)!r}"
                )

    # -- serialisation -------------------------------------------------------------------

    @classmethod
    def member(cls, doc: Mapping[str, Any], source: str) -> ShardingSpec | None:
        """The spec of a metadata document's optional ``sharding`` member (None without
        one); InfoError naming ``source``."""
        if doc.get("sharding") is None:
            return None
        try:
            return cls.from_dict(doc["sharding"])
        except InfoError as e:
            raise InfoError(f"{source}: {e}") from None

    @classmethod
    def from_dict(cls, d: dict) -> ShardingSpec:
        """Parse the ``"sharding"`` member of an info file."""
        if not isinstance(d, dict):
            raise InfoError(f"sharding must be a JSON object, got {type(d).__name__}")
        for name in _REQUIRED:
            if name not in d:
                raise InfoError(f"sharding.{name} is missing")
        unknown = sorted(set(d) - set(_REQUIRED) - set(_OPTIONAL))
        if unknown:
            raise InfoError(f"sharding has unknown member(s) {unknown}")
        if d["@type"] != SHARDING_TYPE:
            raise InfoError(f"sharding.@type must be {SHARDING_TYPE!r}, got {d['@type']!r}")
        return cls(**{k: v for k, v in d.items() if k != "@type"})

    def to_dict(self) -> dict:
        """The ``"sharding"`` JSON object (every member written explicitly)."""
        return {"@type": SHARDING_TYPE, **asdict(self)}

    @classmethod
    def from_json(cls, text: str | bytes) -> ShardingSpec:
        return cls.from_dict(load_json(text, "sharding"))

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    # -- geometry ------------------------------------------------------------------------

    @property
    def num_minishards(self) -> int:
        return 1 << self.minishard_bits

    @property
    def num_shards(self) -> int:
        return 1 << self.shard_bits

    @property
    def index_length(self) -> int:
        """Size in bytes of the shard index at the start of every shard file."""
        return 16 << self.minishard_bits

    def hashed(self, keys: Any) -> np.ndarray:
        """``hash(key >> preshift_bits)`` of each key, uint64."""
        k = as_keys(keys)
        if self.preshift_bits == 64:
            k = np.zeros_like(k)
        elif self.preshift_bits:
            k = k >> np.uint64(self.preshift_bits)
        if self.hash == "murmurhash3_x86_128":
            return murmurhash3_x86_128_u64(k)
        return k

    def shard_and_minishard(self, keys: Any) -> tuple[np.ndarray, np.ndarray]:
        """(shard numbers, minishard numbers) of each key, both uint64 arrays."""
        h = self.hashed(keys)
        mb, sb = self.minishard_bits, self.shard_bits
        minishard = h & np.uint64((1 << mb) - 1)
        shard = np.zeros_like(h) if sb == 0 else (h >> np.uint64(mb)) & np.uint64((1 << sb) - 1)
        return shard, minishard

    def shard_filename(self, shard_number: int) -> str:
        """File name of shard ``shard_number`` (e.g. ``"0a.shard"`` for 8 shard bits)."""
        n = int(shard_number)
        if not 0 <= n < self.num_shards:
            raise InvalidArgumentError(
                f"shard number {n} is outside [0, {self.num_shards}) for shard_bits "
                f"{self.shard_bits}"
            )
        return _shard_name(n, (self.shard_bits + 3) // 4)

    def filename(self, key: int) -> str:
        """Name of the shard file that holds ``key``."""
        shard, _ = self.shard_and_minishard(as_keys(key))
        if len(shard) != 1:
            raise InvalidArgumentError(f"filename() takes one key, got {len(shard)}")
        return self.shard_filename(int(shard[0]))


@functools.lru_cache(maxsize=4096)  # every read names the shard files of its keys
def _shard_name(n: int, digits: int) -> str:
    return format(n, "x").zfill(digits) + ".shard"
