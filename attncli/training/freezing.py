"""`train.freeze`: parts of a fine-tuned model that keep their parent's weights.

A frozen parameter has `requires_grad` off before the optimizer is made (`optim.make_optimizer`
leaves it out), so it gets no gradient, no update and no optimizer state: AdamW's two moments
are two more copies of every parameter it trains, and a frozen part needs neither. Clipping
and the logged gradient norm see only what trains. The parts are the model's own
(`Seq2SeqTransformer.PARTS`): embeddings (tied, the output projection too), encoder, decoder.

Applied whenever the run's config names parts, so a resumed run freezes what it froze when it
was saved (its optimizer state holds only the others; `train.freeze` cannot change on a
resume). Only a run fine-tuned from a parent may set it (`parent.check_freeze`).
"""

from __future__ import annotations

from attncli.core.config import ModelConfig
from attncli.model.transformer import Seq2SeqTransformer


def freeze(model: Seq2SeqTransformer, parts: list[str], cfg: ModelConfig) -> str | None:
    """Turn off the gradients of `parts` (`train.freeze`); the log line saying what is frozen
    and how many parameters train (None: nothing frozen)."""
    if not parts:
        return None
    frozen = 0
    for part in parts:
        for param in model.part_parameters(part):
            param.requires_grad_(False)
            frozen += param.numel()
    trains = sum(p.numel() for p in model.parameters() if p.requires_grad)
    tied = (" (the output projection too: model.tie_embeddings makes it the target "
            "embedding)" if "embeddings" in parts and cfg.ties_output else "")
    return (f"train.freeze {', '.join(parts)}: {frozen:,} parameters frozen{tied}; {trains:,} "
            f"of {frozen + trains:,} train")
