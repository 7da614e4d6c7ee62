"""`attncli train`: one run, in this process alone or as one of several started by torchrun.

``config`` and ``resumed`` come from ``preflight.training_config``, which the CLI calls before
importing this module (and torch), so a bad config or a refused resume fails at once.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from collections.abc import Iterator
from pathlib import Path

from attncli.core.config import check_process_shares
from attncli.core.config_files import load_config, save_config
from attncli.core.console import Reporter, SilentReporter, echo
from attncli.core.device import allow_tf32, machine_description, set_threads
from attncli.core.errors import LAUNCHER_ENV, AttncliError, report
from attncli.core.files import atomic_write_json
from attncli.core.plots import plot_curves
from attncli.runs.layout import RunPaths, read_machines, run_lock
from attncli.training import distributed
from attncli.training.distributed import World
from attncli.training.extension import forget_end_validation
from attncli.training.parent import Parent, recorded_parent
from attncli.training.prepare import banner, never_saved, prepare_run
from attncli.training.resume_rules import validation_changes, validation_settings
from attncli.training.tensorboard import open_tensorboard
from attncli.training.trainer import Trainer
from attncli.training.validate import rescore_best


def train_command(config, resumed: RunPaths | None, *, config_path, name: str | None, runs_dir,
                  device_name: str, parent: Parent | None = None) -> None:
    """Train a new run from ``config`` (from ``parent``'s weights when it is given: a
    fine-tuning run), or continue the run folder ``resumed``; exits 130, 143 or 129 when
    SIGINT, SIGTERM or SIGHUP stopped it (after saving)."""
    world, device = distributed.start(device_name)
    try:
        with distributed.peer_failures_as_errors(world):
            exit_code = _train(config, resumed, config_path=config_path, name=name,
                               runs_dir=runs_dir, world=world, device=device, parent=parent)
            world.wait_for_primary()  # nobody leaves while rank 0 still saves
    except Exception as err:
        if not world.distributed or os.environ.get("ATTNCLI_DEBUG"):
            raise
        # Said before leaving the group: the others stop as soon as this process leaves it.
        raise SystemExit(report(err)) from None
    finally:
        distributed.stop(world)
    if exit_code:
        raise SystemExit(exit_code)


def _train(config, resumed: RunPaths | None, *, config_path, name, runs_dir, world: World,
           device, parent: Parent | None) -> int | None:
    """The run; the exit code when a signal stopped it."""
    set_threads(config.train.threads)
    allow_tf32(device)
    check_process_shares(config.train, world.size, resumed is not None)
    from_step_0 = resumed is None or never_saved(resumed)
    if resumed is not None and from_step_0:  # a child starts again from its parent's weights
        parent = recorded_parent(resumed)
    earlier: list[str] = []

    def say(line: str) -> None:
        if world.primary:
            echo(line)
            earlier.append(line)

    with contextlib.ExitStack() as held:  # the run folder, for this process alone
        if resumed is not None and world.primary:
            held.enter_context(run_lock(resumed))
        data, paths = prepare_run(config, resumed, config_path=config_path, name=name,
                                  runs_dir=runs_dir, world=world, say=say, parent=parent)
        if resumed is None and world.primary:
            held.enter_context(run_lock(paths))
        # the bar's total is set once the epoch's batches are cut (`banner`)
        reporter = (Reporter(paths.log, None, 0, earlier, hold_earlier=resumed is not None)
                    if world.primary else SilentReporter())
        return _run(config, data, paths, reporter=reporter, world=world, device=device,
                    resuming=resumed is not None,
                    parent_weights=parent.checkpoint if parent else None)


def _run(config, data, paths: RunPaths, *, reporter: Reporter, world: World, device,
         resuming: bool, parent_weights: Path | None) -> int | None:
    """Train (after loading the last checkpoint when resuming, or from `parent_weights`, which
    are validated first at step 0) until a stop; the exit code when a signal stopped it."""
    tensorboard = None
    try:
        from_step_0 = not paths.read_pointers()  # a new run, or one stopped before its 1st save
        with _disk_errors_as_user_errors(paths):
            trainer = Trainer(config, paths, data, device=device, reporter=reporter,
                              world=world, parent_weights=parent_weights)
            if resuming:
                _resume(trainer, config, reporter, from_step_0)
            if world.primary:
                _record_machine(paths, trainer, world.size)
                tensorboard = trainer.metrics.mirror = open_tensorboard(
                    config.train.tensorboard, paths.tensorboard,
                    None if from_step_0 else trainer.state.step)
            banner(reporter, trainer, data)
            if parent_weights is not None:
                trainer.validate_parent()
            signal_name = trainer.run()
            return _signal_exit(signal_name, trainer, reporter)
    finally:
        reporter.close()
        if tensorboard is not None:
            tensorboard.close()


def _resume(trainer: Trainer, config, reporter: Reporter, from_step_0: bool) -> None:
    """Load the last checkpoint (none for a run stopped before its first one); only once it is
    accepted, rewrite config.yaml and the metrics."""
    paths = trainer.paths
    if not from_step_0:
        trainer.metrics.read()  # a damaged line is refused before anything is written
        folder = trainer.resume()
        if forgotten := forget_end_validation(trainer.state):
            reporter.line(forgotten)
        # scored with: as the checkpoint recorded (a crash after a rescore left config.yaml
        # already rewritten), else as config.yaml says (runs saved before it was recorded)
        recorded = trainer.state.validation or validation_settings(load_config(paths.config))
        if changes := validation_changes(recorded, config):
            reporter.line(rescore_best(trainer, changes))  # every process: their states agree
    if trainer.world.primary:
        save_config(config, paths.config)  # --set may have extended the run
    if from_step_0:
        weights = " from its parent's weights" if trainer.parent_weights is not None else ""
        reporter.line(f"resumed {paths.root}: it stopped before its first checkpoint, so it "
                      f"trains again from step 0{weights} with its config")
        return
    dropped = trainer.metrics.drop_after(trainer.state.step)
    if trainer.world.primary and dropped:  # the curves showed the dropped events too
        plot_curves(trainer.metrics.read(), paths.curves, config.train.label_smoothing)
    past = (f"; train.log's lines above for steps past {trainer.state.step} are of the "
            f"interrupted part, trained again from here" if dropped else "")
    reporter.line(f"resumed {paths.root} from {folder.name} at step {trainer.state.step} "
                  f"(epoch {trainer.state.epoch + 1}); {dropped} metric events past it "
                  f"dropped{past}")


def _record_machine(paths: RunPaths, trainer: Trainer, processes: int) -> None:
    """Add this training session's machine to machine.json (the model card's "trained on"): a
    resumed run may continue elsewhere, so each session is one entry, from the step it
    started at; a session that started from the same step again replaces that entry. Which
    host it is includes a calibration of its speed (`machine_description`), measured here,
    before the first update, so the session starts a fraction of a second later."""
    step = trainer.state.step
    sessions = [entry for entry in read_machines(paths) if entry.get("from_step", -1) < step]
    sessions.append({"from_step": step, "precision": trainer.precision,
                     **machine_description(trainer.device, processes,
                                           precision=trainer.precision)})
    atomic_write_json(paths.machine, sessions)


def _signal_exit(signal_name: str | None, trainer: Trainer, reporter: Reporter) -> int | None:
    """After a signal stop: the curves drawn, the way to resume said (train.log too), and the
    exit code (130 SIGINT, 143 SIGTERM, 129 SIGHUP: 128 + the signal's number)."""
    if not signal_name:
        return None
    world, paths = trainer.world, trainer.paths
    if world.primary:
        plot_curves(trainer.metrics.read(), paths.curves, trainer.cfg.label_smoothing)
    how = f"`attncli train --resume {paths.root}`"
    if world.size > 1:  # resumed on another count of processes, the curve would differ
        how = (f"`attncli train --resume {paths.root} --nproc {world.size}`"
               if os.environ.get(LAUNCHER_ENV) == "1"
               else f"{how} in {world.size} processes again, as now")
    reporter.line(f"{signal_name}: saved a checkpoint at step {trainer.state.step}; resume "
                  f"with {how}")
    return 128 + signal.Signals[signal_name]


@contextlib.contextmanager
def _disk_errors_as_user_errors(paths: RunPaths) -> Iterator[None]:
    """A full disk or a file-size limit while training: one line, and the last checkpoint."""
    try:
        yield
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS):
            raise
        last = paths.read_pointers().get("last", "none saved yet")
        raise AttncliError(f"{paths.root}: {err.strerror} while training; the last checkpoint "
                           f"({last}) is intact") from None
