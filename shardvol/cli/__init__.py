"""The ``shardvol`` command.

Each subcommand is a module of this package whose ``register(subparsers)`` adds it with
:func:`shardvol.cli.common.command` (name, ``run(args) -> exit code``, help) and its
arguments.  The module names are listed in :data:`COMMANDS`: adding a subcommand is one
line there.  ``run`` raises ShardvolError/OSError for failures (one line, exit 1) and
:class:`~shardvol.cli.common.UsageError` for bad argument combinations (exit 2).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from shardvol import __version__
from shardvol.cli.common import COMMON, UsageError
from shardvol.errors import ShardvolError

COMMANDS: tuple[str, ...] = (
    "info",
    "create",
    "verify",
    "serve",
    "bench",
    "downsample",
    "cp",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shardvol",
        description="Read, write and serve Neuroglancer precomputed volumes and Zarr v3 arrays.",
        parents=[COMMON],
    )
    parser.add_argument("--version", action="version", version=f"shardvol {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"shardvol.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit code.

    0 success, 1 failure (one line on stderr; ``--debug`` shows the traceback instead),
    2 usage error, 130 interrupted.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    args.quiet = getattr(args, "quiet", False)
    args.debug = getattr(args, "debug", False)
    prefix = f"shardvol {args.command}: error:"
    try:
        return int(args.run(args) or 0)
    except UsageError as e:
        args.parser.print_usage(sys.stderr)
        print(f"{prefix} {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"shardvol {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `shardvol info URL | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (ShardvolError, OSError) as e:
        if args.debug:
            raise
        print(f"{prefix} {e}", file=sys.stderr)
        return 1
    except Exception as e:  # an unexpected failure: still one line unless --debug
        if args.debug:
            raise
        print(f"{prefix} {type(e).__name__}: {e} (run with --debug for the traceback)",
              file=sys.stderr)
        return 1
