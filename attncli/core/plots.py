"""Pictures people would rather look at than read: learning curves and attention heatmaps."""

from __future__ import annotations

import io
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attncli.core.files import atomic_write_bytes


def _pyplot():
    """matplotlib with the file-only backend (no display needed, safe in CI and over SSH)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(records: Sequence[dict[str, Any]], path: Path,
                label_smoothing: float = 0.0) -> None:
    """Training loss, validation loss and validation BLEU against steps, saved as a PNG.

    The training loss is the one optimised, label-smoothed by each event's `label_smoothing`
    (`label_smoothing` for events that do not say: runs before 0.5); validation scores plain
    cross-entropy. With smoothing the two differ by far more than overfitting would make them
    (about 0.9 nats at 0.1 and 8,000 pieces), so the legend says which is which, and a resume
    that changed the smoothing, or what validation scores, starts a new line (one line would
    join figures of two kinds)."""
    plt = _pyplot()
    fig, (ax_loss, ax_bleu) = plt.subplots(1, 2, figsize=(10, 4))
    train = [r for r in records if r.get("event") == "train"]
    for part in _runs_of(train, lambda r: r.get("label_smoothing", label_smoothing)):
        smoothing = part[0].get("label_smoothing", label_smoothing)
        smoothed = f" (label-smoothed, {smoothing:g})" if smoothing else ""
        ax_loss.plot([r["step"] for r in part], [r["loss"] for r in part], color="C0",
                     label=f"train loss{smoothed}")
    changes = [r["step"] for r in records if r.get("event") == "validation_changed"]
    val = [r for r in records if r.get("event") == "val"]
    for i, part in enumerate(_runs_of(val, lambda r: sum(r["step"] > s for s in changes))):
        ax_loss.plot([r["step"] for r in part], [r["val_loss"] for r in part], "o-", color="C1",
                     label=None if i else "val loss (cross-entropy)")
        ax_bleu.plot([r["step"] for r in part], [r["val_bleu"] for r in part], "o-", color="C2")
    for i, step in enumerate(changes):
        for ax in (ax_loss, ax_bleu):
            ax.axvline(step, color="grey", linestyle=":",
                       label=None if i or ax is ax_bleu else "validation changed")
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


def _runs_of(records: list[dict[str, Any]], key) -> list[list[dict[str, Any]]]:
    """`records` cut where `key` of consecutive ones changes."""
    return [list(run) for _, run in itertools.groupby(records, key)]


def _shade(weight: float) -> str:
    """A rich style for one heatmap cell: dark for 0, bright for 1, readable text on top."""
    level = round(255 * min(max(weight, 0.0), 1.0))
    text = "black" if weight > 0.5 else "grey70"
    return f"{text} on rgb({level},{level},{round(level * 0.6)})"


def attention_table(weights: Sequence[Sequence[float]], src_pieces: Sequence[str],
                    tgt_pieces: Sequence[str]):
    """Cross-attention (tgt_len, src_len) as a rich table for the terminal (its caller prints
    the title above it: rich wraps a table's own title to the table's width).

    Source subwords across, target subwords down; each cell is shaded by its weight and shows
    it in percent ("." below 0.5 %), so the picture also survives a pipe without colours.
    """
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, padding=(0, 1, 0, 0), show_edge=False)
    table.add_column("", justify="right", style="bold", no_wrap=True)
    for piece in src_pieces:
        table.add_column(piece, justify="right", no_wrap=True, min_width=3)
    for piece, row in zip(tgt_pieces, weights, strict=True):
        cells = [Text(f"{round(100 * w)}" if w >= 0.005 else ".", style=_shade(w)) for w in row]
        table.add_row(piece, *cells)
    return table


def plot_attention(weights, src_pieces: Sequence[str], tgt_pieces: Sequence[str], path: Path,
                   title: str, head: int | None = None) -> None:
    """Cross-attention of one layer, (heads, tgt_len, src_len), saved as a PNG: one panel per
    head plus their mean, or the one `head` asked for."""
    import warnings

    import numpy as np

    plt = _pyplot()
    weights = np.asarray(weights, dtype=np.float32)
    panels = [(f"head {h}", weights[h]) for h in range(weights.shape[0])]
    panels.append(("mean of heads", weights.mean(axis=0)))
    if head is not None:
        panels = [panels[head]]
    cols = min(len(panels), 3)
    rows = -(-len(panels) // cols)
    cell = 0.28  # inches per token
    width = max(3.0, 1.2 + cell * len(src_pieces))
    height = max(2.5, 1.2 + cell * len(tgt_pieces))
    fonts = ["DejaVu Sans", *wide_script_fonts([*src_pieces, *tgt_pieces])]
    with plt.rc_context({"font.family": fonts}), warnings.catch_warnings():
        # matplotlib falls back glyph by glyph; a glyph no font has (a script with no font
        # installed) is a box, and its two-line warning per character is not worth printing
        warnings.simplefilter("ignore")
        fig, axes = plt.subplots(rows, cols, squeeze=False,
                                 figsize=(max(cols * width, 0.075 * len(title)), rows * height))
        for ax, (name, data) in zip(axes.flat, panels, strict=False):
            ax.imshow(data, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_title(name, fontsize=9)
            ax.set_xticks(range(len(src_pieces)), src_pieces, rotation=90, fontsize=7)
            ax.set_yticks(range(len(tgt_pieces)), tgt_pieces, fontsize=7)
        for ax in list(axes.flat)[len(panels):]:
            ax.axis("off")
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


# How Unicode names the characters of Chinese, Japanese and Korean (emoji are wide too, and
# their fonts another matter).
CJK_NAMES = ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "IDEOGRAPHIC", "FULLWIDTH")


def wide_script_fonts(texts: Sequence[str]) -> list[str]:
    """Installed CJK fonts, when `texts` hold wide (CJK) characters: matplotlib's default
    font has none of their glyphs and drew each as an empty box. matplotlib's font list is
    cached when it is first built, so fonts installed since are looked up on the disk; without
    any, one warning says what to install."""
    import unicodedata

    if not any(unicodedata.name(c, "").startswith(CJK_NAMES) for text in texts for c in text):
        return []
    from matplotlib import font_manager

    def cjk() -> list[str]:  # sans-serif first, simplified Chinese first among them
        names = {f.name for f in font_manager.fontManager.ttflist if "CJK" in f.name}
        return sorted(names, key=lambda n: ("Sans CJK" not in n, not n.endswith(" SC"), n))

    if not (names := cjk()):
        for font in font_manager.findSystemFonts():
            if "cjk" in Path(font).name.lower():
                font_manager.fontManager.addfont(font)
        names = cjk()
    if not names:
        print("warning: no CJK font found, so the heatmap's Chinese, Japanese or Korean labels "
              "are empty boxes; install one (Debian/Ubuntu: fonts-noto-cjk)", file=sys.stderr)
    return names
