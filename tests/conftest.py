"""Shared fixtures: a tiny model config, and the data folder the tests read corpora from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from attncli.config import ModelConfig

REPO = Path(__file__).resolve().parents[1]
# Tests never wait on the network: a data set that is not local fails at once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    torch.manual_seed(0)


@pytest.fixture
def tiny_model_config() -> ModelConfig:
    return ModelConfig(d_model=32, heads=4, enc_layers=2, dec_layers=2, ff_dim=64, dropout=0.0,
                       max_positions=128)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The corpora folder: $ATTNCLI_DATA_DIR, else ../shared/data beside the repo."""
    path = Path(os.environ.get("ATTNCLI_DATA_DIR", SHARED_DATA))
    if not (path / "multi30k" / "train.jsonl").is_file():
        pytest.skip(f"no corpora at {path}; set ATTNCLI_DATA_DIR")
    return path
