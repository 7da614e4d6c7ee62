"""The exception type for every problem the user can fix, and which process reports it.

The CLI turns an `AttncliError` into a one-line message and exit code 2; anything
else is a bug and exits 1. Raising this instead of printing keeps library code
usable from Python and keeps the "no traceback for bad input" rule in one place.
"""

import os
import sys
from collections.abc import Callable


class AttncliError(Exception):
    """A problem with the user's input (config, data, run folder, text): exit code 2."""


class PeerFailed(AttncliError):
    """Another training process died while this one waited for it in a collective."""


LAUNCHER_ENV = "ATTNCLI_LAUNCHER"  # set for the processes `attncli train --nproc` starts
PEER_FAILED_EXIT = 3  # a training process that stopped because another one did


def reported_here(err: AttncliError) -> bool:
    """Whether this process prints `err`. Under `attncli train --nproc` one line in all: rank 0
    says its own errors (every rank meets the same ones) and the launcher says which process
    died; under plain torchrun every process speaks, as torchrun's users expect."""
    if os.environ.get(LAUNCHER_ENV) != "1":
        return True
    return not isinstance(err, PeerFailed) and os.environ.get("RANK", "0") == "0"


def report(err: Exception) -> int:
    """Say `err` in one line on stderr, where this process should; its exit code (2 bad input,
    3 another training process failed, 1 a bug)."""
    if not isinstance(err, AttncliError):
        print(f"error: {type(err).__name__}: {err} (set ATTNCLI_DEBUG=1 for a traceback)",
              file=sys.stderr, flush=True)
        return 1
    if reported_here(err):
        print(f"error: {err}", file=sys.stderr, flush=True)
    return PEER_FAILED_EXIT if isinstance(err, PeerFailed) else 2


def run_reporting(main: Callable[[], object]) -> None:
    """Run a script's `main` as the CLI runs a command: an `AttncliError` (a missing run
    folder, say) ends it with one line and exit 2, not a traceback (benchmarks/ scripts)."""
    try:
        main()
    except AttncliError as err:
        sys.exit(report(err))
