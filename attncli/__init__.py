"""attncli: encoder-decoder Transformer translation from the command line.

The packages follow the data flow, from a data set's name to a translation served over HTTP:

    core      errors, crash-safe files, the config, special ids and language codes, the
              device, the console, plots: what every layer shares
    data      a data set found and read, tokenized (SentencePiece), cached, cut into batches
    model     the encoder-decoder Transformer, built from a config
    decoding  greedy and beam search, sources encoded to fit, BLEU/chrF, the CTranslate2 engine
    runs      the run folder: its layout, metrics, checkpoints, averages, a trained run loaded
    training  `attncli train`: the loop, its parts, resuming, several processes
    serve     `attncli serve`: a trained run behind HTTP, with a page
    bench     `attncli bench`: attention kernels, training throughput, decoding speed

and the commands that span them, with the CLI on top:

    evaluate.py   `attncli eval`: a split translated and scored
    translate.py  `attncli translate`: sentences from arguments, a file or a pipe
    export.py     `attncli export`: a checkpoint as a CTranslate2 model folder or an Argos
                  Translate package, with its model card
    cli.py        the Typer app: options parsed, one function called, errors to exit codes
    __main__.py   `python -m attncli`

The import rule: a module imports its own package or the packages listed before it
(core ← data ← model ← decoding ← runs ← training ← {serve, bench} ← commands ← cli); serve and
bench never import each other. import-linter checks it (pyproject.toml, `make test`), and
tests/test_import_layers.py that no modules import each other in a cycle. Each package's
docstring lists its modules in reading order; docs/architecture.md says where things live.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attncli.core.version import __version__

if TYPE_CHECKING:  # for type checkers; at run time __getattr__ imports them when first used
    from attncli.core.errors import AttncliError
    from attncli.runs.translator import Candidate, Translation, Translator

__all__ = ["AttncliError", "Candidate", "Translation", "Translator", "__version__"]


# The public Python interface, imported when first used: `import attncli` (which `attncli
# --help` does too) must not load torch, which takes seconds.
_PUBLIC = {"AttncliError": "attncli.core.errors", "Candidate": "attncli.runs.translator",
           "Translation": "attncli.runs.translator", "Translator": "attncli.runs.translator"}


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'attncli' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_PUBLIC[name]), name)
