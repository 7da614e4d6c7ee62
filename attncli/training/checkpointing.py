"""A run's position and history, and saving or resuming them with weights, optimizer and RNG.

What state.json holds beside the checkpoint's own bookkeeping: `RunState`'s fields (the
learning rate's plan among them), how batches were cut, and each process's RNG state. Weights
and optimizer tensors go to safetensors (see `runs/checkpoints.py`); nothing here is pickled.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from attncli.core.config import TrainConfig
from attncli.core.errors import AttncliError
from attncli.data.batching import BATCHING
from attncli.runs.checkpoints import (
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from attncli.runs.layout import RunPaths, checkpoint_dir
from attncli.training.distributed import World
from attncli.training.optim import apply_optimizer_settings


@dataclass
class RunState:
    """Where a run is (the data position counts global batches) and what it has seen."""

    step: int = 0
    epoch: int = 0
    batch_index: int = 0
    best_bleu: float = -1.0
    best_step: int | None = None
    bad_validations: int = 0
    last_validated: int = -1
    pad_multiple: int = 1   # batches were cut with it; the position means nothing without it
    precision: str = ""     # the precision it trained in, kept by `auto` on a resume ("": before
                            # 0.7, when auto was decided afresh on each resume)
    threads: int = 0        # CPU threads of the process that saved (0: not recorded, before 0.5)
    processes: int = 0      # training processes when it saved (0: not recorded, before 0.5)
    data: str = ""          # `data_fingerprint` of the training pairs ("": before 0.5)
    elapsed: float = 0.0    # training seconds (validation and saving not counted)
    window: dict = field(default_factory=dict)  # the open log window (figures.window_record)
    fixed: dict = field(default_factory=dict)   # the config keys a resume may not change
    validation: dict = field(default_factory=dict)  # what best_bleu was scored on ({}: before)
    # best_bleu, best_step, bad_validations as they were before an end validation between the
    # scheduled ones ({}: none): what an extension of the run goes on from (see Trainer._finish)
    before_end: dict = field(default_factory=dict)
    # the learning rate's plan and what it was made from (lr_planning.RatePlanner.record;
    # saves before 0.7: inverse_sqrt's kind, peak and warm-up)
    scheduler: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Checkpointed:
    """What a save writes and a resume loads, fixed for a trainer's life: the run folder, the
    model and its optimizer, and the model's fingerprint that each save is stamped with. One
    object, so that a save or a resume names only what changes."""

    paths: RunPaths
    model: nn.Module
    optimizer: torch.optim.Optimizer
    fingerprint: str


def data_fingerprint(corpus) -> str:
    """The training pairs' count and a hash of their length columns (`MixedCorpus`), and a
    mix's weights: what the data position indexes, as each epoch's batches are cut from the
    lengths, the weights and the seed."""
    digest = hashlib.sha256(corpus.src_lens.tobytes())
    digest.update(corpus.tgt_lens.tobytes())
    return f"{len(corpus):,} pairs, lengths {digest.hexdigest()[:16]}{corpus.describe()}"


def state_record(state: RunState, world: World, device: torch.device) -> dict:
    """What state.json holds. Every process must call it (it gathers their RNG states)."""
    states = world.gather(rng_state(device))
    position = asdict(state)
    elapsed = position.pop("elapsed")
    return {**position, "batching": BATCHING, "rng": states[0],
            **({"rng_by_rank": states} if world.distributed else {}),
            "elapsed_s": elapsed}


def weights_are_finite(model: nn.Module) -> bool:
    """One device read for every parameter (one per parameter would wait on a GPU each time)."""
    return bool(torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all())


def save_run(run: Checkpointed, state: RunState, *, cfg: TrainConfig, world: World,
             device: torch.device, between: str | None = None) -> None:
    """Save a step folder for `state.step`; never non-finite weights. `between`: why a save
    falls between the run's own ("interrupted": a signal asked for it; "off_schedule": the run
    ended at a limit there), so that it is pruned once a newer save exists.

    Every process takes part (the RNG states); rank 0 writes.
    """
    if not weights_are_finite(run.model):
        raise AttncliError(f"step {state.step}: the weights are not finite; not saved, the "
                           "previous checkpoint is intact")
    record = {**state_record(state, world, device), **({between: True} if between else {})}
    if world.primary:
        save_checkpoint(run.paths, run.model, run.optimizer, record,
                        fingerprint=run.fingerprint, best_step=state.best_step,
                        keep=cfg.keep_checkpoints)


def resume_run(run: Checkpointed, *, cfg: TrainConfig, world: World, device: torch.device
               ) -> tuple[RunState, Path]:
    """Load the `last` checkpoint (strictly) and each process's RNG; its state and folder.

    The saved pad_multiple wins over this machine's `auto`: the data position indexes batches
    cut with it.
    """
    folder = checkpoint_dir(run.paths, "last")
    saved = load_checkpoint(folder, run.model, run.optimizer, run.fingerprint)
    if saved.get("batching") != BATCHING:
        raise AttncliError(
            f"{folder}: its data position counts batches cut another way (attncli 0.2 "
            f"budgeted target tokens only; now {BATCHING}), so it cannot resume exactly; "
            f"finish it with attncli 0.2, or start a new run")
    apply_optimizer_settings(run.optimizer, cfg)
    fields = {name: saved[name] for name in RunState.__dataclass_fields__
              if name != "elapsed" and name in saved}
    state = RunState(**fields, elapsed=saved["elapsed_s"])
    _restore_rng(saved, step=state.step, seed=cfg.seed, world=world, device=device)
    return state, folder


def _restore_rng(saved: dict, *, step: int, seed: int, world: World, device: torch.device
                 ) -> None:
    """Each process its own saved RNG state; saved by another number of processes, rank 0
    takes the first and the others start afresh (only their dropout masks differ)."""
    by_rank = saved.get("rng_by_rank") or [saved["rng"]]
    if len(by_rank) == world.size:
        set_rng_state(by_rank[world.rank], device)
    elif world.primary:
        set_rng_state(by_rank[0], device)
    else:
        torch.manual_seed(seed + 7919 * world.rank + step)
