"""`attncli eval`: translate a split with a trained run and score it with sacreBLEU (BLEU and
chrF), writing eval/<split>.hyp.txt and eval/<split>.json in the run folder.

The parts it puts together are shared: reading a split (`data.sources`), the run opened to
translate with either engine (`runs.translator.Translator`, the Python API, so eval decodes as
`attncli translate` does) and the scores (`decoding.scoring`), which validation while training
uses too.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncli.core.config import DecodeConfig, corpora_of
from attncli.core.console import stdout_json
from attncli.core.device import set_threads
from attncli.core.errors import AttncliError
from attncli.core.files import atomic_write_json, atomic_write_text, output_folder_problem
from attncli.data.sources import load_split
from attncli.decoding.scoring import corpus_scores
from attncli.decoding.texts import TruncateHook, source_subword_limit
from attncli.runs.average import averaged_facts, describe
from attncli.runs.checkpoints import weights_digest
from attncli.runs.trained import TrainedModel, decode_precision
from attncli.runs.translator import Translator


@dataclass(frozen=True)
class EvalOptions:
    """`attncli eval`'s options as cli.py parsed them (their meaning: its --help)."""

    run_dir: Path
    split: str = "test"
    data: str | None = None
    beam: int | None = None
    json_out: bool = False
    device: str = "auto"
    checkpoint: str = "auto"
    engine: str = "torch"
    exported: Path | None = None
    no_repeat_ngram: int | None = None
    threads: int | None = None


@dataclass(frozen=True)
class Scoring:
    """What `attncli eval` scores, as its reports and titles say it: the run, the split, the
    beam and the engine."""

    run_dir: Path
    split: str
    beam: int
    engine: str


def evaluate_split(
    translator: Translator,
    texts_src: Sequence[str],
    texts_ref: Sequence[str],
    *,
    beam: int,
    on_truncate: TruncateHook | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Translate ``texts_src`` with the run's decode settings and precision and score against
    ``texts_ref``.

    Returns the scores (see ``corpus_scores``) plus beam, no_repeat_ngram_size, sentences,
    seconds, sentences_per_s, and ``hypotheses``: the detokenized best translations in input order.
    """
    cfg = translator.config
    start = time.perf_counter()
    src_ids = translator.encode(texts_src, on_truncate)
    found = translator.search(src_ids, beam=beam, progress=progress)
    seconds = time.perf_counter() - start
    hyps = [translator.detokenize(h[0]) for h in found]
    return {
        **corpus_scores(hyps, texts_ref, cfg.data.tgt),
        "beam": beam,
        "no_repeat_ngram_size": cfg.decode.no_repeat_ngram_size,
        "sentences": len(hyps),
        "seconds": round(seconds, 3),
        "sentences_per_s": round(len(hyps) / seconds, 2) if seconds > 0 else None,
        "hypotheses": hyps,
    }


def _weights_sha256(trained: TrainedModel) -> str | None:
    """The scored weights' SHA-256: the checkpoint's, or what the CTranslate2 export recorded
    of the weights it was made from (None for an export made before attncli 0.5)."""
    if trained.engine is not None:
        return trained.engine.metadata.get("weights_sha256")
    return weights_digest(trained.checkpoint)


def _averaged(trained: TrainedModel) -> dict[str, Any]:
    """{"averaged": its steps and validation scores} when the checkpoint is an averaged one
    (see `runs.average.averaged_facts`), so the report says what was scored."""
    facts = averaged_facts(trained.checkpoint) if trained.engine is None else {}
    return {"averaged": facts} if facts else {}


def _blocking(cfg: DecodeConfig) -> str:
    """How a title names the n-gram blocking, when it is on."""
    return f", no repeated {n}-grams" if (n := cfg.no_repeat_ngram_size) else ""


def _data_label(data: str) -> str:
    """A file-name part for `--data`: its file or folder name, without the extension."""
    label = re.sub(r"\.(jsonl|json|tsv|txt)$", "", Path(data.rstrip("/")).name)
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label) or "data"


def _warn(truncated: list[int], limit: int, left_out: int) -> None:
    """What the scores do not say by themselves: cut sources, pairs left out."""
    if truncated:
        print(f"warning: {len(truncated)} source sentence(s) longer than {limit} subwords were "
              f"cut to fit the model (first: line {truncated[0] + 1})", file=sys.stderr)
    if left_out:
        print(f"warning: {left_out} pair(s) with an empty side were left out of the scores and "
              "of the hypotheses file", file=sys.stderr)


def _eval_sets(config, split: str, data: str | None) -> list[tuple[str, Any]]:
    """(file name, data section) of each set to score: `--data`'s, the config's `data.<split>`,
    or, for a mix of corpora, each corpus's own split (files <split>-<corpus>.*)."""
    if data is not None:
        return [(f"{split}-{_data_label(data)}", config.data.model_copy(update={split: data}))]
    if config.data.corpora is None or getattr(config.data, split) is not None:
        return [(split, corpora_of(config.data)[0].data)]
    return [(f"{split}-{corpus.name}", corpus.data) for corpus in corpora_of(config.data)]


def eval_reports(run_dir: Path, split: str = "test") -> dict[str, dict[str, Any]]:
    """The scores `attncli eval RUN` wrote for `split` (eval/<split>.json, or a mix's
    eval/<split>-<corpus>.json each), by file name, in the config's corpus order; those not
    written yet are left out. For scripts that read a run's scores (benchmarks/)."""
    from attncli.core.config_files import load_config

    config = load_config(Path(run_dir) / "config.yaml")
    reports = {}
    for name, _ in _eval_sets(config, split, None):
        path = Path(run_dir) / "eval" / f"{name}.json"
        if path.is_file():
            reports[name] = json.loads(path.read_text("utf-8"))
    return reports


def eval_command(options: EvalOptions) -> None:
    """`attncli eval`: score a split, write eval/<split>.hyp.txt and eval/<split>.json
    (eval/<split>-<data>.* for a split from --data, so the run's own scores stay; a mix of
    corpora: eval/<split>-<corpus>.* for each corpus's split)."""
    run_dir, split = options.run_dir, options.split
    set_threads(options.threads)
    translator = Translator(run_dir, options.checkpoint, options.device, options.engine,
                            exported=options.exported, no_repeat_ngram=options.no_repeat_ngram)
    trained = translator.trained
    if problem := output_folder_problem(trained.paths.eval_dir):  # before the decoding
        raise AttncliError(f"{trained.paths.eval_dir}: {problem}; eval writes its scores there")
    sets = [(name, load_split(data_cfg, split))  # every split read before decoding
            for name, data_cfg in _eval_sets(translator.config, split, options.data)]
    beam = options.beam or translator.beam
    scoring = Scoring(run_dir, split, beam, options.engine)
    results = [(*_score(translator, scoring, name, parallel), parallel) for name, parallel in sets]
    if options.json_out:
        reports = [report for report, _, _ in results]
        print(stdout_json(reports[0] if len(reports) == 1 else {"run": str(run_dir),
                                                                "results": reports}))
        return
    if len(results) == 1:
        _print_one(trained, scoring, *results[0][:2])
    else:
        _print_table(trained, scoring, results)


def _score(translator: Translator, scoring: Scoring, name: str,
           parallel) -> tuple[dict[str, Any], Path]:
    """Translate and score one set; its report, written with its hypotheses to eval/NAME.*."""
    from rich.console import Console
    from rich.progress import Progress

    trained, split, beam = translator.trained, scoring.split, scoring.beam
    err = Console(stderr=True)
    truncated: list[int] = []
    with Progress(console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task(f"translating {parallel.name} {split} (beam {beam})",
                            total=len(parallel.src))
        result = evaluate_split(
            translator, parallel.src, parallel.tgt, beam=beam,
            on_truncate=lambda i, length, kept: truncated.append(parallel.rows[i]),
            progress=lambda done: bar.advance(task, done),
        )
    _warn(truncated, source_subword_limit(translator.config.model.max_positions),
          parallel.dropped_empty)
    hyps = result.pop("hypotheses")
    report = {"run": str(scoring.run_dir), "checkpoint": trained.checkpoint.name,
              "weights_sha256": _weights_sha256(trained),  # the model card's check
              "data": parallel.name, "split": split, "engine": scoring.engine,
              "precision": decode_precision(trained), **result,
              "left_out_empty": parallel.dropped_empty, **_averaged(trained)}
    hyp_file = trained.paths.eval_dir / f"{name}.hyp.txt"
    atomic_write_text(hyp_file, "".join(f"{h}\n" for h in hyps))
    atomic_write_json(trained.paths.eval_dir / f"{name}.json", report)
    return report, hyp_file


def _print_one(trained: TrainedModel, scoring: Scoring, report: dict[str, Any],
               hyp_file: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    title = (f"{Path(scoring.run_dir).name} ({describe(trained.checkpoint)}): {report['data']} "
             f"{scoring.split}, beam {scoring.beam}"
             + _blocking(trained.config.decode))  # rich wraps table titles
    table = Table()
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("BLEU", f"{report['bleu']:.2f}")
    table.add_row("chrF", f"{report['chrf']:.2f}")
    table.add_row("sentences", str(report["sentences"]))
    table.add_row("seconds", f"{report['seconds']:.1f}")
    table.add_row("sentences/s", f"{report['sentences_per_s']}")
    out = Console()
    out.print(title, markup=False, highlight=False, soft_wrap=True)
    out.print(table)
    out.print(f"[dim]{report['signature']}[/dim]")
    out.print(f"[dim]hypotheses: {hyp_file}[/dim]")


def _print_table(trained: TrainedModel, scoring: Scoring, results: list) -> None:
    """A mix's scores: a row per corpus's split."""
    from rich.console import Console
    from rich.table import Table

    title = (f"{Path(scoring.run_dir).name} ({describe(trained.checkpoint)}): each corpus's "
             f"{scoring.split} split, beam {scoring.beam}" + _blocking(trained.config.decode))
    table = Table()
    for column in ("corpus", "BLEU", "chrF", "sentences", "seconds"):
        table.add_column(column, justify="left" if column == "corpus" else "right")
    for report, _, parallel in results:
        table.add_row(parallel.name, f"{report['bleu']:.2f}", f"{report['chrf']:.2f}",
                      str(report["sentences"]), f"{report['seconds']:.1f}")
    out = Console()
    out.print(title, markup=False, highlight=False, soft_wrap=True)
    out.print(table)
    for report, hyp_file, _ in results:
        out.print(f"[dim]{report['data']}: {report['signature']}[/dim]")
        out.print(f"[dim]hypotheses: {hyp_file}[/dim]")
