"""The run's event log, metrics.jsonl: one JSON object per log, validation or examples event.

Appended as training goes (each line flushed at once, so a crash keeps it), read back by the
curves, a resume (which drops the events past its checkpoint) and `attncli serve`'s model
description.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attncli.core.errors import AttncliError
from attncli.core.files import atomic_write_text


class MetricsLog:
    """Appends one JSON object per event to metrics.jsonl (flushed at once, so a crash keeps it).

    With no path it keeps nothing: what the training processes other than rank 0 write to.
    `mirror`, when set, gets every record too (the TensorBoard log).
    """

    def __init__(self, path: Path | None):
        self.path = Path(path) if path is not None else None
        self.mirror: Callable[[dict[str, Any]], None] | None = None

    def write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
        if self.mirror is not None:
            self.mirror(record)

    def read(self) -> list[dict[str, Any]]:
        """Every event; a last line cut short by a kill is left out."""
        if self.path is None or not self.path.is_file():
            return []
        text = self.path.read_text("utf-8")
        lines = text.splitlines()
        if lines and not text.endswith("\n"):
            lines.pop()
        records = []
        for number, line in enumerate(lines, 1):
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise AttncliError(f"{self.path}, line {number}: not a metrics event ({err}); "
                                   "mend or delete that line") from None
        return records

    def drop_after(self, step: int) -> int:
        """Forget events past `step` (a resumed run replays them); returns how many went."""
        records = self.read()
        kept = [r for r in records if r.get("step", 0) <= step]
        if self.path is not None and self.path.is_file():
            atomic_write_text(self.path, "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                                 for r in kept))
        return len(records) - len(kept)
