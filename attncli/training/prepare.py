"""Before the first update: a run's data (tokenizer, token caches) and run folder (with a
fine-tuned run's parent.json, and its data's share of <unk> under the parent's tokenizer), a
run folder restarted from step 0 when it was stopped before its first checkpoint, and the
banner.

Rank 0 alone makes the run folder; the other processes wait for it, take its tokenizer and
run folder, and find the token caches it wrote (or, on another node's disk, tokenize with
that same tokenizer).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from attncli.core.config_files import save_config
from attncli.core.cpu_kind import detect_cpu_kind
from attncli.core.errors import AttncliError
from attncli.core.files import atomic_write_json, check_writable
from attncli.data.batching import padding_share
from attncli.data.corpus import corpus_reports, prepare_training_data, report_line
from attncli.data.coverage import unknown_characters, unknown_tokens
from attncli.data.tokenizer import TokenizerModels, model_sides
from attncli.runs.layout import RunPaths, create_run_dir, default_run_name
from attncli.training.distributed import World
from attncli.training.lr_planning import step_limit
from attncli.training.parent import Parent, parent_record
from attncli.training.parent_weights import check_parent_weights, check_same_parent_weights

# Above this share of the target tokens, <unk> under a parent's tokenizer is warned about.
UNKNOWN_WARNING = 0.01


def never_saved(resumed: RunPaths | None) -> bool:
    """A run folder given to --resume whose run was stopped before its first checkpoint."""
    return resumed is not None and not resumed.read_pointers()


def prepare_run(config, resumed: RunPaths | None, *, config_path, name: str | None, runs_dir,
                world: World, say, parent: Parent | None = None):
    """The data (`corpus.TrainingData`) and the run folder (`RunPaths`); `parent`: the run a
    new run is fine-tuned from, or a resumed child stopped before its first checkpoint starts
    from again.

    Bad data leaves nothing behind: the data is prepared, and a parent's weights checked,
    before a new run folder is made.
    """
    shared: tuple | AttncliError | None = None
    if world.primary:
        try:
            if resumed is None:
                data, paths = _new_run(config, parent, config_path=config_path, name=name,
                                       runs_dir=runs_dir, say=say)
            else:
                data, paths = _resumed_run(config, resumed, parent, say)
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


def _new_run(config, parent: Parent | None, *, config_path, name: str | None, runs_dir, say):
    """A new run's data, then its folder: config, tokenizer (a parent's: copied, never trained
    again), corpora.json, parent.json."""
    check_writable(Path(runs_dir))
    models = TokenizerModels.read(parent.paths.root, config.tokenizer.joint) if parent else None
    data = prepare_training_data(config, say, models)
    if parent is not None:
        digest = check_parent_weights(parent, config, data.models.tokenizer())
        for line in unknown_lines(data):
            say(line)
    paths = create_run_dir(Path(runs_dir), name or default_run_name(Path(config_path)))
    if parent is not None:  # first: killed before its first save, the run is still a child
        atomic_write_json(paths.parent_record, parent_record(parent, digest))
    save_config(config, paths.config)
    data.models.install(paths.root)
    atomic_write_json(paths.corpora, corpus_reports(data, config.data.max_len))
    return data, paths


def _resumed_run(config, resumed: RunPaths, parent: Parent | None, say):
    """A resumed run's data; a run stopped before its first checkpoint restarts from step 0
    (with its tokenizer trained again if it is missing; a child's from its parent again)."""
    joint = config.tokenizer.joint
    if not never_saved(resumed):
        models = TokenizerModels.read(resumed.root, joint)
        return prepare_training_data(config, say, models), resumed
    complete = all(resumed.spm_model(side).is_file() for side in model_sides(joint))
    models = TokenizerModels.read(resumed.root, joint) if complete else None
    if parent is not None:  # a child: its parent's weights and tokenizer, as when it started
        check_same_parent_weights(parent, resumed)
        models = TokenizerModels.read(parent.paths.root, joint)
    data = prepare_training_data(config, say, models)
    data.models.install(resumed.root)
    restart_from_step_0(resumed)
    return data, resumed


def unknown_lines(data) -> list[str]:
    """Each corpus's share of `<unk>` under the run's tokenizer (a parent's, which never saw
    this data), and a warning naming the characters behind it above `UNKNOWN_WARNING` of its
    target tokens."""
    lines, tokenizer = [], data.models.tokenizer()
    for counts in unknown_tokens(data):
        corpus = f"corpus {counts.corpus.name}: " if data.mixed else ""
        share = counts.share("tgt")
        lines.append(f"{corpus}<unk> under the parent's tokenizer: {share:.2%} of the training "
                     f"targets' {counts.tgt_total:,} tokens, {counts.share('src'):.2%} of the "
                     f"sources' {counts.src_total:,}")
        if share > UNKNOWN_WARNING:
            named = ", ".join(f"{char!r} ({count:,})"
                              for char, count in unknown_characters(counts, tokenizer))
            lines.append(f"warning: {corpus}{share:.1%} of the target tokens are <unk> (above "
                         f"{UNKNOWN_WARNING:.0%}): the model can neither read nor write them; "
                         f"the most frequent unknown characters: {named}; a run from scratch "
                         f"trains a tokenizer of its own data")
    return lines


def restart_from_step_0(paths: RunPaths) -> None:
    """Forget what a run stopped before its first checkpoint logged: it trains again from
    step 0 in the same folder, and its metrics, log and TensorBoard events start afresh."""
    for path in (paths.metrics, paths.log):
        path.unlink(missing_ok=True)
    shutil.rmtree(paths.tensorboard, ignore_errors=True)


def banner(reporter, trainer, data) -> None:
    """Two lines before the first update: the data and its batches, the model and device."""
    if not trainer.world.primary:
        return
    processes = trainer.world.size
    corpus, multiple = data.train, trainer.state.pad_multiple
    batches = trainer.feed.epoch_batches(trainer.state.epoch)
    share = padding_share(batches, corpus.src_lens, corpus.tgt_lens, multiple)
    reporter.line(
        f"data {data.name}: {len(corpus):,} training pairs ({corpus.dropped_empty} empty and "
        f"{corpus.dropped_long} over {trainer.config.data.max_len} tokens with EOS dropped); "
        f"{len(batches)} batches per epoch, {share:.1%} padding (lengths rounded up to "
        f"multiples of {multiple}); {trainer.feed.workers} batch worker(s)")
    if data.mixed:
        reporter.line(f"  an epoch: {sum(len(b) for b in batches):,} pairs by the corpora's "
                      f"weights")
        _corpora_lines(reporter, data, trainer.config.data.max_len)
    reporter.set_total(planned_updates(trainer.cfg, len(batches)))
    reporter.line(
        f"model: {trainer.model.num_parameters():,} parameters on {trainer.device} "
        f"({trainer.precision}{_cpu_kind_words(trainer.device)}, "
        f"{torch.get_num_threads()} threads)"
        + (f"; {processes} processes share each update" if processes > 1 else ""))
    if trainer.frozen:
        reporter.line(trainer.frozen)


def _cpu_kind_words(device: torch.device) -> str:
    """On CPU, the kind `precision: auto` decided from (`core.cpu_kind`)."""
    return f" on a CPU of kind {detect_cpu_kind().describe()}" if device.type == "cpu" else ""


def _corpora_lines(reporter, data, max_len: int) -> None:
    """A mix's corpora, what each gave, and their licences (run folder: corpora.json)."""
    reports = corpus_reports(data, max_len)
    for report in reports:
        reporter.line("  " + report_line(report, max_len))
    for report in reports:
        if report["licence"]:
            reporter.line(f"  licence of {report['name']}: {report['licence']}")


def planned_updates(cfg, batches_per_epoch: int) -> int | None:
    """The updates the progress bar counts to: the first of train.max_steps and max_epochs
    (epochs of about `batches_per_epoch`), None when max_minutes may end the run sooner (an
    ETA from the step count would promise the wrong end; a budgeted learning rate's plan sets
    the count once the clock has made it, `Trainer.run`)."""
    if cfg.max_minutes is not None:
        return None
    return step_limit(cfg, batches_per_epoch)
