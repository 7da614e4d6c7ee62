"""The rule: a run stopped and resumed, or extended past its limit, equals the uninterrupted run.

A run that stops (a signal, a crash after a save, a limit reached) and is resumed with
`attncli train --resume RUN` — its limit raised with `--set train.max_steps=...` or not —
trains on exactly as the one that never stopped: the same batches in the same order, the same
random draws, the same log lines, validations and saves, and the same best checkpoint,
patience count and average. Where that cannot hold, the resume refuses with the reason, or
(when the run stays sound, only its last digits differ) says so.

Every part of the rule, and where it is kept:

- **The position.** The data position (epoch, batch) indexes batches cut from the training
  pairs' lengths, the seed and the saved `pad_multiple`: the resume keeps the saved multiple
  (`pad_multiple_notice`) and refuses other pairs (`check_same_data`), batches cut by attncli
  0.2's rule (`checkpointing.resume_run`), or a changed fixed setting (`resume_rules`).
- **The path.** `precision: auto` keeps the precision the run began in, whatever this
  machine's kind would choose (`resumed_precision`); a precision the user names is said.
- **The random draws.** Each process's RNG state is saved and restored
  (`checkpointing.resume_run`); subword sampling draws from (seed, epoch, the batch's place),
  never a running stream (`data/subwords.py`). On another count of threads or processes the
  draws or the kernels' rounding differ: said, not refused (`threads_notice`,
  `processes_notice`).
- **The schedule.** Logs, validations and saves fall where the uninterrupted run has them,
  stop or no stop (`schedule.due`); the open log window is saved, so the first train event
  after a resume averages the same updates (`figures.UpdateFigures`).
- **The learning rate.** inverse_sqrt's rate depends on the update's number alone; a budgeted
  shape's (`linear`, `wsd`) follows a plan saved with every checkpoint and continued as saved
  (`lr_planning.resumed_plan`). The one exception to this rule: a budgeted run extended past its
  limit (or resumed with other schedule keys) is planned afresh for its new end, so it is not
  the run that never stopped; the log says so (docs/runs-and-checkpoints.md, "The learning
  rate").
- **The end of a run.** A run ended at a limit between scheduled validations is validated and
  saved there all the same, for its user. The uninterrupted run never made that validation:
  the best and patience as the scheduled ones left them are kept (`decisions_before_end`) and
  an extension goes on from them (`forget_end_validation`); the end's save is marked off the
  schedule and pruned once a newer save exists, while the best before the end stays
  (`runs/checkpoints._prune`), so the saves kept and averaged are the uninterrupted run's.
- **The metrics.** Events past the resumed step are dropped before the run goes on
  (`command._resume`, `runs/metrics.MetricsLog.drop_after`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from attncli.core.config import ModelConfig
from attncli.core.errors import AttncliError
from attncli.training.checkpointing import RunState


def check_same_data(state: RunState, now: str, folder: Path) -> None:
    """Refuse a resume on other training pairs (`now`: their `data_fingerprint`): the data
    position would point into other batches. Runs saved before 0.5 recorded none."""
    if state.data and state.data != now:
        raise AttncliError(
            f"{folder}: this run trained on other data ({state.data}; now {now}), so "
            f"its data position would point into other batches and it cannot resume "
            f"exactly; resume it with the data it trained on, or start a new run")
    state.data = now


def pad_multiple_notice(state: RunState, chosen: int) -> str | None:
    """The line saying the saved `pad_multiple` is kept where this device would choose
    another (`chosen`): the data position counts batches cut with the saved one."""
    if chosen == state.pad_multiple:
        return None
    return (f"batch lengths stay rounded to multiples of {state.pad_multiple}, as this run's "
            f"batches were cut (this device would choose {chosen}): its data position counts "
            f"those batches")


def resumed_precision(state: RunState, setting: str, chosen: str) -> tuple[str, str | None]:
    """The precision a resumed run trains in, and the line that says so where it is not what
    this machine would choose (`chosen`, from `setting`). `auto` keeps the saved precision, so
    a run started on an AMX CPU stays in bf16 on an AVX2 one (slower, the same path); a
    precision the user names wins, and the log says the run changes path there. Records the
    precision for the next save."""
    saved = state.precision or chosen
    precision = saved if setting == "auto" else chosen
    state.precision = precision
    if precision == chosen and saved == chosen:
        return precision, None
    if setting == "auto":
        return precision, (f"training stays in {saved}, as this run began (this machine would "
                           f"choose {chosen}: set train.precision={chosen} to change)")
    return precision, (f"training in {chosen} from step {state.step} (train.precision; it "
                       f"trained in {saved} until here): its curve leaves the one in {saved}")


def threads_notice(state: RunState, device: torch.device) -> str | None:
    """On CPU the matrix kernels split their work among the threads, and for some shapes
    their rounding follows the split: with another thread count the resumed curve leaves the
    uninterrupted one in the last digits. Said, not refused: the run is still sound. Records
    this process's count for the next save."""
    threads, saved = torch.get_num_threads(), state.threads
    state.threads = threads
    if device.type != "cpu" or saved in (0, threads):
        return None
    return (f"this run saved with {saved} CPU threads and resumes with {threads}: its losses "
            f"will differ from an uninterrupted run's in the last digits (train.threads sets "
            f"the count)")


def processes_notice(state: RunState, processes: int, model: ModelConfig) -> str | None:
    """Each process draws dropout masks of its own (seeded by its rank) for its share of an
    update, so on another count of processes the resumed curve is another curve: said, as the
    run is still sound and resumes where it stopped. Records the count for the next save."""
    saved = state.processes
    state.processes = processes
    dropout = model.dropout or model.attention_dropout  # without it the curve is the same
    if not dropout or saved in (0, processes):
        return None
    return (f"this run saved with {saved} training process(es) and resumes with {processes}: "
            f"its losses will not follow an uninterrupted run's (resume with --nproc {saved} "
            f"for that)")


def decisions_before_end(state: RunState) -> dict:
    """What validations decide by (best so far, patience's count), kept before a validation
    made only because the run ends (`schedule.Due.end_validate`)."""
    return {"best_bleu": state.best_bleu, "best_step": state.best_step,
            "bad_validations": state.bad_validations}


def forget_end_validation(state: RunState) -> str | None:
    """On a resume from a run that ended at a limit between scheduled validations: best and
    patience as the scheduled validations left them (the end validation scored the run's last
    weights for that end; an uninterrupted run would not have made it, and it would stop an
    extension early on patience or change its best and its average). The log line, when there
    was one to forget."""
    before = state.before_end
    if not before:
        return None
    state.best_bleu, state.best_step = before["best_bleu"], before["best_step"]
    state.bad_validations, state.before_end = before["bad_validations"], {}
    best = "none yet" if state.best_step is None else f"step-{state.best_step}"
    return (f"the validation at step {state.step}, made because the run ended there, does not "
            f"count on: best ({best}) and patience go on from the scheduled validations")
