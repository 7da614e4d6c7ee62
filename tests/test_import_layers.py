"""No two modules of attncli import each other, however indirectly: the import graph has no cycle.

The layers themselves (core ← data ← model ← decoding ← runs ← training ← {serve, bench} ←
commands ← cli) are import-linter's contract in pyproject.toml (`lint-imports`, run by `make
test`); that contract says nothing of the modules inside one package, where a cycle is as hard
to read. Every import counts, as it does for a reader: at the top, inside a function, or under
`TYPE_CHECKING`.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def module_name(root: Path, path: Path) -> str:
    """'attncli.data.cache' for attncli/data/cache.py; a package is named by its __init__.py."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, here: str, is_package: bool, modules: set[str]) -> list[str]:
    """The modules of `modules` that an import statement in module `here` names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in modules]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: from the package of `here` (itself when it is a package)
        package = here.split(".")
        package = package if is_package else package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    found = []
    for alias in node.names:  # `from pkg import module` names the module, else pkg itself
        name = f"{base}.{alias.name}"
        found.append(name if name in modules else base)
    return [name for name in found if name in modules]


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each module of the package at `root` -> the modules of that package it imports."""
    paths = {module_name(root, path): path for path in sorted(root.rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text("utf-8"))
        is_package = path.name == "__init__.py"
        graph[name] = {target for node in ast.walk(tree)
                       for target in _imported(node, name, is_package, set(paths))} - {name}
    return graph


def import_cycles(root: Path) -> list[list[str]]:
    """The groups of modules that import each other (strongly connected, Tarjan), sorted."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(cycles)


def test_no_modules_of_attncli_import_each_other():
    assert import_cycles(REPO / "attncli") == []


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_check_finds_a_cycle_through_functions_type_checking_and_relative_imports(tmp_path):
    package = _package(tmp_path / "pkg", {
        "__init__.py": '"""A package."""\n',
        "low.py": "from typing import TYPE_CHECKING\n"
                  "if TYPE_CHECKING:\n    from pkg.sub.high import High\n",
        "sub/__init__.py": "",
        "sub/mid.py": "from pkg import low\n",
        "sub/high.py": "def f():\n    from . import mid\n",
        "apart.py": "import pkg.low\n",
    })
    assert import_cycles(package) == [["pkg.low", "pkg.sub.high", "pkg.sub.mid"]]
    (package / "low.py").write_text("")  # the cycle broken
    assert import_cycles(package) == []
