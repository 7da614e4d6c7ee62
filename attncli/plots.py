"""Pictures people would rather look at than read: learning curves and attention heatmaps."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attncli.runs import atomic_write_bytes


def _pyplot():
    """matplotlib with the file-only backend (no display needed, safe in CI and over SSH)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(records: Sequence[dict[str, Any]], path: Path) -> None:
    """Training loss, validation loss and validation BLEU against steps, saved as a PNG."""
    plt = _pyplot()
    train = [r for r in records if "loss" in r and "val_loss" not in r]
    val = [r for r in records if "val_loss" in r]
    fig, (ax_loss, ax_bleu) = plt.subplots(1, 2, figsize=(10, 4))
    if train:
        ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
    if val:
        ax_loss.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-",
                     label="val loss")
        ax_bleu.plot([r["step"] for r in val], [r["val_bleu"] for r in val], "o-", color="C2")
    ax_loss.set(xlabel="update", ylabel="loss per target token", title="Loss")
    ax_loss.legend()
    ax_bleu.set(xlabel="update", ylabel="BLEU (greedy, val)", title="Validation BLEU")
    for ax in (ax_loss, ax_bleu):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
