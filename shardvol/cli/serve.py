"""``shardvol serve DIR``: serve the volumes below DIR over HTTP for Neuroglancer.

Prints a ``precomputed://http://HOST:PORT/PATH`` source for every volume found (a
directory with an ``info`` file; ``zarr3://`` for ``zarr.json``) to paste into
Neuroglancer's layer source box.  Range requests, CORS and CloudVolume's compressed
chunk files (``.gz``, ``.br``, ``.zstd``) are handled; nothing outside DIR is served.
Ctrl-C (or SIGTERM) stops it.

CORS: by default any web page open in your browser may read what is served (Chrome's
private-network preflight is answered too, so a page on the internet can read a server
on 127.0.0.1).  ``--cors-origin https://neuroglancer-demo.appspot.com`` lets that one
origin read it; ``--cors-origin none`` no other origin at all.
"""

from __future__ import annotations

import argparse
import signal
from typing import Any

from shardvol.cli.common import command, port
from shardvol.ops.serve import serve


def register(subparsers: Any) -> None:
    p = command(subparsers, "serve", run, help="serve volumes over HTTP for Neuroglancer",
                description=__doc__)
    p.add_argument("dir", help="directory to serve")
    p.add_argument("--port", type=port, default=8080, help="TCP port (8080; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--cors-origin", default="*", metavar="ORIGIN|*|none",
                   help="the web origin browsers may let read what is served: * (default: "
                   "any web page open in your browser can read it, also from 127.0.0.1), one "
                   "origin such as https://neuroglancer-demo.appspot.com, or none")


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    # SIGTERM (kill, systemd, docker stop) stops it as cleanly as Ctrl-C; this also covers a
    # background job of a non-interactive shell, which starts with SIGINT ignored.
    signal.signal(signal.SIGTERM, _stop)
    # --quiet silences the access log; the sources found are always printed.
    origin = None if args.cors_origin.lower() == "none" else args.cors_origin
    serve(args.dir, host=args.host, port=args.port, quiet=args.quiet,
          out=lambda line: print(line, flush=True), cors_origin=origin)
    return 0
