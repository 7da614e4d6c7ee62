"""Scoring translations against references with sacreBLEU: corpus BLEU and chrF, and the BLEU
tokenizer that suits the target language.

What `attncli eval` reports and validation scores while training; a resume compares the BLEU
tokenizer too (`training.resume_rules`: it is part of what a best score was scored with).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from attncli.core.errors import AttncliError
from attncli.core.text import base_language

# sacreBLEU tokenizers to try, best first, for targets that do not separate words by spaces.
_CJK_TOKENIZERS = {"zh": ("zh",), "ja": ("ja-mecab", "char"), "ko": ("ko-mecab", "char")}


@functools.cache
def bleu_tokenizer(tgt_lang: str) -> str:
    """The sacreBLEU tokenizer for a target language: 13a, or zh / ja-mecab / ko-mecab / char.

    MeCab needs optional packages (``sacrebleu[ja]``, ``sacrebleu[ko]``); without them
    Japanese and Korean fall back to characters.
    """
    from sacrebleu.metrics import BLEU

    for name in _CJK_TOKENIZERS.get(base_language(tgt_lang), ("13a",)):
        try:
            BLEU(tokenize=name)
        except (ImportError, RuntimeError):
            continue
        return name
    return "char"


def corpus_scores(hyps: Sequence[str], refs: Sequence[str], tgt_lang: str) -> dict[str, Any]:
    """Corpus BLEU and chrF of detokenized hypotheses against one reference each.

    Returns bleu, chrf, signature (BLEU's sacreBLEU signature) and chrf_signature.
    """
    from sacrebleu.metrics import BLEU, CHRF

    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references")
    if not hyps:
        raise AttncliError("nothing to score: no sentences")
    bleu, chrf = BLEU(tokenize=bleu_tokenizer(tgt_lang)), CHRF()
    bleu_score = bleu.corpus_score(list(hyps), [list(refs)])
    chrf_score = chrf.corpus_score(list(hyps), [list(refs)])
    return {
        "bleu": bleu_score.score,
        "chrf": chrf_score.score,
        "signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }
