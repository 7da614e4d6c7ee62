"""The training loop: optimizer, schedule, precision, accumulation, validation, checkpoints.

The pieces a benchmark also needs (`make_optimizer`, `inverse_sqrt_lr`, `train_step`) come
first; `Trainer` and `train_command` below drive them over epochs and write the run folder.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from attncli.batching import Batch
from attncli.config import TrainConfig
from attncli.device import autocast, compute_dtype
from attncli.progress import Reporter


def inverse_sqrt_lr(step: int, peak_lr: float, warmup: int) -> float:
    """Linear warm-up to `peak_lr` over `warmup` updates, then peak * sqrt(warmup / step)."""
    step = max(step, 1)
    if warmup and step < warmup:
        return peak_lr * step / warmup
    return peak_lr * math.sqrt(max(warmup, 1) / step)


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW; biases, norms and embeddings (the second group) get no weight decay.

    On CUDA the fused kernel (one launch for every parameter), elsewhere `foreach`.
    """
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() > 1 and "embed" not in name else no_decay).append(p)
    on_cuda = next(model.parameters()).is_cuda
    optimizer = torch.optim.AdamW([{"params": decay}, {"params": no_decay}], lr=cfg.lr,
                                  fused=on_cuda or None, foreach=None if on_cuda else True)
    apply_optimizer_settings(optimizer, cfg)
    return optimizer


def apply_optimizer_settings(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> None:
    """The config's betas and weight decay on the optimizer's two groups.

    Called again after a resume: the param groups loaded from a checkpoint carry the old
    settings, and a `--set train.betas=...` the resume accepted must win over them.
    """
    decay_group, no_decay_group = optimizer.param_groups
    for group in optimizer.param_groups:
        group["betas"] = tuple(cfg.betas)
    decay_group["weight_decay"], no_decay_group["weight_decay"] = cfg.weight_decay, 0.0


@dataclass
class StepStats:
    loss: float          # mean loss per target token over the update
    tokens: int          # target tokens in the update
    grad_norm: float     # before clipping

    @property
    def finite(self) -> bool:
        """False when the loss or the gradient overflowed: such an update is skipped."""
        return math.isfinite(self.loss) and math.isfinite(self.grad_norm)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Sequence[Batch],
               cfg: TrainConfig, lr: float, device: torch.device, precision: str) -> StepStats:
    """One optimizer update over `batches` (gradient accumulation when there are several).

    Loss is summed over all target tokens of the update and divided by their count, so an
    accumulated update equals one big batch. A non-finite loss or gradient norm skips the
    optimizer step (the gradients are dropped), so a NaN never reaches the weights.
    """
    model.train()
    tokens = sum(b.num_tgt_tokens for b in batches)
    total = 0.0
    for batch in batches:
        batch = batch.to(device)
        with autocast(device, precision):
            loss = model.summed_loss(batch.src, batch.tgt_in, batch.tgt_out,
                                     cfg.label_smoothing, compute_dtype(precision)) / tokens
        loss.backward()
        total += loss.item()
    if cfg.clip_norm:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm))
    else:
        grad_norm = float(torch.nn.utils.get_total_norm(
            [p.grad for p in model.parameters() if p.grad is not None]))
    stats = StepStats(total, tokens, grad_norm)
    if stats.finite:
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return stats


# --------------------------------------------------------------------------------------------
# The training run: data -> tokenizer -> model -> updates -> validation -> checkpoints
# --------------------------------------------------------------------------------------------


class _StopSignal:
    """Turns SIGINT/SIGTERM into a flag checked between updates, so a checkpoint gets saved."""

    def __init__(self):
        self.name: str | None = None
        self._previous = {}

    def __enter__(self):
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        import signal

        if self.name is not None:  # second signal: stop now
            signal.signal(signum, self._previous[signum])
            raise KeyboardInterrupt
        self.name = signal.Signals(signum).name

    def __exit__(self, *exc):
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class Trainer:
    """Runs updates until a stop condition, validating and checkpointing along the way."""

    def __init__(self, config, paths, tokenizer, data, device: torch.device,
                 reporter: Reporter):
        """`data`: the `corpus.TrainingData` (token caches of train and val, val texts)."""
        from attncli.batching import resolve_workers
        from attncli.checkpoint import build_model
        from attncli.config import model_fingerprint
        from attncli.device import resolve_pad_multiple, resolve_precision

        self.config, self.cfg, self.paths = config, config.train, paths
        self.tokenizer, self.corpus, self.device = tokenizer, data.train, device
        self.reporter = reporter
        self.precision = resolve_precision(self.cfg.precision, device)
        self.pad_multiple = resolve_pad_multiple(self.cfg.pad_multiple, device, self.precision)
        self.workers = resolve_workers(self.cfg.workers, device)
        self.fingerprint = model_fingerprint(config.model)
        torch.manual_seed(self.cfg.seed)
        self.model = build_model(config, tokenizer).to(device)
        if self.cfg.compile:  # compile what a training step calls (not `forward`)
            self.model.summed_loss = torch.compile(self.model.summed_loss)
        self.optimizer = make_optimizer(self.model, self.cfg)
        self.val_corpus = data.val
        limit = config.data.valid_limit or len(data.val_text)
        self.val_src, self.val_ref = data.val_text.src[:limit], data.val_text.tgt[:limit]
        # Position and history; restored by `resume`.
        self.step = self.epoch = self.batch_index = 0
        self.elapsed = 0.0
        self.best_bleu, self.best_step = -1.0, None
        self.bad_validations = 0
        self.last_validated = -1
        # Not saved: a resumed run starts counting afresh.
        self.saved_step = -1
        self.nonfinite_in_row = 0
        self._epoch_order: tuple[int, list] = (-1, [])

    def epoch_batches(self, epoch: int) -> list:
        """The batches of `epoch` in training order (pair positions, numpy arrays).

        Kept for the epoch last asked for: the start-up banner and the loop share one cut,
        which takes seconds on millions of pairs.
        """
        from attncli.batching import token_batches

        if self._epoch_order[0] != epoch:
            corpus = self.corpus
            self._epoch_order = (epoch, token_batches(
                corpus.src_lens, corpus.tgt_lens, self.cfg.batch_tokens, self.cfg.seed, epoch,
                self.pad_multiple))
        return self._epoch_order[1]

    # -- state ---------------------------------------------------------------------------------

    _RESTORED = ("step", "epoch", "batch_index", "best_bleu", "best_step", "bad_validations",
                 "last_validated", "pad_multiple")

    def state(self) -> dict:
        from attncli.batching import BATCHING
        from attncli.checkpoint import rng_state

        return {**{key: getattr(self, key) for key in self._RESTORED},
                "batching": BATCHING, "rng": rng_state(self.device),
                "elapsed_s": self.elapsed,
                "scheduler": {"kind": "inverse_sqrt", "peak_lr": self.cfg.lr,
                              "warmup_steps": self.cfg.warmup_steps}}

    def resume(self):
        """Continue from the `last` checkpoint (strictly loaded); returns its folder.

        The saved pad_multiple wins over this machine's `auto`: the data position indexes
        batches built with it.
        """
        from attncli.batching import BATCHING
        from attncli.checkpoint import checkpoint_dir, load_checkpoint, set_rng_state
        from attncli.errors import AttncliError

        folder = checkpoint_dir(self.paths, "last")
        state = load_checkpoint(folder, self.model, self.optimizer, self.fingerprint)
        if state.get("batching") != BATCHING:
            raise AttncliError(
                f"{folder}: its data position counts batches cut another way (attncli 0.2 "
                f"budgeted target tokens only; now {BATCHING}), so it cannot resume exactly; "
                f"finish it with attncli 0.2, or start a new run")
        apply_optimizer_settings(self.optimizer, self.cfg)
        for key in self._RESTORED:
            setattr(self, key, state[key])
        self.elapsed = state["elapsed_s"]
        self.saved_step = self.step
        set_rng_state(state["rng"], self.device)
        return folder

    def save(self) -> None:
        """Save a step folder for the current step (once per step); never non-finite weights."""
        from attncli.checkpoint import save_checkpoint
        from attncli.errors import AttncliError

        if self.saved_step == self.step:
            return
        if not all(bool(torch.isfinite(p).all()) for p in self.model.parameters()):
            raise AttncliError(f"step {self.step}: the weights are not finite; not saved, the "
                               "previous checkpoint is intact")
        save_checkpoint(self.paths, self.model, self.optimizer, self.state(), self.fingerprint,
                        self.best_step, self.cfg.keep_checkpoints)
        self.saved_step = self.step

    # -- validation ----------------------------------------------------------------------------

    @torch.inference_mode()
    def validation_loss(self) -> float:
        from attncli.batching import token_batches

        self.model.eval()
        total, tokens = 0.0, 0
        corpus = self.val_corpus
        for pairs in token_batches(corpus.src_lens, corpus.tgt_lens, self.cfg.batch_tokens, 0, 0,
                                   self.pad_multiple):
            batch = corpus.collate(pairs, self.pad_multiple).to(self.device)
            with autocast(self.device, self.precision):
                total += float(self.model.summed_loss(batch.src, batch.tgt_in, batch.tgt_out,
                                                      0.0, compute_dtype(self.precision)))
            tokens += batch.num_tgt_tokens
        return total / max(tokens, 1)

    def validation_bleu(self) -> float:
        from attncli.device import resolve_decode_precision
        from attncli.evaluate import corpus_scores, translate_texts

        self.model.eval()  # decoded at eval's precision, so `best` is chosen as it is scored
        results = translate_texts(self.model, self.tokenizer, self.val_src,
                                  self.config.decode, 1, 1, self.device,
                                  precision=resolve_decode_precision(self.cfg.precision,
                                                                     self.device))
        hyps = [self.tokenizer.decode_tgt(r[0].tokens) for r in results]
        return corpus_scores(hyps, self.val_ref, self.config.data.tgt)["bleu"]

    def validate(self, metrics) -> bool:
        """Score val and redraw the curves; True when patience is exhausted."""
        import time

        from attncli.plots import plot_curves

        started = time.perf_counter()
        val_loss, bleu = self.validation_loss(), self.validation_bleu()
        seconds = time.perf_counter() - started  # not training time: `run` leaves it out
        self.last_validated = self.step
        improved = bleu > self.best_bleu
        if improved:
            self.best_bleu, self.best_step, self.bad_validations = bleu, self.step, 0
        else:
            self.bad_validations += 1
        metrics.write({"event": "val", "step": self.step, "epoch": self.epoch,
                       "val_loss": round(val_loss, 6), "val_bleu": round(bleu, 3),
                       "seconds": round(self.elapsed, 2)})
        self.reporter.line(f"validation step {self.step}: val loss {val_loss:.4f}, greedy BLEU "
                           f"{bleu:.2f}{' (best)' if improved else ''} [{seconds:.1f} s]")
        plot_curves(metrics.read(), self.paths.curves)
        return self.cfg.patience is not None and self.bad_validations >= self.cfg.patience

    # -- the loop ------------------------------------------------------------------------------

    def limit_reached(self) -> str | None:
        """The first of train.max_steps / max_epochs / max_minutes that is reached, if any."""
        cfg = self.cfg
        if cfg.max_steps is not None and self.step >= cfg.max_steps:
            return "max_steps"
        if cfg.max_epochs is not None and self.epoch >= cfg.max_epochs:
            return "max_epochs"
        if cfg.max_minutes is not None and self.elapsed >= cfg.max_minutes * 60:
            return "max_minutes"
        return None

    def _skipped(self, stats: StepStats, metrics) -> None:
        self.nonfinite_in_row += 1
        what = f"loss {stats.loss}, grad norm {stats.grad_norm}"
        metrics.write({"event": "skipped", "step": self.step + 1, "epoch": self.epoch,
                       "reason": what})
        self.reporter.line(f"update {self.step + 1} skipped: non-finite {what} "
                           f"({self.nonfinite_in_row} in a row)")

    def _after_update(self, stop, metrics, updated: bool) -> str | None:
        """Why to stop after this update (None: go on); validates and saves when due."""
        if stop.name:
            return "signal"
        if self.nonfinite_in_row >= self.cfg.max_nonfinite_updates:
            return "nonfinite"
        reason = self.limit_reached()
        if not updated or reason is not None:
            return reason
        if self.step % self.cfg.eval_every == 0:
            reason = "patience" if self.validate(metrics) else None
            self.save()
        elif self.cfg.save_every and self.step % self.cfg.save_every == 0:
            self.save()
        return reason

    def _batch_groups(self) -> Iterator[list[Batch]]:
        """The batches of each update from the saved position on, epoch after epoch.

        The position (epoch, batch_index) moves past a group before it is trained on, and to
        the next epoch right after an epoch's last group, so a checkpoint saved after any update
        names where training continues.
        """
        from attncli.batching import batch_loader

        accum = self.cfg.accum_steps
        while True:
            order = self.epoch_batches(self.epoch)
            loader = iter(batch_loader(self.corpus, order[self.batch_index:], self.pad_multiple,
                                       self.workers, self.device.type == "cuda"))
            while self.batch_index < len(order):
                group = list(itertools.islice(loader, min(accum, len(order) - self.batch_index)))
                self.batch_index += len(group)
                if self.batch_index == len(order):
                    self.epoch, self.batch_index = self.epoch + 1, 0
                    yield group
                    break
                yield group

    def _log_window(self, window: dict, lr: float, grad_norm: float, metrics) -> None:
        """A train event in metrics.jsonl and a log line over the updates since the last one."""
        import time

        span = time.perf_counter() - window["start"]
        record = {"event": "train", "step": self.step, "epoch": self.epoch,
                  "loss": window["loss"] / window["steps"], "lr": lr,
                  "tokens_per_s": round(window["tokens"] / span, 1),
                  "grad_norm": round(grad_norm, 4), "seconds": round(self.elapsed, 2)}
        metrics.write(record)
        self.reporter.line(
            f"step {self.step:>6} | epoch {self.epoch + 1:>3} | loss {record['loss']:.4f} | lr "
            f"{lr:.2e} | {record['tokens_per_s']:,.0f} tgt tok/s | {self.elapsed:,.0f} s")

    def run(self) -> str | None:
        """Train until a limit; returns the name of a stop signal if one interrupted the run."""
        import time

        from attncli.runs import MetricsLog

        metrics = MetricsLog(self.paths.metrics)
        cfg, reason = self.cfg, None
        window = {"tokens": 0, "loss": 0.0, "steps": 0, "start": time.perf_counter()}
        run_start, elapsed_before = time.perf_counter(), self.elapsed
        with _StopSignal() as stop:
            for group in self._batch_groups():
                lr = inverse_sqrt_lr(self.step + 1, cfg.lr, cfg.warmup_steps)
                stats = train_step(self.model, self.optimizer, group, cfg, lr, self.device,
                                   self.precision)
                self.elapsed = elapsed_before + time.perf_counter() - run_start
                if stats.finite:
                    self.step += 1
                    self.nonfinite_in_row = 0
                    window["tokens"] += stats.tokens
                    window["loss"] += stats.loss
                    window["steps"] += 1
                else:
                    self._skipped(stats, metrics)
                if stats.finite and self.step % cfg.log_every == 0:
                    self._log_window(window, lr, stats.grad_norm, metrics)
                    window = {"tokens": 0, "loss": 0.0, "steps": 0, "start": time.perf_counter()}
                self.reporter.step(self.step, f"loss {stats.loss:.3f} lr {lr:.1e}")
                checks_start = time.perf_counter()
                reason = self._after_update(stop, metrics, stats.finite)
                # leave validation and saving out of both the tok/s window and the clock
                paused = time.perf_counter() - checks_start
                window["start"] += paused
                run_start += paused
                if reason is not None:
                    break
        return self._finish(reason, stop.name, metrics)

    def _finish(self, reason: str, signal_name: str | None, metrics) -> str | None:
        """Validate and save at the end; a non-finite stop saves nothing and is an error."""
        from attncli.errors import AttncliError

        if reason == "nonfinite":
            last = self.paths.read_pointers().get("last", "none saved yet")
            raise AttncliError(
                f"update {self.step + 1}: {self.nonfinite_in_row} non-finite updates in a row, "
                f"each skipped (train.max_nonfinite_updates); stopped without saving, the last "
                f"checkpoint ({last}) is intact; lower train.lr or raise train.warmup_steps and "
                f"resume with `attncli train --resume {self.paths.root} --set train.lr=...`")
        if reason == "signal":
            self.save()
            return signal_name
        if self.last_validated != self.step:
            self.validate(metrics)
        self.save()
        self.reporter.line(f"stopped at step {self.step} ({reason}); best greedy val BLEU "
                           f"{self.best_bleu:.2f}; run folder {self.paths.root}")
        return None


def _banner(reporter: Reporter, trainer: Trainer, data) -> None:
    from attncli.batching import padding_share

    corpus, multiple = data.train, trainer.pad_multiple
    batches = trainer.epoch_batches(trainer.epoch)
    share = padding_share(batches, corpus.src_lens, corpus.tgt_lens, multiple)
    reporter.line(
        f"data {data.name}: {len(corpus):,} training pairs ({corpus.dropped_empty} empty and "
        f"{corpus.dropped_long} longer than {trainer.config.data.max_len} subwords dropped); "
        f"{len(batches)} batches per epoch, {share:.1%} padding (lengths rounded up to "
        f"multiples of {multiple}); {trainer.workers} batch worker(s)")
    reporter.line(
        f"model: {trainer.model.num_parameters():,} parameters on {trainer.device} "
        f"({trainer.precision}, {torch.get_num_threads()} threads)")


def _resume(trainer: Trainer, config, reporter: Reporter) -> None:
    """Load the last checkpoint; only once it is accepted, rewrite config.yaml and the metrics."""
    from attncli.config import save_config
    from attncli.errors import AttncliError
    from attncli.runs import MetricsLog

    paths = trainer.paths
    folder = trainer.resume()
    reached = trainer.limit_reached()
    if reached:
        raise AttncliError(
            f"{paths.root}: train.{reached} ({getattr(config.train, reached)}) is reached "
            f"already at step {trainer.step}; raise it to train on (--set train.{reached}=...)")
    save_config(config, paths.config)  # --set may have extended the run
    dropped = MetricsLog(paths.metrics).drop_after(trainer.step)
    reporter.line(f"resumed {paths.root} from {folder.name} at step {trainer.step} "
                  f"(epoch {trainer.epoch + 1}); {dropped} metric events past it dropped")


@contextlib.contextmanager
def _disk_errors_as_user_errors(paths) -> Iterator[None]:
    """A full disk or a file-size limit while training: one line, and the last checkpoint."""
    from attncli.errors import AttncliError

    try:
        yield
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS):
            raise
        last = paths.read_pointers().get("last", "none saved yet")
        raise AttncliError(f"{paths.root}: {err.strerror} while training; the last checkpoint "
                           f"({last}) is intact") from None


def train_command(config, resumed, config_path, name: str | None, runs_dir,
                  device_name: str) -> None:
    """`attncli train`: a new run from ``config``, or continue the run folder ``resumed``.

    ``config`` and ``resumed`` come from ``runs.training_config``, which the CLI calls before
    importing this module (and torch), so a bad config or a refused resume fails at once.
    """
    from pathlib import Path

    from attncli.config import save_config
    from attncli.corpus import prepare_training_data
    from attncli.device import allow_tf32, resolve_device, set_threads
    from attncli.runs import check_writable, create_run_dir, default_run_name
    from attncli.tokenizer import install_models, run_models, tokenizer_from_bytes

    device = resolve_device(device_name)
    set_threads(config.train.threads)
    allow_tf32(device)
    if resumed is None:
        check_writable(Path(runs_dir))
    earlier: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        earlier.append(line)

    # Prepare the data before making a run folder: bad data leaves nothing behind.
    models = run_models(resumed, config.tokenizer.joint) if resumed else None
    data = prepare_training_data(config, say, models)
    paths = resumed or create_run_dir(Path(runs_dir), name or default_run_name(Path(config_path)))
    if resumed is None:
        save_config(config, paths.config)
        install_models(data.models, paths)
    tokenizer = tokenizer_from_bytes(data.models)
    reporter = Reporter(paths.log, config.train.max_steps, 0, earlier)
    try:
        with _disk_errors_as_user_errors(paths):
            trainer = Trainer(config, paths, tokenizer, data, device, reporter)
            if resumed is not None:
                _resume(trainer, config, reporter)
            _banner(reporter, trainer, data)
            signal_name = trainer.run()
    finally:
        reporter.close()
    if signal_name:
        print(f"{signal_name}: saved a checkpoint at step {trainer.step}; resume with "
              f"`attncli train --resume {paths.root}`")
        raise SystemExit(130 if signal_name == "SIGINT" else 143)
