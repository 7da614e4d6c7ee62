"""What `attncli train --resume` may change in a run's config, and what validation scores with.

Every key outside `RESUME_MAY_CHANGE` is fixed by what the run has on disk: the weights'
shapes, the tokenizer, or the data order (the saved position indexes one batch list).
"""

from __future__ import annotations

from typing import Any

from attncli.core.config import TERMS_KEYS, WEIGHTLESS_MODEL_KEYS, Config, TrainConfig
from attncli.core.errors import AttncliError
from attncli.core.text import language_subtag
from attncli.decoding.scoring import bleu_tokenizer
from attncli.training.stops import StopReason

RESUME_MAY_CHANGE: dict[str, frozenset[str] | None] = {
    "data": frozenset({"valid_limit", "val", "test", "cache_dir", "num_proc", *TERMS_KEYS}),
    "tokenizer": frozenset({"sample_size", "sample_bytes"}),  # the run's own tokenizer is loaded
    "model": WEIGHTLESS_MODEL_KEYS,  # dropout and the attention kernel: not the weights' shapes
    "train": frozenset({
        "max_steps", "max_epochs", "max_minutes", "eval_every", "log_every", "save_every",
        "keep_checkpoints", "patience", "max_nonfinite_updates", "lr", "warmup_steps",
        "lr_schedule", "min_lr", "cooldown", "lr_plan", "betas", "weight_decay", "clip_norm",
        "label_smoothing", "precision", "compile", "threads", "workers", "tensorboard",
        "average_last", "examples"}),
    "decode": None,  # every key: decoding settings only affect validation BLEU
}
_WHY_FIXED = {"data": "it changes the training data and its order",
              "tokenizer": "it changes the tokenizer the run trained with",
              "model": "it changes the model the weights belong to",
              "train": "it changes the data order the saved position points into",
              # the optimizer state saved holds the trained parameters' moments only
              "train.freeze": "it changes which parameters the saved optimizer state is of"}


def _may_change_summary() -> str:
    parts = []
    for section, keys in RESUME_MAY_CHANGE.items():
        if keys is None:
            parts.append(f"{section}.*")
        elif keys:
            parts.append(f"{section}.{{{','.join(sorted(keys))}}}")
    return "; ".join(parts)


def check_resume_changes(saved: Config, wanted: Config, run: str) -> None:
    """Refuse (one line naming the key) a change that the saved state cannot honour."""
    old, new = saved.to_dict(), wanted.to_dict()
    for section, allowed in RESUME_MAY_CHANGE.items():
        for key, value in new[section].items():
            if (_without_terms(key, value) == _without_terms(key, old[section].get(key))
                    or allowed is None or key in allowed):
                continue
            raise AttncliError(
                f"--resume {run}: {section}.{key} cannot change when resuming "
                f"({old[section].get(key)!r} -> {value!r}): "
                f"{_WHY_FIXED.get(f'{section}.{key}', _WHY_FIXED[section])}; start a new "
                f"run for that. May change: {_may_change_summary()}")


def fixed_settings(config: Config) -> dict[str, Any]:
    """Every key a resume may not change, 'section.key' -> value. state.json keeps them, so a
    hand-edited config.yaml cannot slip past `check_resume_changes`, which compares --set with
    that same file."""
    return {f"{section}.{key}": _without_terms(key, value)
            for section, values in config.to_dict().items()
            for key, value in values.items()
            if (allowed := RESUME_MAY_CHANGE.get(section, frozenset())) is not None
            and key not in allowed}


def check_fixed_settings(recorded: dict[str, Any], now: dict[str, Any], folder: object
                         ) -> None:
    """Refuse fixed settings (`fixed_settings` of the config) that differ from those the
    checkpoint recorded (runs saved before they were recorded: nothing to compare)."""
    for key, value in recorded.items():
        if key in now and now[key] != _without_terms(key.rpartition(".")[2], value):
            raise AttncliError(
                f"{folder}: {key} is {now[key]!r} in the run's config.yaml, but the run trained "
                f"with {value!r} (was the file edited?); it cannot change when resuming: put it "
                f"back, or start a new run")


def _without_terms(key: str, value: Any) -> Any:
    """`data.corpora` less each corpus's licence and attribution: they describe the data's
    terms, not its pairs, so a resume may change them (as data.licence), and a checkpoint that
    recorded them (attncli 0.6 before this) still compares equal."""
    if key != "corpora" or not isinstance(value, list):
        return value
    return [{k: v for k, v in item.items() if k not in TERMS_KEYS} if isinstance(item, dict)
            else item for item in value]


def limit_reached(train: TrainConfig, step: int, epoch: int, elapsed: float
                  ) -> StopReason | None:
    """The first of train.max_steps / max_epochs / max_minutes that a run at (step, epoch,
    training seconds) has reached, if any."""
    if train.max_steps is not None and step >= train.max_steps:
        return StopReason.MAX_STEPS
    if train.max_epochs is not None and epoch >= train.max_epochs:
        return StopReason.MAX_EPOCHS
    if train.max_minutes is not None and elapsed >= train.max_minutes * 60:
        return StopReason.MAX_MINUTES
    return None


def check_resume_limits(saved: dict[str, Any], train: TrainConfig, run: object) -> None:
    """Refuse to resume a run whose last save (`saved`: its state.json) already reached a limit
    of `train`, or stopped on patience: it would save again at once, or train one more
    validation interval and stop again."""
    step = saved.get("step", 0)
    reached = limit_reached(train, step, saved.get("epoch", 0), saved.get("elapsed_s", 0.0))
    if (reached is None and train.patience is not None
            and saved.get("bad_validations", 0) >= train.patience):
        reached = StopReason.PATIENCE
    if reached:  # each reason is named as its train. key
        key = reached.value
        raise AttncliError(
            f"{run}: train.{key} ({getattr(train, key)}) is reached already at step "
            f"{step}; raise it to train on (--set train.{key}=...)")


# What greedy validation BLEU depends on beside the weights: the pairs and the search's limits.
VALIDATION_KEYS = (("data", "valid_limit"), ("data", "val"), ("decode", "max_len_a"),
                   ("decode", "max_len_b"), ("decode", "no_repeat_ngram_size"))


def validation_settings(config: Config) -> dict[str, Any]:
    """What validation scores with, 'section.key' -> value; each save records them beside the
    best BLEU they gave."""
    values = config.to_dict()
    settings = {f"{section}.{key}": values[section][key] for section, key in VALIDATION_KEYS}
    return {**settings, "bleu.tokenize": bleu_tokenizer(config.data.tgt)}


def validation_changes(recorded: dict[str, Any], wanted: Config) -> list[str]:
    """The resume's changes to what validation scores ('data.valid_limit 16 -> 200'), against
    the settings the checkpoint's best BLEU was scored with (`validation_settings`): that best
    was scored otherwise, and cannot be compared with the next ones as it is."""
    new = validation_settings(wanted)
    recorded = {"bleu.tokenize": _former_bleu_tokenizer(wanted.data.tgt), **recorded}
    return [f"{key} {recorded[key]!r} -> {new[key]!r}"
            for key in new if key in recorded and recorded[key] != new[key]]


def _former_bleu_tokenizer(tgt: str) -> str:
    """The sacreBLEU tokenizer of saves that did not record one: CJK targets were known by
    their two-letter codes only (Tatoeba's `cmn` was scored with 13a)."""
    base = language_subtag(tgt)
    return bleu_tokenizer(base) if base in ("zh", "ja", "ko") else "13a"
