"""What a checkpoint holds, as files: tensors in safetensors, everything else in JSON.

The weights and AdamW's per-parameter tensors go to safetensors; the optimizer's scalars (its
`step` counts and hyper-parameters) and the Python and torch RNG states go into state.json.
No pickle anywhere, so opening a checkpoint never runs code. Where these files live, and how a
save is made crash-safe, is `checkpoint.py`'s business.
"""

from __future__ import annotations

import base64
import random
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from attncli.errors import AttncliError

# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------


def unique_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
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


def read_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of a safetensors file; anything else is a one-line error."""
    if not path.is_file():
        raise AttncliError(f"{path}: checkpoint file missing")
    try:
        with safe_open(str(path), framework="pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (not a dict)
            return tensors, dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError) as err:
        raise AttncliError(
            f"{path}: not a valid safetensors checkpoint (truncated, corrupt or a pickle?): "
            f"{str(err).splitlines()[0][:120]}"
        ) from None


def load_state_dict_strictly(model: nn.Module, tensors: dict[str, torch.Tensor],
                             source: Path) -> None:
    """Every parameter present with its shape, nothing extra (tied copies come from their twin)."""
    expected = model.state_dict()
    owners = {t.data_ptr(): name for name, t in expected.items() if name in tensors}
    missing = [k for k in expected if k not in tensors and expected[k].data_ptr() not in owners]
    extra = [k for k in tensors if k not in expected]
    if missing or extra:
        raise AttncliError(f"{source}: checkpoint does not match the run's model config "
                           f"(missing {missing[:3]}, unexpected {extra[:3]})")
    try:
        model.load_state_dict(tensors, strict=False)
    except RuntimeError as err:
        raise AttncliError(f"{source}: checkpoint does not match the model: "
                           f"{str(err).splitlines()[-1].strip()[:160]}") from None


# --------------------------------------------------------------------------------------------
# Optimizer
# --------------------------------------------------------------------------------------------


def split_optimizer_state(optimizer: torch.optim.Optimizer
                          ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
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


def join_optimizer_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]
                         ) -> dict[str, Any]:
    """The optimizer state_dict that `split_optimizer_state` took apart, for `load_state_dict`."""
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


# --------------------------------------------------------------------------------------------
# RNG state
# --------------------------------------------------------------------------------------------


def rng_state(device: torch.device) -> dict[str, Any]:
    """Python and torch RNG states as JSON-friendly data (torch state as base64 bytes), and
    the state of the CUDA device the run uses: not every visible GPU's, so a CPU run saves none
    and a run resumes on a machine with fewer GPUs."""
    state = {
        "python": _jsonable(random.getstate()),
        "torch": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode(),
    }
    if device.type == "cuda":
        state["cuda"] = base64.b64encode(torch.cuda.get_rng_state(device).numpy().tobytes()
                                         ).decode()
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    """Restore what `rng_state` saved; a CUDA state is restored only when training on CUDA."""
    random.setstate(_tupled(state["python"]))
    torch.set_rng_state(torch.frombuffer(bytearray(base64.b64decode(state["torch"])),
                                         dtype=torch.uint8))
    saved = state.get("cuda")
    if isinstance(saved, list):  # attncli 0.2 saved every visible GPU's state
        saved = saved[0] if saved else None
    if saved is not None and device.type == "cuda":
        torch.cuda.set_rng_state(torch.frombuffer(bytearray(base64.b64decode(saved)),
                                                  dtype=torch.uint8), device)


def _jsonable(x: Any) -> Any:
    return [_jsonable(v) for v in x] if isinstance(x, (tuple, list)) else x


def _tupled(x: Any) -> Any:
    return tuple(_tupled(v) for v in x) if isinstance(x, list) else x
