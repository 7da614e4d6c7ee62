"""The `attncli` command's entry point, and `python -m attncli`.

Before the CLI imports anything, `attncli serve` gets its stop handlers (serve/stopping.py): a
SIGTERM that arrives while the server is still starting must stop it with exit 0, not kill it.
"""

import sys


def main() -> None:
    """Run the command line (`attncli.cli.main`), serve's stop handlers installed first."""
    from attncli.serve.stopping import is_serve_command, stop_at_once_while_starting

    if is_serve_command(sys.argv[1:]):
        stop_at_once_while_starting()
    from attncli.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
