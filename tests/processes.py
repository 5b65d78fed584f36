"""Starting the command-line processes that tests stop with Ctrl-C (SIGINT)."""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def popen_interruptible(args: list[str], **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen`` with SIGINT at its default disposition in the child.  A suite run
    where SIGINT is ignored (a background job of a non-interactive shell) would pass that on
    to the child, whose Ctrl-C would then do nothing: Python installs its KeyboardInterrupt
    handler only over the default.  (Called from the main thread, as tests run.)"""
    previous = signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        return subprocess.Popen(args, **kwargs)
    finally:
        signal.signal(signal.SIGINT, previous)
