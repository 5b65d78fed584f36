"""Decoding in worker processes of their own, for decoders that corrupt data can crash.

``IsolatedDecoder(script, name).decode(data, nbytes, where)`` sends ``data`` to one of a
pool of ``python script`` processes (the protocol is in ``_fpzip_worker.py``) and returns
the ``nbytes`` bytes it answers.  A process that dies or stalls past the deadline is a
ChunkDecodeError naming ``where``; it is replaced by a fresh one on the next call.  Idle
processes are kept for reuse (at most one per core); they end when this process does.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time

from shardvol.errors import ChunkDecodeError

#: Seconds a decode may take: this, plus one second per 16 MiB of input and output.
BASE_DEADLINE = 30.0


class _Worker:
    def __init__(self, script: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stdin.close()
        self.stdout.close()

    def read(self, n: int, deadline: float) -> bytes:
        """``n`` bytes of the answer; EOFError if the process ended first, TimeoutError
        if the deadline passed."""
        out = bytearray()
        fd = self.stdout.fileno()
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            piece = os.read(fd, min(n - len(out), 1 << 22))
            if not piece:
                raise EOFError
            out += piece
        return bytes(out)

    def ended(self) -> str:
        """How the process ended (it has closed its output)."""
        try:
            code = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            return "closed its output"
        if code < 0:
            return f"was killed by {signal.Signals(-code).name}"
        return f"exited with code {code}"


class IsolatedDecoder:
    """A pool of ``python script`` processes that decode one kind of stream."""

    def __init__(self, script: str, name: str) -> None:
        self.script, self.name = script, name
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        atexit.register(self.close)

    def close(self) -> None:
        """End the idle worker processes."""
        with self._lock:
            idle, self._idle = (self._idle if self._pid == os.getpid() else []), []
        for worker in idle:
            worker.close()

    def decode(self, data: bytes | memoryview, nbytes: int, where: str) -> bytes:
        """What a worker decodes ``data`` to, which must be ``nbytes`` long."""
        worker = self._take()
        seconds = BASE_DEADLINE + (len(data) + nbytes) / (16 << 20)
        try:
            worker.stdin.write(struct.pack("<Q", len(data)))
            worker.stdin.write(data)
            worker.stdin.flush()
            head = worker.read(9, time.monotonic() + seconds)
            size = struct.unpack("<Q", head[1:])[0]
            if head[:1] not in (b"K", b"E") or size > max(nbytes, 1 << 16):
                worker.close()
                raise ChunkDecodeError(f"{where}: corrupt {self.name} chunk: its decoder "
                                       "process answered out of protocol")
            body = worker.read(size, time.monotonic() + seconds)
        except (EOFError, BrokenPipeError):
            how = worker.ended()
            worker.close()
            raise ChunkDecodeError(
                f"{where}: corrupt {self.name} chunk: its decoder process {how}") from None
        except TimeoutError:
            worker.close()
            raise ChunkDecodeError(
                f"{where}: corrupt {self.name} chunk: not decoded within {seconds:.0f} s "
                "(its decoder process was stopped)") from None
        self._give_back(worker)
        if head[:1] == b"E":
            message = body.decode(errors="replace")
            raise ChunkDecodeError(f"{where}: corrupt {self.name} chunk: {message}")
        if len(body) != nbytes:
            raise ChunkDecodeError(
                f"{where}: corrupt {self.name} chunk: decodes to {len(body)} bytes, not {nbytes}")
        return body

    def _take(self) -> _Worker:
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's pipes are not ours
                self._idle, self._pid = [], os.getpid()
            if self._idle:
                return self._idle.pop()
        return _Worker(self.script)

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if len(self._idle) < (os.cpu_count() or 1):
                self._idle.append(worker)
                return
        worker.close()
