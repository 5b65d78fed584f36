"""Pieces shared by the subcommands: common options, usage errors, progress bars."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any, TypeVar

from tqdm import tqdm

from shardvol.errors import InfoError, ShardvolError
from shardvol.jsondoc import load_json

T = TypeVar("T")

# --quiet / --debug are accepted before or after the subcommand; SUPPRESS keeps a
# subcommand's default from overwriting a value given before it.
COMMON = argparse.ArgumentParser(add_help=False)
COMMON.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                    help="no progress bars or informational messages")
COMMON.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                    help="show the traceback of an error")


class UsageError(Exception):
    """Arguments that parse but do not make sense together (exit code 2)."""


def command(subparsers: Any, name: str, run: Callable[[argparse.Namespace], int | None],
            help: str, description: str | None = None) -> argparse.ArgumentParser:
    """Add subcommand ``name`` whose ``run(args)`` returns the exit code (None = 0)."""
    parser = subparsers.add_parser(
        name, help=help, description=description or help, parents=[COMMON],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(run=run, parser=parser)
    return parser


def executor_args(parser: argparse.ArgumentParser) -> None:
    """``--processes N`` and ``--scheduler ADDRESS``: where a job's tasks run."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--processes", type=positive_int, metavar="N",
                       help="run the tasks in N local worker processes (default: threads of "
                            "this process)")
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="run the tasks on the Dask cluster of this scheduler "
                            "(tcp://host:8786; pip install shardvol[dask])")


@contextlib.contextmanager
def executor(args: argparse.Namespace) -> Iterator[Executor | None]:
    """The executor ``--processes`` / ``--scheduler`` ask for (None: threads here)."""
    if getattr(args, "processes", None):
        with ProcessPoolExecutor(args.processes) as pool:
            yield pool
    elif getattr(args, "scheduler", None):
        try:
            from distributed import Client
        except ImportError:
            raise ShardvolError("--scheduler needs Dask: pip install shardvol[dask]") from None
        try:
            client = Client(args.scheduler, timeout=30)
        except OSError as e:
            raise ShardvolError(f"cannot reach the Dask scheduler {args.scheduler}: {e}"
                                ) from None
        with client:
            yield client.get_executor()
    else:
        yield None


def progress(items: Iterable[T], quiet: bool, **kwargs: Any) -> Iterator[T]:
    """``items`` with a tqdm progress bar on stderr unless ``quiet``."""
    return iter(tqdm(items, disable=quiet, file=sys.stderr, dynamic_ncols=True, **kwargs))


def note(args: argparse.Namespace, message: str) -> None:
    """An informational message on stderr (silenced by --quiet)."""
    if not args.quiet:
        print(message, file=sys.stderr)


def sharding_arg(value: str) -> str | dict[str, Any] | None:
    """``--sharding`` value: ``auto``, ``none`` or a JSON sharding spec."""
    if value.lower() in ("auto", "none"):
        return None if value.lower() == "none" else "auto"
    try:
        spec = load_json(value, "--sharding")
    except InfoError:
        raise argparse.ArgumentTypeError(
            f"expected auto, none or a JSON sharding spec, got {value!r}") from None
    if not isinstance(spec, dict):
        raise argparse.ArgumentTypeError(f"a sharding spec must be a JSON object, got {value!r}")
    return spec


def positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return n


def port(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = -1
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port in 0-65535, got {value!r}")
    return n


def human_bytes(n: int) -> str:
    """``n`` bytes as ``123 B`` / ``4.5 MiB``."""
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024:
            return f"{size:.1f} {unit}"
    return f"{size / 1024:.1f} TiB"
