"""The sizes a reader takes in at once, kept: functions, and the README as a guide; and every
package's map of its modules.

A module is split when it has two jobs, never to fit a number (modules stay under about 500
lines as a guide, not a test). Long tables and sections that later work adds go to docs/ pages
linked from the README.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FUNCTION_LINES, README_LINES = 60, 250


def _modules() -> list[Path]:
    return sorted((REPO / "attncli").rglob("*.py"))


def test_no_function_is_over_60_lines():
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{path.relative_to(REPO)}:{node.name}"] = lines
    assert not long, f"too long to read at once: {long}"


def test_the_readme_stays_a_guide_under_250_lines():
    lines = len((REPO / "README.md").read_text("utf-8").splitlines())
    assert lines < README_LINES, f"README.md has {lines} lines: move tables to docs/"


def test_every_package_names_its_modules_in_its_docstring():
    """Each package's __init__.py says its job and lists its modules (docs/architecture.md),
    so a module added without a place on the map is noticed."""
    missing = {}
    for init in sorted((REPO / "attncli").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text("utf-8"))) or ""
        names = [p.stem for p in init.parent.glob("*.py") if p.name != "__init__.py"]
        names += [p.name for p in init.parent.iterdir() if (p / "__init__.py").is_file()]
        if absent := sorted(name for name in names if name not in doc):
            missing[str(init.relative_to(REPO))] = absent
    assert not missing, f"name these modules in their package's docstring: {missing}"
