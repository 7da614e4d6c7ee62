"""data: from a data set's name to the batches a training step takes.

A name becomes files (sources), files become string columns (readers, chinese_script), text
becomes subword ids (tokenizer, subwords), ids are cached on disk (cache) and cut into padded
batches (batching); corpus ties them together for a training run. Imports only `core`.
Modules, in reading order:

    sources.py         find a data set (path, $ATTNCLI_DATA_DIR, ./data, the Hub; Hub layouts)
                       and read one split as strings
    readers.py         one split's files (JSON Lines, TSV, parallel text), checked, as columns
    chinese_script.py  traditional Chinese converted to simplified where it is read (OpenCC)
    tokenizer.py       SentencePiece: train, save, load (the models' bytes, as they travel
                       and key the caches); encode and decode
    sentences.py       a text's lines and sentences (split in the source language) and its
                       layout, rebuilt around translations joined the target's way
    subwords.py        subword regularization: training batches re-segmented by sampling
    batching.py        token-budget batches, padding, and the DataLoader feeding training
    filters.py         the filters of a training corpus (same text, length ratio, script,
                       duplicates): a drop code per pair
    cache.py           the data cache: tokenized splits as memory-mapped Arrow, keyed on what
                       they depend on
    mixing.py          several corpora as one: each epoch's pairs by the corpora's weights
    corpus.py          what a training run reads: its tokenizer and tokenized splits, cached
                       (`attncli prepare`)
    coverage.py        the share of <unk> a tokenizer makes of the training pairs, and the
                       characters behind it (a fine-tuned run keeps its parent's tokenizer)
"""
