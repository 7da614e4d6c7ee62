"""Every attention weight behind one translation, per layer and head: encoder self-attention,
decoder self-attention and encoder-decoder cross-attention.

Why a pass of its own: the search runs the fused kernels, which return no weights, and keeping
every layer's and head's weights at every step would cost each decoding step time and memory.
Once the output is chosen, one teacher-forced forward over (source, output) through the
written-out path gives all of them at once, and the output stays exactly the one decoded without
attention (it was fixed before).

The weights are taken with hooks on the model's `MultiHeadAttention` modules: a pre-hook asks
each module for its weights (``need_weights=True``, which takes ``reference_attention`` or the
additive path), a forward hook keeps them. The modules' code and the fast path stay as they
are, and the hooks are removed when the pass ends. The model is not thread-safe while they are
on: call this where decoding runs, not beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attncli.core.text import BOS_ID
from attncli.model.attention import MultiHeadAttention
from attncli.model.transformer import Seq2SeqTransformer


@dataclass
class AttentionMaps:
    """One sentence's weights, float32 on the CPU, one tensor per layer.

    encoder: (heads, src_len, src_len)  query source piece × key source piece
    decoder: (heads, out_len, out_len)  output piece being produced × decoder input read so far
                                        (BOS, then the output pieces before it)
    cross:   (heads, out_len, src_len)  output piece × source piece; what ``Hypothesis.attention``
                                        holds for one layer
    ``out_len`` is the output tokens plus the final EOS; ``src_len`` counts the source's EOS.
    """

    encoder: list[Tensor]
    decoder: list[Tensor]
    cross: list[Tensor]


def _modules(model: Seq2SeqTransformer) -> dict[str, list[MultiHeadAttention]]:
    return {
        "encoder": [layer.self_attn for layer in model.encoder_layers],
        "decoder": [layer.self_attn for layer in model.decoder_layers],
        "cross": [layer.cross_attn for layer in model.decoder_layers],
    }


def _ask_for_weights(module, args, kwargs):
    return args, {**kwargs, "need_weights": True}


@torch.inference_mode()
def attention_maps(model: Seq2SeqTransformer, src_ids: Sequence[int],
                   out_ids: Sequence[int]) -> AttentionMaps:
    """The weights of `model` translating `src_ids` (ending in EOS) into `out_ids` (the output
    tokens, without BOS and EOS), from one teacher-forced pass of batch 1 (no padding)."""
    device = model.output_bias.device
    src = torch.tensor([list(src_ids)], dtype=torch.long, device=device)  # (1, src_len)
    tgt_in = torch.tensor([[BOS_ID, *out_ids]], dtype=torch.long, device=device)  # (1, out_len)
    kept: dict[str, list[Tensor]] = {kind: [] for kind in ("encoder", "decoder", "cross")}
    handles = []
    for kind, modules in _modules(model).items():
        for module in modules:
            handles.append(module.register_forward_pre_hook(_ask_for_weights, with_kwargs=True))
            handles.append(module.register_forward_hook(
                lambda _m, _args, out, kind=kind: kept[kind].append(out[1][0].float().cpu())))
    try:
        memory, src_mask = model.encode(src)
        model.decode(tgt_in, memory, src_mask)
    finally:
        for handle in handles:
            handle.remove()
    return AttentionMaps(**kept)
