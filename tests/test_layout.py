"""The package layout is the architecture: imports only point down the layers, and no
module imports itself back through others.

storage (kvstore) -> chunk engine (array) and the uint64 sharded format (sharding) ->
formats (precomputed, zarr3) -> format detection (formats.py) -> operations (ops) ->
command line (cli).  Every import counts, also those inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "shardvol"

# layer of each top-level part of the package: a module may import its own part and
# lower layers only (and the two formats, and the engine and sharding, not each other)
LAYERS = {
    "errors": 0, "_parallel": 0,
    "_ext": 1, "compression": 1, "jsondoc": 1, "_reference": 1, "sizes": 1,
    "kvstore": 2,
    "array": 3, "sharding": 3,
    "precomputed": 4, "zarr3": 4,
    "formats": 5,
    "ops": 6,
    "__init__": 7,
    "cli": 8, "demo": 8, "__main__": 9,
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every shardvol module ``path`` imports, at any depth of its code."""
    tree = ast.parse(path.read_text(), str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(
        ".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:  # "from shardvol import zarr3" imports a module
                found.add(f"{base}.{alias.name}")
            found.add(base)
    return {m for m in found if m == "shardvol" or m.startswith("shardvol.")}


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for imported in _imports(path):
            while imported not in modules and "." in imported:  # a name in a module
                imported = imported.rpartition(".")[0]
            if imported in modules and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_the_graph_is_read():
    graph = _graph()
    assert "shardvol.array.engine" in graph["shardvol.precomputed.volume"]
    assert "shardvol.sharding.writer" in graph["shardvol.precomputed.sharded"]
    assert len(graph) > 60


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycle = [*stack[stack.index(t):], t]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_imports_point_down_the_layers():
    wrong = []
    for m, targets in sorted(_graph().items()):
        mine = _part(m)
        assert mine in LAYERS, f"{m}: part {mine!r} has no layer in this test"
        for t in sorted(targets):
            theirs = _part(t)
            if theirs == mine or (t == "shardvol" and mine in ("cli", "demo")):
                continue
            if LAYERS[theirs] >= LAYERS[mine]:
                wrong.append(f"{m} -> {t}")
    assert not wrong, "imports that point up or across the layers:\n" + "\n".join(wrong)
