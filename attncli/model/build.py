"""The model from a config, used by training, checkpoints, export and bench, and the
fingerprint of the config's shapes that every checkpoint records.

One place decides how a run's config and tokenizer become a model, so the parameter names and
shapes a checkpoint was saved with are the ones eval, translate, export and bench build again
to load it; loading refuses weights whose fingerprint is another config's.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from attncli.core.config import WEIGHTLESS_MODEL_KEYS, Config, ModelConfig
from attncli.model.transformer import Seq2SeqTransformer

if TYPE_CHECKING:  # the tokenizer module loads sentencepiece; the model needs only its sizes
    from attncli.data.tokenizer import Tokenizer


def build_model(config: Config, tokenizer: Tokenizer) -> Seq2SeqTransformer:
    """The model a config describes, sized to the tokenizer's vocabularies."""
    return Seq2SeqTransformer(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                              pad_id=tokenizer.pad_id)


def model_fingerprint(model: ModelConfig) -> str:
    """A short hash of what shapes the weights (`WEIGHTLESS_MODEL_KEYS`, which --resume may
    change, are left out)."""
    shape = {k: v for k, v in model.model_dump(mode="json").items()
             if k not in WEIGHTLESS_MODEL_KEYS}
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]
