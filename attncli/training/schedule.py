"""What is due after an update: a log line, a validation, a save, and what a stop adds.

The one statement of the schedule that the loop (`trainer.py`) and the log lines
(`figures.py`) follow; see `due`.
"""

from __future__ import annotations

from dataclasses import dataclass

from attncli.core.config import TrainConfig
from attncli.training.stops import StopReason


@dataclass(frozen=True)
class Due:
    """What the schedule asks after one update (see `due` for the rule)."""

    log: bool            # a train event and a log line over the updates since the last one
    validate: bool       # the scheduled validation (every train.eval_every updates)
    save: bool           # the scheduled save (with each validation, every train.save_every)
    end_validate: bool   # a validation only because the run ends here (forgotten by extensions)
    end_save: str | None  # why the stop's save falls between the scheduled ones, if it does
    read: bool           # the updates' figures are read from the device

    @property
    def checkpoint(self) -> bool:
        """Whether the schedule validates or saves here (the loop's duties)."""
        return self.validate or self.save


def due(cfg: TrainConfig, step: int, stop: StopReason | None = None) -> Due:
    """What is due after update `step` (counted from 1), the run stopping there for `stop`.

    The schedule: a log line every `log_every` updates; a validation every `eval_every`, each
    one saved; a save every `save_every` too (None: only with validations). It is the same
    whether or not the run stops at `step`, so a run stopped and extended logs, validates and
    saves where an uninterrupted one does. What a stop adds at its last update:

    - a limit or patience (`StopReason.completes`): the run's end is validated where no
      validation is scheduled (`end_validate`: an extension forgets it, as the uninterrupted
      run never made it) and saved where no save is ("off_schedule", pruned once a newer save
      exists); no log line beside the schedule's;
    - a signal: saved where no save is ("interrupted", pruned likewise), not validated (the
      scheduled duties of that update are still done: a resume starts after it);
    - non-finite updates: nothing validated nor saved (the weights gave non-finite figures).

    Any stop reads the figures from the device, so the last updates' skips are counted.
    """
    validate = step % cfg.eval_every == 0
    save = validate or bool(cfg.save_every and step % cfg.save_every == 0)
    log = step % cfg.log_every == 0
    end_save = None
    if stop is not None and stop is not StopReason.NONFINITE and not save:
        end_save = "interrupted" if stop is StopReason.SIGNAL else "off_schedule"
    return Due(log=log, validate=validate, save=save,
               end_validate=stop is not None and stop.completes and not validate,
               end_save=end_save, read=stop is not None or log or save)
