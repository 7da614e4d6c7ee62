"""Call sites that name their arguments (docs/architecture.md, "Arguments by name").

Outside `attncli/cli.py`, whose Typer functions must list their options, options travel as one
typed object per command or decoding setting, or as keyword-only parameters. Two bools, or two
`Path | None`s, passed by position in the wrong order are a bug no type checker and no error
message catches; a keyword, or a field of an options object, makes every call say what it
sets. Kept here for `attncli/` and `benchmarks/`, by an AST walk:

* no function outside cli.py takes more than 8 parameters (`self` counted);
* none takes `*args`/`**kwargs` unless listed in `VARARGS` with the reason it carries no
  options (a protocol, data of one kind, a library's own options passed through);
* no call of an attncli function (a function or class defined in attncli/ or benchmarks/, found
  by name) passes more than 4 arguments by position (a `*starred` one counts as one).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("attncli", "benchmarks")
CLI = "attncli/cli.py"
MAX_PARAMETERS, MAX_POSITIONAL = 8, 4

# (file, function) taking *args or **kwargs -> why they are no options.
VARARGS = {
    ("attncli/model/attention.py", "combine_masks"):
        "the masks to AND, as many as there are: data of one kind, not options",
    ("attncli/training/stops.py", "__exit__"):
        "the context-manager protocol's exception triple",
    ("attncli/data/readers.py", "_read"):
        "the `datasets` builder's own keyword options, passed through to load_dataset",
    ("benchmarks/data_scale.py", "remove"):
        "the folders to delete, as many as there are: data of one kind, not options",
}

# attncli names that are also the names of common torch or standard-library methods: called as
# an attribute (`x.to(...)`), the callee is most often not attncli's, so such calls are not
# counted (bare-name calls of them still are). Add a name here only for such a clash.
NOT_RESOLVED = {
    "add": "set.add, Tensor.add",
    "append": "list.append (KVCache.append is attncli's)",
    "close": "files, writers (Reporter.close is attncli's)",
    "encode": "str.encode (Seq2SeqTransformer.encode is attncli's)",
    "gather": "Tensor.gather (World.gather is attncli's)",
    "read": "files (MetricsLog.read is attncli's)",
    "remove": "list.remove, hook handles (benchmarks' remove is attncli's)",
    "run": "subprocess.run (Trainer.run is attncli's)",
    "select": "Tensor.select (KVCache.select is attncli's)",
    "step": "optimizer.step (Reporter.step is attncli's)",
    "sum": "Tensor.sum (World.sum is attncli's)",
    "to": "Tensor.to, Module.to (Batch.to is attncli's)",
    "train": "Module.train (benchmarks' train is attncli's)",
    "write": "files (MetricsLog.write is attncli's)",
}


def _trees(repo: Path) -> Iterator[tuple[str, ast.Module]]:
    """(path relative to `repo`, parsed module) of every .py file under attncli/, benchmarks/."""
    for path in sorted(p for root in ROOTS for p in (repo / root).rglob("*.py")):
        yield path.relative_to(repo).as_posix(), ast.parse(path.read_text("utf-8"))


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _parameter_count(args: ast.arguments) -> int:
    return (len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
            + (args.vararg is not None) + (args.kwarg is not None))


def _defined_names(repo: Path) -> set[str]:
    """Every function, method and class name defined in attncli/ and benchmarks/."""
    return {node.name for _, tree in _trees(repo) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _callee(call: ast.Call, ours: set[str]) -> str | None:
    """The attncli name `call` calls, or None (not ours, or not resolvable by name)."""
    if isinstance(call.func, ast.Name) and call.func.id in ours:
        return call.func.id
    if isinstance(call.func, ast.Attribute) and call.func.attr in ours:
        return None if call.func.attr in NOT_RESOLVED else call.func.attr
    return None


def too_many_parameters(repo: Path = REPO) -> list[str]:
    """`file:line name takes N` for each function outside cli.py with over 8 parameters."""
    return [f"{name}:{node.lineno} {node.name} takes {_parameter_count(node.args)}"
            for name, tree in _trees(repo) if name != CLI for node in _functions(tree)
            if _parameter_count(node.args) > MAX_PARAMETERS]


def unlisted_varargs(repo: Path = REPO) -> list[str]:
    """`file:line name(*args)` for each function with *args or **kwargs not in `VARARGS`."""
    found = []
    for name, tree in _trees(repo):
        for node in _functions(tree):
            star = node.args.vararg or node.args.kwarg
            if star is not None and (name, node.name) not in VARARGS:
                found.append(f"{name}:{node.lineno} {node.name}(*{star.arg})")
    return found


def positional_calls(repo: Path = REPO) -> list[str]:
    """`file:line callee with N positional` for each call of an attncli name with over 4."""
    ours = _defined_names(repo)
    found = []
    for name, tree in _trees(repo):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and len(node.args) > MAX_POSITIONAL
                    and (callee := _callee(node, ours)) is not None):
                found.append((name, node.lineno, f"{callee} with {len(node.args)} positional"))
    return [f"{name}:{line} {what}" for name, line, what in sorted(found)]


def test_no_function_outside_cli_takes_more_than_8_parameters():
    offenders = too_many_parameters()
    assert not offenders, ("more than 8 parameters: group options in a typed object, or "
                           "drop what can be derived:\n" + "\n".join(offenders))


def test_no_function_carries_options_through_varargs():
    offenders = unlisted_varargs()
    assert not offenders, ("*args/**kwargs: name the parameters, or list the function in "
                           "VARARGS with why it carries no options:\n" + "\n".join(offenders))


def test_the_varargs_list_names_functions_that_exist():
    defined = {(name, node.name) for name, tree in _trees(REPO) for node in _functions(tree)
               if node.args.vararg or node.args.kwarg}
    assert not set(VARARGS) - defined, f"stale VARARGS entries: {set(VARARGS) - defined}"


def test_no_call_of_an_attncli_function_passes_more_than_4_arguments_by_position():
    offenders = positional_calls()
    assert not offenders, ("more than 4 arguments by position: pass the rest by keyword "
                           "(make them keyword-only at the callee):\n" + "\n".join(offenders))


def test_the_checks_find_what_they_look_for(tmp_path):
    """The walk sees a long signature, *args and a positional call in a tree it is given, and
    leaves alone cli.py's signatures, other callees and attribute calls of a clashing name."""
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "attncli").mkdir()
    (tmp_path / "attncli" / "bad.py").write_text(
        "def wide(a, b, c, d, e, f, g, h, i):\n    pass\n\n"
        "def loose(*options):\n    pass\n\n"
        "wide(1, 2, 3, 4, 5, f=6, g=7, h=8, i=9)\n"
        "wide(1, 2, 3, 4, e=5, f=6, g=7, h=8, i=9)\n"
        "print(1, 2, 3, 4, 5)\n"
        "def to(a, b, c, d, e):\n    pass\n\n"
        "x.to(1, 2, 3, 4, 5)\n", "utf-8")
    (tmp_path / "attncli" / "cli.py").write_text(
        "def command(a, b, c, d, e, f, g, h, i):\n    pass\n", "utf-8")
    assert too_many_parameters(tmp_path) == ["attncli/bad.py:1 wide takes 9"]
    assert unlisted_varargs(tmp_path) == ["attncli/bad.py:4 loose(*options)"]
    assert positional_calls(tmp_path) == ["attncli/bad.py:7 wide with 5 positional"]
