"""The parent of a fine-tuning run (`attncli train CONFIG --init-from RUN`), before torch loads:
the parent found and checked, the child's config made, and what RUN/parent.json records.

What a child takes from where:

- from the parent: its weights (the checkpoint `--checkpoint` names, resolved as `eval` does)
  and its tokenizer (copied into the child, never trained again), and so its `model` and
  `tokenizer` sections, but for the keys that leave the weights' shapes as they are
  (`model.dropout`, `attention_dropout`, `attention`: CONFIG's, given or default);
- from CONFIG: everything else (the data, `train`: learning rate, warm-up, limits; `decode`).

A `model` or `tokenizer` key that CONFIG or `--set` writes down with another value than the
parent's is refused, naming both: the run could not honour it. A key CONFIG leaves out is the
parent's, so a fine-tuning config needs no model section (the shape is never typed again by
hand). Torch-free (`preflight.py` calls it), so that each refusal comes before any data is
read and before any run folder exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncli.core.config import WEIGHTLESS_MODEL_KEYS, Config, DataConfig
from attncli.core.config_files import load_config, parse_config
from attncli.core.errors import AttncliError
from attncli.runs.layout import RunPaths, checkpoint_dir, open_run, read_parent_record, read_state

# The keys of the parent's sections that CONFIG decides (the others are the parent's).
FROM_CONFIG = {"model": WEIGHTLESS_MODEL_KEYS, "tokenizer": frozenset()}


@dataclass(frozen=True)
class Parent:
    """The run a child starts from: as given on the command line (parent.json records it so),
    its folder, the checkpoint folder whose weights the child starts from, and its config."""

    given: Path
    paths: RunPaths
    checkpoint: Path
    config: Config


def open_parent(run: Path, checkpoint: str) -> Parent:
    """The run folder `run` and its checkpoint named `checkpoint` (auto, best, last, averaged,
    step-N); a folder that is not a run, or has no such checkpoint, is one line."""
    try:
        paths = open_run(run)
        folder = checkpoint_dir(paths, checkpoint)
        config = load_config(paths.config)
    except AttncliError as err:
        raise AttncliError(f"--init-from: {err}") from None
    return Parent(Path(run), paths, folder, config)


def child_config(wanted: Config, parent: Parent, source: str) -> Config:
    """The child's config: `wanted` (CONFIG with its `--set`s, read from `source`) with the
    parent's `model` and `tokenizer` sections, but for the keys of `FROM_CONFIG`. Refused: a
    language pair other than the parent's, and a key of those sections that `wanted` gives
    another value."""
    _check_pair(wanted.data, parent)
    merged = wanted.to_dict()
    for section, own in FROM_CONFIG.items():
        given, theirs = getattr(wanted, section), getattr(parent.config, section)
        for key in type(given).model_fields:
            if key in own or key not in given.model_fields_set:
                continue
            if getattr(given, key) != getattr(theirs, key):
                raise AttncliError(
                    f"--init-from {parent.given}: {section}.{key}: {source} or --set gives "
                    f"{getattr(given, key)!r}, the parent has {getattr(theirs, key)!r}: a "
                    f"fine-tuned run keeps its parent's model and tokenizer (only model.dropout, "
                    f"attention_dropout and attention come from CONFIG); leave {section}.{key} "
                    f"out, or give the parent's value")
        merged[section] = {**theirs.model_dump(mode="json"),
                           **{key: merged[section][key] for key in own}}
    return parse_config(merged, source)


def _check_pair(wanted: DataConfig, parent: Parent) -> None:
    """A model translates the pair it learnt: another pair, or the same one swapped, has other
    words on each side than its embeddings and output were trained for."""
    theirs = parent.config.data
    if (wanted.src, wanted.tgt) == (theirs.src, theirs.tgt):
        return
    how = ("the pair swapped" if (wanted.src, wanted.tgt) == (theirs.tgt, theirs.src)
           else "another language pair")
    raise AttncliError(
        f"--init-from {parent.given}: that run translates {theirs.src}->{theirs.tgt} and CONFIG "
        f"{wanted.src}->{wanted.tgt} ({how}): a run is fine-tuned on its own pair; train "
        f"{wanted.src}->{wanted.tgt} from scratch, or from a run of that pair")


def check_freeze(config: Config) -> None:
    """`train.freeze` on a run from scratch: its weights are random, and frozen they would stay
    so."""
    if config.train.freeze:
        raise AttncliError(
            f"train.freeze {config.train.freeze}: freezing keeps parts of a parent's weights "
            f"as they are, and a run from scratch has none (its weights are random): give "
            f"--init-from RUN, or leave train.freeze empty")


def parent_record(parent: Parent, digest: str) -> dict[str, Any]:
    """What RUN/parent.json holds: the parent as given (relative where it was given so), the
    checkpoint's folder name, its weights' SHA-256 (`digest`), the updates behind them (the
    newest save's, for an average), and the parent's own parent.json when it is a child too."""
    state = read_state(parent.checkpoint)
    updates = state["step"] if "step" in state else max(state.get("averaged_steps") or [0])
    record: dict[str, Any] = {"run": str(parent.given), "checkpoint": parent.checkpoint.name,
                              "weights_sha256": digest, "updates": updates}
    if (chain := read_parent_record(parent.paths)) is not None:
        record["parent"] = chain
    return record


def recorded_parent(paths: RunPaths) -> Parent | None:
    """For a child stopped before its first checkpoint, which trains again from step 0: the
    parent its parent.json names (None: not a child), looked for where it was given, from the
    working folder (`parent_weights.check_same_parent_weights` checks its weights)."""
    record = read_parent_record(paths)
    if record is None:
        return None
    given = Path(record["run"])
    try:
        parent_paths = open_run(given)
        config = load_config(parent_paths.config)
    except AttncliError as err:
        raise AttncliError(
            f"--resume {paths.root}: it stopped before its first checkpoint, so it starts "
            f"again from its parent's weights, and its parent ({err}) is not found: resume it "
            f"from the folder it was started in") from None
    folder = parent_paths.checkpoints / record["checkpoint"]  # step-N or averaged
    return Parent(given, parent_paths, folder, config)
