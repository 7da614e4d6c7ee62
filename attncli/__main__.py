"""The `attncli` command's entry point, and `python -m attncli`.

Two things happen here rather than in the CLI, because they concern the process, not a command:

- Before the CLI imports anything, `attncli serve` gets its stop handlers (serve/stopping.py):
  a SIGTERM that arrives while the server is still starting must stop it with exit 0, not kill
  it.
- Commands that are done once they return (`ENDS_WITHOUT_TEARDOWN`) end the process without
  the interpreter's teardown: unloading torch and the model took a fifth of a one-sentence
  `attncli translate` (benchmarks/MEASUREMENTS.md, "One sentence, start to end"). Their outputs
  are written and closed before they return, and they leave no worker process or background
  writer behind; `train`, `prepare` and `export` do, or may, and end as usual.
"""

import contextlib
import os
import sys

ENDS_WITHOUT_TEARDOWN = frozenset({"translate", "eval", "serve"})


def command_of(argv: list[str]) -> str | None:
    """The command a command line (without the program's name) runs: its first word that is
    not an option (the root options are flags and take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def _end(code: object) -> None:
    """Exit with `code` (SystemExit's meaning) once outputs are flushed, skipping teardown."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # None: the stream was closed when the process started
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    if code is None or isinstance(code, int):
        os._exit(code or 0)
    if sys.stderr is not None:  # SystemExit("message"), as Python prints it
        with contextlib.suppress(OSError, ValueError):
            print(code, file=sys.stderr, flush=True)
    os._exit(1)


def main() -> None:
    """Run the command line (`attncli.cli.main`) with serve's stop handlers installed first."""
    from attncli.serve.stopping import stop_at_once_while_starting

    command = command_of(sys.argv[1:])
    if command == "serve":
        stop_at_once_while_starting()
    from attncli.cli import main as cli_main

    try:
        cli_main()
    except SystemExit as done:
        if command not in ENDS_WITHOUT_TEARDOWN:
            raise
        _end(done.code)


if __name__ == "__main__":
    main()
