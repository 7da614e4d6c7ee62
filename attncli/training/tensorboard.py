"""Training metrics in TensorBoard: the scalars of metrics.jsonl, and the `train.examples`
translations as text, also under RUN/tensorboard/.

    tensorboard --logdir runs

TensorBoard is optional (`pip install 'attncli[tensorboard]'`); `train.tensorboard: auto` logs
to it when it is installed. metrics.jsonl stays the record attncli itself reads.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from attncli.core.errors import AttncliError

# The figures of each metrics.jsonl event that become scalars, tagged "<event>/<figure>".
SCALARS = {"train": ("loss", "lr", "tokens_per_s", "grad_norm"),
           "val": ("val_loss", "val_bleu")}


class TensorBoardLog:
    """Writes each metrics record's scalars as TensorBoard events at the record's step."""

    def __init__(self, folder: Path, resumed_at: int | None):
        from torch.utils.tensorboard import SummaryWriter

        # A resumed run replays the steps after its checkpoint: drop what was logged past it.
        purge = resumed_at + 1 if resumed_at is not None else None
        self.writer = SummaryWriter(str(folder), purge_step=purge)

    def __call__(self, record: dict[str, Any]) -> None:
        for figure in SCALARS.get(record.get("event"), ()):
            self.writer.add_scalar(f"{record['event']}/{figure}", record[figure], record["step"])
        for corpus, figures in record.get("corpora", {}).items():  # a mix's val sets
            for figure, value in figures.items():
                self.writer.add_scalar(f"val_{corpus}/{figure}", value, record["step"])
        if record.get("event") == "examples":  # the text panel, a table per validation
            self.writer.add_text("examples", examples_table(record["examples"]), record["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def examples_table(examples: list[dict[str, str]]) -> str:
    """The examples as a Markdown table, as TensorBoard's text panel renders it."""
    def cell(text: str) -> str:
        return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")

    rows = [f"| {cell(e['source'])} | {cell(e['output'])} |" for e in examples]
    return "\n".join(["| source | output |", "| --- | --- |", *rows])


def open_tensorboard(setting: bool | str, folder: Path,
                     resumed_at: int | None) -> TensorBoardLog | None:
    """The log `train.tensorboard` asks for, or None (off, or `auto` without tensorboard).

    Off on a resume of a run that logged before, its events past the checkpoint are dropped
    all the same (they were kept, and a later resume with it on showed them beside the
    replayed steps' new figures)."""
    if tensorboard_wanted(setting):
        return TensorBoardLog(folder, resumed_at)
    if resumed_at is not None and folder.is_dir() and _installed():
        TensorBoardLog(folder, resumed_at).close()
    return None


def tensorboard_wanted(setting: bool | str) -> bool:
    """Whether `train.tensorboard` logs: true, or auto where tensorboard is installed (which
    torch.utils.tensorboard needs); true without it is an error. Checked before a run starts,
    so the error comes before any data is prepared."""
    installed = _installed()
    if setting is True and not installed:
        raise AttncliError("train.tensorboard is true but tensorboard is not installed: "
                           "pip install 'attncli[tensorboard]', or set it to auto")
    return setting is not False and installed


def _installed() -> bool:
    return importlib.util.find_spec("tensorboard") is not None
