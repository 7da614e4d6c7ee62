"""The model card: a README.md that says what a run's model is, from what the run folder
recorded, for the run folder (when training ends, and `attncli card RUN`) and every export.

    attncli card runs/small [--checkpoint auto]       rewrites runs/small/README.md

It says the languages; the training data corpus by corpus, with the pairs used and the
licence, and a line at the top when a licence forbids commercial use (NC), asks derived works
to keep it (SA) or allows none (ND); the model's shape and size; the updates, minutes,
precision and machine (machine.json, from attncli 0.6: older runs' cards leave them out); the
`eval/` scores of this very checkpoint (same weights' SHA-256, or same name where an older eval
file recorded none) with their sacreBLEU signatures; the translations of `train.examples` by
this checkpoint; the attncli version and the config. Every figure is read from the run folder
or the weights, none is estimated, and no absolute path is written: a card travels with a
package to other machines.

A run made with `--init-from` lists its parents' corpora too (its parent.json chain, each
parent looked for where it was given, else beside the run), and the flags are computed over all
of them; a parent not found is named, with its corpora left to check by hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

import torch
import yaml

from attncli.core.config import corpora_of
from attncli.core.config_files import load_config
from attncli.core.device import resolve_decode_precision
from attncli.core.errors import AttncliError
from attncli.core.files import atomic_write_text
from attncli.core.licences import CHECK_THE_TERMS, Licence
from attncli.core.text import language_name
from attncli.core.version import __version__
from attncli.decoding.search import SearchSettings
from attncli.decoding.texts import translate_texts
from attncli.runs.average import averaged_facts
from attncli.runs.checkpoints import weights_digest
from attncli.runs.layout import RunPaths, read_machines, read_parent_record, saved_state
from attncli.runs.trained import TrainedModel, load_trained_model

FLAG_WORDS = {"NC": "non-commercial", "SA": "share-alike", "ND": "no derivatives"}


@dataclass(frozen=True)
class CorpusTerms:
    """One training corpus as the card lists it: `pairs` kept for training (None: the run did
    not record it), its licence, and the run it trained (None: this one, else the name of the
    parent it was fine-tuned from)."""

    name: str
    dataset: str
    pairs: int | None
    licence: Licence
    run: str | None = None
    weight: float = 1.0


@dataclass
class Export:
    """What an export adds to the card: its format and stored weight type."""

    form: str
    quantization: str
    notes: list[str] = field(default_factory=list)


def card_command(run_dir: Path, checkpoint: str = "auto") -> Path:
    """`attncli card`: (re)write RUN/README.md for `checkpoint`; returns its path."""
    trained = load_trained_model(Path(run_dir), torch.device("cpu"), checkpoint)
    atomic_write_text(trained.paths.card, card_text(trained))
    print(f"model card of {trained.checkpoint.name} written to {trained.paths.card}")
    return trained.paths.card


def card_at_end(paths: RunPaths) -> str:
    """When training ends: the card of the checkpoint eval and translate use by default; the
    log's line. A card that cannot be written leaves the finished run as it is (the line says
    how to write it later) rather than failing it."""
    try:
        trained = load_trained_model(paths.root, torch.device("cpu"), "auto")
        atomic_write_text(paths.card, card_text(trained))
    except (AttncliError, OSError) as err:
        return f"model card not written ({err}); `attncli card {paths.root}` writes it"
    return f"model card of {trained.checkpoint.name} written to {paths.card}"


def card_text(trained: TrainedModel, export: Export | None = None) -> str:
    """The card of `trained` (its checkpoint's weights loaded), as Markdown."""
    config, paths = trained.config, trained.paths
    digest = weights_digest(trained.checkpoint)
    ancestors, missing = lineage(paths)
    corpora = data_sources([paths, *ancestors])
    title = (f"# {paths.root.name}: {language_name(config.data.src)} → "
             f"{language_name(config.data.tgt)} translation")
    parts = [title, _made_by(trained, digest, export), *_flag_lines(corpora), *missing,
             _languages(config), _data_section(corpora), _model_section(trained, export),
             _training_section(paths, trained.checkpoint), _scores_section(paths, trained,
                                                                           digest),
             _examples_section(trained), _config_section(config)]
    return "\n\n".join(part for part in parts if part) + "\n"


def data_sources(runs: list[RunPaths]) -> list[CorpusTerms]:
    """The corpora the weights learnt from, run by run: the first run's own, then each
    ancestor's (`lineage`), labelled with its run."""
    found = []
    for depth, paths in enumerate(runs):
        origin = None if depth == 0 else paths.root.name
        found.extend(_run_corpora(paths, origin))
    return found


def lineage(paths: RunPaths) -> tuple[list[RunPaths], list[str]]:
    """The run folders a fine-tuned run descends from, parent first (its parent.json chain),
    and a line for the first ancestor not found from here (its data cannot be listed)."""
    found: list[RunPaths] = []
    record = read_parent_record(paths)
    while record is not None:
        given = Path(record["run"])
        beside = paths.root.parent / given.name
        folder = next((f for f in (given, beside) if (f / "config.yaml").is_file()), None)
        if folder is None:
            return found, [f"**Fine-tuned from `{_no_path(str(given))}`**, not found from here: "
                           f"its training data and theirs are not listed; check their terms."]
        found.append(RunPaths(folder))
        record = read_parent_record(found[-1])
    return found, []


def _run_corpora(paths: RunPaths, origin: str | None) -> list[CorpusTerms]:
    """One run's corpora: corpora.json where the run wrote it (every run from attncli 0.6, a
    mix's before), else its config alone (pairs not recorded)."""
    config = load_config(paths.config)
    reports = _read_json(paths.corpora)
    kept = ({r.get("name"): r.get("kept") for r in reports if isinstance(r, dict)}
            if isinstance(reports, list) else {})
    return [CorpusTerms(_no_path(corpus.name), _no_path(corpus.data.dataset),
                        pairs=kept.get(corpus.name),
                        licence=Licence(corpus.licence, corpus.attribution), run=origin,
                        weight=corpus.weight)
            for corpus in corpora_of(config.data)]


def _made_by(trained: TrainedModel, digest: str, export: Export | None) -> str:
    what = (f"{export.form} export ({export.quantization} weights)" if export else
            "run folder")
    return (f"Model card of the {what}, written by attncli {__version__} from the run "
            f"`{trained.paths.root.name}`, checkpoint `{trained.checkpoint.name}` (weights "
            f"SHA-256 `{digest[:16]}…`). What follows is read from the run folder, the examples "
            f"translated by that checkpoint.")


def _flag_lines(corpora: list[CorpusTerms]) -> list[str]:
    """The warning at the top: restrictive licences (by identifier) and terms to check."""
    lines = []
    flagged = [(c, c.licence.flags()) for c in corpora if c.licence.flags()]
    if flagged:
        flags = sorted({f for _, fs in flagged for f in fs}, key=list(FLAG_WORDS).index)
        words = ", ".join(f"{FLAG_WORDS[f]} ({f})" for f in flags)
        which = "; ".join(f"{_label(c)}: {c.licence.spdx}" for c, _ in flagged)
        lines.append(f"**Licence: {words}.** This model learnt from data whose licence "
                     f"restricts its use: {which}. NC: no commercial use; SA: adaptations are "
                     f"shared under the same licence; ND: no adaptations. Whether a model is "
                     f"an adaptation of its data is for its user to judge.")
    unclear = [c for c in corpora if c.licence.spdx is None]
    if unclear:
        lines.append(f"**{CHECK_THE_TERMS.capitalize()}** of " + "; ".join(
            f"{_label(c)} ({c.licence.text or 'no licence stated'})" for c in unclear)
            + ": attncli cannot tell from free text what they allow.")
    return lines


def _label(corpus: CorpusTerms) -> str:
    return corpus.name if corpus.run is None else f"{corpus.name} (parent run {corpus.run})"


def _languages(config) -> str:
    data = config.data
    script = (f"; Chinese read in {data.chinese_script} script (OpenCC)"
              if data.chinese_script else "")
    return (f"## Languages\n\nFrom {language_name(data.src)} (`{data.src}`) to "
            f"{language_name(data.tgt)} (`{data.tgt}`){script}.")


def _data_section(corpora: list[CorpusTerms]) -> str:
    rows = ["| corpus | data set | pairs used | licence | attribution |",
            "| --- | --- | --- | --- | --- |"]
    for c in corpora:
        pairs = f"{c.pairs:,}" if isinstance(c.pairs, int) else "not recorded by this run"
        if c.weight != 1:
            pairs += f", each seen {c.weight:g} times an epoch"
        rows.append(f"| {_label(c)} | {c.dataset} | {pairs} | {c.licence.describe()} | "
                    f"{c.licence.attribution or '—'} |")
    return ("## Training data\n\n" + "\n".join(rows) + "\n\nPairs used: the training pairs "
            "kept after the length limit and the corpus's filters.")


def _model_section(trained: TrainedModel, export: Export | None) -> str:
    m, tok = trained.config.model, trained.config.tokenizer
    params = trained.model.num_parameters() if trained.model is not None else None
    lines = [f"- Transformer encoder-decoder: {m.enc_layers} encoder and {m.dec_layers} decoder "
             f"layers, width {m.d_model}, {m.heads} heads, feed-forward {m.ff_dim}, "
             f"{m.norm}-norm, tied embeddings: {str(m.tie_embeddings).lower()}, positions up to "
             f"{m.max_positions}",
             f"- {params:,} parameters" if params is not None else "",
             f"- SentencePiece {tok.type}, {tok.vocab_size:,} pieces, "
             f"{'one model for both languages' if tok.joint else 'one model per language'}",
             f"- checkpoint `{trained.checkpoint.name}`" + _averaged_of(trained.checkpoint)]
    if export is not None:
        lines.append(f"- exported as {export.form}, weights stored as {export.quantization}")
        lines.extend(f"- {note}" for note in export.notes)
    return "## Model\n\n" + "\n".join(line for line in lines if line)


def _averaged_of(folder: Path) -> str:
    facts = averaged_facts(folder)
    steps = facts.get("averaged_steps")
    return f": the mean of the weights of steps {', '.join(map(str, steps))}" if steps else ""


def _training_section(paths: RunPaths, checkpoint: Path) -> str:
    """Updates and minutes from the checkpoint (an average: its newest step's), precision and
    machine from machine.json."""
    state = saved_state(checkpoint)
    steps = averaged_facts(checkpoint).get("averaged_steps")
    if steps:
        state = saved_state(paths.step_dir(max(steps))) or {"step": max(steps)}
    lines = []
    if "step" in state:
        lines.append(f"- {state['step']:,} updates")
    if isinstance(state.get("elapsed_s"), (int, float)):
        lines.append(f"- {state['elapsed_s'] / 60:.1f} minutes of training (validation and "
                     "saving not counted)")
    sessions = read_machines(paths)
    for entry in sessions:
        lines.append(f"- {_machine_line(entry, len(sessions) > 1)}")
    if not sessions:
        lines.append("- machine and precision: not recorded (the run was made before attncli "
                     "0.6 recorded them)")
    return "## Training\n\n" + "\n".join(lines)


def _machine_line(entry: dict[str, Any], several: bool) -> str:
    """One training session's machine. Sessions recorded before issue 63 have only the name,
    cores and bf16; the host facts (`host_facts`) are said where recorded, so an old entry reads
    as it always did."""
    where = f"from update {entry.get('from_step', 0):,}: " if several else ""
    device = entry.get("device_name") or entry.get("device")
    speed = calibration_fact(entry)
    if entry.get("device") == "cpu":
        cores = f"{entry.get('cpu_cores')} cores"
        if entry.get("cpu_bf16") and "cpu_flags" not in entry:  # newer entries name the flags
            cores += ", AVX-512-BF16 or AMX"
        cpu = f" ({'; '.join([cores, *host_facts(entry), *speed])})"
    else:
        facts = host_facts(entry)
        cpu = ((f" ({speed[0]})" if speed else "") + f", CPU {entry.get('cpu')}"
               + (f" ({'; '.join(facts)})" if facts else ""))
    processes = f", {entry['processes']} processes" if entry.get("processes", 1) > 1 else ""
    return (f"{where}trained in {entry.get('precision', 'an unrecorded precision')} on "
            f"{device}{cpu}{processes}; torch {entry.get('torch')}, {entry.get('system')}")


def host_facts(entry: dict[str, Any]) -> list[str]:
    """What tells apart hosts of one CPU name, as machine.json recorded it (issue 63): the
    CPU's vendor, family, model and stepping, the CPUs the session could use and threads per
    core, its kernel flags and torch's threads; each left out where the entry lacks it (an
    older one has none), so no "None" is ever printed."""
    facts = []
    identity = [(f"{label} {entry[key]}" if label else str(entry[key]))
                for label, key in (("", "cpu_vendor"), ("family", "cpu_family"),
                                   ("model", "cpu_model"), ("stepping", "cpu_stepping"))
                if entry.get(key) is not None]
    if identity:
        facts.append(" ".join(identity))
    cpus = []
    if isinstance(entry.get("usable_cpus"), int):
        quota = entry.get("cgroup_cpu_quota")
        cpus.append(_count(entry["usable_cpus"], "usable CPU")
                    + (f" (cgroup quota {quota:g})" if isinstance(quota, (int, float)) else ""))
    if isinstance(entry.get("threads_per_core"), int):
        cpus.append(_count(entry["threads_per_core"], "thread") + " per core")
    if cpus:
        facts.append(", ".join(cpus))
    if entry.get("cpu_flags"):
        facts.append(", ".join(entry["cpu_flags"]))
    if isinstance(entry.get("torch_threads"), int):
        facts.append(_count(entry["torch_threads"], "torch thread"))
    return facts


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def calibration_fact(entry: dict[str, Any]) -> list[str]:
    """The session's matrix-product calibration, as [one phrase], or [] where none was
    recorded."""
    calibration = entry.get("calibration")
    if not isinstance(calibration, dict) or not isinstance(calibration.get("tflops"),
                                                           (int, float)):
        return []
    precision = f" {calibration['precision']}" if calibration.get("precision") else ""
    return [f"{calibration['tflops']:.3g} TFLOP/s{precision} measured at start"]


def _scores_section(paths: RunPaths, trained: TrainedModel, digest: str) -> str:
    """`eval/*.json` of these weights: the same SHA-256, or (files written before eval
    recorded it) the same checkpoint name."""
    rows = []
    for report_file in sorted(paths.eval_dir.glob("*.json")):
        report = _read_json(report_file)
        if not isinstance(report, dict) or "bleu" not in report:
            continue
        same = (report.get("weights_sha256") == digest if "weights_sha256" in report
                else report.get("checkpoint") == trained.checkpoint.name)
        if same:
            rows.append(f"| {report.get('data')} {report.get('split')} | {report.get('engine')} "
                        f"| {report['bleu']:.2f} | {report.get('chrf', float('nan')):.2f} | "
                        f"`{report.get('signature')}` |")
    if not rows:
        return ("## Scores\n\nNo `attncli eval` score of this checkpoint in the run folder "
                f"(`attncli eval {paths.root.name}` writes them).")
    return ("## Scores\n\n`attncli eval` of this checkpoint (sacreBLEU):\n\n| data | engine | "
            "BLEU | chrF | BLEU signature |\n| --- | --- | --- | --- | --- |\n"
            + "\n".join(rows))


def _examples_section(trained: TrainedModel) -> str:
    """`train.examples` translated by this checkpoint as `attncli translate` would (the run's
    beam and limits, fp32 on the CPU)."""
    examples, decode = trained.config.train.examples, trained.config.decode
    if not examples or trained.model is None:
        return ""
    settings = SearchSettings.from_config(decode, beam=decode.beam, nbest=1)
    found = translate_texts(trained.model, trained.tokenizer, examples, settings,
                            device=trained.device, precision=resolve_decode_precision(
                                trained.config.train.precision, trained.device))
    rows = [f"| {_cell(src)} | {_cell(trained.tokenizer.decode_tgt(hyps[0].tokens))} |"
            for src, hyps in zip(examples, found, strict=True)]
    return (f"## Examples\n\n`train.examples` translated by this checkpoint (beam "
            f"{decode.beam}):\n\n| source | translation |\n| --- | --- |\n" + "\n".join(rows))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _config_section(config) -> str:
    text = yaml.safe_dump(_no_path(config.to_dict()), sort_keys=False, allow_unicode=True)
    return (f"## Made with\n\nattncli {__version__}, with this config (config.yaml; absolute "
            f"paths cut to their last part):\n\n```yaml\n{text}```")


def _no_path(value: Any) -> Any:
    """`value` with every absolute path cut to its last part (`…/name`): a card leaves the
    machine it was written on."""
    if isinstance(value, dict):
        return {key: _no_path(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_no_path(item) for item in value]
    if isinstance(value, str) and PurePath(value).is_absolute():
        return f"…/{PurePath(value).name}"
    return value


def _read_json(path: Path) -> Any:
    """A JSON file of the run folder, or None where it is missing or damaged (the card then
    leaves out what it would have said)."""
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
