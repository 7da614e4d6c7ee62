"""runs: the run folder on disk: its layout, its log, its checkpoints, and a trained run opened
for decoding.

Imports `core`, `data`, `model` and `decoding`. Modules, in reading order:

    layout.py       the run folder's layout (described once, here), finding runs and their
                    checkpoints by name, the one reader of state.json; torch-free
    metrics.py      metrics.jsonl, the run's event log
    checkpoints.py  step folders: saved crash-safely, loaded strictly; weights, optimizer and
                    RNG as safetensors and JSON (no pickle)
    average.py      the mean of the newest step folders (`attncli average`)
    trained.py      a trained run loaded for decoding, with attncli's search or its
                    CTranslate2 export
    translator.py   `attncli.Translator`, the public Python interface: texts in, translations
                    out
    card.py         the model card (README.md): languages, data and licences, shape, budget,
                    machine, scores, examples, config; written when training ends, by
                    `attncli card` and into every export
"""
