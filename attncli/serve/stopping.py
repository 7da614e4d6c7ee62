"""How `attncli serve` stops on SIGTERM, SIGINT and SIGHUP, from its first instant to its last.

Two phases, one rule each:

- **Starting** (the interpreter, imports, loading the runs): nothing has been accepted yet, so
  there is nothing to finish. A stop signal ends the process at once with exit 0 and one line.
  `os._exit` rather than an exception: an exception raised inside an import or a destructor
  can be swallowed ("Exception ignored in ..."), and the server would then start serving after
  it was told to stop. The handlers are installed by the entry point, before the CLI imports
  anything, when the command is `serve`.
- **Serving**: the signal asks uvicorn to stop (command.py); requests in flight are answered.
  Then the process ends without the interpreter's teardown (attncli/__main__.py): unloading
  torch and the models was most of an idle server's stop, and nothing is left to write.

Why the serving phase needs more than a handler: CPython runs Python signal handlers only in
the main thread, and a process-wide signal may be taken by any thread that does not block it
(the kernel prefers the main thread, but not when it has the signal blocked for a moment, as
glibc does while it creates a thread). When another thread takes it, CPython 3.11 marks the
signal pending without waking the main thread, which notices it only the next time it takes
the interpreter lock. The main thread decodes, and an idle server's main thread waits on the
batcher's queue: a wait without a timeout never took the lock again, and the server hung
(issue 63: its log ended with the last request's line). So the HTTP thread blocks the stop
signals (`block_stop_signals`), and the batcher's idle wait wakes up regularly.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _exit_while_starting(signum: int, frame) -> None:
    name = signal.Signals(signum).name
    with contextlib.suppress(OSError):  # no stderr (a closed terminal): the exit code says it
        os.write(2, f"attncli serve: {name} before serving started: stopped\n".encode())
    os._exit(0)


def stop_at_once_while_starting() -> None:
    """Until `attncli serve` takes connections, a stop signal exits 0 at once (module doc)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _exit_while_starting)


def block_stop_signals() -> None:
    """Block the stop signals in the calling thread (and the threads it starts), so that the
    kernel hands them to the main thread, where their handlers run (module doc)."""
    if sys.platform != "win32":
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

