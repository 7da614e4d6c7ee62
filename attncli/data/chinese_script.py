"""Chinese text in one script: OpenCC's traditional-to-simplified conversion, applied where text
is read (`data.chinese_script: simplified`).

Why: Tatoeba's Mandarin mixes traditional and simplified characters (docs/configs-and-data.md
says how much), so a small model learns two spellings of most words from half the
examples each, writes a mix of both, and is scored against references in either. Converted
when read, training pairs, validation and test references all speak one script. OpenCC's own
Python bindings (the `opencc` package) do the conversion: its tables handle one-to-many
characters by phrase, which no hand-made character table does.

A language marked traditional (zh-Hant, zh-TW, zh-HK, zh-MO) is never converted: that script
is what its user asked for.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from attncli.core.errors import AttncliError

INSTALL = "pip install opencc"


@functools.cache
def simplifier() -> Callable[[str], str]:
    """OpenCC's t2s conversion; its absence is one line naming the package to install."""
    try:
        import opencc
    except ImportError:
        raise AttncliError(f"data.chinese_script: simplified converts Chinese text with "
                           f"OpenCC, which is not installed: {INSTALL} (or set "
                           f"data.chinese_script: null)") from None
    return opencc.OpenCC("t2s").convert


def converter_version() -> str:
    """What the conversion's result depends on, for cache keys: the OpenCC release."""
    simplifier()  # installed, or one line saying so
    import opencc

    return getattr(opencc, "__version__", "unknown")


def convert_columns(ds, sides: tuple[str, ...]):
    """A `datasets.Dataset` with text columns `sides` converted to simplified script (`ds`
    itself when there are none); a null cell stays null for the readers to refuse."""
    if not sides:
        return ds
    convert = simplifier()

    def batch(rows: dict) -> dict:
        return {side: [None if text is None else convert(text) for text in rows[side]]
                for side in sides}

    return ds.map(batch, batched=True, batch_size=10_000, load_from_cache_file=False, desc=None)
