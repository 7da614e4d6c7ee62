"""The filters of a training corpus (`FilterConfig`): which pairs each one drops, as a code per
pair stored beside its token ids, so the counts stay known and training reads only the kept.

A pair is dropped by the first filter, in `FILTERS` order, that takes it: the counts add up to
the pairs dropped. Empty pairs and pairs longer than data.max_len are dropped before any
filter (as with no filter), and counted apart by the token cache. Filters run when a split is
tokenized, on its stripped texts (as they are trained on) and its subword tokens, so they are
part of the token cache's key.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from attncli.core.scripts import script_pattern

# The order filters are tried in; a pair's code is 1 + the index of the filter that took it.
FILTERS = ("same_text", "length_ratio", "script", "duplicates")
KEPT = 0


def filter_counts(codes: np.ndarray) -> dict[str, int]:
    """Pairs dropped by each filter, from the codes of a split (`PairFilter.codes`)."""
    counts = np.bincount(codes, minlength=len(FILTERS) + 1)
    return {name: int(counts[i + 1]) for i, name in enumerate(FILTERS)}


def repeated_pairs(src_texts: list[str | None], tgt_texts: list[str | None]) -> np.ndarray:
    """True for each pair whose stripped texts equal an earlier pair's (the first one stays).

    Computed over the whole split before it is tokenized in several processes, which each see
    only their part of it."""
    seen: set[bytes] = set()
    repeated = np.zeros(len(src_texts), dtype=bool)
    for row, (src, tgt) in enumerate(zip(src_texts, tgt_texts, strict=True)):
        key = hashlib.blake2b(f"{(src or '').strip()}\t{(tgt or '').strip()}".encode(),
                              digest_size=16).digest()
        repeated[row] = key in seen
        seen.add(key)
    return repeated


class PairFilter:
    """The drop code of each pair of a batch (`KEPT`, or the filter that takes it); picklable
    for the tokenizing processes (the script patterns are compiled where used)."""

    def __init__(self, active: dict[str, Any], src: str, tgt: str):
        """`active`: `FilterConfig.active()`; `src`, `tgt`: the language codes."""
        self.active, self.src, self.tgt = active, src, tgt

    def codes(self, src_texts: list[str], tgt_texts: list[str], src_tokens: np.ndarray,
              tgt_tokens: np.ndarray, repeated: np.ndarray | None) -> np.ndarray:
        """Codes for pairs of stripped texts and their subword token counts (no EOS);
        `repeated` (`repeated_pairs`) where `duplicates` is on."""
        codes = np.zeros(len(src_texts), dtype=np.uint8)
        for index, name in enumerate(FILTERS):
            if name not in self.active:
                continue
            dropped = self._dropped_by(name, src_texts, tgt_texts, src_tokens=src_tokens,
                                       tgt_tokens=tgt_tokens, repeated=repeated)
            codes[(codes == KEPT) & dropped] = index + 1
        return codes

    def _dropped_by(self, name: str, src_texts: list[str], tgt_texts: list[str],
                    src_tokens: np.ndarray, tgt_tokens: np.ndarray,
                    repeated: np.ndarray | None) -> np.ndarray:
        if name == "same_text":
            return np.array([s == t for s, t in zip(src_texts, tgt_texts, strict=True)],
                            dtype=bool)
        if name == "length_ratio":
            longer = np.maximum(src_tokens, tgt_tokens).astype(np.float64)
            shorter = np.maximum(np.minimum(src_tokens, tgt_tokens), 1)
            return longer / shorter > self.active["length_ratio"]
        if name == "script":
            src_script, tgt_script = script_pattern(self.src), script_pattern(self.tgt)
            return np.array([not (src_script.search(s) and tgt_script.search(t))
                             for s, t in zip(src_texts, tgt_texts, strict=True)], dtype=bool)
        assert repeated is not None, "duplicates needs the repeated pairs"
        return repeated
