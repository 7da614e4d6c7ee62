"""Texts in, hypotheses out: sources encoded to fit the model, then decoded by `search`.

What `attncli translate`, `eval`, `serve` and validation while training share before the
search: each source is cut to the model's positions (with a warning hook), ends in EOS, and
goes to `search.translate_ids`. A sentence longer than the model learned from can instead be
cut into pieces of a length it translates well (`fitting_pieces`), so that none of it is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from attncli.core.config import Config
from attncli.core.text import EOS_ID
from attncli.data.tokenizer import Tokenizer
from attncli.decoding.search import Hypothesis, SearchSettings, translate_ids
from attncli.model.transformer import Seq2SeqTransformer

# Positions kept free when a long source is cut: the model never saw sources near the limit,
# and a few spare positions cost nothing.
SOURCE_MARGIN = 8

# Called for each source that was cut: (index in the input, its subwords, the subwords kept;
# the EOS every source ends with is not counted).
TruncateHook = Callable[[int, int, int], None]


def encode_sources(tokenizer: Tokenizer, texts: Sequence[str], max_positions: int,
                   on_truncate: TruncateHook | None = None) -> list[list[int]]:
    """Source ids ending in EOS, each cut to fit the model's positions (minus a margin)."""
    kept = source_subword_limit(max_positions)
    ids = tokenizer.encode_src(texts)
    for i, seq in enumerate(ids):
        if len(seq) > kept + 1:
            ids[i] = [*seq[:kept], EOS_ID]
            if on_truncate is not None:
                on_truncate(i, len(seq) - 1, kept)
    return ids


def source_subword_limit(max_positions: int) -> int:
    """The most subwords of a source that are translated (then its EOS)."""
    return max(max_positions - SOURCE_MARGIN, 2) - 1


# Where a long sentence is best cut: after a clause mark, else at a space (see fitting_pieces).
CLAUSE_MARKS = ";:,，；、"


@dataclass(frozen=True)
class PieceLimits:
    """When a sentence is cut into pieces, and how long its pieces are (subwords, no EOS).

    whole: the longest sentence decoded as it is: no longer than the training sources
           (`data.max_len`) nor than the model's positions allow.
    piece: the longest piece a longer sentence is cut into (`decode.piece_subwords`): a model
           trained on sentences stops early on a long unpunctuated run, so a few dozen
           subwords, as long as the sentences it learned from, come back whole.
    """

    whole: int
    piece: int


def piece_limits(config: Config) -> PieceLimits:
    """The run's `PieceLimits` (see there)."""
    whole = min(source_subword_limit(config.model.max_positions), config.data.max_len - 1)
    return PieceLimits(whole=max(whole, 1),
                       piece=max(min(config.decode.piece_subwords, whole), 1))


def fitting_pieces(sentence: str, tokenizer: Tokenizer, limits: PieceLimits) -> list[str]:
    """`sentence` as it is when it fits `limits.whole`, else cut into pieces of at most
    `limits.piece` subwords.

    Each cut is made in the longest start that fits: after its last clause mark (`CLAUSE_MARKS`)
    when that keeps at least half of it, else at its last space, else (Chinese with neither)
    after its last character; the pieces, stripped, hold all the sentence's text.
    """
    def length(text: str) -> int:
        return len(tokenizer.encode_src([text])[0]) - 1

    if length(sentence) <= limits.whole:
        return [sentence]

    def fits(text: str) -> bool:
        return length(text) <= limits.piece

    pieces, rest = [], sentence
    while not fits(rest):
        longest = _longest_fitting_start(rest, fits)
        cut = _cut_point(rest[:longest])
        if not fits(rest[:cut].strip()):
            cut = longest
        pieces.append(rest[:cut].strip())
        rest = rest[cut:].strip()
    return [*pieces, rest]


def _longest_fitting_start(text: str, fits: Callable[[str], bool]) -> int:
    """The most characters of `text`'s start that fit (bisection; at least one)."""
    low, high = 1, len(text)  # text[:high] does not fit
    while high - low > 1:
        middle = (low + high) // 2
        if fits(text[:middle]):
            low = middle
        else:
            high = middle
    return low


def _cut_point(start: str) -> int:
    """Where to cut within the longest start that fits (see `fitting_pieces`)."""
    mark = max(start.rfind(m) for m in CLAUSE_MARKS) + 1
    if mark >= len(start) // 2 and start[:mark].strip():
        return mark
    space = max((i for i, c in enumerate(start) if c.isspace()), default=0)
    return space if start[:space].strip() else len(start)


def translate_texts(
    model: Seq2SeqTransformer,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    settings: SearchSettings,
    *,
    device: torch.device | str,
    precision: str = "fp32",
    on_truncate: TruncateHook | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[list[Hypothesis]]:
    """Tokenize, decode (greedy when ``settings.beam == 1``) and return ``settings.nbest``
    hypotheses per text.

    Detokenize a hypothesis with ``tokenizer.decode_tgt(h.tokens)``.
    """
    src_ids = encode_sources(tokenizer, texts, model.cfg.max_positions, on_truncate)
    return translate_ids(model, src_ids, settings, device=device, precision=precision,
                         progress=progress)
