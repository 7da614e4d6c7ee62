"""The training loop: optimizer, schedule, precision, accumulation, validation, checkpoints.

The pieces a benchmark also needs (`make_optimizer`, `inverse_sqrt_lr`, `train_step`) come
first; `Trainer` and `train_command` below drive them over epochs and write the run folder.
"""

from __future__ import annotations

import contextlib
import errno
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from attncli.batching import Batch
from attncli.config import TrainConfig
from attncli.device import autocast, compute_dtype
from attncli.distributed import World, without_gradient_sync
from attncli.progress import Reporter
from attncli.tokenizer import PAD_ID


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


def compile_loss(model: nn.Module, backend: str = "inductor") -> None:
    """`torch.compile` what a training step calls (`summed_loss`, not `forward`).

    Batch shapes vary from batch to batch: the first shape compiles a static graph, the second
    a graph with dynamic lengths and batch size (torch's automatic dynamic shapes) that the
    others reuse. The chunked loss stays eager (see `model/loss.py`) and so does the CPU dropout
    mask trick (see `model/dropout.py`), since either would make a graph per shape.
    """
    model.summed_loss = torch.compile(model.summed_loss, backend=backend)


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
    """One update's figures, left on the training device: reading one waits for the device to
    finish, so the loop reads them together at log steps (`Trainer._read_updates`)."""

    loss: torch.Tensor       # this process's part of the update's mean loss per target token
    grad_norm: torch.Tensor  # of the update's whole gradient, before clipping
    tokens: int              # target tokens in the update (every process's batches)


def train_step(loss_fn: nn.Module, optimizer: torch.optim.Optimizer, batches: Sequence[Batch],
               cfg: TrainConfig, lr: float, device: torch.device, precision: str,
               tokens: int | None = None, processes: int = 1, counted: bool = True
               ) -> StepStats:
    """One optimizer update over `batches` (gradient accumulation when there are several).

    `loss_fn(src, tgt_in, tgt_out, smoothing, dtype)` is the summed loss (`SummedLoss`, wrapped
    in DistributedDataParallel with several processes). The loss is summed over the update's
    target tokens and divided by their count (`tokens`: all processes' batches; default: these
    batches), so an accumulated update equals one big batch, and N processes sharing the
    batches equal one process accumulating them (DDP averages gradients, hence the `processes`
    factor). `counted=False` makes the batch a stand-in with zero weight, for a process whose
    share of an update is empty: it must still join the gradient all-reduce.

    An update whose gradient is not finite (a NaN or inf loss makes it so) is skipped on the
    device: the weights and the optimizer state stay as they were.
    """
    loss_fn.train()
    tokens = tokens or sum(b.num_tgt_tokens for b in batches)
    share = processes if counted else 0  # DDP divides the summed gradient by `processes`
    total = torch.zeros((), device=device)
    for i, batch in enumerate(batches):
        last = i == len(batches) - 1
        with contextlib.nullcontext() if last else without_gradient_sync(loss_fn):
            batch = batch.to(device)
            with autocast(device, precision):
                summed = loss_fn(batch.src, batch.tgt_in, batch.tgt_out, cfg.label_smoothing,
                                 compute_dtype(precision))
            (summed * share / tokens).backward()
        total += summed.detach().float() / tokens
    params = list(loss_fn.parameters())
    if cfg.clip_norm:
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.clip_norm)
    else:
        grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    for group in optimizer.param_groups:
        group["lr"] = lr
    step_unless_not_finite(optimizer, grad_norm)
    optimizer.zero_grad(set_to_none=True)
    return StepStats(total if counted else total.zero_(), grad_norm, tokens)


def step_unless_not_finite(optimizer: torch.optim.Optimizer, grad_norm: torch.Tensor) -> None:
    """`optimizer.step()` when `grad_norm` is finite.

    A fused optimizer (CUDA) decides on the device through its `found_inf` input, so the host
    never waits for the GPU here; the `foreach` one (CPU) is told on the host, where reading the
    value costs nothing because nothing runs asynchronously.
    """
    if optimizer.defaults.get("fused"):
        optimizer.found_inf = (~torch.isfinite(grad_norm)).float()
        optimizer.step()
        del optimizer.found_inf
    elif bool(torch.isfinite(grad_norm)):
        optimizer.step()


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


class _Stopwatch:
    """Training seconds: wall time less the pauses (validation, saving), which are not
    training and must count neither in `max_minutes` nor in tokens/s."""

    def __init__(self, before: float = 0.0):
        import time

        self._origin = time.perf_counter() - before

    def seconds(self) -> float:
        import time

        return time.perf_counter() - self._origin

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        import time

        started = time.perf_counter()
        try:
            yield
        finally:
            self._origin += time.perf_counter() - started


@dataclass
class _Window:
    """The updates since the last log line (the skipped ones not counted)."""

    start: float          # training seconds when it opened
    tokens: int = 0
    loss: float = 0.0
    steps: int = 0


class Trainer:
    """Runs updates until a stop condition, validating and checkpointing along the way.

    With several processes (`distributed.World`) every process runs this same loop on its
    share of each update, and only rank 0 writes (metrics, checkpoints, what the user sees).
    """

    def __init__(self, config, paths, tokenizer, data, device: torch.device,
                 reporter: Reporter, world: World | None = None):
        """`data`: the `corpus.TrainingData` (token caches of train and val, val texts)."""
        from attncli.batching import resolve_workers
        from attncli.checkpoint import build_model
        from attncli.config import model_fingerprint
        from attncli.device import resolve_pad_multiple, resolve_precision
        from attncli.distributed import loss_module
        from attncli.runs import MetricsLog

        self.config, self.cfg, self.paths = config, config.train, paths
        self.tokenizer, self.corpus, self.device = tokenizer, data.train, device
        self.reporter, self.world = reporter, world or World()
        self.metrics = MetricsLog(paths.metrics if self.world.primary else None)
        self.precision = resolve_precision(self.cfg.precision, device)
        self.pad_multiple = resolve_pad_multiple(self.cfg.pad_multiple, device, self.precision)
        self.workers = resolve_workers(self.cfg.workers, device)
        self.fingerprint = model_fingerprint(config.model)
        torch.manual_seed(self.cfg.seed)
        self.model = build_model(config, tokenizer).to(device)
        if self.world.rank:  # same weights everywhere, dropout masks of its own
            torch.manual_seed(self.cfg.seed + 7919 * self.world.rank)
        if self.cfg.compile:
            compile_loss(self.model)
        self.loss_fn = loss_module(self.model, self.world, device)
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
        self.nonfinite_in_row, self.nonfinite_stop = 0, None
        self.pending: list[tuple[int, float, StepStats]] = []  # updates not read yet
        self.shown = ""  # figures beside the progress bar
        self.last_read: tuple[float, float, float] = (math.nan, 0.0, math.nan)  # loss, lr, norm
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
        """What state.json holds. Every process must call it (it gathers their RNG states)."""
        from attncli.batching import BATCHING
        from attncli.checkpoint import rng_state

        states = self.world.gather(rng_state(self.device))
        return {**{key: getattr(self, key) for key in self._RESTORED},
                "batching": BATCHING, "rng": states[0],
                **({"rng_by_rank": states} if self.world.distributed else {}),
                "elapsed_s": self.elapsed,
                "scheduler": {"kind": "inverse_sqrt", "peak_lr": self.cfg.lr,
                              "warmup_steps": self.cfg.warmup_steps}}

    def resume(self):
        """Continue from the `last` checkpoint (strictly loaded); returns its folder.

        The saved pad_multiple wins over this machine's `auto`: the data position indexes
        batches built with it.
        """
        from attncli.batching import BATCHING
        from attncli.checkpoint import checkpoint_dir, load_checkpoint
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
        self._restore_rng(state)
        return folder

    def _restore_rng(self, state: dict) -> None:
        """Each process its own saved RNG state; saved by another number of processes, rank 0
        takes the first and the others start afresh (only their dropout masks differ)."""
        from attncli.checkpoint import set_rng_state

        by_rank = state.get("rng_by_rank") or [state["rng"]]
        if len(by_rank) == self.world.size:
            set_rng_state(by_rank[self.world.rank], self.device)
        elif self.world.primary:
            set_rng_state(by_rank[0], self.device)
        else:
            torch.manual_seed(self.cfg.seed + 7919 * self.world.rank + self.step)

    def save(self) -> None:
        """Save a step folder for the current step (once per step); never non-finite weights.

        Every process takes part (the RNG states); rank 0 writes.
        """
        from attncli.checkpoint import save_checkpoint
        from attncli.errors import AttncliError

        if self.saved_step == self.step:
            return
        if not all(bool(torch.isfinite(p).all()) for p in self.model.parameters()):
            raise AttncliError(f"step {self.step}: the weights are not finite; not saved, the "
                               "previous checkpoint is intact")
        state = self.state()
        if self.world.primary:
            save_checkpoint(self.paths, self.model, self.optimizer, state, self.fingerprint,
                            self.best_step, self.cfg.keep_checkpoints)
        self.saved_step = self.step

    # -- validation ----------------------------------------------------------------------------

    @torch.inference_mode()
    def validation_loss(self) -> float:
        """Mean loss per target token on the val split; each process scores its share."""
        from attncli.batching import token_batches

        self.model.eval()
        corpus = self.val_corpus
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss, tokens
        batches = token_batches(corpus.src_lens, corpus.tgt_lens, self.cfg.batch_tokens, 0, 0,
                                self.pad_multiple)
        for pairs in self.world.share(batches):
            batch = corpus.collate(pairs, self.pad_multiple).to(self.device)
            with autocast(self.device, self.precision):
                sums[0] += self.model.summed_loss(batch.src, batch.tgt_in, batch.tgt_out, 0.0,
                                                  compute_dtype(self.precision)).double()
            sums[1] += (batch.tgt_out != PAD_ID).sum()
        loss, tokens = self.world.sum(sums).tolist()
        return loss / max(tokens, 1)

    def validation_bleu(self) -> float:
        """Greedy BLEU on the val sentences; each process decodes its share."""
        from attncli.device import resolve_decode_precision
        from attncli.evaluate import corpus_scores, translate_texts

        self.model.eval()  # decoded at eval's precision, so `best` is chosen as it is scored
        results = translate_texts(self.model, self.tokenizer, self.world.share(self.val_src),
                                  self.config.decode, 1, 1, self.device,
                                  precision=resolve_decode_precision(self.cfg.precision,
                                                                     self.device))
        shares = self.world.gather([self.tokenizer.decode_tgt(r[0].tokens) for r in results])
        hyps = [None] * len(self.val_src)
        for rank, share in enumerate(shares):
            hyps[rank :: self.world.size] = share
        return corpus_scores(hyps, self.val_ref, self.config.data.tgt)["bleu"]

    def validate(self) -> bool:
        """Score val and redraw the curves; True when patience is exhausted."""
        import time

        from attncli.plots import plot_curves

        started = time.perf_counter()
        val_loss, bleu = self.validation_loss(), self.validation_bleu()
        seconds = time.perf_counter() - started
        self.last_validated = self.step
        improved = bleu > self.best_bleu
        if improved:
            self.best_bleu, self.best_step, self.bad_validations = bleu, self.step, 0
        else:
            self.bad_validations += 1
        self.metrics.write({"event": "val", "step": self.step, "epoch": self.epoch,
                            "val_loss": round(val_loss, 6), "val_bleu": round(bleu, 3),
                            "seconds": round(self.elapsed, 2)})
        self.reporter.line(f"validation step {self.step}: val loss {val_loss:.4f}, greedy BLEU "
                           f"{bleu:.2f}{' (best)' if improved else ''} [{seconds:.1f} s]")
        if self.world.primary:
            plot_curves(self.metrics.read(), self.paths.curves)
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

    def _agreed_stop(self, stop: _StopSignal) -> str | None:
        """A signal or a limit, the same on every process (their clocks differ a little, and a
        signal may reach only some)."""
        reason = self.limit_reached()
        signal, late = self.world.any_of([stop.name is not None, reason == "max_minutes"])
        if signal:
            return "signal"
        return "max_minutes" if late and reason is None else reason

    def _updates(self) -> Iterator[tuple[list[Batch], int, bool]]:
        """(this process's batches, the update's target tokens, counted) per update, from the
        saved position on, epoch after epoch.

        An update is `accum_steps` consecutive batches of the epoch's order; this process
        trains on its share of them (`World.share`), and on a zero-weight stand-in when the
        epoch's last update has fewer batches than processes. The position (epoch, batch_index)
        counts global batches and moves past an update before it is trained on, so a checkpoint
        saved after any update names where training continues.
        """
        from attncli.batching import batch_loader

        accum, share, corpus = self.cfg.accum_steps, self.world.share, self.corpus
        while True:
            order = self.epoch_batches(self.epoch)
            updates = [order[i : i + accum] for i in range(self.batch_index, len(order), accum)]
            loader = iter(batch_loader(corpus, [b for u in updates for b in share(u)],
                                       self.pad_multiple, self.workers,
                                       self.device.type == "cuda"))
            for update in updates:
                self.batch_index += len(update)
                if self.batch_index == len(order):
                    self.epoch, self.batch_index = self.epoch + 1, 0
                rows = sum(len(pairs) for pairs in update)
                tokens = rows + sum(int(corpus.tgt_lens[pairs].sum()) for pairs in update)
                mine = [next(loader) for _ in share(update)]
                if mine:
                    yield mine, tokens, True
                else:
                    yield [corpus.collate(update[0], self.pad_multiple)], tokens, False

    def _read_updates(self) -> None:
        """Read the figures of the updates since the last read (this waits for the device):
        skipped updates are logged, the window gathers the others, a log step writes a line."""
        if not self.pending:
            return
        losses = self.world.sum(torch.stack([stats.loss for _, _, stats in self.pending]))
        norms = torch.stack([stats.grad_norm.float() for _, _, stats in self.pending])
        for (step, lr, stats), loss, norm in zip(self.pending, losses.tolist(), norms.tolist(),
                                                 strict=True):
            if math.isfinite(norm) and math.isfinite(loss):
                self.nonfinite_in_row = 0
                self.window.tokens += stats.tokens
                self.window.loss += loss
                self.window.steps += 1
                self.last_read = (loss, lr, norm)
            else:
                self._skipped(step, loss, norm)
        self.pending.clear()
        if self.step % self.cfg.log_every == 0:
            self._log_window()

    def _skipped(self, step: int, loss: float, grad_norm: float) -> None:
        self.nonfinite_in_row += 1
        if self.nonfinite_in_row >= self.cfg.max_nonfinite_updates:
            self.nonfinite_stop = self.nonfinite_stop or step
        what = f"loss {loss}, grad norm {grad_norm}"
        self.metrics.write({"event": "skipped", "step": step, "epoch": self.epoch,
                            "reason": what})
        self.reporter.line(f"update {step} skipped (weights unchanged): non-finite {what} "
                           f"({self.nonfinite_in_row} in a row)")

    def _log_window(self) -> None:
        """A train event in metrics.jsonl and a log line over the updates since the last one."""
        window, now = self.window, self.clock.seconds()
        self.window = _Window(now)
        if not window.steps:
            return
        loss, lr, grad_norm = self.last_read
        record = {"event": "train", "step": self.step, "epoch": self.epoch,
                  "loss": window.loss / window.steps, "lr": lr,
                  "tokens_per_s": round(window.tokens / max(now - window.start, 1e-9), 1),
                  "grad_norm": round(grad_norm, 4), "seconds": round(now, 2)}
        self.metrics.write(record)
        self.shown = f"loss {record['loss']:.3f} lr {lr:.1e}"
        self.reporter.line(
            f"step {self.step:>6} | epoch {self.epoch + 1:>3} | loss {record['loss']:.4f} | lr "
            f"{lr:.2e} | {record['tokens_per_s']:,.0f} tgt tok/s | {now:,.0f} s")

    def _checkpoint_duties(self, reason: str | None) -> str | None:
        """Validate and save when due; why to stop after this update (None: go on)."""
        if self.nonfinite_stop is not None:
            return "nonfinite"
        if reason is not None:
            return reason
        if self.step % self.cfg.eval_every == 0:
            reason = "patience" if self.validate() else None
            self.save()
        elif self.cfg.save_every and self.step % self.cfg.save_every == 0:
            self.save()
        return reason

    def _read_due(self, reason: str | None) -> bool:
        cfg, step = self.cfg, self.step
        return (reason is not None or step % cfg.log_every == 0 or step % cfg.eval_every == 0
                or bool(cfg.save_every and step % cfg.save_every == 0))

    def run(self) -> str | None:
        """Train until a limit; returns the name of a stop signal if one interrupted the run.

        The updates' figures stay on the device until a log, validation, save or stop reads
        them, so a GPU is never kept waiting for the host between updates.
        """
        cfg, reason = self.cfg, None
        self.clock = _Stopwatch(self.elapsed)
        self.window = _Window(self.elapsed)
        with _StopSignal() as stop:
            for batches, tokens, counted in self._updates():
                lr = inverse_sqrt_lr(self.step + 1, cfg.lr, cfg.warmup_steps)
                stats = train_step(self.loss_fn, self.optimizer, batches, cfg, lr, self.device,
                                   self.precision, tokens, self.world.size, counted)
                self.step += 1
                self.pending.append((self.step, lr, stats))
                self.elapsed = self.clock.seconds()
                reason = self._agreed_stop(stop)
                if self._read_due(reason):
                    self._read_updates()
                self.reporter.step(self.step, self.shown)
                with self.clock.paused():  # validation and saving are not training time
                    reason = self._checkpoint_duties(reason)
                if reason is not None:
                    break
        self.elapsed = self.clock.seconds()
        return self._finish(reason, stop.name or "SIGTERM")  # a signal to another process

    def _finish(self, reason: str, signal_name: str | None) -> str | None:
        """Validate and save at the end; a non-finite stop saves nothing and is an error."""
        from attncli.errors import AttncliError

        if reason == "nonfinite":
            last = self.paths.read_pointers().get("last", "none saved yet")
            raise AttncliError(
                f"update {self.nonfinite_stop}: {self.cfg.max_nonfinite_updates} non-finite "
                f"updates in a row, each skipped (train.max_nonfinite_updates); stopped without "
                f"saving, the last checkpoint ({last}) is intact; lower train.lr or raise "
                f"train.warmup_steps and resume with `attncli train --resume {self.paths.root} "
                f"--set train.lr=...`")
        if reason == "signal":
            self.save()
            return signal_name
        if self.last_validated != self.step:
            self.validate()
        self.save()
        self.reporter.line(f"stopped at step {self.step} ({reason}); best greedy val BLEU "
                           f"{self.best_bleu:.2f}; run folder {self.paths.root}")
        return None


def _banner(reporter: Reporter, trainer: Trainer, data) -> None:
    from attncli.batching import padding_share

    if not trainer.world.primary:
        return
    processes = trainer.world.size
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
        f"({trainer.precision}, {torch.get_num_threads()} threads)"
        + (f"; {processes} processes share each update" if processes > 1 else ""))


def _resume(trainer: Trainer, config, reporter: Reporter) -> None:
    """Load the last checkpoint; only once it is accepted, rewrite config.yaml and the metrics."""
    from attncli.config import save_config
    from attncli.errors import AttncliError

    paths = trainer.paths
    folder = trainer.resume()
    reached = trainer.limit_reached()
    if reached:
        raise AttncliError(
            f"{paths.root}: train.{reached} ({getattr(config.train, reached)}) is reached "
            f"already at step {trainer.step}; raise it to train on (--set train.{reached}=...)")
    if trainer.world.primary:
        save_config(config, paths.config)  # --set may have extended the run
    dropped = trainer.metrics.drop_after(trainer.step)
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


def _prepare_run(config, resumed, config_path, name, runs_dir, world: World, say):
    """The data (tokenizer, token caches) and the run folder, made by rank 0 alone.

    The other processes wait for it, take its tokenizer and run folder, and find the token
    caches it wrote (or, on another node's disk, tokenize with that same tokenizer).
    """
    from pathlib import Path

    from attncli.config import save_config
    from attncli.corpus import prepare_training_data
    from attncli.errors import AttncliError
    from attncli.runs import RunPaths, check_writable, create_run_dir, default_run_name
    from attncli.tokenizer import install_models, run_models

    models = run_models(resumed, config.tokenizer.joint) if resumed else None
    shared: tuple | AttncliError | None = None
    if world.primary:
        try:
            if resumed is None:
                check_writable(Path(runs_dir))
            # Prepare the data before making a run folder: bad data leaves nothing behind.
            data = prepare_training_data(config, say, models)
            paths = resumed or create_run_dir(Path(runs_dir),
                                              name or default_run_name(Path(config_path)))
            if resumed is None:
                save_config(config, paths.config)
                install_models(data.models, paths)
            shared = (data.models, str(paths.root))
        except AttncliError as err:
            shared = err
    shared = world.from_primary(shared)  # the others stop on rank 0's error too, as it says it
    if isinstance(shared, AttncliError):
        raise shared
    models, root = shared
    if not world.primary:
        data = prepare_training_data(config, say, models)
        paths = RunPaths(Path(root))
    return data, paths


def train_command(config, resumed, config_path, name: str | None, runs_dir,
                  device_name: str) -> None:
    """`attncli train`: a new run from ``config``, or continue the run folder ``resumed``;
    one process of several when started by torchrun (see `distributed`).

    ``config`` and ``resumed`` come from ``runs.training_config``, which the CLI calls before
    importing this module (and torch), so a bad config or a refused resume fails at once.
    """
    import os

    from attncli import distributed
    from attncli.errors import report

    world, device = distributed.start(device_name)
    try:
        with distributed.peer_failures_as_errors(world):
            exit_code = _train(config, resumed, config_path, name, runs_dir, world, device)
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


def _train(config, resumed, config_path, name, runs_dir, world: World, device) -> int | None:
    """The run; the exit code when a signal stopped it."""
    from attncli.config import check_process_shares
    from attncli.device import allow_tf32, set_threads
    from attncli.progress import SilentReporter
    from attncli.tensorboard_log import open_tensorboard
    from attncli.tokenizer import tokenizer_from_bytes

    set_threads(config.train.threads)
    allow_tf32(device)
    check_process_shares(config.train, world.size)
    earlier: list[str] = []

    def say(line: str) -> None:
        if world.primary:
            print(line, flush=True)
            earlier.append(line)

    data, paths = _prepare_run(config, resumed, config_path, name, runs_dir, world, say)
    tokenizer = tokenizer_from_bytes(data.models)
    reporter = (Reporter(paths.log, config.train.max_steps, 0, earlier) if world.primary
                else SilentReporter())
    tensorboard = None
    try:
        with _disk_errors_as_user_errors(paths):
            trainer = Trainer(config, paths, tokenizer, data, device, reporter, world)
            if resumed is not None:
                _resume(trainer, config, reporter)
            if world.primary:
                tensorboard = trainer.metrics.mirror = open_tensorboard(
                    config.train.tensorboard, paths.tensorboard,
                    trainer.step if resumed is not None else None)
            _banner(reporter, trainer, data)
            signal_name = trainer.run()
    finally:
        reporter.close()
        if tensorboard is not None:
            tensorboard.close()
    if not signal_name:
        return None
    if world.primary:
        print(f"{signal_name}: saved a checkpoint at step {trainer.step}; resume with "
              f"`attncli train --resume {paths.root}`")
    return 130 if signal_name == "SIGINT" else 143
