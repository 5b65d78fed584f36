"""The process that decodes fpzip streams for :mod:`shardvol.precomputed.codecs._isolated`.

The fpzip package reads a stream without knowing its length and trusts every byte of it: a
truncated or damaged stream makes it read and write outside its buffers (a segfault, as
often as not).  So streams are decoded here, in a process of its own, and a crash costs
this process, not the user's.  Run as a script (``python _fpzip_worker.py``), so that it
imports neither shardvol nor the user's program.

Protocol on stdin/stdout, little-endian: a request is a u64 length and the stream; the
answer is ``b"K"``, a u64 length and the decoded values (the array in Fortran order), or
``b"E"``, a u64 length and a UTF-8 message.  End of input ends the process.
"""

import os
import struct
import sys


def _read(stream, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError
    return data


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))  # (holds shardvol's fpzip.py: not it)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    import fpzip

    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            (n,) = struct.unpack("<Q", _read(inp, 8))
            stream = _read(inp, n)
        except EOFError:
            return
        try:
            values = _decode_whole(fpzip, stream)
            out.write(b"K" + struct.pack("<Q", len(values)))
            out.write(values)
        except Exception as e:  # the package's own errors: a message for the caller
            message = f"{type(e).__name__}: {e}".encode()
            out.write(b"E" + struct.pack("<Q", len(message)) + message)
        out.flush()


def _decode_whole(fpzip, stream: bytes) -> bytes:
    """The values of ``stream``, decoded twice: followed by zero bytes, then by 0xFF bytes.
    A whole stream decodes the same either way; one cut short is decoded on into what
    follows it, so the two differ (the package itself returns such values silently)."""
    values = fpzip.decompress(stream + bytes(_PAD), order="F").tobytes(order="F")
    again = fpzip.decompress(stream + b"\xff" * _PAD, order="F").tobytes(order="F")
    if values != again:
        raise ValueError("the stream ends before its values do (truncated or damaged)")
    return values


_PAD = 64


if __name__ == "__main__":
    main()
