"""Greedy and beam search over a batch of source sentences, with the decoder's key/value cache.

Both searches run the encoder once per batch and then feed the decoder one new token per step
(the cache keeps every earlier position's keys/values, so a step costs O(t), not O(t²)).
Beam search is batched: ``sentences x beam`` rows go through the decoder together, and after
each step the cache follows the surviving hypotheses with one ``index_select``. Sentences whose
search is over leave the batch at once, so late steps only pay for the sentences still going.

Conventions shared by both searches:

* every hypothesis ends in EOS: at its maximum length (``a * src_len + b`` tokens, src_len
  counting the source's real tokens and its EOS) only EOS is allowed;
* PAD and BOS are never generated;
* ``score = log_prob / (len(tokens) + 1) ** length_penalty`` — the +1 counts the EOS, whose
  probability is part of ``log_prob``;
* ``attention`` (when asked) has one row per output token plus one for the EOS.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attncli.batching import pad
from attncli.config import DecodeConfig
from attncli.device import autocast
from attncli.errors import AttncliError
from attncli.model.transformer import DecoderCache, Seq2SeqTransformer
from attncli.tokenizer import BOS_ID, EOS_ID, PAD_ID


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


def max_output_lengths(src: Tensor, model: Seq2SeqTransformer, a: float, b: float) -> Tensor:
    """Per sentence ``floor(a * src_len + b)``, at least 1, and leaving a position for the EOS.

    src (batch, src_len) right-padded -> (batch,) long.
    """
    src_lens = (src != model.pad_id).sum(dim=1)  # (batch,)
    limit = model.cfg.max_positions - 1  # step t feeds position t; the EOS step feeds max_len
    return (a * src_lens + b).floor().long().clamp(1, limit)


def _hypothesis(tokens: list[int], log_prob: float, length_penalty: float,
                attention: Tensor | None) -> Hypothesis:
    return Hypothesis(tokens, log_prob / (len(tokens) + 1) ** length_penalty, log_prob, attention)


def _restrict(logits: Tensor, at_limit: Tensor) -> None:
    """In place: no PAD/BOS anywhere; only EOS for sentences at their maximum length.

    logits (sentences, width, vocab), at_limit (sentences,) bool. Applied after the
    log-normaliser was taken, so the log-probabilities stay the model's own.
    """
    logits[:, :, PAD_ID] = -torch.inf
    logits[:, :, BOS_ID] = -torch.inf
    if at_limit.any():
        eos = logits[at_limit, :, EOS_ID]  # (m, width)
        logits[at_limit] = -torch.inf
        logits[at_limit, :, EOS_ID] = eos


def _reorder_self_attention(cache: DecoderCache, rows: Tensor) -> None:
    """Follow the surviving beams in the self-attention caches only.

    Cross-attention keys/values depend on the source alone, so they are equal for all beams of
    one sentence; while the set of sentences is unchanged, copying them would be wasted work.
    """
    for layer in cache.layers:
        layer.self_attn.reorder(rows)


class _DecodingState:
    """What a search carries from step to step: encoder output, cache, prefixes, attention.

    Rows are hypotheses (a sentence's beams are adjacent rows). ``tokens`` (rows, 1 + t) holds
    BOS plus the t tokens chosen so far; ``attention`` (rows, layers, heads, t, src_len) the
    cross-attention of each chosen token when asked.
    """

    def __init__(self, model: Seq2SeqTransformer, src: Tensor, use_cache: bool,
                 need_attention: bool):
        self.model, self.need_attention = model, need_attention
        self.memory, self.src_mask = model.encode(src)  # (batch, S, d_model), (batch, 1, 1, S)
        self.cache = model.new_cache() if use_cache else None
        self.tokens = torch.full((src.size(0), 1), BOS_ID, dtype=torch.long, device=src.device)
        self.attention: Tensor | None = None

    @property
    def steps(self) -> int:
        """Tokens chosen so far (BOS not counted)."""
        return self.tokens.size(1) - 1

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
                same_sentences: bool = False) -> None:
        """Continue the prefixes ``rows`` (None: all, in order) with ``next_tokens`` (new_rows,).

        ``same_sentences`` says that the new rows belong to the same sentences, in the same
        places, as the old ones (a beam reordering): the source side then stays as it is.
        """
        if rows is not None:
            self.tokens = self.tokens.index_select(0, rows)
            if step_attention is not None:
                step_attention = step_attention.index_select(0, rows)
                if self.attention is not None:
                    self.attention = self.attention.index_select(0, rows)
            if self.cache is not None:
                if same_sentences:
                    _reorder_self_attention(self.cache, rows)
                else:
                    self.cache.reorder(rows)
            if not same_sentences:
                self.memory = self.memory.index_select(0, rows)
                self.src_mask = self.src_mask.index_select(0, rows)
        self.tokens = torch.cat([self.tokens, next_tokens[:, None]], dim=1)  # (rows, 2 + t)
        if step_attention is not None:
            step_attention = step_attention[:, :, :, None]  # (rows, layers, heads, 1, S)
            self.attention = (step_attention if self.attention is None
                              else torch.cat([self.attention, step_attention], dim=3))


@torch.inference_mode()
def greedy_search(
    model: Seq2SeqTransformer,
    src: Tensor,
    max_len_a: float,
    max_len_b: float,
    use_cache: bool = True,
    need_attention: bool = False,
    length_penalty: float = 1.0,
) -> list[Hypothesis]:
    """The most probable next token at every step, for each row of ``src`` (batch, src_len).

    ``length_penalty`` only affects the reported ``score`` (for comparison with beam search).
    """
    state = _DecodingState(model, src, use_cache, need_attention)
    sentence = torch.arange(src.size(0), device=src.device)  # row -> input sentence
    max_len = max_output_lengths(src, model, max_len_a, max_len_b)  # (rows,)
    log_prob = torch.zeros(src.size(0), device=src.device)  # (rows,)
    results: list[Hypothesis | None] = [None] * src.size(0)
    while True:
        logits, log_norm, step_attention = state.step()  # (rows, vocab), (rows, 1)
        _restrict(logits[:, None], max_len <= state.steps)
        best_logit, best = logits.max(dim=-1)  # (rows,)
        log_prob += best_logit - log_norm.squeeze(1)
        ended = best == EOS_ID
        if not ended.any():
            state.advance(None, best, step_attention)
            continue
        rows = ended.nonzero().squeeze(1)
        for i, hypothesis in state.ended(rows, sentence[rows], log_prob[rows], step_attention,
                                         length_penalty):
            results[i] = hypothesis
        going = (~ended).nonzero().squeeze(1)
        if going.numel() == 0:
            return results  # type: ignore[return-value]
        sentence, max_len, log_prob = sentence[going], max_len[going], log_prob[going]
        state.advance(going, best[going], step_attention)


@dataclass
class _Extensions:
    """A step's best ``2 * beam`` extensions of each active sentence's beams, best first.

    All (sentences, 2 * beam): ``log_prob`` of the extended hypothesis, the decoder ``row``
    (prefix) it extends, and the ``token`` it appends.
    """

    log_prob: Tensor
    row: Tensor
    token: Tensor


def _best_extensions(logits: Tensor, log_norm: Tensor, scores: Tensor, beam: int) -> _Extensions:
    """The best ``2 * beam`` extensions of each sentence's beams, from the step's (restricted)
    logits (n * width, vocab), their log-normaliser (n * width, 1) and the beams' log-probs
    (n, width).

    Why two top-k's: a sentence's best 2 * beam extensions are among each row's best 2 * beam
    tokens, so only (n, width * 2 * beam) candidates are ever summed, never the whole vocabulary.
    """
    n, width = scores.shape
    row_logits, row_token = logits.topk(min(2 * beam, logits.size(-1)), dim=-1)  # (n * width, c)
    per_row = row_logits.size(1)
    candidates = scores[:, :, None] + (row_logits - log_norm).view(n, width, per_row)
    top_scores, top = candidates.view(n, -1).topk(min(2 * beam, width * per_row), dim=1)
    top_row = torch.arange(n, device=scores.device)[:, None] * width + top // per_row
    return _Extensions(top_scores, top_row, row_token.view(n, -1).gather(1, top))


def _ending(best: _Extensions, is_eos: Tensor, ended_count: Tensor, beam: int) -> Tensor:
    """(n, beam) bool: the EOS extensions among the best ``beam`` that end a hypothesis.

    A sentence ends at most ``beam - ended_count`` more (the best first), and an extension whose
    log-probability is -inf (a forbidden token forced into the top k) never ends one.
    """
    ending = is_eos[:, :beam] & best.log_prob[:, :beam].isfinite()
    return ending & (ending.cumsum(dim=1) <= (beam - ended_count)[:, None])


def _survivors(best: _Extensions, is_eos: Tensor, beam: int) -> tuple[Tensor, Tensor, Tensor]:
    """Log-prob, row and token (n, beam each) of the best ``beam`` extensions that are not EOS,
    best first (a stable sort of the EOS flags keeps the candidates' order)."""
    keep = torch.sort(is_eos.byte(), dim=1, stable=True).indices[:, :beam]  # (n, beam)
    return best.log_prob.gather(1, keep), best.row.gather(1, keep), best.token.gather(1, keep)


@torch.inference_mode()
def beam_search(
    model: Seq2SeqTransformer,
    src: Tensor,
    beam: int,
    max_len_a: float,
    max_len_b: float,
    length_penalty: float = 1.0,
    nbest: int = 1,
    use_cache: bool = True,
    need_attention: bool = False,
) -> list[list[Hypothesis]]:
    """The ``nbest`` best of ``beam`` hypotheses per row of ``src`` (batch, src_len).

    Each step takes the top ``2 * beam`` extensions of a sentence's beams: EOS among the best
    ``beam`` of them ends a hypothesis, the best ``beam`` others continue (there are always
    enough, as each beam has only one EOS extension). A sentence is done when ``beam``
    hypotheses have ended (or its maximum length forced EOS on all of them).
    """
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest ({nbest}) must be between 1 and beam ({beam})")
    device = src.device
    state = _DecodingState(model, src, use_cache, need_attention)
    sentence = torch.arange(src.size(0), device=device)  # active sentence -> input sentence
    max_len = max_output_lengths(src, model, max_len_a, max_len_b)  # (n,)
    ended_count = torch.zeros(src.size(0), dtype=torch.long, device=device)  # (n,)
    scores = torch.zeros(src.size(0), 1, device=device)  # (n, width): 1 at first, then beam
    finished: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    while True:
        n, width = scores.shape
        logits, log_norm, step_attention = state.step()  # (n * width, vocab), (n * width, 1)
        _restrict(logits.view(n, width, -1), max_len <= state.steps)
        best = _best_extensions(logits, log_norm, scores, beam)
        is_eos = best.token == EOS_ID
        ending = _ending(best, is_eos, ended_count, beam)
        if ending.any():
            rows = best.row[:, :beam][ending]
            for i, hypothesis in state.ended(rows, sentence[ending.nonzero()[:, 0]],
                                             best.log_prob[:, :beam][ending], step_attention,
                                             length_penalty):
                finished[i].append(hypothesis)
            ended_count += ending.sum(dim=1)
        going = ~((ended_count >= beam) | (max_len <= state.steps))  # (n,)
        if not going.any():
            break
        all_going = bool(going.all())
        scores, rows, tokens = _survivors(best, is_eos, beam)  # (n, beam) each
        if not all_going:
            scores, rows, tokens = scores[going], rows[going], tokens[going]
            sentence, max_len, ended_count = sentence[going], max_len[going], ended_count[going]
        state.advance(rows.view(-1), tokens.view(-1), step_attention,
                      same_sentences=all_going and width == beam)

    for hyps in finished:
        hyps.sort(key=lambda h: h.score, reverse=True)
    return [hyps[:nbest] for hyps in finished]


def translate_ids(
    model: Seq2SeqTransformer,
    src_ids: Sequence[Sequence[int]],
    cfg: DecodeConfig,
    beam: int,
    nbest: int,
    device: torch.device | str,
    need_attention: bool = False,
    progress: Callable[[int], None] | None = None,
    precision: str = "fp32",
) -> list[list[Hypothesis]]:
    """Decode many sources (id lists ending in EOS); ``nbest`` hypotheses each, in input order.

    Sources are sorted by length and cut into batches of ``cfg.batch_size`` sentences, so a
    batch holds little padding; greedy search when ``beam == 1``. Attention, when asked, is
    trimmed to each source's own length. ``progress(k)`` is called after each batch of k.
    ``precision="bf16"`` decodes under bf16 autocast (see ``device.resolve_precision``).
    """
    if not 1 <= nbest <= beam:
        raise AttncliError(f"--nbest {nbest} needs a beam of at least {nbest} (beam is {beam})")
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    results: list[list[Hypothesis]] = [[] for _ in src_ids]
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), autocast(torch.device(device), precision):
            for start in range(0, len(order), cfg.batch_size):
                chunk = order[start : start + cfg.batch_size]
                src = pad([src_ids[i] for i in chunk]).to(device)  # (batch, src_len)
                if beam == 1:
                    found = [[h] for h in greedy_search(
                        model, src, cfg.max_len_a, cfg.max_len_b, need_attention=need_attention,
                        length_penalty=cfg.length_penalty)]
                else:
                    found = beam_search(model, src, beam, cfg.max_len_a, cfg.max_len_b,
                                        cfg.length_penalty, nbest, need_attention=need_attention)
                for i, hyps in zip(chunk, found, strict=True):
                    for h in hyps:
                        if h.attention is not None:
                            h.attention = h.attention[..., : len(src_ids[i])]
                    results[i] = hyps
                if progress is not None:
                    progress(len(chunk))
    finally:
        model.train(was_training)
    return results
