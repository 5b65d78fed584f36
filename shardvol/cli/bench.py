"""``shardvol bench``: run the side-by-side benchmarks (benchmarks/bench_*.py of a checkout).

Each script compares shardvol with TensorStore / CloudVolume / zarr-python in one run
and prints the ratios.  ``--quick`` is passed to the scripts that accept it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

from shardvol.cli.common import UsageError, command, note

# the directory holding the shardvol package this command runs (a checkout, or site-packages)
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CHECKOUT_BENCHMARKS = os.path.join(_PACKAGE_PARENT, "benchmarks")


def register(subparsers: Any) -> None:
    p = command(subparsers, "bench", run, help="run the side-by-side benchmarks",
                description=__doc__)
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="only these benchmarks (e.g. sharding for bench_sharding.py)")
    p.add_argument("--quick", action="store_true", help="smaller data, where supported")
    p.add_argument("--dir", default=None,
                   help="directory of the bench_*.py scripts (default: the checkout's "
                   "benchmarks/, else ./benchmarks)")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")


def find_scripts(directory: str) -> dict[str, str]:
    """Benchmark name -> script path (``bench_NAME.py``), sorted by name."""
    names = sorted(f for f in os.listdir(directory) if f.startswith("bench_") and f.endswith(".py"))
    return {f[len("bench_"):-len(".py")]: os.path.join(directory, f) for f in names}


def _default_dir() -> str:
    for d in (_CHECKOUT_BENCHMARKS, os.path.join(os.getcwd(), "benchmarks")):
        if os.path.isdir(d):
            return d
    raise UsageError("no benchmarks/ directory found (they live in the source checkout); "
                     "pass --dir")


def _accepts_quick(path: str) -> bool:
    with open(path, encoding="utf-8") as f:
        return '"--quick"' in f.read()


def run(args: argparse.Namespace) -> int:
    directory = args.dir or _default_dir()
    scripts = find_scripts(directory)
    unknown = [n for n in args.names if n not in scripts]
    if unknown:
        raise UsageError(f"unknown benchmark(s) {', '.join(unknown)}; "
                         f"available: {', '.join(scripts)}")
    if args.list:
        print("\n".join(scripts))
        return 0
    chosen = {n: p for n, p in scripts.items() if not args.names or n in args.names}
    # the scripts import the same shardvol as this command, installed or not
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (_PACKAGE_PARENT, os.environ.get("PYTHONPATH")) if p))
    failed = []
    for name, path in chosen.items():
        cmd = [sys.executable, path]
        if args.quick and _accepts_quick(path):
            cmd.append("--quick")
        note(args, f"==> {name}: {' '.join(cmd)}")
        t0 = time.perf_counter()
        code = subprocess.call(cmd, env=env)
        note(args, f"<== {name}: exit {code} after {time.perf_counter() - t0:.0f} s")
        if code != 0:
            failed.append(name)
    if failed:
        print(f"benchmark(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
