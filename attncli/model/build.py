"""The model from a config, used by training, checkpoints, export and bench.

One place decides how a run's config and tokenizer become a model, so the parameter names and
shapes a checkpoint was saved with are the ones eval, translate, export and bench build again
to load it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attncli.core.config import Config
from attncli.model.transformer import Seq2SeqTransformer

if TYPE_CHECKING:  # the tokenizer module loads sentencepiece; the model needs only its sizes
    from attncli.data.tokenizer import Tokenizer


def build_model(config: Config, tokenizer: Tokenizer) -> Seq2SeqTransformer:
    """The model a config describes, sized to the tokenizer's vocabularies."""
    return Seq2SeqTransformer(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                              pad_id=tokenizer.pad_id)
