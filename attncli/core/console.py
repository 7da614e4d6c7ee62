"""What the user sees: standard output that may not be UTF-8 or may go away, JSON lines on it,
and while training a progress bar on a terminal, plain lines otherwise, and every line in the
run's train.log."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Sequence
from typing import Any


def writes_utf8(stream) -> bool:
    """Whether `stream` (stdout, stderr) encodes UTF-8: where not, what it cannot encode is
    escaped (`cli.main`), and JSON lines use JSON's own escapes (`stdout_json`)."""
    return (getattr(stream, "encoding", None) or "").lower().replace("-", "") == "utf8"


def stdout_json(record: dict[str, Any]) -> str:
    """`record` as one JSON line for standard output: its text as it is where stdout is UTF-8,
    else as JSON escapes (the escapes that stdout falls back on are not JSON's)."""
    return json.dumps(record, ensure_ascii=not writes_utf8(sys.stdout))


_stdout_gone = False  # set once standard output failed: the lines after it go to train.log only


def echo(text: str) -> None:
    """`print`, except that a standard output that fails (its reader gone, as `| head` does; its
    disk full; closed) is let go for good: a training run's lines are in train.log too, and the
    run must not end over them (it died at its next log line, without a checkpoint)."""
    global _stdout_gone
    if _stdout_gone:
        return
    try:
        print(text, flush=True)
    except (OSError, ValueError, AttributeError):  # AttributeError: no sys.stdout at all
        _stdout_gone = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # for the exit flush


class Reporter:
    """Prints progress: a rich progress bar on a terminal, plain lines otherwise (CI, logs).

    Every line also goes to train.log, so a run folder explains itself afterwards.
    """

    def __init__(self, log_path, total_steps: int | None, start_step: int,
                 earlier: Sequence[str] = (), hold_earlier: bool = False):
        """`earlier`: lines printed before the run folder existed, added to train.log; with
        `hold_earlier` (a resume) only with the first line of the run's own, so a resume that
        is refused leaves train.log as it was."""
        import sys

        from rich.console import Console

        self.log_path = log_path
        self._held = list(earlier)
        if not hold_earlier:
            self._write([])
        self.console = Console(stderr=False)
        self.interactive = sys.stdout.isatty()
        self.progress = None
        if self.interactive:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[figures]}"), TimeElapsedColumn(), TextColumn("ETA"),
                TimeRemainingColumn(), console=self.console, transient=False,
            )
            self.task = self.progress.add_task("train", total=total_steps, completed=start_step,
                                               figures="")
            self.progress.start()

    def _write(self, lines: list[str]) -> None:
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in [*self._held, *lines])
        self._held = []

    def line(self, text: str) -> None:
        self._write([text])
        if self.progress is not None:
            self.progress.console.print(text, highlight=False, markup=False)
        else:
            echo(text)

    def set_total(self, total: int | None) -> None:
        """The update count the bar runs to (None: no end known, so no ETA)."""
        if self.progress is not None:
            self.progress.update(self.task, total=total)

    def step(self, step: int, figures: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step, figures=figures)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


class SilentReporter(Reporter):
    """Shows nothing: the reporter of the training processes other than rank 0."""

    def __init__(self):
        self.progress = None

    def line(self, text: str) -> None:
        pass
