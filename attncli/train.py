"""The training loop: optimizer, schedule, precision, accumulation, validation, checkpoints.

The pieces a benchmark also needs (`make_optimizer`, `inverse_sqrt_lr`, `train_step`) come
first; `Trainer` and `train_command` below drive them over epochs and write the run folder.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from attncli.batching import Batch
from attncli.config import TrainConfig
from attncli.device import autocast, compute_dtype


def inverse_sqrt_lr(step: int, peak_lr: float, warmup: int) -> float:
    """Linear warm-up to `peak_lr` over `warmup` updates, then peak * sqrt(warmup / step)."""
    step = max(step, 1)
    if warmup and step < warmup:
        return peak_lr * step / warmup
    return peak_lr * math.sqrt(max(warmup, 1) / step)


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW; biases, norms and embeddings get no weight decay."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() > 1 and "embed" not in name else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, foreach=True)


@dataclass
class StepStats:
    loss: float          # mean loss per target token over the update
    tokens: int          # target tokens in the update
    grad_norm: float     # before clipping


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Sequence[Batch],
               cfg: TrainConfig, lr: float, device: torch.device, precision: str) -> StepStats:
    """One optimizer update over `batches` (gradient accumulation when there are several).

    Loss is summed over all target tokens of the update and divided by their count, so an
    accumulated update equals one big batch.
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
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepStats(total, tokens, grad_norm)


# --------------------------------------------------------------------------------------------
# The training run: data -> tokenizer -> model -> updates -> validation -> checkpoints
# --------------------------------------------------------------------------------------------


@dataclass
class EncodedCorpus:
    """Tokenized training pairs that fit `data.max_len`, with their lengths for batching."""

    src: list[list[int]]
    tgt: list[list[int]]
    dropped_long: int

    @property
    def src_lens(self) -> list[int]:
        return [len(s) for s in self.src]

    @property
    def tgt_lens(self) -> list[int]:
        return [len(t) for t in self.tgt]


def encode_corpus(tokenizer, src_texts: Sequence[str], tgt_texts: Sequence[str], max_len: int
                  ) -> EncodedCorpus:
    """Encode both sides; pairs with a side longer than `max_len` subwords are dropped."""
    src_ids, tgt_ids = tokenizer.encode_src(src_texts), tokenizer.encode_tgt(tgt_texts)
    keep = [i for i in range(len(src_ids))
            if len(src_ids[i]) <= max_len and len(tgt_ids[i]) + 1 <= max_len]
    return EncodedCorpus([src_ids[i] for i in keep], [tgt_ids[i] for i in keep],
                         len(src_ids) - len(keep))


class Reporter:
    """Prints progress: a rich progress bar on a terminal, plain lines otherwise (CI, logs).

    Every line also goes to train.log, so a run folder explains itself afterwards.
    """

    def __init__(self, log_path, total_steps: int | None, start_step: int):
        import sys

        from rich.console import Console

        self.log_path = log_path
        self.console = Console(stderr=False)
        self.interactive = sys.stdout.isatty()
        self.progress = None
        if self.interactive:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[figures]}"), TimeElapsedColumn(), TextColumn("ETA"),
                TimeRemainingColumn(), console=self.console, transient=False,
            )
            self.task = self.progress.add_task("train", total=total_steps, completed=start_step,
                                               figures="")
            self.progress.start()

    def line(self, text: str) -> None:
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(text + "\n")
        if self.progress is not None:
            self.progress.console.print(text, highlight=False, markup=False)
        else:
            print(text, flush=True)

    def step(self, step: int, figures: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step, figures=figures)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


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

    def __init__(self, config, paths, tokenizer, corpus: EncodedCorpus, val_data,
                 device: torch.device, reporter: Reporter):
        from attncli.checkpoint import build_model
        from attncli.device import resolve_pad_multiple, resolve_precision

        self.config, self.cfg, self.paths = config, config.train, paths
        self.tokenizer, self.corpus, self.device = tokenizer, corpus, device
        self.reporter = reporter
        self.precision = resolve_precision(self.cfg.precision, device)
        self.pad_multiple = resolve_pad_multiple(self.cfg.pad_multiple, device, self.precision)
        torch.manual_seed(self.cfg.seed)
        self.model = build_model(config, tokenizer).to(device)
        if self.cfg.compile:  # compile what a training step calls (not `forward`)
            self.model.summed_loss = torch.compile(self.model.summed_loss)
        self.optimizer = make_optimizer(self.model, self.cfg)
        self.val_corpus = encode_corpus(tokenizer, val_data.src, val_data.tgt,
                                        config.data.max_len)
        limit = config.data.valid_limit or len(val_data)
        self.val_src, self.val_ref = val_data.src[:limit], val_data.tgt[:limit]
        # Position and history; restored by `resume`.
        self.step = self.epoch = self.batch_index = 0
        self.elapsed = 0.0
        self.best_bleu = -1.0
        self.bad_validations = 0
        self.last_validated = -1

    # -- state ---------------------------------------------------------------------------------

    def state(self) -> dict:
        return {"step": self.step, "epoch": self.epoch, "batch_index": self.batch_index,
                "elapsed_s": self.elapsed, "best_bleu": self.best_bleu,
                "bad_validations": self.bad_validations, "last_validated": self.last_validated,
                "pad_multiple": self.pad_multiple,
                "scheduler": {"kind": "inverse_sqrt", "peak_lr": self.cfg.lr,
                              "warmup_steps": self.cfg.warmup_steps}}

    def resume(self) -> None:
        from attncli.checkpoint import load_checkpoint, set_rng_state

        state = load_checkpoint(self.paths, "last", self.model, self.optimizer)
        for key in ("step", "epoch", "batch_index", "best_bleu", "bad_validations",
                    "last_validated"):
            setattr(self, key, state[key])
        self.elapsed = state["elapsed_s"]
        # The saved data position indexes batches built with this multiple.
        self.pad_multiple = state.get("pad_multiple", self.pad_multiple)
        set_rng_state(state["rng"])

    def save(self, tag: str) -> None:
        from attncli.checkpoint import save_checkpoint

        save_checkpoint(self.paths, tag, self.model, self.optimizer, self.state())

    # -- validation ----------------------------------------------------------------------------

    @torch.inference_mode()
    def validation_loss(self) -> float:
        from attncli.batching import collate, token_batches

        self.model.eval()
        total, tokens = 0.0, 0
        corpus = self.val_corpus
        multiple = self.pad_multiple
        for idx in token_batches(corpus.src_lens, corpus.tgt_lens, self.cfg.batch_tokens, 0, 0,
                                 multiple):
            batch = collate([corpus.src[i] for i in idx], [corpus.tgt[i] for i in idx], multiple)
            batch = batch.to(self.device)
            with autocast(self.device, self.precision):
                total += float(self.model.summed_loss(batch.src, batch.tgt_in, batch.tgt_out,
                                                      0.0, compute_dtype(self.precision)))
            tokens += batch.num_tgt_tokens
        return total / max(tokens, 1)

    def validation_bleu(self) -> float:
        from attncli.evaluate import corpus_scores, translate_texts

        self.model.eval()
        results = translate_texts(self.model, self.tokenizer, self.val_src,
                                  self.config.decode, 1, 1, self.device)
        hyps = [self.tokenizer.decode_tgt(r[0].tokens) for r in results]
        return corpus_scores(hyps, self.val_ref, self.config.data.tgt)["bleu"]

    def validate(self, metrics) -> bool:
        """Score val, save checkpoints, redraw curves; True when patience is exhausted."""
        import time

        from attncli.plots import plot_curves

        started = time.perf_counter()
        val_loss, bleu = self.validation_loss(), self.validation_bleu()
        seconds = time.perf_counter() - started
        self.elapsed += seconds
        self.last_validated = self.step
        improved = bleu > self.best_bleu
        if improved:
            self.best_bleu, self.bad_validations = bleu, 0
        else:
            self.bad_validations += 1
        metrics.write({"event": "val", "step": self.step, "epoch": self.epoch,
                       "val_loss": round(val_loss, 6), "val_bleu": round(bleu, 3),
                       "seconds": round(self.elapsed, 2)})
        self.reporter.line(f"validation step {self.step}: val loss {val_loss:.4f}, greedy BLEU "
                           f"{bleu:.2f}{' (best)' if improved else ''} [{seconds:.1f} s]")
        self.save("last")
        if improved:
            self.save("best")
        plot_curves(metrics.read(), self.paths.curves)
        return self.cfg.patience is not None and self.bad_validations >= self.cfg.patience

    # -- the loop ------------------------------------------------------------------------------

    def _time_up(self, now_elapsed: float) -> bool:
        return self.cfg.max_minutes is not None and now_elapsed >= self.cfg.max_minutes * 60

    def run(self) -> str | None:
        """Train until a limit; returns the name of a stop signal if one interrupted the run."""
        import time

        from attncli.batching import collate, token_batches
        from attncli.runs import MetricsLog

        metrics = MetricsLog(self.paths.metrics)
        cfg, corpus = self.cfg, self.corpus
        reason = None
        window_tokens, window_loss, window_steps = 0, 0.0, 0
        window_start = time.perf_counter()
        run_start, elapsed_before = time.perf_counter(), self.elapsed
        with _StopSignal() as stop:
            while reason is None:
                batches = token_batches(corpus.src_lens, corpus.tgt_lens, cfg.batch_tokens,
                                        cfg.seed, self.epoch, self.pad_multiple)
                while self.batch_index < len(batches) and reason is None:
                    group = batches[self.batch_index : self.batch_index + cfg.accum_steps]
                    self.batch_index += len(group)
                    lr = inverse_sqrt_lr(self.step + 1, cfg.lr, cfg.warmup_steps)
                    stats = train_step(
                        self.model, self.optimizer,
                        [collate([corpus.src[i] for i in b], [corpus.tgt[i] for i in b],
                                 self.pad_multiple)
                         for b in group],
                        cfg, lr, self.device, self.precision,
                    )
                    self.step += 1
                    window_tokens += stats.tokens
                    window_loss += stats.loss
                    window_steps += 1
                    self.elapsed = elapsed_before + time.perf_counter() - run_start
                    if self.step % cfg.log_every == 0:
                        span = time.perf_counter() - window_start
                        record = {"event": "train", "step": self.step, "epoch": self.epoch,
                                  "loss": window_loss / window_steps, "lr": lr,
                                  "tokens_per_s": round(window_tokens / span, 1),
                                  "grad_norm": round(stats.grad_norm, 4),
                                  "seconds": round(self.elapsed, 2)}
                        metrics.write(record)
                        self.reporter.line(
                            f"step {self.step:>6} | epoch {self.epoch + 1:>3} | loss "
                            f"{record['loss']:.4f} | lr {lr:.2e} | "
                            f"{record['tokens_per_s']:,.0f} tgt tok/s | {self.elapsed:,.0f} s")
                        window_tokens, window_loss, window_steps = 0, 0.0, 0
                        window_start = time.perf_counter()
                    self.reporter.step(self.step, f"loss {stats.loss:.3f} lr {lr:.1e}")
                    checks_start = time.perf_counter()
                    if stop.name:
                        reason = "signal"
                    elif cfg.max_steps is not None and self.step >= cfg.max_steps:
                        reason = "max_steps"
                    elif self._time_up(self.elapsed):
                        reason = "max_minutes"
                    elif self.step % cfg.eval_every == 0 and self.validate(metrics):
                        reason = "patience"
                    if self.step % cfg.eval_every == 0:
                        # leave validation out of both the tok/s window and the training clock
                        paused = time.perf_counter() - checks_start
                        window_start += paused
                        run_start += paused
                if self.batch_index >= len(batches):
                    self.epoch += 1
                    self.batch_index = 0
                    if reason is None and cfg.max_epochs is not None and \
                            self.epoch >= cfg.max_epochs:
                        reason = "max_epochs"
            if reason == "signal":
                self.save("last")
                return stop.name
        if self.last_validated != self.step:
            self.validate(metrics)
        self.reporter.line(f"stopped at step {self.step} ({reason}); best greedy val BLEU "
                           f"{self.best_bleu:.2f}; run folder {self.paths.root}")
        return None


def _banner(reporter: Reporter, trainer: Trainer, train_data, corpus: EncodedCorpus) -> None:
    from attncli.batching import padding_share, token_batches

    multiple = trainer.pad_multiple
    batches = token_batches(corpus.src_lens, corpus.tgt_lens, trainer.cfg.batch_tokens,
                            trainer.cfg.seed, 0, multiple)
    share = padding_share(batches, corpus.tgt_lens, multiple)
    reporter.line(
        f"data {train_data.name}: {len(corpus.src):,} training pairs "
        f"({train_data.dropped_empty} empty and {corpus.dropped_long} longer than "
        f"{trainer.config.data.max_len} subwords dropped); {len(batches)} batches per epoch, "
        f"{share:.1%} padding (lengths rounded up to multiples of {multiple})")
    reporter.line(
        f"model: {trainer.model.num_parameters():,} parameters on {trainer.device} "
        f"({trainer.precision}, {torch.get_num_threads()} threads)")


def train_command(config, resumed, config_path, name: str | None, runs_dir,
                  device_name: str) -> None:
    """`attncli train`: a new run from ``config``, or continue the run folder ``resumed``.

    ``config`` and ``resumed`` come from ``runs.training_config``, which the CLI calls before
    importing this module (and torch), so a bad config fails at once.
    """
    from pathlib import Path

    from attncli.config import save_config
    from attncli.data import load_split
    from attncli.device import resolve_device, set_threads
    from attncli.errors import AttncliError
    from attncli.runs import create_run_dir, default_run_name
    from attncli.tokenizer import check_model_file, load_tokenizer, train_tokenizer

    device = resolve_device(device_name)
    set_threads(config.train.threads)
    # Read the data before making a run folder: bad data leaves nothing behind.
    train_data = load_split(config.data, "train").head(config.data.train_limit)
    val_data = load_split(config.data, "val")
    check_model_file(config.tokenizer)
    paths = resumed or create_run_dir(Path(runs_dir), name or default_run_name(Path(config_path)))
    save_config(config, paths.config)  # on resume too: --set may have extended the run
    if resumed is None:
        tokenizer = train_tokenizer(config.tokenizer, train_data.src, train_data.tgt, paths)
    else:
        tokenizer = load_tokenizer(paths, config.tokenizer.joint)
    corpus = encode_corpus(tokenizer, train_data.src, train_data.tgt, config.data.max_len)
    if not corpus.src:
        raise AttncliError(f"no training pairs fit data.max_len={config.data.max_len}")
    reporter = Reporter(paths.log, config.train.max_steps, 0)
    try:
        trainer = Trainer(config, paths, tokenizer, corpus, val_data, device, reporter)
        if resumed is not None:
            trainer.resume()
            reporter.line(f"resumed {paths.root} at step {trainer.step} "
                          f"(epoch {trainer.epoch + 1})")
        _banner(reporter, trainer, train_data, corpus)
        signal_name = trainer.run()
    finally:
        reporter.close()
    if signal_name:
        print(f"{signal_name}: saved a checkpoint at step {trainer.step}; resume with "
              f"`attncli train --resume {paths.root}`")
        raise SystemExit(130 if signal_name == "SIGINT" else 143)
