"""Checkpoints without pickle: weights and optimizer moments in safetensors, the rest in JSON.

A checkpoint tagged `last` or `best` is three files (see `runs.RunPaths`): the model weights,
the optimizer's tensors, and a JSON state (step, epoch, optimizer scalars, scheduler, RNG
states, data position). Each file is written to a temp name and renamed, so an interrupt
never leaves a half-written checkpoint behind.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from attncli.errors import AttncliError
from attncli.runs import RunPaths, atomic_write_bytes, atomic_write_json


def _unique_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """state_dict with tied tensors stored once (safetensors refuses shared storage)."""
    seen: set[int] = set()
    out = {}
    for name, tensor in model.state_dict().items():
        key = tensor.data_ptr()
        if key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().contiguous().cpu()
    return out


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict | None = None):
    tmp = path.with_name(f".{path.name}.tmp")
    save_file(tensors, str(tmp), metadata=metadata)
    atomic_write_bytes(path, tmp.read_bytes())
    tmp.unlink()


def _load_tensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise AttncliError(f"{path}: checkpoint file missing")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise AttncliError(
            f"{path}: not a valid safetensors checkpoint (truncated, corrupt or a pickle?): "
            f"{str(err).splitlines()[0][:120]}"
        ) from None


def save_weights(model: nn.Module, path: Path) -> None:
    _save_tensors(_unique_state_dict(model), path)


def load_weights(model: nn.Module, path: Path) -> None:
    """Load weights saved by `save_weights` (tied tensors restored through the module)."""
    tensors = _load_tensors(path)
    expected = model.state_dict()
    missing = [k for k in expected if k not in tensors]
    shared = {k for k in missing if any(expected[k].data_ptr() == expected[j].data_ptr()
                                        for j in tensors if j in expected)}
    if set(missing) - shared:
        raise AttncliError(f"{path}: checkpoint does not match the run's model config "
                           f"(missing {sorted(set(missing) - shared)[:3]})")
    try:
        model.load_state_dict(tensors, strict=False)
    except RuntimeError as err:
        raise AttncliError(f"{path}: checkpoint does not match the model: "
                           f"{str(err).splitlines()[-1].strip()[:160]}") from None


def rng_state() -> dict[str, Any]:
    """Python and torch RNG states as JSON-friendly data (torch state as base64 bytes)."""
    state = {
        "python": _jsonable(random.getstate()),
        "torch": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode(),
    }
    if torch.cuda.is_available():
        state["cuda"] = [base64.b64encode(s.numpy().tobytes()).decode()
                         for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(_tupled(state["python"]))
    torch.set_rng_state(torch.frombuffer(bytearray(base64.b64decode(state["torch"])),
                                         dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([
            torch.frombuffer(bytearray(base64.b64decode(s)), dtype=torch.uint8)
            for s in state["cuda"]
        ])


def _jsonable(x: Any) -> Any:
    return [_jsonable(v) for v in x] if isinstance(x, (tuple, list)) else x


def _tupled(x: Any) -> Any:
    return tuple(_tupled(v) for v in x) if isinstance(x, list) else x


def _split_optimizer_state(optimizer: torch.optim.Optimizer):
    """Optimizer state_dict -> (tensors for safetensors, everything else for JSON)."""
    sd = optimizer.state_dict()
    tensors, scalars = {}, {}
    for pid, pstate in sd["state"].items():
        scalars[str(pid)] = {}
        for key, value in pstate.items():
            if torch.is_tensor(value) and value.dim() > 0:
                tensors[f"{pid}.{key}"] = value.contiguous().cpu()
            elif torch.is_tensor(value):
                scalars[str(pid)][key] = {"tensor": value.item(), "dtype": str(value.dtype)}
            else:
                scalars[str(pid)][key] = value
    return tensors, {"state": scalars, "param_groups": sd["param_groups"]}


def _join_optimizer_state(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state: dict[int, dict] = {}
    for pid, entries in meta["state"].items():
        state[int(pid)] = {
            k: (torch.tensor(v["tensor"], dtype=getattr(torch, v["dtype"].split(".")[-1]))
                if isinstance(v, dict) and "tensor" in v else v)
            for k, v in entries.items()
        }
    for name, tensor in tensors.items():
        pid, key = name.split(".", 1)
        state.setdefault(int(pid), {})[key] = tensor
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(paths: RunPaths, tag: str, model: nn.Module,
                    optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Write weights, optimizer tensors and JSON state for `tag` ('last' or 'best').

    The JSON goes last: a checkpoint counts as present once its JSON exists.
    """
    save_weights(model, paths.weights(tag))
    opt_tensors, opt_meta = _split_optimizer_state(optimizer)
    _save_tensors(opt_tensors, paths.optimizer(tag))
    atomic_write_json(paths.state(tag), {**state, "optimizer": opt_meta, "rng": rng_state()})


def load_checkpoint(paths: RunPaths, tag: str, model: nn.Module,
                    optimizer: torch.optim.Optimizer | None = None) -> dict[str, Any]:
    """Restore model (and optimizer) from `tag`; returns the JSON state (RNG not yet applied)."""
    state_path = paths.state(tag)
    if not state_path.is_file():
        raise AttncliError(f"{paths.root}: no {tag} checkpoint to resume from")
    try:
        state = json.loads(state_path.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise AttncliError(f"{state_path}: corrupt checkpoint state ({err})") from None
    load_weights(model, paths.weights(tag))
    if optimizer is not None:
        tensors = _load_tensors(paths.optimizer(tag))
        optimizer.load_state_dict(_join_optimizer_state(tensors, state["optimizer"]))
    return state


class TrainedModel:
    """What eval, translate and bench need from a run: its config, tokenizer and model."""

    def __init__(self, paths: RunPaths, config, tokenizer, model: nn.Module, device: torch.device):
        self.paths, self.config, self.tokenizer = paths, config, tokenizer
        self.model, self.device = model, device


def build_model(config, tokenizer) -> nn.Module:
    """The model a config describes, sized to the tokenizer's vocabularies."""
    from attncli.model import Seq2SeqTransformer

    return Seq2SeqTransformer(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                              pad_id=tokenizer.pad_id)


def load_trained_model(run_dir: Path, device: torch.device, tag: str = "best") -> TrainedModel:
    """Open a run folder and load its tokenizer and `tag` checkpoint (falls back to last)."""
    from attncli.config import load_config
    from attncli.runs import open_run
    from attncli.tokenizer import load_tokenizer

    paths = open_run(run_dir, need=tag)
    if not paths.weights(tag).is_file():
        tag = "last"
    config = load_config(paths.config)
    tokenizer = load_tokenizer(paths, config.tokenizer.joint)
    model = build_model(config, tokenizer)
    load_weights(model, paths.weights(tag))
    return TrainedModel(paths, config, tokenizer, model.to(device).eval(), device)
