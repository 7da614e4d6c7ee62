"""The model: attention modules, Transformer layers and the encoder-decoder."""

from attncli.model.transformer import DecoderCache, DecoderOutput, Seq2SeqTransformer

__all__ = ["DecoderCache", "DecoderOutput", "Seq2SeqTransformer"]
