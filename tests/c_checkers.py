"""Building and running the C checkers of tests/c (random-input and differential checks of
the kernels in csrc), for the tests that call them."""

from __future__ import annotations

import shlex
import subprocess
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_checker(tmp_path: Path, checker: str, sources: list[str], args: list[str], *,
                libs: tuple[str, ...] = (), defines: tuple[str, ...] = (),
                sanitize: bool = False, timeout: float = 120) -> str:
    """Build ``tests/c/<checker>.c`` with ``csrc/<sources>`` (and ``-l<libs>``, ``-D<defines>``;
    with ASan + UBSan when ``sanitize`` and the compiler has them), run it with ``args``
    and return what it printed; it must exit 0."""
    exe = tmp_path / checker
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    build = [*cc, "-std=c99", "-O1", "-g", *(f"-D{d}" for d in defines), f"-I{ROOT / 'csrc'}",
             str(ROOT / "tests" / "c" / f"{checker}.c"), *(str(ROOT / "csrc" / s) for s in sources),
             "-o", str(exe), *(f"-l{lib}" for lib in libs)]
    sanitized = sanitize and subprocess.run(
        [*build, "-fsanitize=address,undefined", "-fno-sanitize-recover=all"],
        capture_output=True, check=False).returncode == 0
    if not sanitized:
        subprocess.run(build, check=True)
    run = subprocess.run([str(exe), *args], capture_output=True, check=False, text=True,
                         timeout=timeout)
    assert run.returncode == 0, run.stderr
    return run.stdout
