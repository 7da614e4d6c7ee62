"""The training loop: update after update until a limit, logging, validating and saving.

Read `Trainer.run` first; each thing it calls lives in a module of its own (see
`attncli/training/__init__.py`). With several processes (`distributed.World`) every process
runs this same loop on its share of each update, and only rank 0 writes (metrics,
checkpoints, what the user sees).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import torch

from attncli.core.console import Reporter
from attncli.core.device import resolve_pad_multiple, resolve_precision
from attncli.core.errors import AttncliError
from attncli.core.memory import gigabytes_text, peak_resident_bytes
from attncli.core.plots import plot_curves
from attncli.data.batching import resolve_workers
from attncli.data.subwords import SubwordSampler
from attncli.model.build import build_model, model_fingerprint
from attncli.runs.card import card_at_end
from attncli.runs.layout import RunPaths
from attncli.runs.metrics import MetricsLog
from attncli.training.averaging import average_at_end
from attncli.training.checkpointing import (
    Checkpointed,
    RunState,
    data_fingerprint,
    resume_run,
    save_run,
)
from attncli.training.distributed import World, loss_module
from attncli.training.extension import (
    check_same_data,
    decisions_before_end,
    pad_multiple_notice,
    processes_notice,
    resumed_precision,
    threads_notice,
)
from attncli.training.feed import UpdateFeed
from attncli.training.figures import UpdateFigures, time_left_text
from attncli.training.freezing import freeze
from attncli.training.lr_planning import RatePlanner, fresh_plan, resumed_plan, step_limit
from attncli.training.optim import make_optimizer
from attncli.training.parent_weights import load_parent_weights
from attncli.training.resume_rules import (
    check_fixed_settings,
    fixed_settings,
    limit_reached,
    validation_settings,
)
from attncli.training.schedule import due
from attncli.training.step import UpdateShare, compile_loss, train_step
from attncli.training.stops import SIGNAL_ECHO_S, StopReason, StopSignal, Stopwatch
from attncli.training.validate import ValidationSetup, Validators, translate_examples


class Trainer:
    """Runs updates until a stop condition, validating and checkpointing along the way.

    Made for step 0; `resume` then moves it to the run's last checkpoint. The batch feed and
    the validator are made at first use, after a resume, since both cut batches with the
    run's saved `pad_multiple`.
    """

    def __init__(self, config, paths: RunPaths, data, *, device: torch.device,
                 reporter: Reporter, world: World | None = None,
                 parent_weights: Path | None = None):
        """`data`: the `corpus.TrainingData` (its tokenizer, token caches of train and val, val
        texts); `parent_weights`: the checkpoint folder a fine-tuned run starts from (its
        parent's)."""
        self.config, self.cfg, self.paths = config, config.train, paths
        self.tokenizer, self.data, self.device = data.models.tokenizer(), data, device
        self.reporter, self.world = reporter, world or World()
        self.metrics = MetricsLog(paths.metrics if self.world.primary else None)
        self.precision = resolve_precision(self.cfg.precision, device)
        self.data_fingerprint = data_fingerprint(data.train)
        self.state = RunState(pad_multiple=self._device_pad_multiple(), processes=self.world.size,
                              threads=torch.get_num_threads(), data=self.data_fingerprint,
                              precision=self.precision)
        self.fingerprint = model_fingerprint(config.model)
        self.fixed_settings = fixed_settings(config)  # what each save records
        torch.manual_seed(self.cfg.seed)
        self.model = build_model(config, self.tokenizer).to(device)
        self.parent_weights = parent_weights
        if parent_weights is not None:  # before DDP, which gives every process rank 0's
            load_parent_weights(self.model, parent_weights)
        self.frozen = freeze(self.model, self.cfg.freeze, config.model)  # before the optimizer
        if self.world.rank:  # same weights everywhere, dropout masks of its own
            torch.manual_seed(self.cfg.seed + 7919 * self.world.rank)
        if self.cfg.compile:
            compile_loss(self.model)
        self.loss_fn = loss_module(self.model, self.world, device)
        self.optimizer = make_optimizer(self.model, self.cfg)
        self.saved_step = -1  # not saved: a resumed run starts counting afresh
        self.trained_epoch = 0  # the epoch of the last update's batches

    def _device_pad_multiple(self) -> int:
        return resolve_pad_multiple(self.cfg.pad_multiple, self.device, self.precision)

    @cached_property
    def feed(self) -> UpdateFeed:
        sampler = None
        if self.cfg.subword_alpha > 0:
            sampler = SubwordSampler(self.tokenizer, alpha=self.cfg.subword_alpha,
                                     nbest=self.cfg.subword_nbest,
                                     max_len=self.config.data.max_len, seed=self.cfg.seed)
        return UpdateFeed(self.data.train, self.cfg, self.world,
                          pad_multiple=self.state.pad_multiple,
                          workers=resolve_workers(self.cfg.workers, self.device),
                          device=self.device, sampler=sampler)

    @cached_property
    def validators(self) -> Validators:
        setup = ValidationSetup(device=self.device, precision=self.precision,
                                pad_multiple=self.state.pad_multiple, world=self.world)
        return Validators(self.config, self.model, self.tokenizer, self.data, setup=setup)

    @property
    def checkpointed(self) -> Checkpointed:
        """What its saves write and a resume loads."""
        return Checkpointed(self.paths, self.model, self.optimizer, self.fingerprint)

    def resume(self) -> Path:
        """Continue from the `last` checkpoint (strictly loaded); returns its folder."""
        self.state, folder = resume_run(self.checkpointed, cfg=self.cfg, world=self.world,
                                        device=self.device)
        self.saved_step = self.state.step
        check_fixed_settings(self.state.fixed, self.fixed_settings, folder)
        check_same_data(self.state, self.data_fingerprint, folder)
        self.precision, precision_notice = resumed_precision(
            self.state, self.cfg.precision, resolve_precision(self.cfg.precision, self.device))
        notices = (precision_notice, pad_multiple_notice(self.state, self._device_pad_multiple()),
                   threads_notice(self.state, self.device),
                   processes_notice(self.state, self.world.size, self.config.model))
        for line in filter(None, notices):
            self.reporter.line(line)
        return folder

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> str | None:
        """Train until a limit; returns the name of a stop signal if one interrupted the run.

        The updates' figures stay on the device until a log, validation, save or stop reads
        them, so a GPU is never kept waiting for the host between updates.
        """
        state, cfg, reason = self.state, self.cfg, None
        self.clock = Stopwatch(state.elapsed)
        self.planner = self._rate_planner()
        self.figures = UpdateFigures(cfg, self.world, metrics=self.metrics,
                                     reporter=self.reporter, clock=self.clock,
                                     window=state.window)
        with StopSignal(SIGNAL_ECHO_S if self.world.distributed else 0.0) as stop:
            for update in self.feed.updates(state.epoch, state.batch_index):
                state.epoch, state.batch_index = update.epoch, update.batch_index
                self.trained_epoch = update.trained_epoch  # what logs label the step with
                lr = self.planner.rate(state.step + 1)
                share = UpdateShare(update.tokens, self.world.size, update.counted)
                stats = train_step(self.loss_fn, self.optimizer, update.batches, cfg=cfg, lr=lr,
                                   device=self.device, precision=self.precision, share=share)
                state.step += 1
                self.figures.add(state.step, lr, stats)
                state.elapsed = self.clock.seconds()
                self._plan_from_clock()
                reason = self._agreed_stop(stop)
                if due(cfg, state.step, reason).read:
                    self.figures.read(state.step, self.trained_epoch)
                self.reporter.step(state.step, self.figures.shown)
                with self.clock.paused():  # validation and saving are not training time
                    reason = self._checkpoint_duties(reason, stop)
                if reason is not None:
                    break
            state.elapsed = self.clock.seconds()
            return self._finish(reason, stop)

    def _rate_planner(self) -> RatePlanner:
        """The learning rate's plan: made for a new run, the saved one for a resumed run (or
        one made afresh when the resume changed what it was made from: `resumed_plan`)."""
        limit = step_limit(self.cfg, len(self.feed.epoch_batches(self.state.epoch)))
        if self.state.step == 0:
            plan = fresh_plan(self.cfg, limit)
        else:
            plan, line = resumed_plan(self.state.scheduler or None, self.cfg,
                                      step=self.state.step, seconds=self.state.elapsed,
                                      limit=limit)
            if line:
                self.reporter.line(line)
        if plan.total is not None and (self.cfg.max_minutes is None or self.state.step):
            self.reporter.set_total(plan.total)  # a new timed run's: once the clock planned it
        return RatePlanner(self.cfg, plan, limit=limit, world=self.world)

    def _plan_from_clock(self) -> None:
        """A time-limited budgeted run revises its plan from the clock at log steps; the
        progress bar counts to the plan's last update."""
        total = self.planner.plan.total
        self.planner.after_update(self.state.step, self.state.elapsed,
                                  log_step=due(self.cfg, self.state.step).log)
        if self.planner.plan.total != total:
            self.reporter.set_total(self.planner.plan.total)

    def limit_reached(self) -> StopReason | None:
        """The first of train.max_steps / max_epochs / max_minutes that is reached, if any."""
        return limit_reached(self.cfg, self.state.step, self.state.epoch, self.state.elapsed)

    def _agreed_stop(self, stop: StopSignal) -> StopReason | None:
        """A signal or a limit, the same on every process (their clocks differ a little, and a
        signal may reach only some). A limit reached by the same update wins: the run is at its
        end, which `_finish` completes with the signal held (else the save would be a run that
        can neither train on nor have its end work done)."""
        reason = self.limit_reached()
        signal, late = self.world.any_of([stop.name is not None,
                                          reason is StopReason.MAX_MINUTES])
        if late and reason is None:
            reason = StopReason.MAX_MINUTES
        return StopReason.SIGNAL if signal and reason is None else reason

    def _signalled(self, stop: StopSignal) -> bool:
        """Whether a signal reached any process (a collective: every process asks at once)."""
        return self.world.any_of([stop.name is not None])[0]

    def _checkpoint_duties(self, reason: StopReason | None, stop: StopSignal
                           ) -> StopReason | None:
        """Validate and save when the schedule says (`schedule.due`); why to stop after this
        update (None: go on).

        A signal stop still validates a step that is due (a resume starts after it, so its
        validation would be lost for good); a signal that came during the duties stops the run
        before another update."""
        if self.figures.nonfinite_stop is not None:
            return StopReason.NONFINITE
        if reason not in (None, StopReason.SIGNAL) or self.figures.nonfinite_in_row:
            # During a run of skipped updates the weights are those that gave non-finite
            # ones: neither scored nor saved (a save would become `last` and prune good ones).
            return reason
        scheduled = due(self.cfg, self.state.step)
        if not scheduled.checkpoint:
            return reason
        if scheduled.validate and self.validate():
            reason = StopReason.PATIENCE  # wins over a signal, as a limit does (`_agreed_stop`)
        self.save()
        return StopReason.SIGNAL if reason is None and self._signalled(stop) else reason

    def _finish(self, reason: StopReason, stop: StopSignal) -> str | None:
        """Validate and save at the end (and average the last saves, `train.average_last`); a
        non-finite stop saves nothing and is an error.

        Still under `stop`: a signal during this end work is held until it is done (a second
        one stops at once, as during training), so the run ends whole, with exit 0.
        """
        if reason is StopReason.NONFINITE or self.figures.nonfinite_in_row:
            self._refuse_nonfinite_weights(reason)
        end = due(self.cfg, self.state.step, reason)
        if reason is StopReason.SIGNAL:
            self.save(end.end_save)  # a no-op where this step was saved as due
            self.reporter.line(peak_memory_line())
            return stop.name or "SIGTERM"  # the signal reached another process
        if self.state.last_validated != self.state.step:  # patience validated it already
            if end.end_validate:  # not scheduled: a run extended later forgets it
                self.state.before_end = decisions_before_end(self.state)
            self.validate()
        self.save(end.end_save)
        self.reporter.line(f"stopped at step {self.state.step} ({reason.value}); best greedy "
                           f"val BLEU {self.state.best_bleu:.2f}; run folder {self.paths.root}")
        if self.planner.plan.budgeted:  # where patience or a limit left the schedule
            self.reporter.line(f"  the last update's {self.planner.plan.position(self.state.step)}")
        if self.cfg.average_last and self.world.primary:
            self.reporter.line(average_at_end(self))
        if self.world.primary:
            self.reporter.line(card_at_end(self.paths))
        if stop.name is not None:
            self.reporter.line(f"{stop.name} came while the run was ending: its end (validation, "
                               f"save, averaging) was finished first")
        self.reporter.line(peak_memory_line())
        return None

    def _time_left(self) -> str:
        """'; 12:03 of 30:00 left' for a time-limited run, else ''."""
        if self.cfg.max_minutes is None:
            return ""
        return f"; {time_left_text(self.cfg.max_minutes, self.state.elapsed)}"

    def _refuse_nonfinite_weights(self, reason: StopReason) -> None:
        """End without saving: the weights gave the last updates non-finite figures."""
        last = self.paths.read_pointers().get("last", "none saved yet")
        figures = self.figures
        why = (f"update {figures.nonfinite_stop}: {self.cfg.max_nonfinite_updates} non-finite "
               f"updates in a row, each skipped (train.max_nonfinite_updates)"
               if reason is StopReason.NONFINITE else
               f"stopped ({reason.value}) after {figures.nonfinite_in_row} non-finite "
               "update(s) in a row, each skipped")
        raise AttncliError(
            f"{why}; the weights that gave them were not saved, the last checkpoint ({last}) "
            f"is intact; lower train.lr or raise train.warmup_steps and resume with `attncli "
            f"train --resume {self.paths.root} --set train.lr=...`")

    # -- validation and saving -----------------------------------------------------------------

    def validate(self) -> bool:
        """Score val (each corpus's in a mix), keep the best (by the deciding set's BLEU),
        redraw the curves; True when patience is exhausted."""
        state = self.state
        by_set = self.validators.score()
        state.last_validated = state.step
        improved = by_set[self.validators.deciding].bleu > state.best_bleu
        if improved:
            state.best_bleu, state.best_step = by_set[self.validators.deciding].bleu, state.step
            state.bad_validations = 0
        else:
            state.bad_validations += 1
        self._record_validation(by_set, " (best)" if improved else "")
        self.reporter.line(f"  schedule at step {state.step}: "
                           f"{self.planner.plan.position(state.step)}{self._time_left()}")
        return self.cfg.patience is not None and state.bad_validations >= self.cfg.patience

    def validate_parent(self) -> None:
        """Step 0 of a fine-tuned run: its parent's weights scored on its validation pairs,
        logged and written to metrics.jsonl. Not a checkpoint: never best nor averaged, and no
        patience counted (the parent's checkpoint is that state)."""
        self._record_validation(self.validators.score(),
                                " (the parent's weights, before fine-tuning)")

    def _record_validation(self, by_set: dict, mark: str) -> None:
        """A validation's scores in metrics.jsonl and the log (`mark` on the deciding set's
        line), the examples translated, the curves redrawn."""
        state, validators = self.state, self.validators
        scores = by_set[validators.deciding]
        per_corpus = {"corpora": {name: {"val_loss": round(s.loss, 6),
                                         "val_bleu": round(s.bleu, 3)}
                                  for name, s in by_set.items()}} if len(by_set) > 1 else {}
        self.metrics.write({"event": "val", "step": state.step, "epoch": self.trained_epoch,
                            "val_loss": round(scores.loss, 6), "val_bleu": round(scores.bleu, 3),
                            "seconds": round(state.elapsed, 2), **per_corpus})
        for name, set_scores in by_set.items():
            marked = mark if name == validators.deciding else ""
            which = "" if name is None else (f"{name}, " + ("deciding, " if name ==
                                                             validators.deciding else ""))
            self.reporter.line(
                f"validation step {state.step} ({which}{validators.by_name[name].pairs}): val "
                f"loss {set_scores.loss:.4f}, greedy BLEU {set_scores.bleu:.2f}{marked} [loss "
                f"{set_scores.loss_seconds:.1f} s, BLEU {set_scores.bleu_seconds:.1f} s]")
        if self.world.primary:
            self._show_examples()
            plot_curves(self.metrics.read(), self.paths.curves, self.cfg.label_smoothing)

    def _show_examples(self) -> None:
        """`train.examples` and what the model makes of them now: console, train.log,
        metrics.jsonl (and TensorBoard's text panel through it)."""
        if not self.cfg.examples:
            return
        outputs = translate_examples(self.config, self.model, self.tokenizer, self.device)
        pairs = list(zip(self.cfg.examples, outputs, strict=True))
        self.metrics.write({"event": "examples", "step": self.state.step,
                            "examples": [{"source": src, "output": out} for src, out in pairs]})
        for number, (src, out) in enumerate(pairs, 1):
            self.reporter.line(f"  example {number}: {src}\n          -> {out}")

    def save(self, between: str | None = None) -> None:
        """Save a step folder for the current step, once per step (`between`: why it falls
        between the run's own saves, see `save_run`)."""
        if self.saved_step == self.state.step:
            return
        self.state.window = self.figures.window_record()
        self.state.scheduler = self.planner.agreed_record()
        self.state.fixed = self.fixed_settings
        self.state.validation = validation_settings(self.config)
        save_run(self.checkpointed, self.state, cfg=self.cfg, world=self.world,
                 device=self.device, between=between)
        self.saved_step = self.state.step


def peak_memory_line() -> str:
    """The end of a run's log: the most resident memory the process has held, which every
    logged `rss_mb` is at most (preparation in the same process, the tokenizer's training
    included)."""
    line = f"peak memory: {gigabytes_text(peak_resident_bytes())} resident (this process)"
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        line += f", CUDA peak allocated {torch.cuda.max_memory_allocated() / 1e9:.2f} GB"
    return line
