"""What a search carries from step to step (``DecodingState``) and what it returns (``Hypothesis``).

The state keeps its buffers (prefixes, key/value caches) allocated once per batch and moves
only the rows whose content changes: searches choose row indices that keep most rows in place
(see ``compaction`` and ``search._in_place_order``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from attncli.data.tokenizer import BOS_ID
from attncli.model.kv_cache import changed_rows
from attncli.model.transformer import Seq2SeqTransformer


@dataclass
class Hypothesis:
    """One translation of one sentence.

    tokens:    target ids without BOS/EOS
    score:     ``log_prob / (len(tokens) + 1) ** length_penalty`` (what n-best lists are sorted by)
    log_prob:  sum of the token log-probabilities, EOS included
    attention: cross-attention (layers, heads, len(tokens) + 1, src_len), only when asked
    """

    tokens: list[int]
    score: float
    log_prob: float
    attention: Tensor | None = None


def _hypothesis(tokens: list[int], log_prob: float, length_penalty: float,
                attention: Tensor | None) -> Hypothesis:
    return Hypothesis(tokens, log_prob / (len(tokens) + 1) ** length_penalty, log_prob, attention)


def compaction(going: Tensor) -> Tensor:
    """Which old sentence each of the ``m`` going ones comes from (m,), ``going`` (n,) bool.

    The going sentences among the first m stay where they are; the others fill, in order, the
    places of those that are done. Their rows in the caches are then the only ones to move
    (removing the done ones and closing up the batch would move every row after the first).
    """
    kept = going.nonzero().squeeze(1)  # (m,) ascending
    m = kept.numel()
    index = torch.arange(m, device=going.device)
    index[(~going[:m]).nonzero().squeeze(1)] = kept[kept >= m]
    return index

class DecodingState:
    """What a search carries from step to step: encoder output, cache, prefixes, attention.

    Rows are hypotheses (a sentence's beams are adjacent rows); the source side (encoder
    output, its mask, the cross-attention keys/values) has one row per sentence, which its
    beams share (``attention.group_queries``). ``tokens`` (rows, 1 + t) holds
    BOS plus the t tokens chosen so far, a view of a buffer allocated once for the batch's
    longest output; ``attention`` (rows, layers, heads, t, src_len) the cross-attention of each
    chosen token when asked. ``max_rows`` is the most rows a step will have (sentences x beam).
    With a cache, ``memory`` (the encoder output) is read at the first step only (for the
    cross-attention keys/values) and does not follow the rows after it.
    """

    def __init__(self, model: Seq2SeqTransformer, src: Tensor, use_cache: bool,
                 need_attention: bool, max_rows: int, max_steps: int):
        self.model, self.need_attention = model, need_attention
        self.memory, self.src_mask = model.encode(src)  # (batch, S, d_model), (batch, 1, 1, S)
        # Step t feeds position t; the last (EOS) step feeds position max_steps.
        self.cache = model.new_cache(max_rows, max_steps + 1) if use_cache else None
        self._tokens = torch.full((max_rows, max_steps + 2), BOS_ID, dtype=torch.long,
                                  device=src.device)  # (max_rows, BOS + max_steps + EOS)
        self.rows = src.size(0)  # rows in use
        self.steps = 0  # tokens chosen so far (BOS not counted)
        self.attention: Tensor | None = None

    @property
    def tokens(self) -> Tensor:
        """(rows, 1 + steps): BOS and the tokens chosen so far."""
        return self._tokens[: self.rows, : 1 + self.steps]

    def step(self) -> tuple[Tensor, Tensor, Tensor | None]:
        """Next-token logits (rows, vocab), their log-normaliser (rows, 1), and the step's
        cross-attention (rows, layers, heads, src_len) when asked.

        log-probabilities = logits - normaliser; the searches subtract it only from the few
        candidates they keep, instead of writing a full log-softmax every step.
        """
        new = self.tokens if self.cache is None else self.tokens[:, -1:]  # (rows, 1 or 1 + t)
        out = self.model.decode(new, self.memory, self.src_mask, self.cache,
                                need_weights=self.need_attention)
        logits = out.logits[:, -1].float()  # (rows, vocab)
        log_norm = logits.logsumexp(dim=-1, keepdim=True)  # (rows, 1)
        if not self.need_attention:
            return logits, log_norm, None
        return logits, log_norm, torch.stack([w[:, :, -1] for w in out.cross_attention], dim=1)

    def attention_of(self, rows: Tensor, step_attention: Tensor | None) -> list[Tensor | None]:
        """Full attention (layers, heads, t + 1, src_len) of the given rows, this step included."""
        if step_attention is None:
            return [None] * rows.numel()
        now = step_attention.index_select(0, rows)[:, :, :, None]  # (n, layers, heads, 1, S)
        if self.attention is not None:
            now = torch.cat([self.attention.index_select(0, rows), now], dim=3)
        return list(now.float().cpu().unbind(0))

    def ended(self, rows: Tensor, sentences: Tensor, log_probs: Tensor,
              step_attention: Tensor | None, length_penalty: float
              ) -> Iterator[tuple[int, Hypothesis]]:
        """(input sentence, hypothesis) for the prefixes ``rows`` (k,) that this step's EOS ends.

        ``sentences`` (k,) names each row's input sentence, ``log_probs`` (k,) its log-probability
        with the EOS; one host transfer per tensor, not one per hypothesis.
        """
        for i, tokens, log_prob, attention in zip(
            sentences.tolist(), self.tokens[rows, 1:].tolist(), log_probs.tolist(),
            self.attention_of(rows, step_attention), strict=True,
        ):
            yield i, _hypothesis(tokens, log_prob, length_penalty, attention)

    def advance(self, rows: Tensor | None, next_tokens: Tensor, step_attention: Tensor | None,
                sources: Tensor | None = None) -> None:
        """Continue the prefixes ``rows`` (None: all, in order) with ``next_tokens`` (new_rows,).

        ``sources`` (new sentences,) names the old sentence each new one is, when sentences
        leave the batch (None: the same sentences, as in a beam reordering, or when beam
        search widens from one row per sentence to ``beam``: the source side stays). The
        prefixes and caches move only the rows whose index differs from their place (see
        ``KVCache.select``), so searches choose indices that keep rows where they are.
        """
        if rows is not None:
            moved = changed_rows(rows)  # (k,), one device read
            if moved.numel():
                self._tokens[moved, : 1 + self.steps] = self._tokens[rows[moved], : 1 + self.steps]
            self.rows = rows.numel()
            if step_attention is not None:
                step_attention = step_attention.index_select(0, rows)
                if self.attention is not None:
                    self.attention = self.attention.index_select(0, rows)
            if self.cache is not None:
                for layer in self.cache.layers:
                    layer.self_attn.select(rows, moved)
            if sources is not None:
                self._follow_sources(sources)
        self._tokens[: self.rows, 1 + self.steps] = next_tokens
        self.steps += 1
        if step_attention is not None:
            step_attention = step_attention[:, :, :, None]  # (rows, layers, heads, 1, S)
            self.attention = (step_attention if self.attention is None
                              else torch.cat([self.attention, step_attention], dim=3))

    def _follow_sources(self, sources: Tensor) -> None:
        """The source side of the going sentences: cross-attention caches, mask, encoder
        output."""
        self.src_mask = self.src_mask.index_select(0, sources)  # (rows, 1, 1, S), small
        if self.cache is None:  # without a cache every step reads the encoder output
            self.memory = self.memory.index_select(0, sources)
            return
        # With one, only the first step read it (for the cross-attention keys/values).
        moved = changed_rows(sources)
        for layer in self.cache.layers:
            layer.cross_attn.select(sources, moved)
