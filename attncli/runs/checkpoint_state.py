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

from attncli.core.errors import AttncliError

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
    """Optimizer state_dict -> (tensors for safetensors, everything else for JSON).

    The 0-dim tensors (AdamW's `step` of every parameter, possibly on the GPU) become JSON
    numbers read in one host transfer: reading them one by one cost a device sync each, a few
    hundred per save for a Transformer.
    """
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    zero_dim: list[tuple[dict[str, Any], str, torch.Tensor]] = []  # (entries, key, tensor)
    for pid, pstate in sd["state"].items():
        scalars[str(pid)] = entries = {}
        for key, value in pstate.items():
            if torch.is_tensor(value) and value.dim() > 0:
                tensors[f"{pid}.{key}"] = value.contiguous().cpu()
            elif torch.is_tensor(value):
                entries[key] = None  # holds the key's place; filled below
                zero_dim.append((entries, key, value))
            else:
                entries[key] = value
    numbers = _host_values([value for _, _, value in zero_dim])
    for (entries, key, value), number in zip(zero_dim, numbers, strict=True):
        entries[key] = {"tensor": number, "dtype": str(value.dtype)}
    return tensors, {"state": scalars, "param_groups": sd["param_groups"]}


def _host_values(values: list[torch.Tensor]) -> list[int | float | bool]:
    """`[v.item() for v in values]` with one transfer per (device, dtype), not one per value.

    Grouping keeps each number exactly what `.item()` gives: stacking never mixes dtypes, so
    an int64 count stays an int and a float32 step is widened from float32 as `.item()` does.
    """
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, value in enumerate(values):
        groups.setdefault((value.device, value.dtype), []).append(i)
    out: list[int | float | bool] = [0] * len(values)
    for indices in groups.values():
        for i, number in zip(indices, torch.stack([values[i] for i in indices]).tolist(),
                             strict=True):
            out[i] = number
    return out


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


# The flags that choose how an optimizer runs, not what it computes: they follow the device a
# run is on now, never the one a checkpoint was saved on.
IMPLEMENTATION_FLAGS = ("fused", "foreach", "capturable", "differentiable")


def with_implementation_of(saved: dict[str, Any], optimizer: torch.optim.Optimizer
                           ) -> dict[str, Any]:
    """A saved optimizer state_dict whose groups take `optimizer`'s implementation flags.

    `load_state_dict` replaces the groups with the saved ones, flags included: a CPU run
    (foreach) resumed on CUDA would load `fused=None` into a fused optimizer, whose step then
    hands `found_inf` to the foreach path, which refuses it. The flags also decide where
    `load_state_dict` puts each `step` tensor (the fused kernel wants them on the device), so
    they must be right before loading, not patched after.
    """
    groups = [{**group, **{flag: current[flag] for flag in IMPLEMENTATION_FLAGS
                           if flag in current}}
              for group, current in zip(saved["param_groups"], optimizer.param_groups,
                                        strict=True)]
    return {**saved, "param_groups": groups}


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
