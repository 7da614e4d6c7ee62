"""The updates' figures, read from the device in groups, and what they become: log lines,
train and skipped events in metrics.jsonl, and the count of non-finite updates in a row."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from attncli.core.config import TrainConfig
from attncli.core.console import Reporter
from attncli.core.memory import megabytes, resident_bytes
from attncli.runs.metrics import MetricsLog
from attncli.training.distributed import World
from attncli.training.schedule import due
from attncli.training.step import StepStats
from attncli.training.stops import Stopwatch


@dataclass
class _Window:
    """The updates since the last log line (the skipped ones not counted)."""

    start: float          # training seconds when it opened
    tokens: int = 0
    loss: float = 0.0
    steps: int = 0


class UpdateFigures:
    """Keeps each update's `StepStats` on the device until `read` is due (a log, validation,
    save or stop step), so a GPU is never kept waiting for the host between updates."""

    def __init__(self, cfg: TrainConfig, world: World, *, metrics: MetricsLog,
                 reporter: Reporter, clock: Stopwatch, window: dict | None = None):
        """`window`: the open log window a checkpoint saved (`window_record`), so the first
        train event after a resume averages the same updates as the uninterrupted run's."""
        self.cfg, self.world, self.metrics, self.reporter = cfg, world, metrics, reporter
        self.clock = clock
        self.window = _Window(**window) if window else _Window(clock.seconds())
        self.started_here = True  # the open window holds this process's start-up time
        self.pending: list[tuple[int, float, StepStats]] = []  # updates not read yet
        self.nonfinite_in_row, self.nonfinite_stop = 0, None
        self.shown = ""  # figures beside the progress bar
        self.last_read: tuple[float, float, float] = (math.nan, 0.0, math.nan)  # loss, lr, norm

    def window_record(self) -> dict:
        """The updates since the last log line, for state.json (read first: see `read`)."""
        return asdict(self.window)

    def add(self, step: int, lr: float, stats: StepStats) -> None:
        self.pending.append((step, lr, stats))

    def read(self, step: int, epoch: int) -> None:
        """Read the figures of the updates since the last read (this waits for the device):
        skipped updates are logged, the window gathers the others, a log step writes a line."""
        if not self.pending:
            return
        losses = self.world.sum(torch.stack([stats.loss for _, _, stats in self.pending]))
        norms = torch.stack([stats.grad_norm.float() for _, _, stats in self.pending])
        for (at, lr, stats), loss, norm in zip(self.pending, losses.tolist(), norms.tolist(),
                                               strict=True):
            if math.isfinite(norm) and math.isfinite(loss):
                self.nonfinite_in_row = 0
                self.window.tokens += stats.tokens
                self.window.loss += loss
                self.window.steps += 1
                self.last_read = (loss, lr, norm)
            else:
                self._skipped(at, epoch, loss, norm)
        self.pending.clear()
        if due(self.cfg, step).log:
            self._log_window(step, epoch)

    def _skipped(self, step: int, epoch: int, loss: float, grad_norm: float) -> None:
        self.nonfinite_in_row += 1
        if self.nonfinite_in_row >= self.cfg.max_nonfinite_updates:
            self.nonfinite_stop = self.nonfinite_stop or step
        what = f"loss {loss}, grad norm {grad_norm}"
        self.metrics.write({"event": "skipped", "step": step, "epoch": epoch, "reason": what})
        self.reporter.line(f"update {step} skipped (weights unchanged): non-finite {what} "
                           f"({self.nonfinite_in_row} in a row)")

    def _log_window(self, step: int, epoch: int) -> None:
        """A train event in metrics.jsonl and a log line over the updates since the last one."""
        window, now = self.window, self.clock.seconds()
        self.window = _Window(now)
        if not window.steps:
            return
        loss, lr, grad_norm = self.last_read
        record = {"event": "train", "step": step, "epoch": epoch,
                  "loss": window.loss / window.steps, "lr": lr,
                  "tokens_per_s": round(window.tokens / max(now - window.start, 1e-9), 1),
                  "grad_norm": round(grad_norm, 4), "seconds": round(now, 2),
                  "label_smoothing": self.cfg.label_smoothing, **memory_fields(),
                  **({"includes_startup": True} if self.started_here else {})}
        startup = " (incl. start-up)" if self.started_here else ""
        self.started_here = False
        self.metrics.write(record)
        left = ("" if self.cfg.max_minutes is None
                else f" | {time_left_text(self.cfg.max_minutes, now)}")
        self.shown = f"loss {record['loss']:.3f} lr {lr:.1e}{left}"
        smoothed = f" (ls {self.cfg.label_smoothing:g})" if self.cfg.label_smoothing else ""
        self.reporter.line(
            f"step {step:>6} | epoch {epoch + 1:>3} | loss {record['loss']:.4f}{smoothed} | lr "
            f"{lr:.2e} | {record['tokens_per_s']:,.0f} tgt tok/s{startup} | {now:,.0f} s{left} | "
            f"{memory_text(record)}")


def time_left_text(max_minutes: float, seconds: float) -> str:
    """'12:03 of 30:00 left': a time-limited run's training time left (minutes:seconds)."""
    def clock(total: float) -> str:
        whole = max(0, round(total))
        return f"{whole // 60}:{whole % 60:02d}"
    return f"{clock(max_minutes * 60 - seconds)} of {clock(max_minutes * 60)} left"


def memory_fields() -> dict:
    """The process's resident memory now (`rss_mb`) and, where CUDA is in use, the most its
    allocator has held (`cuda_peak_mb`): the memory figures of a train event."""
    fields = {"rss_mb": megabytes(resident_bytes())}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        fields["cuda_peak_mb"] = megabytes(torch.cuda.max_memory_allocated())
    return fields


def memory_text(record: dict) -> str:
    """A train event's memory as the log line shows it: 'RSS 1.02 GB' (and CUDA's peak)."""
    rss = record["rss_mb"]
    text = "RSS unknown" if rss is None else f"RSS {rss / 1000:.2f} GB"
    if "cuda_peak_mb" in record:
        text += f", CUDA peak {record['cuda_peak_mb'] / 1000:.2f} GB"
    return text
