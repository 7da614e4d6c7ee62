"""What `attncli train` checks before torch loads: `training_config`.

Everything this module imports is torch-free too (core, runs.layout, resume_rules, parent, the
TensorBoard check): keep it so, or `attncli train missing.yaml` waits seconds for torch before
it answers (tests/test_cli.py checks).
"""

from __future__ import annotations

from pathlib import Path

from attncli.core.config import Config
from attncli.core.config_files import load_config
from attncli.core.errors import AttncliError
from attncli.runs.layout import RunPaths, check_run_name, open_run, saved_state
from attncli.training.parent import Parent, check_freeze, child_config, open_parent
from attncli.training.resume_rules import check_resume_changes, check_resume_limits
from attncli.training.tensorboard import tensorboard_wanted


def training_config(config_path: Path | None, overrides: list[str], resume: Path | None,
                    name: str | None = None, *, init_from: Path | None = None,
                    checkpoint: str | None = None
                    ) -> tuple[Config, RunPaths | None, Parent | None]:
    """The config `attncli train` will use, the run folder when resuming, and the parent run
    (`--init-from`, with its `--checkpoint`) when fine-tuning (else None).

    Torch-free on purpose: the CLI calls it before loading the trainer, so a missing or mistyped
    config, a bad run name, a folder that is not a resumable run or a parent, or a change that
    resuming (or the parent's model) cannot honour is reported in a blink, before any data is
    prepared or folder made.
    """
    _check_options(config_path, resume, init_from, checkpoint)
    if name is not None:
        check_run_name(name)
    paths = parent = None
    if resume is None:
        config = load_config(config_path, overrides)
        if init_from is not None:
            parent = open_parent(init_from, checkpoint or "auto")
            config = child_config(config, parent, str(config_path))
        else:
            check_freeze(config)
    else:
        paths = open_run(resume)  # with no checkpoint yet, it trains again from step 0
        config = load_config(paths.config, overrides)
        check_resume_changes(load_config(paths.config), config, str(resume))
        if (last := paths.pointed_steps().get("last")) is not None:
            check_resume_limits(saved_state(paths.step_dir(last)), config.train, resume)
    tensorboard_wanted(config.train.tensorboard)  # true without it installed: said now
    return config, paths, parent


def _check_options(config_path: Path | None, resume: Path | None, init_from: Path | None,
                   checkpoint: str | None) -> None:
    """The options that go together: CONFIG or --resume; --init-from with CONFIG; --checkpoint
    with --init-from."""
    if resume is None and config_path is None:
        raise AttncliError("give a CONFIG file, or --resume RUN_DIR to continue a run")
    if resume is not None and init_from is not None:
        raise AttncliError(f"--init-from {init_from} starts a new run from that run's weights, "
                           f"--resume {resume} continues a run as it was: give one of them")
    if resume is not None and config_path is not None:
        raise AttncliError(f"--resume {resume} continues with that run's own config.yaml: give "
                           f"no CONFIG ({config_path}); --set changes what a resume may change")
    if checkpoint is not None and init_from is None:
        raise AttncliError(f"--checkpoint {checkpoint} names the checkpoint of --init-from RUN "
                           f"that a new run starts from; without --init-from there is none")
