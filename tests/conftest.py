"""Shared fixtures: a tiny model config, and a small parallel corpus the tests make themselves.

The corpus is a toy English -> German-like language (a fixed word mapping and a fixed word
order), so a tiny model's loss falls within a few updates, and every training test runs on a
fresh clone with no data beside it.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import torch

from attncli.core.config import ModelConfig

REPO = Path(__file__).resolve().parents[1]
# Tests never wait on the network: a data set that is not local fails at once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

SUBJECTS = {"the man": "der Mann", "the woman": "die Frau", "a dog": "ein Hund",
            "a child": "ein Kind", "the cat": "die Katze", "a girl": "ein Mädchen",
            "a boy": "ein Junge", "the worker": "der Arbeiter"}
VERBS = {"sees": "sieht", "holds": "hält", "finds": "findet", "paints": "malt",
         "carries": "trägt", "likes": "mag"}
OBJECTS = {"a red ball": "einen roten Ball", "the big house": "das große Haus",
           "a small boat": "ein kleines Boot", "the green tree": "den grünen Baum",
           "a white bike": "ein weißes Fahrrad", "the old car": "das alte Auto"}
PLACES = {"": "", " in the park": " im Park", " on the street": " auf der Straße",
          " at the beach": " am Strand", " in the snow": " im Schnee"}


def toy_pairs(count: int, seed: int) -> list[dict[str, str]]:
    """`count` en/de pairs of the toy language (subject verb object place)."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        parts = [rng.choice(list(words.items())) for words in (SUBJECTS, VERBS, OBJECTS, PLACES)]
        en = " ".join(p[0] for p in parts[:3]) + parts[3][0] + "."
        de = " ".join(p[1] for p in parts[:3]) + parts[3][1] + "."
        pairs.append({"en": en[0].upper() + en[1:], "de": de[0].upper() + de[1:]})
    return pairs


def write_toy_corpus(folder: Path, sizes: dict[str, int]) -> Path:
    """`folder`/<split>.jsonl for each split in `sizes` (different seeds, so splits differ)."""
    folder.mkdir(parents=True, exist_ok=True)
    for seed, (split, count) in enumerate(sizes.items()):
        lines = [json.dumps(p, ensure_ascii=False) + "\n" for p in toy_pairs(count, seed)]
        (folder / f"{split}.jsonl").write_text("".join(lines), encoding="utf-8")
    return folder


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def _data_cache(tmp_path_factory) -> None:
    """Token caches and cached tokenizers go to a temp folder, never the user's ~/.cache."""
    os.environ["ATTNCLI_CACHE_DIR"] = str(tmp_path_factory.mktemp("attncli-cache"))


@pytest.fixture
def tiny_model_config() -> ModelConfig:
    return ModelConfig(d_model=32, heads=4, enc_layers=2, dec_layers=2, ff_dim=64, dropout=0.0,
                       max_positions=128)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """A data folder whose `tatoeba-en-de` (small.yaml's data set) and `multi30k`
    (multi30k.yaml's) are the toy corpus (400 train, 40 val, 40 test pairs)."""
    root = tmp_path_factory.mktemp("data")
    for name in ("tatoeba-en-de", "multi30k"):
        write_toy_corpus(root / name, {"train": 400, "val": 40, "test": 40})
    return root


@pytest.fixture(scope="session")
def served_run(tmp_path_factory, data_dir) -> Path:
    """A tiny trained run with two layers on each side and two heads (so a page can switch
    layers and heads), shared by the `attncli serve` tests."""
    from helpers import SMALL, train

    root = tmp_path_factory.mktemp("served")
    result = train(data_dir, root, SMALL, "--name", "tiny",
                   sets=["model.enc_layers=2", "model.dec_layers=2", "train.max_steps=40",
                         "train.lr=0.005", "train.eval_every=40"])
    assert result.returncode == 0, result.stderr
    return root / "tiny"
