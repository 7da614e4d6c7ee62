"""The decoder's key/value cache: a buffer per attention module, written in place.

Kept apart from ``attention.py`` (the maths) because it is decoding's bookkeeping: where each
step's keys/values go and how rows follow the searches' reorderings.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Keys and values of one attention module, kept between decoding steps.

    Both are (rows, heads, length, head_dim) views of a buffer of (capacity rows, capacity
    positions, heads, head_dim): a row's positions lie together, so writing a position or
    moving a row copies contiguous blocks. For self-attention the buffer is allocated once, for
    the longest output of the batch, and each step writes its keys/values at the next positions
    in place (growing by ``torch.cat`` would copy all earlier positions at every step: O(T²) for
    T tokens); it only grows, by copying, if a caller asked for too little. For cross-attention
    the buffer is the encoder output's projection, computed once per source.

    ``select`` keeps a subset or reordering of the rows (beam search, sentences leaving the
    batch) by moving only the rows whose content changes.
    """

    def __init__(self, rows: int = 0, positions: int = 0):
        self.capacity = (rows, positions)  # what to allocate at the first append
        self.k_buffer: Tensor | None = None  # (capacity rows, positions, heads, head_dim)
        self.v_buffer: Tensor | None = None
        self.rows = self.length = 0  # the part in use: [:rows, :length]

    def _in_use(self, buffer: Tensor | None) -> Tensor | None:
        """(rows, heads, length, head_dim) view of a buffer (None before the first step)."""
        return None if buffer is None else buffer[: self.rows, : self.length].transpose(1, 2)

    @property
    def k(self) -> Tensor | None:
        return self._in_use(self.k_buffer)

    @property
    def v(self) -> Tensor | None:
        return self._in_use(self.v_buffer)

    def set(self, k: Tensor, v: Tensor) -> None:
        """Keep ``k``, ``v`` (rows, heads, src_len, head_dim) as they are (cross-attention)."""
        self.k_buffer, self.v_buffer = k.transpose(1, 2), v.transpose(1, 2)
        self.rows, self.length = k.size(0), k.size(2)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write the new positions' keys/values ``k``, ``v`` (rows, heads, new, head_dim) after
        the earlier ones, in place; returns all of them, (rows, heads, length + new, head_dim)."""
        rows, end = k.size(0), self.length + k.size(2)
        if self.k_buffer is None or end > self.k_buffer.size(1) or rows > self.k_buffer.size(0):
            self._allocate(k, rows, end)
        self.k_buffer[:rows, self.length : end] = k.transpose(1, 2)
        self.v_buffer[:rows, self.length : end] = v.transpose(1, 2)
        self.rows, self.length = rows, end
        return self.k, self.v  # type: ignore[return-value]

    def _allocate(self, like: Tensor, rows: int, positions: int) -> None:
        """A buffer with room for at least ``rows`` x ``positions``, the filled part copied."""
        old = self.k_buffer
        rows = max(rows, self.capacity[0], 0 if old is None else old.size(0))
        positions = max(positions, self.capacity[1], 0 if old is None else 2 * old.size(1))
        _, heads, _, head_dim = like.shape
        k_buffer = like.new_empty(rows, positions, heads, head_dim)
        v_buffer = like.new_empty(rows, positions, heads, head_dim)
        if old is not None:
            k_buffer[: self.rows, : self.length] = old[: self.rows, : self.length]
            v_buffer[: self.rows, : self.length] = self.v_buffer[: self.rows, : self.length]
        self.k_buffer, self.v_buffer = k_buffer, v_buffer

    def select(self, index: Tensor, moved: Tensor | None = None) -> None:
        """Keep rows ``index`` (new row i = old row ``index[i]``), like ``index_select`` on the
        rows, but in place and moving only the rows ``moved`` where ``index[i] != i`` (give
        them when several caches share one index: finding them reads the device once)."""
        if self.k_buffer is None:
            return
        if index.numel() > self.k_buffer.size(0):
            raise ValueError(f"{index.numel()} rows asked of a cache of {self.k_buffer.size(0)}")
        if moved is None:
            moved = changed_rows(index)
        if moved.numel():
            source = index[moved]
            for buffer in (self.k_buffer, self.v_buffer):
                filled = buffer[:, : self.length]  # (capacity rows, length, heads, head_dim)
                # gathered before written: a row may be both moved and read
                filled.index_copy_(0, moved, filled.index_select(0, source))
        self.rows = index.numel()


def changed_rows(index: Tensor) -> Tensor:
    """Positions i where ``index[i] != i`` (a row selection that moves only those rows)."""
    return (index != torch.arange(index.numel(), device=index.device)).nonzero().squeeze(1)
