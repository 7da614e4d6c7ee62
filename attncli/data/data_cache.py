"""The data cache's entries: where the cache is, what names an entry, and how one is written.

    <cache>/tokenizers/<key>/   a tokenizer trained on a sample of a training split (corpus.py)
    <cache>/corpora/<key>/      a tokenized split as Arrow files and their manifest
                                (token_cache.py writes it, token_table.py reads it)

A key is a hash of everything an entry's contents depend on, so a second run over the same data
reuses the entry and a changed input gets a new one. An entry is written into a temp folder
that is renamed when complete, so a reader never sees half of one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attncli.core.config import DataConfig
from attncli.core.errors import AttncliError
from attncli.core.files import remove_folder, remove_temp_entries, staged_folder
from attncli.runs.layout import check_writable

CACHE_FORMAT = 1


def _remove_damaged(folder: Path) -> None:
    """Remove a damaged entry; another process removing it too is no error."""
    with contextlib.suppress(FileNotFoundError):
        remove_folder(folder)


def cache_root(cfg: DataConfig) -> Path:
    """data.cache_dir, else $ATTNCLI_CACHE_DIR, else $XDG_CACHE_HOME/attncli (~/.cache)."""
    if cfg.cache_dir:
        return Path(cfg.cache_dir).expanduser()
    if os.environ.get("ATTNCLI_CACHE_DIR"):
        return Path(os.environ["ATTNCLI_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "attncli"


def check_cache_writable(folder: Path) -> None:
    """`folder` (the cache's tokenizers/ or corpora/) can take a new entry: checked before the
    work that fills one, as a read-only or misplaced cache otherwise fails only after it."""
    check_writable(folder, "the data cache",
                   "set data.cache_dir or $ATTNCLI_CACHE_DIR to a writable folder")


def cache_key(parts: dict[str, Any]) -> str:
    """The entry name for `parts`: everything the entry's contents depend on, hashed."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def write_entry(folder: Path, fill: Callable[[Path], None],
                intact: Callable[[Path], bool]) -> None:
    """`fill` a temp folder that becomes the cache entry `folder` in one rename.

    The temp folders a killed build of it left are removed first (not those of a build still
    running in another process: several may start at once). An entry already there is
    replaced only if, once ours is built, it is not `intact` (damaged): another process may
    have built it meanwhile (the build takes minutes), and theirs is kept. Anything else the
    disk refuses is one line, and nothing is kept.
    """
    remove_temp_entries(folder.parent, f"{folder.name}.*", abandoned_only=True)
    try:
        with staged_folder(folder) as staging:
            fill(staging)
            if folder.exists() and not intact(folder):
                _remove_damaged(folder)
    except OSError as err:
        if not (folder.is_dir() and intact(folder)):
            raise AttncliError(f"{folder.parent}: cannot write the data cache "
                               f"({err.strerror or err}); nothing was kept") from None
