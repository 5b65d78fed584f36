"""Every ```python block of the documentation runs (docs/**/*.md and README.md).

The blocks of one page run in order in one namespace (later blocks use what earlier ones
made), in a fresh temporary directory, so relative paths in examples land there.  A block
right after a ``<!-- skip-test -->`` line is not run: only for examples that need a remote
store (S3, GCS, a server) that the tests cannot reach.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIP = "<!-- skip-test -->"
FENCE = re.compile(r"^```python\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[tuple[int, str]]:
    """The (line number, code) of each ```python block of ``page`` not marked skip-test."""
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        if before != SKIP:
            found.append((text.count("\n", 0, m.start()) + 1, m.group("code")))
    return found


def test_pages_have_examples() -> None:
    """The extraction finds the pages and their blocks (a broken pattern would run none)."""
    counted = {p.relative_to(ROOT).as_posix(): len(blocks(p)) for p in pages()}
    assert counted["README.md"] >= 1
    assert counted["docs/getting-started.md"] >= 1
    assert sum(counted.values()) >= 40


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_example_{page.stem}"}
    for line, code in blocks(page):
        where = f"{page.relative_to(ROOT)}:{line}"
        try:
            exec(compile(code, where, "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"the example at {where} failed: {type(e).__name__}: {e}") from e
