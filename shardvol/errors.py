"""Exceptions raised by shardvol.

Every user-facing failure is a :class:`ShardvolError`; the subclasses also
derive from the matching built-in exception so ``except ValueError`` keeps
working for callers who do not know shardvol.  Messages name the key, field
or value at fault.
"""

from __future__ import annotations


class ShardvolError(Exception):
    """Base class of every shardvol exception."""


class InvalidArgumentError(ShardvolError, ValueError):
    """An argument has the wrong type, shape, dtype or value."""


class MortonOverflowError(InvalidArgumentError, OverflowError):
    """A grid needs more than 64 bits of compressed Morton code."""


class InfoError(ShardvolError, ValueError):
    """An info / zarr.json metadata document is missing a field or is invalid."""


class StoreError(ShardvolError, OSError):
    """A key-value store operation failed."""


class InvalidKeyError(StoreError, ValueError):
    """A store key is malformed (empty, absolute, or escaping the store root)."""


class ByteRangeError(StoreError, ValueError):
    """A requested byte range lies (partly) past the end of the stored value."""


class UnsupportedSchemeError(StoreError, ValueError):
    """No store backend is registered for a URL scheme."""


class ReadOnlyStoreError(StoreError, PermissionError):
    """A write was attempted on a store that cannot be written."""


class ShardFormatError(ShardvolError, ValueError):
    """A shard file (index, minishard index or data) is malformed."""


class ChunkDecodeError(ShardvolError, ValueError):
    """An encoded chunk cannot be decoded (corrupt, truncated, wrong size)."""


class ChunkEncodeError(ShardvolError, ValueError):
    """An array cannot be encoded with the requested chunk encoding."""


class UnsupportedCodecError(ShardvolError, ValueError):
    """An encoding, codec or data type is not supported."""


class ChecksumError(ShardFormatError):
    """A stored checksum does not match the data it covers."""


class OutOfBoundsError(ShardvolError, IndexError, ValueError):
    """A selection reaches outside the volume's domain (an IndexError as numpy's, and a
    ValueError as CloudVolume's, so callers of either catch it)."""


class MissingChunkError(ShardvolError, KeyError):
    """A chunk is absent and the volume was opened with ``fill_missing=False``."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class AlreadyExistsError(ShardvolError, FileExistsError):
    """Creating something that exists already, without ``overwrite=True``."""


class JobConflictError(AlreadyExistsError):
    """A destination holds an unfinished job other than the one started there."""


class TaskError(ShardvolError, RuntimeError):
    """A task of a job failed (its worker lost, or an error that names no unit itself); the
    message names the task's unit and store."""


class WriteConflictError(ShardvolError, RuntimeError):
    """Another writer changed a file between our read and our write."""


class UnitChangedError(WriteConflictError):
    """A conditional write (compare-and-swap) found its file changed since it was read: the
    update is to be redone from a fresh read."""


class LockError(StoreError):
    """A store lock could not be taken or was lost while held."""


class LockTimeoutError(LockError, TimeoutError):
    """A store lock stayed held by another writer for longer than the wait allowed."""


class LockLostError(LockError):
    """A lock's lease ran out or was taken over while held; writes under it are refused."""


class VersionChangedError(StoreError):
    """A conditional read found the value replaced since the version it was asked for."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


class IncompleteWarning(UserWarning):
    """What is being opened is written by a job that has not finished (its missing parts
    read as the fill value): run the job again to finish it."""


class StagedPyramidWarning(UserWarning):
    """A pyramid's coarser mips are pooled from a finer new mip rather than from the source
    (it did not fit the memory limit in one pass): with mean or mode pooling their values
    can differ from pooling the source directly."""
