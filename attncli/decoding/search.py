"""Greedy and beam search over a batch of source sentences, with the decoder's key/value cache.

Both searches run the encoder once per batch and then feed the decoder one new token per step
(the cache keeps every earlier position's keys/values, so a step costs O(t), not O(t²)). The
cache and the prefixes live in buffers allocated once per batch for its longest output, and
each step writes its position in place: nothing earlier is copied again.
Beam search is batched: ``sentences x beam`` rows go through the decoder together (sharing
their sentence's encoder output and cross-attention keys/values), and after each step the
cache follows the surviving hypotheses. Each beam's best continuation stays in
its row, so only the rows of the other continuations are copied (``_in_place_order``).
Sentences whose search is over leave the batch at once (and go to the caller's ``on_done``,
so a server can answer them), so late steps only pay for the sentences still going; the last
going sentences fill their places (``compaction``), so only those rows move. A step reads the
device once (whether anything ended), more only on steps where hypotheses end.

Conventions shared by both searches:

* every hypothesis ends in EOS: at its maximum length (``a * src_len + b`` tokens, src_len
  counting the source's real tokens and its EOS) only EOS is allowed;
* PAD and BOS are never generated;
* ``score = log_prob / (len(tokens) + 1) ** length_penalty`` — the +1 counts the EOS, whose
  probability is part of ``log_prob``;
* ``attention`` (when asked) has one row per output token plus one for the EOS;
* with ``no_repeat_ngram_size`` n > 0 (fairseq's and CTranslate2's option), no n-gram of output
  ids occurs twice in a hypothesis: a token that would complete one already in its row's prefix
  gets -inf, like the forbidden tokens, after the log-normaliser (``block_repeated_ngrams``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attncli.core.config import DecodeConfig
from attncli.core.device import autocast
from attncli.core.errors import AttncliError
from attncli.core.text import BOS_ID, EOS_ID, PAD_ID
from attncli.data.batching import pad
from attncli.model.kv_cache import changed_rows
from attncli.model.transformer import Seq2SeqTransformer

# --------------------------------------------------------------------------------------------
# What a search carries from step to step (`DecodingState`) and returns (`Hypothesis`).
# The state keeps its buffers (prefixes, key/value caches) allocated once per batch and moves
# only the rows whose content changes: searches choose row indices that keep most rows in place
# (`compaction`, `_in_place_order`).
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchSettings:
    """One decoding setting, as the searches read it: output limits (``a * src_len + b``
    tokens), beam and n-best, length penalty, n-gram blocking (0: off), whether to return the
    cross-attention, whether to keep the key/value cache (off only to check it), and how many
    sentences ``translate_ids`` searches together.

    One typed object travels from the config (``from_config``) to each step: passed by
    position, two swapped numbers (a and b) or flags would decode wrongly and say nothing.
    ``greedy_search`` reads neither ``beam`` nor ``nbest`` (one hypothesis per row).
    """

    max_len_a: float
    max_len_b: float
    beam: int = 1
    nbest: int = 1
    length_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    need_attention: bool = False
    use_cache: bool = True
    batch_size: int = 64

    @classmethod
    def from_config(cls, cfg: DecodeConfig, *, beam: int, nbest: int,
                    need_attention: bool = False) -> SearchSettings:
        """The run's decode settings with this call's beam, n-best and attention."""
        return cls(max_len_a=cfg.max_len_a, max_len_b=cfg.max_len_b, beam=beam, nbest=nbest,
                   length_penalty=cfg.length_penalty,
                   no_repeat_ngram_size=cfg.no_repeat_ngram_size,
                   need_attention=need_attention, batch_size=cfg.batch_size)


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

    def __init__(self, model: Seq2SeqTransformer, src: Tensor, settings: SearchSettings, *,
                 max_rows: int, max_steps: int):
        self.model, self.need_attention = model, settings.need_attention
        self.memory, self.src_mask = model.encode(src)  # (batch, S, d_model), (batch, 1, 1, S)
        # Step t feeds position t; the last (EOS) step feeds position max_steps.
        self.cache = model.new_cache(max_rows, max_steps + 1) if settings.use_cache else None
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

    def ended(self, rows: Tensor, sentences: Tensor, log_probs: Tensor, *,
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


# --------------------------------------------------------------------------------------------
# The searches
# --------------------------------------------------------------------------------------------


# on_done(i, hypotheses): input sentence i's search has ended with these (best first).
SentenceDone = Callable[[int, list[Hypothesis]], None]


def max_output_lengths(src: Tensor, model: Seq2SeqTransformer, a: float, b: float) -> Tensor:
    """Per sentence ``floor(a * src_len + b)``, at least 1, and leaving a position for the EOS.

    src (batch, src_len) right-padded -> (batch,) long.
    """
    src_lens = (src != model.pad_id).sum(dim=1)  # (batch,)
    limit = model.cfg.max_positions - 1  # step t feeds position t; the EOS step feeds max_len
    return (a * src_lens + b).floor().long().clamp(1, limit)


def _restrict(logits: Tensor, at_limit: Tensor, any_at_limit: bool) -> None:
    """In place: no PAD/BOS anywhere; only EOS for sentences at their maximum length.

    logits (sentences, width, vocab), at_limit (sentences,) bool; ``any_at_limit`` says whether
    one is (known on the host, so the step reads nothing from the device for it). Applied after
    the log-normaliser was taken, so the log-probabilities stay the model's own.
    """
    logits[:, :, PAD_ID] = -torch.inf
    logits[:, :, BOS_ID] = -torch.inf
    if any_at_limit:
        eos = logits[at_limit, :, EOS_ID]  # (m, width)
        logits[at_limit] = -torch.inf
        logits[at_limit, :, EOS_ID] = eos


def block_repeated_ngrams(logits: Tensor, prefix: Tensor, n: int) -> None:
    """In place: -inf for each token that would complete an ``n``-gram already in its row.

    logits (rows, vocab); prefix (rows, t) the output ids each row's hypothesis has so far (no
    BOS), row for row. Every n-gram of the prefix whose first n - 1 ids equal its last n - 1
    bans its last id. One scatter and no device read, so a step still syncs only once; the
    comparisons cost O(rows * t * n) a step.
    """
    t = prefix.size(1)
    if n <= 0 or t < n:
        return
    ngrams = prefix.unfold(1, n, 1)  # (rows, t - n + 1, n): every n-gram so far
    repeats = (ngrams[:, :, :-1] == prefix[:, None, t - n + 1 :]).all(dim=2)  # (rows, t-n+1)
    penalty = torch.zeros(repeats.shape, dtype=logits.dtype, device=logits.device)
    logits.scatter_add_(1, ngrams[:, :, -1], penalty.masked_fill_(repeats, -torch.inf))


def _step_logits(state: DecodingState, max_len: Tensor, lengths: list[int], *, width: int,
                 no_repeat_ngram_size: int) -> tuple[Tensor, Tensor, Tensor | None]:
    """``state.step()`` with its logits (sentences * width, vocab) restricted (``_restrict``)
    and, when asked, the repeated n-grams of each row's current prefix blocked."""
    logits, log_norm, step_attention = state.step()
    _restrict(logits.view(max_len.size(0), width, -1), max_len <= state.steps,
              min(lengths) <= state.steps)
    if no_repeat_ngram_size:
        block_repeated_ngrams(logits, state.tokens[:, 1:], no_repeat_ngram_size)
    return logits, log_norm, step_attention


@torch.inference_mode()
def greedy_search(model: Seq2SeqTransformer, src: Tensor, settings: SearchSettings, *,
                  on_done: SentenceDone | None = None) -> list[Hypothesis]:
    """The most probable next token at every step, for each row of ``src`` (batch, src_len).

    ``settings.length_penalty`` only affects the reported ``score`` (for comparison with beam
    search); ``no_repeat_ngram_size``: see the module doc (0: off). ``on_done(i,
    [hypothesis])`` is called for row i as soon as its search ends, while the other rows go on.
    """
    max_len = max_output_lengths(src, model, settings.max_len_a, settings.max_len_b)  # (rows,)
    lengths = max_len.tolist()  # the one read of the limits; min(lengths) follows departures
    state = DecodingState(model, src, settings, max_rows=src.size(0), max_steps=max(lengths))
    sentence = torch.arange(src.size(0), device=src.device)  # row -> input sentence
    log_prob = torch.zeros(src.size(0), device=src.device)  # (rows,)
    results: list[Hypothesis | None] = [None] * src.size(0)
    while True:
        logits, log_norm, step_attention = _step_logits(  # (rows, vocab)
            state, max_len, lengths, width=1, no_repeat_ngram_size=settings.no_repeat_ngram_size)
        best_logit, best = logits.max(dim=-1)  # (rows,)
        log_prob += best_logit - log_norm.squeeze(1)
        ended = best == EOS_ID
        if not ended.any():  # the step's one device read
            state.advance(None, best, step_attention)
            continue
        rows = ended.nonzero().squeeze(1)
        for i, hypothesis in state.ended(rows, sentence[rows], log_prob[rows],
                                         step_attention=step_attention,
                                         length_penalty=settings.length_penalty):
            results[i] = hypothesis
            if on_done is not None:
                on_done(i, [hypothesis])
        if rows.numel() == ended.numel():
            return results  # type: ignore[return-value]
        going = compaction(~ended)  # (m,) the going rows, most of them staying in place
        sentence, max_len, log_prob = sentence[going], max_len[going], log_prob[going]
        lengths = max_len.tolist()
        state.advance(going, best[going], step_attention, sources=going)


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


def _in_place_order(parent: Tensor) -> Tensor:
    """Which survivor goes to each beam slot (n, beam), ``parent`` (n, beam) being the slot
    each survivor extends, so that as many as possible stay in their parent's slot.

    The best child of each parent takes the parent's slot (its prefix and cache rows then need
    not move); the other children take, in order, the slots whose hypotheses have no child.
    The order of a sentence's beams changes no result: every step ranks all their extensions.
    """
    n, beam = parent.shape
    same = parent[:, :, None] == parent[:, None, :]  # (n, beam, beam): j and i share a parent
    earlier = torch.ones(beam, beam, dtype=torch.bool, device=parent.device).tril(-1)  # i < j
    first = ~(same & earlier).any(dim=2)  # (n, beam): j is its parent's best child
    taken = torch.zeros_like(parent).scatter_add_(1, parent, first.long()) > 0  # (n, slots)
    free = torch.sort(taken.byte(), dim=1, stable=True).indices  # untaken slots first, in order
    later = (~first).long().cumsum(dim=1) - 1  # among the other children: 0, 1, ...
    slot_of = torch.where(first, parent, free.gather(1, later.clamp(min=0)))  # (n, beam)
    survivors = torch.arange(beam, device=parent.device).expand(n, beam)
    return torch.empty_like(slot_of).scatter_(1, slot_of, survivors)


def _next_beams(best: _Extensions, is_eos: Tensor, going: Tensor, *, n_going: int, width: int,
                beam: int) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Log-prob, row and token (m, beam each) of the going sentences' surviving beams, placed
    so that few rows move, and which old sentence each of the m comes from (None: the same n).

    ``going`` (n,) bool, ``n_going`` its count (already read), ``width`` the beams per sentence
    this step had (1 at the first step).
    """
    scores, rows, tokens = _survivors(best, is_eos, beam)  # (n, beam) each, best first
    n = scores.size(0)
    if width == beam:  # each beam's best continuation stays in its row
        slot = _in_place_order(rows - torch.arange(n, device=rows.device)[:, None] * beam)
        scores, rows, tokens = (t.gather(1, slot) for t in (scores, rows, tokens))
    if n_going == n:
        return scores, rows, tokens, None
    kept = compaction(going)
    return scores[kept], rows[kept], tokens[kept], kept


@torch.inference_mode()
def beam_search(model: Seq2SeqTransformer, src: Tensor, settings: SearchSettings, *,
                on_done: SentenceDone | None = None) -> list[list[Hypothesis]]:
    """The ``settings.nbest`` best of ``settings.beam`` hypotheses per row of ``src`` (batch,
    src_len).

    Each step takes the top ``2 * beam`` extensions of a sentence's beams: EOS among the best
    ``beam`` of them ends a hypothesis, the best ``beam`` others continue (there are always
    enough, as each beam has only one EOS extension). A sentence is done when ``beam``
    hypotheses have ended (or its maximum length forced EOS on all of them); ``on_done(i,
    hypotheses)`` then gets row i's result at once, while the other rows go on.
    """
    beam, nbest = settings.beam, settings.nbest
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest ({nbest}) must be between 1 and beam ({beam})")
    device = src.device
    max_len = max_output_lengths(src, model, settings.max_len_a, settings.max_len_b)  # (n,)
    lengths = max_len.tolist()  # read once; min(lengths) follows departures
    state = DecodingState(model, src, settings, max_rows=src.size(0) * beam,
                          max_steps=max(lengths))
    sentence = torch.arange(src.size(0), device=device)  # active sentence -> input sentence
    ended_count = torch.zeros(src.size(0), dtype=torch.long, device=device)  # (n,)
    scores = torch.zeros(src.size(0), 1, device=device)  # (n, width): 1 at first, then beam
    finished: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    while True:
        width = scores.size(1)  # logits (n * width, vocab), log_norm (n * width, 1)
        logits, log_norm, step_attention = _step_logits(
            state, max_len, lengths, width=width,
            no_repeat_ngram_size=settings.no_repeat_ngram_size)
        best = _best_extensions(logits, log_norm, scores, beam)
        is_eos = best.token == EOS_ID
        ending = _ending(best, is_eos, ended_count, beam)
        ended_count += ending.sum(dim=1)
        going = ~((ended_count >= beam) | (max_len <= state.steps))  # (n,)
        n_ending, n_going = torch.stack((ending.sum(), going.sum())).tolist()  # one device read
        if n_ending:
            rows = best.row[:, :beam][ending]
            for i, hypothesis in state.ended(rows, sentence[ending.nonzero()[:, 0]],
                                             best.log_prob[:, :beam][ending],
                                             step_attention=step_attention,
                                             length_penalty=settings.length_penalty):
                finished[i].append(hypothesis)
        if on_done is not None and n_going < going.numel():
            for i in sentence[~going].tolist():  # read only on steps where sentences end
                on_done(i, _best_first(finished[i], nbest))
        if not n_going:
            break
        scores, rows, tokens, kept = _next_beams(best, is_eos, going, n_going=n_going,
                                                 width=width, beam=beam)
        sources = None  # the source side is per sentence: only departures move it
        if kept is not None:
            sentence, max_len, ended_count = sentence[kept], max_len[kept], ended_count[kept]
            lengths, sources = max_len.tolist(), kept
        state.advance(rows.view(-1), tokens.view(-1), step_attention, sources)
    return [_best_first(hyps, nbest) for hyps in finished]


def _best_first(hypotheses: list[Hypothesis], nbest: int) -> list[Hypothesis]:
    """The ``nbest`` highest-scoring of a sentence's ended hypotheses, best first."""
    return sorted(hypotheses, key=lambda h: h.score, reverse=True)[:nbest]


def translate_ids(
    model: Seq2SeqTransformer,
    src_ids: Sequence[Sequence[int]],
    settings: SearchSettings,
    *,
    device: torch.device | str,
    precision: str = "fp32",
    progress: Callable[[int], None] | None = None,
    done: SentenceDone | None = None,
) -> list[list[Hypothesis]]:
    """Decode many sources (id lists ending in EOS); ``settings.nbest`` hypotheses each, in
    input order.

    Sources are sorted by length and cut into batches of ``settings.batch_size`` sentences, so
    a batch holds little padding; greedy search when ``beam == 1``. Attention, when asked, is
    trimmed to each source's own length. ``progress(k)`` is called after each batch of k;
    ``done(i, hypotheses)`` as soon as source i's are final (the server answers with it while
    the rest of the batch decodes). ``precision="bf16"`` decodes under bf16 autocast (see
    ``core.device.resolve_precision``).
    """
    beam, nbest, batch_size = settings.beam, settings.nbest, settings.batch_size
    if not 1 <= nbest <= beam:
        raise AttncliError(f"--nbest {nbest} needs a beam of at least {nbest} (beam is {beam})")
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    results: list[list[Hypothesis]] = [[] for _ in src_ids]
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), autocast(torch.device(device), precision):
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                finish = _finisher(chunk, src_ids, results, done)
                src = pad([src_ids[i] for i in chunk]).to(device)  # (batch, src_len)
                search = greedy_search if beam == 1 else beam_search
                search(model, src, settings, on_done=finish)
                if progress is not None:
                    progress(len(chunk))
    finally:
        model.train(was_training)
    return results


def _finisher(chunk: list[int], src_ids: Sequence[Sequence[int]],
              results: list[list[Hypothesis]], done: SentenceDone | None) -> SentenceDone:
    """The search's ``on_done`` for one batch: row j is source ``chunk[j]``; its attention is
    trimmed to the source's length, stored in ``results`` and handed to ``done``."""

    def finish(j: int, hypotheses: list[Hypothesis]) -> None:
        i = chunk[j]
        for h in hypotheses:
            if h.attention is not None:
                h.attention = h.attention[..., : len(src_ids[i])]
        results[i] = hypotheses
        if done is not None:
            done(i, hypotheses)

    return finish
