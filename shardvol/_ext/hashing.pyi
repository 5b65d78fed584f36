"""murmurhash3_x86_128 of uint64 keys (csrc/murmurhash3.h)."""

from typing import Any

from numpy.typing import ArrayLike

def murmurhash3_x86_128_u64(keys: ArrayLike) -> Any: ...
