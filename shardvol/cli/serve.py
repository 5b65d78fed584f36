"""``shardvol serve DIR``: serve the volumes below DIR over HTTP for Neuroglancer.

Prints a ``precomputed://http://HOST:PORT/PATH`` source for every volume found (a
directory with an ``info`` file; ``zarr3://`` for ``zarr.json``) to paste into
Neuroglancer's layer source box.  Range requests, CORS and ``.gz`` files are
handled; nothing outside DIR is served.  Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
from typing import Any

from shardvol.cli.common import command
from shardvol.serve import serve


def register(subparsers: Any) -> None:
    p = command(subparsers, "serve", run, help="serve volumes over HTTP for Neuroglancer",
                description=__doc__)
    p.add_argument("dir", help="directory to serve")
    p.add_argument("--port", type=int, default=8080, help="TCP port (8080; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (127.0.0.1; 0.0.0.0 for every interface)")


def run(args: argparse.Namespace) -> int:
    # --quiet silences the access log; the sources found are always printed.
    serve(args.dir, host=args.host, port=args.port, quiet=args.quiet,
          out=lambda line: print(line, flush=True))
    return 0
