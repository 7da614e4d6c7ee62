"""model: the encoder-decoder Transformer, from attention up, and built from a config.

Imports `core` (and the tokenizer's type, for hints only). Modules, in reading order:

    attention.py       attention spelled out: masks, reference, fused and additive scores
    kv_cache.py        the decoder's key/value cache, a buffer per attention module
    dropout.py         dropout with a cheaper random mask on CPU
    layers.py          positions, feed-forward, encoder and decoder layers
    loss.py            the output projection fused with label-smoothed cross-entropy
    transformer.py     the encoder-decoder (`Seq2SeqTransformer`) and its parts (embeddings,
                       encoder, decoder: what `train.freeze` names)
    build.py           the model a run's config describes, and its weights' fingerprint
    attention_maps.py  every attention weight behind one translation (translate, serve)
"""

from attncli.model.transformer import DecoderCache, DecoderOutput, Seq2SeqTransformer

__all__ = ["DecoderCache", "DecoderOutput", "Seq2SeqTransformer"]
