"""The optimizer's state as safetensors plus JSON: what state.json records, and the way back."""

from __future__ import annotations

import json

import pytest
import torch

from attncli.core.config import ModelConfig, TrainConfig
from attncli.model import Seq2SeqTransformer
from attncli.runs.checkpoints import _host_values, join_optimizer_state, split_optimizer_state
from attncli.training.optim import make_optimizer


def _trained_optimizer(seed: int = 0) -> torch.optim.Optimizer:
    """A tiny model's AdamW after three updates: moments, and a `step` tensor per parameter."""
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(ModelConfig(d_model=16, heads=2, enc_layers=1, dec_layers=1,
                                           ff_dim=32, max_positions=32), 30, 30)
    optimizer = make_optimizer(model, TrainConfig())
    for step in range(1, 4):
        loss = sum(p.pow(2).mean() for p in model.parameters()) * step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return optimizer


def _one_item_at_a_time(optimizer: torch.optim.Optimizer) -> dict:
    """The JSON part as attncli wrote it before: `.item()` on each 0-dim tensor."""
    sd = optimizer.state_dict()
    return {"state": {str(pid): {key: ({"tensor": value.item(), "dtype": str(value.dtype)}
                                       if torch.is_tensor(value) else value)
                                 for key, value in pstate.items()
                                 if not (torch.is_tensor(value) and value.dim() > 0)}
                      for pid, pstate in sd["state"].items()},
            "param_groups": sd["param_groups"]}


def test_step_counts_reach_state_json_in_one_transfer_as_they_did_one_by_one(monkeypatch):
    optimizer = _trained_optimizer()
    expected = json.dumps(_one_item_at_a_time(optimizer))
    steps = [s["step"] for s in optimizer.state_dict()["state"].values()]
    assert len(steps) > 20 and all(torch.is_tensor(s) and s.dim() == 0 for s in steps)

    def no_item(self):  # one device sync per parameter on a GPU: what the save must not do
        raise AssertionError("Tensor.item() called while splitting the optimizer state")

    monkeypatch.setattr(torch.Tensor, "item", no_item)
    tensors, meta = split_optimizer_state(optimizer)
    monkeypatch.undo()
    assert json.dumps(meta) == expected  # same keys, same order, same numbers
    assert {name.split(".", 1)[1] for name in tensors} == {"exp_avg", "exp_avg_sq"}


def test_the_split_state_loads_back_into_a_fresh_optimizer_exactly():
    saved = _trained_optimizer()
    tensors, meta = split_optimizer_state(saved)
    fresh = _trained_optimizer(seed=1)
    fresh.load_state_dict(join_optimizer_state(tensors, json.loads(json.dumps(meta))))
    want, got = saved.state_dict(), fresh.state_dict()
    assert json.dumps(want["param_groups"]) == json.dumps(got["param_groups"])  # betas: a list
    for pid, pstate in want["state"].items():
        for key, value in pstate.items():
            assert got["state"][pid][key].dtype == value.dtype
            assert torch.equal(got["state"][pid][key], value), (pid, key)


@pytest.mark.parametrize("values", [
    [],
    [torch.tensor(3), torch.tensor(0.1), torch.tensor(True), torch.tensor(2.5, dtype=torch.float64),
     torch.tensor(7), torch.tensor(0.3, dtype=torch.bfloat16)],
])
def test_host_values_are_what_item_gives_whatever_the_dtypes(values):
    got = _host_values(values)
    want = [value.item() for value in values]
    assert got == want and [type(v) for v in got] == [type(v) for v in want]
