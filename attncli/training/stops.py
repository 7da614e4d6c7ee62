"""Stopping between updates: why a run stops, signals turned into a flag, and the clock
`max_minutes` reads."""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import stat
import sys
import time
from collections.abc import Iterator

# Under a launcher, how soon after a signal its forwarded copy arrives at the latest (it comes
# within milliseconds; a person's second Ctrl-C comes later).
SIGNAL_ECHO_S = 2.0


class StopReason(enum.StrEnum):
    """Why a run stops after an update. Each value is the text that log lines and error
    messages print ("stopped at step 40 (max_steps)") and that a limit's config key is named
    by, so it is a `StrEnum`: a `str` that prints as its value.

    - MAX_STEPS, MAX_EPOCHS, MAX_MINUTES: that `train.` limit is reached; the run is at its
      end: validated and saved there, and an extension (`--resume --set train.max_...`) goes on.
    - PATIENCE: `train.patience` validations in a row did not improve the best BLEU; the run is
      at its end, as at a limit.
    - SIGNAL: SIGINT, SIGTERM or SIGHUP (the terminal closed) asked the run to stop; it saves
      and can be resumed (exit 130, 143 or 129), its end work (end validation, averaging) not
      done.
    - NONFINITE: `train.max_nonfinite_updates` updates in a row were non-finite; nothing is
      saved and the run ends with an error.
    """

    MAX_STEPS = "max_steps"
    MAX_EPOCHS = "max_epochs"
    MAX_MINUTES = "max_minutes"
    PATIENCE = "patience"
    SIGNAL = "signal"
    NONFINITE = "nonfinite"

    @property
    def completes(self) -> bool:
        """Whether the run is at its end (a limit or patience): its end work is due."""
        return self not in (StopReason.SIGNAL, StopReason.NONFINITE)


# The signals that stop a run with a save: Ctrl-C, `kill`/docker/systemd, and a closed terminal
# (SIGHUP reaches the terminal's processes when its window or SSH session closes).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopSignal:
    """Turns SIGINT/SIGTERM/SIGHUP into a flag checked between updates, so a checkpoint gets
    saved.

    A second signal stops at once, for a user who will not wait: SIGINT as a
    KeyboardInterrupt (exit 130), SIGTERM and SIGHUP with exit 128 + the signal's number, as a
    death by that signal reads. What is on disk is the last checkpoint, whole (saves are
    atomic).
    """

    def __init__(self, echo_s: float = 0.0):
        """`echo_s`: for a process under a launcher that forwards signals, the same signal
        again within this many seconds is the launcher's copy of the first, not a second (a
        terminal's Ctrl-C, `systemctl stop` or `scancel` signal every process at once)."""
        self.name: str | None = None
        self.echo_s, self._first_at = echo_s, 0.0
        self._previous = {}

    def __enter__(self) -> StopSignal:
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if name == self.name and time.monotonic() - self._first_at < self.echo_s:
            return  # the launcher's copy of the signal this process already got
        if self.name is not None:  # second signal: stop now
            signal.signal(signum, self._previous[signum])
            print(f"a second {name}: stopped at once; the run resumes from its last checkpoint",
                  file=sys.stderr, flush=True)
            if signum != signal.SIGINT:
                raise SystemExit(128 + signum)
            raise KeyboardInterrupt
        self.name, self._first_at = name, time.monotonic()
        if signum == signal.SIGHUP:
            _leave_the_closed_terminal()

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _leave_the_closed_terminal() -> None:
    """After SIGHUP the terminal is gone, and every write to it fails (EIO): the progress bar's
    next refresh or the line that says where the run saved would end the process before its
    save. Standard output and error that are terminals go to /dev/null from here on; train.log
    still gets every line."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        null_device = os.fstat(devnull).st_rdev
        for fd in (1, 2):
            with contextlib.suppress(OSError):
                info = os.fstat(fd)
                if stat.S_ISCHR(info.st_mode) and info.st_rdev != null_device:  # a terminal
                    os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class Stopwatch:
    """Training seconds: wall time less the pauses (validation, saving), which are not
    training and must count neither in `max_minutes` nor in tokens/s."""

    def __init__(self, before: float = 0.0):
        self._origin = time.perf_counter() - before

    def seconds(self) -> float:
        return time.perf_counter() - self._origin

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self._origin += time.perf_counter() - started
