"""The sizes a reader takes in at once, kept: modules, functions, and the README as a guide.

Long tables and sections that later work adds go to docs/ pages linked from the README.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODULE_LINES, FUNCTION_LINES, README_LINES = 400, 60, 250


def _modules() -> list[Path]:
    return sorted((REPO / "attncli").rglob("*.py"))


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(REPO)): n for p in _modules()
            if (n := len(p.read_text("utf-8").splitlines())) > MODULE_LINES}
    assert not long, f"split these by responsibility: {long}"


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
