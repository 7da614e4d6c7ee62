"""The `attncli` command line: parse options, call one function, turn errors into exit codes.

Exit codes: 0 success, 2 bad usage or bad input (`AttncliError`, Typer usage errors),
1 anything else. No logic lives here: each command hands its options to a module, imported
inside the command's function (torch-free start-up: `attncli --help`, or a config that is not
there, answers before torch loads).
"""

from __future__ import annotations

import errno
import os
import sys
from enum import StrEnum
from pathlib import Path

import typer

from attncli.core.errors import AttncliError, report
from attncli.core.version import __version__

app = typer.Typer(
    name="attncli",
    help="Train, evaluate, run and benchmark encoder-decoder Transformer translation models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


DEVICE_OPTION = typer.Option(
    "auto", "--device", help="auto (CUDA when present), cpu, cuda or cuda:N (the N-th GPU).")
CHECKPOINT_HELP = ("Which checkpoint: auto (averaged when the run has one of its newest saves, "
                   "else best), best, "
                   "last, averaged (see `attncli average` and train.average_last) or step-N "
                   "(one of the run's checkpoints/step-N folders).")


class Engine(StrEnum):
    torch = "torch"
    ctranslate2 = "ctranslate2"


ENGINE_OPTION = typer.Option(
    Engine.torch, "--engine", help="torch: attncli's own decoder; ctranslate2: the run's "
    "CTranslate2 export (see `attncli export`), with the same tokenizer, beam and limits.")
NO_REPEAT_OPTION = typer.Option(
    None, "--no-repeat-ngram", min=0, metavar="N", help="No n-gram of N output subwords twice "
    "in a translation, 0 = off (default: the run's decode.no_repeat_ngram_size).")
THREADS_OPTION = typer.Option(
    None, "--threads", min=1, help="CPU threads to decode with (default: every CPU this "
    "process may use; beside other work, fewer: see docs/serving.md#sharing-a-machine).")
EXPORTED_OPTION = typer.Option(
    None, "--exported", help="The CTranslate2 folder for --engine ctranslate2 (default: "
    "RUN/ctranslate2).")


class Split(StrEnum):
    test = "test"
    val = "val"


class Suite(StrEnum):
    attention = "attention"
    train = "train"
    infer = "infer"
    all = "all"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"attncli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Encoder-decoder Transformer translation: train, eval, translate, bench."""


@app.command()
def train(
    config: Path | None = typer.Argument(
        None, help="YAML config (see configs/). Omit with --resume.", show_default=False
    ),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a config key, e.g. --set train.max_steps=20 (repeatable)."
    ),
    name: str | None = typer.Option(
        None, "--name", help="Run folder name under --runs-dir (default: config name + time)."
    ),
    runs_dir: Path | None = typer.Option(None, "--runs-dir",
                                         help="Where run folders go (default: runs)."),
    device: str = DEVICE_OPTION,
    resume: Path | None = typer.Option(
        None, "--resume", help="Continue the run in this folder from its last checkpoint."
    ),
    init_from: Path | None = typer.Option(
        None, "--init-from", help="Fine-tune: a new run of CONFIG's data and training settings "
        "that starts from this run's weights, with its model and tokenizer (optimizer, "
        "schedule, step and best score start afresh; see docs/runs-and-checkpoints.md)."),
    checkpoint: str | None = typer.Option(
        None, "--checkpoint", help="With --init-from: which of that run's checkpoints to start "
        "from, as eval's --checkpoint (default auto)."),
    nproc: int = typer.Option(
        1, "--nproc", min=1, help="Train with N processes on this machine (torchrun's launcher: "
        "one per GPU with --device cuda, gloo on CPU). Same as `torchrun --nproc_per_node N -m "
        "attncli train ...`; for several machines use torchrun itself (see the README)."
    ),
) -> None:
    """Train a model from a YAML config into runs/<name>/ (or continue one with --resume, or
    fine-tune one with --init-from)."""
    from attncli.training.preflight import training_config  # here: torch-free start-up

    checked, resumed, parent = training_config(  # before torch: fails fast
        config, set_, resume, name, init_from=init_from, checkpoint=checkpoint)
    if resume is not None and (name is not None or runs_dir is not None):
        raise AttncliError(f"--resume {resume} continues that run in its own folder: "
                           f"--name and --runs-dir are for a new run")
    if nproc > 1 and not os.environ.get("LOCAL_RANK"):
        from attncli.core.config import check_process_shares  # here: torch-free start-up

        check_process_shares(checked.train, nproc, resumed is not None)
        from attncli.training.distributed import launch  # here: torch-free start-up

        launch(nproc, sys.argv[1:], device)  # each process comes back here, with LOCAL_RANK set
        return
    from attncli.training.command import train_command  # here: torch-free start-up

    train_command(checked, resumed, config_path=config, name=name,
                  runs_dir=runs_dir or Path("runs"), device_name=device, parent=parent)


@app.command()
def prepare(
    config: Path = typer.Argument(..., help="YAML config (see configs/).", show_default=False),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a config key, e.g. --set data.num_proc=8 (repeatable)."
    ),
) -> None:
    """Train the tokenizer and tokenize the train and val splits into the data cache, without
    training: a later `attncli train` with the same data and tokenizer settings starts at once."""
    from attncli.core.config_files import load_config  # here: torch-free start-up
    from attncli.data.corpus import prepare_command  # here: torch-free start-up

    prepare_command(load_config(config, set_))


@app.command("eval")
def eval_(
    run_dir: Path = typer.Argument(..., help="A run folder made by `attncli train`."),
    split: Split = typer.Option(Split.test, "--split", help="Which split of the data set."),
    data: str | None = typer.Option(
        None, "--data", help="Another data set name or folder/file to score instead."
    ),
    beam: int | None = typer.Option(
        None, "--beam", min=1, help="Beam size (default: the run's decode.beam; 1 = greedy)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the scores as JSON."),
    device: str = DEVICE_OPTION,
    checkpoint: str = typer.Option("auto", "--checkpoint", help=CHECKPOINT_HELP),
    engine: Engine = ENGINE_OPTION,
    exported: Path | None = EXPORTED_OPTION,
    no_repeat_ngram: int | None = NO_REPEAT_OPTION,
    threads: int | None = THREADS_OPTION,
) -> None:
    """Translate a split with a checkpoint of the run and score it (sacreBLEU BLEU and chrF)."""
    from attncli.evaluate import EvalOptions, eval_command  # here: torch-free start-up

    eval_command(EvalOptions(
        run_dir=run_dir, split=split.value, data=data, beam=beam, json_out=json_out,
        device=device, checkpoint=checkpoint, engine=engine.value, exported=exported,
        no_repeat_ngram=no_repeat_ngram, threads=threads))


@app.command()
def translate(
    text: list[str] = typer.Argument(
        None, help="Texts to translate, each split into sentences. None or '-' reads "
        "standard input line by line."
    ),
    run: Path | None = typer.Option(
        None, "--run",
        help="Run folder (default: the run under ./runs that saved a checkpoint last)."
    ),
    beam: int | None = typer.Option(None, "--beam", min=1, help="Beam size (1 = greedy)."),
    nbest: int = typer.Option(1, "--nbest", min=1, help="Print the N best translations."),
    input_file: Path | None = typer.Option(None, "--input", help="Read sentences from a file."),
    output_file: Path | None = typer.Option(None, "--output", help="Write translations here."),
    json_out: bool = typer.Option(
        False, "--json", help="One JSON object per sentence: source, hypotheses, scores."
    ),
    show_attention: bool = typer.Option(
        False, "--show-attention", help="Print cross-attention as a heatmap in the terminal."
    ),
    attention_png: Path | None = typer.Option(
        None, "--attention-png", help="Save the cross-attention heatmap(s) as a PNG."
    ),
    layer: int = typer.Option(-1, "--layer", help="Decoder layer whose attention is shown."),
    head: int | None = typer.Option(
        None, "--head", help="Attention head to show (default: the mean over heads; the PNG then "
        "draws every head and their mean)."
    ),
    device: str = DEVICE_OPTION,
    checkpoint: str = typer.Option("auto", "--checkpoint", help=CHECKPOINT_HELP),
    engine: Engine = ENGINE_OPTION,
    exported: Path | None = EXPORTED_OPTION,
    no_repeat_ngram: int | None = NO_REPEAT_OPTION,
    split: bool = typer.Option(
        True, "--split/--no-split", help="Split each line into sentences, translate them and "
        "join them (--no-split: each line is one sentence, cut to the model's positions)."),
    paragraphs: bool = typer.Option(
        False, "--paragraphs", help="Hard-wrapped text: lines up to a blank line are one "
        "paragraph, written as one line (blank lines kept)."),
    threads: int | None = THREADS_OPTION,
) -> None:
    """Translate text with a trained run (arguments, a file, or standard input): one output
    line per input line, each line's sentences translated and joined."""
    from attncli.translate import TranslateOptions, translate_command  # here: torch-free start

    translate_command(TranslateOptions(
        texts=text or [], run=run, beam=beam, nbest=nbest, input_file=input_file,
        output_file=output_file, json_out=json_out, show_attention=show_attention,
        attention_png=attention_png, layer=layer, head=head, device=device,
        checkpoint=checkpoint, engine=engine.value, exported=exported,
        no_repeat_ngram=no_repeat_ngram, split=split, paragraphs=paragraphs, threads=threads))


@app.command()
def serve(
    run: list[Path] | None = typer.Argument(
        None, help="Run folder(s), one per language pair; requests go to the run of their "
        "source and target (default: the run under ./runs that saved a checkpoint last)."),
    checkpoint: str = typer.Option("auto", "--checkpoint", help=CHECKPOINT_HELP),
    engine: Engine = ENGINE_OPTION,
    exported: Path | None = EXPORTED_OPTION,
    device: str = DEVICE_OPTION,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0: all)."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port (0: a free one)."),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="ATTNCLI_API_KEY", help="Require this key (LibreTranslate's "
        "api_key field or an Authorization: Bearer header)."),
    cors_origin: list[str] = typer.Option(
        [], "--cors-origin", help="Allow requests from pages of this origin, e.g. "
        "https://example.org (repeatable; others are refused)."),
    max_texts: int = typer.Option(64, "--max-texts", min=1, help="Texts in one request."),
    max_chars: int = typer.Option(2000, "--max-chars", min=1, help="Characters in one request."),
    max_beam: int = typer.Option(16, "--max-beam", min=1, help="Largest beam a request may ask."),
    max_queue: int = typer.Option(
        256, "--max-queue", min=1, help="Sentences waiting at most; past it, 503 with "
        "Retry-After."),
    timeout: float = typer.Option(
        30.0, "--timeout", min=0.1, help="Seconds a request may wait for its translation (503)."),
    batch_size: int | None = typer.Option(
        None, "--batch-size", min=1, help="Sentences decoded together at most (default: the "
        "run's decode.batch_size)."),
    batch_tokens: int = typer.Option(
        8192, "--batch-tokens", min=1, help="Padded source tokens decoded together at most."),
    batch_wait: float = typer.Option(
        10.0, "--batch-wait", min=0.0, help="Milliseconds a request waits for others to join "
        "its batch."),
    threads: int | None = THREADS_OPTION,
) -> None:
    """Serve runs over HTTP: LibreTranslate's API, attncli's own with attention, and a page."""
    from attncli.serve.command import ServeCommandOptions, serve_command  # torch-free start-up

    serve_command(ServeCommandOptions(
        runs=list(run or []), checkpoint=checkpoint, engine=engine.value, exported=exported,
        device=device, host=host, port=port, api_key=api_key, cors_origins=cors_origin,
        max_texts=max_texts, max_chars=max_chars, max_beam=max_beam, max_queue=max_queue,
        timeout=timeout, batch_size=batch_size, batch_tokens=batch_tokens,
        batch_wait_ms=batch_wait, threads=threads))


@app.command()
def export(
    run_dir: Path = typer.Argument(..., help="A run folder made by `attncli train`."),
    to: str = typer.Option("ctranslate2", "--to", help="The format: ctranslate2 (a model "
                           "folder) or argos (an Argos Translate package for argostranslate and "
                           "LibreTranslate)."),
    quantization: str = typer.Option(
        "float32", "--quantization", help="Stored weight type: float32, int8, int8_float32, "
        "int8_float16, int16, float16, bfloat16, ... (CTranslate2's list)."),
    output: Path | None = typer.Option(
        None, "--output", help="The model folder to write (default: RUN/ctranslate2), or "
        "with --to argos the package file (default: RUN/<from>_<to>.argosmodel)."),
    force: bool = typer.Option(False, "--force", help="Replace the output if it exists (only "
                               "an export attncli wrote)."),
    checkpoint: str = typer.Option("auto", "--checkpoint", help=CHECKPOINT_HELP),
) -> None:
    """Export a checkpoint of the run as a CTranslate2 model folder or an Argos Translate
    package, with its model card (needs `attncli\\[ct2]`)."""
    from attncli.export import export_command  # here: torch-free start-up

    export_command(run_dir, to=to, quantization=quantization, output=output, force=force,
                   checkpoint=checkpoint)


@app.command()
def card(
    run_dir: Path = typer.Argument(..., help="A run folder made by `attncli train`."),
    checkpoint: str = typer.Option("auto", "--checkpoint", help=CHECKPOINT_HELP),
) -> None:
    """Write the run's model card, RUN/README.md: languages, data and licences, model,
    training budget and machine, scores, examples, config."""
    from attncli.runs.card import card_command  # here: torch-free start-up

    card_command(run_dir, checkpoint)


@app.command()
def average(
    run_dir: Path = typer.Argument(..., help="A run folder made by `attncli train`."),
    last: int = typer.Option(..., "--last", min=2, help="How many of the newest step folders."),
) -> None:
    """Average the weights of the last N checkpoints into checkpoints/averaged/."""
    from attncli.runs.average import average_command  # here: torch-free start-up

    average_command(run_dir, last)


@app.command()
def bench(
    device: str = DEVICE_OPTION,
    suite: Suite = typer.Option(Suite.all, "--suite", help="Which benchmarks to run."),
    config: Path | None = typer.Option(
        None, "--config", help="Model config for the train/infer suites (default: "
        "configs/base.yaml on CUDA, configs/small.yaml on CPU)."
    ),
    json_file: Path | None = typer.Option(None, "--json", help="Also write every figure here."),
    warmup: int = typer.Option(2, "--warmup", min=0, help="Untimed runs before timing."),
    repeats: int = typer.Option(5, "--repeats", min=1, help="Timed runs (the median is shown)."),
) -> None:
    """Measure attention kernels, training throughput (with MFU) and decoding speed."""
    from attncli.bench import bench_command  # here: torch-free start-up

    bench_command(device, suite.value, config=config, json_file=json_file, warmup=warmup,
                  repeats=repeats)


def main() -> None:
    """Entry point: run the app; bad input exits 2 with one line, other errors exit 1."""
    from attncli.core.kernel_caches import bound_kernel_caches  # here: torch-free start-up
    from attncli.core.malloc import keep_freed_memory

    keep_freed_memory()
    bound_kernel_caches()
    _escape_what_stdout_cannot_encode()
    try:
        code = app(standalone_mode=False)  # usage errors come here, said in one line below
    except _USAGE_ERROR as err:
        sys.exit(_usage_error(err))
    except _CLICK_ERROR as err:
        print(f"error: {err.format_message()}", file=sys.stderr)
        sys.exit(err.exit_code)
    except typer.Abort:
        print("Aborted.", file=sys.stderr)
        sys.exit(1)
    except AttncliError as err:
        sys.exit(report(err))
    except Exception as err:  # a real bug: one line unless asked for the traceback
        if os.environ.get("ATTNCLI_DEBUG"):
            raise
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            # where the output goes is full: the user's to fix
            err = AttncliError(f"{err.filename or 'standard output'}: {err.strerror}")
        sys.exit(report(err))
    sys.exit(code if isinstance(code, int) else 0)


def _escape_what_stdout_cannot_encode() -> None:
    """On a standard output that is not UTF-8 (a Latin-1 or ASCII locale, PYTHONIOENCODING),
    characters it cannot encode are written as escapes: printing a German or Chinese output
    raised UnicodeEncodeError after the work was done, and the output was lost."""
    from attncli.core.console import writes_utf8  # here: torch-free start-up

    for stream in (sys.stdout, sys.stderr):
        if stream is not None and not writes_utf8(stream) and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


# The click that typer runs on (its own copy in newer typers): its usage and other errors.
_USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _usage_error(err: Exception) -> int:
    """A usage error as one line on stderr (click draws a box of several), naming the help to
    read; `attncli COMMAND` alone shows that command's help, as before."""
    if type(err).__name__ == "NoArgsIsHelpError":
        err.show()
        return err.exit_code
    where = f"{err.ctx.command_path} -h" if err.ctx is not None else "attncli -h"
    print(f"error: {err.format_message()} (see {where})", file=sys.stderr)
    return err.exit_code
