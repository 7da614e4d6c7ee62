"""decoding: source ids in, translations out, and how good they are.

Imports `core`, `data` and `model`; knows nothing of run folders (`runs.trained` opens a run
and decodes with what is here). Modules, in reading order:

    search.py       greedy and beam search with the decoder's cache, batched
    texts.py        sources encoded to fit the model, then searched (`translate_texts`); a
                    long sentence cut into pieces that fit (`fitting_pieces`)
    documents.py    texts as documents: split into sentences and pieces, each distinct piece
                    decoded once (`plan_documents`)
    scoring.py      sacreBLEU's BLEU and chrF, and the BLEU tokenizer for a language
    ctranslate2.py  the model as a CTranslate2 folder, and decoding with one (the other engine)
    argos.py        an Argos Translate package: which runs it can hold, its metadata and
                    model config, written as one zip
"""
