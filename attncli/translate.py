"""`attncli translate`: text from arguments, a file or standard input, through a run.

Each line is split into sentences, the sentences of a chunk of lines are translated in one
batch, and each line's translations are joined back into one output line, its whitespace kept
(`Translator.translate`, `split=True`); a blank line is written as it is. `--no-split` (and the
n-best and attention views, which show one sentence's search) translate each line whole, as
one sentence. `--paragraphs` reads hard-wrapped text: the lines up to a blank one are one
paragraph, written as one line.

Input is read and translated in chunks, so a pipe of any size streams through in bounded
memory. A bad line (not UTF-8, a NUL byte; without splitting also empty or only invisible
characters) is reported on stderr with its number while the others are still translated, and
its place in the output is an empty line (under --json a record with its error), so output line
k is input line k (paragraph k under --paragraphs); the command then exits 2. Output names that
could never be written are refused before the model loads once per invocation.
"""

from __future__ import annotations

import codecs
import contextlib
import itertools
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

from attncli.core.console import stdout_json
from attncli.core.device import set_threads
from attncli.core.errors import AttncliError
from attncli.core.files import output_file_problem, replacing_file
from attncli.core.plots import attention_table, plot_attention
from attncli.data.sentences import join_wrapped, split_text
from attncli.data.tokenizer import NO_TEXT, no_visible_text, text_problem
from attncli.decoding.search import Hypothesis
from attncli.runs.average import describe
from attncli.runs.layout import find_latest_run
from attncli.runs.trained import TrainedModel
from attncli.runs.translator import Translator

# Lines read and translated together from a file or a pipe (one at a time from a terminal).
CHUNK_LINES = 256


@dataclass(frozen=True)
class TranslateOptions:
    """`attncli translate`'s options as cli.py parsed them (their meaning: its --help)."""

    texts: Sequence[str] = ()
    run: Path | None = None
    beam: int | None = None
    nbest: int = 1
    input_file: Path | None = None
    output_file: Path | None = None
    json_out: bool = False
    show_attention: bool = False
    attention_png: Path | None = None
    layer: int = -1
    head: int | None = None
    device: str = "auto"
    checkpoint: str = "auto"
    engine: str = "torch"
    exported: Path | None = None
    no_repeat_ngram: int | None = None
    split: bool = True
    paragraphs: bool = False
    threads: int | None = None

    @property
    def whole_lines(self) -> bool:
        """Whether each line is translated whole, as one sentence: --no-split, and the views
        of one sentence's search (n-best lists, attention)."""
        return (not self.split or self.nbest > 1 or self.show_attention
                or self.attention_png is not None)


@dataclass
class _Input:
    """One sentence to translate, or the reason it cannot be (``problem``)."""

    number: int  # 1-based position in the input
    label: str  # how messages name it: "line 3", "argument 2", "notes.txt line 3"
    text: str
    problem: str | None = None

    @property
    def blank(self) -> bool:
        """Nothing to translate: written as it is when splitting (see `_check`)."""
        return self.problem is None and no_visible_text(self.text)


def _check(number: int, label: str, text: str, blank_ok: bool = False) -> _Input:
    """The input, with its problem if it cannot be translated; `blank_ok`: a line with no
    visible text is one to write as it is (when splitting), not a problem."""
    problem = text_problem(text)
    if blank_ok and problem and "\x00" not in text:
        problem = None
    return _Input(number, label, "" if problem and "\x00" in text else text, problem)


def _from_arguments(texts: Sequence[str], blank_ok: bool) -> Iterator[_Input]:
    for number, text in enumerate(texts, 1):
        try:  # undecodable argv bytes arrive as lone surrogates
            text.encode("utf-8")
        except UnicodeEncodeError:
            yield _Input(number, f"argument {number}", "", "not valid UTF-8")
            continue
        yield _check(number, f"argument {number}", text, blank_ok)


def _from_lines(stream: BinaryIO, prefix: str, blank_ok: bool) -> Iterator[_Input]:
    """Decode each line on its own, so one bad byte costs one line, not the whole input; an
    input that starts with a UTF-16 byte-order mark is refused whole (split at its newline
    bytes, its lines would each be one more bad line than the file has)."""
    for number, raw in enumerate(stream, 1):
        label = f"{prefix}line {number}"
        if number == 1 and raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            where = prefix.strip() or "the input"
            raise AttncliError(f"{where}: UTF-16 (it starts with its byte-order mark); attncli "
                               f"reads UTF-8: convert it first, e.g. iconv -f UTF-16 -t UTF-8")
        try:
            text = raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8")
        except UnicodeDecodeError as err:
            problem = f"not valid UTF-8 ({err.reason} at byte {err.start + 1})"
            yield _Input(number, label, "", problem)
            continue
        yield _check(number, label, text.removeprefix("\ufeff") if number == 1 else text,
                     blank_ok)


def _chunks(inputs: Iterable[_Input], size: int) -> Iterator[list[_Input]]:
    iterator = iter(inputs)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


@contextlib.contextmanager
def _output(path: Path | None) -> Iterator[TextIO]:
    """stdout, or a file written under a temporary name and renamed once complete (see
    `core.files.replacing_file`)."""
    if path is None:
        if sys.stdout is None:  # started with `>&-`
            raise AttncliError("standard output is closed: give --output FILE")
        yield sys.stdout
        return
    with replacing_file(path, "w") as f:
        yield f


def _format(item: _Input, hyps: list[Hypothesis], texts: list[str], *, nbest: int,
            json_out: bool) -> str:
    if json_out:
        return stdout_json({"line": item.number, "source": item.text, "hypotheses": texts,
                            "scores": [round(h.score, 4) for h in hyps]})
    if nbest == 1:
        return texts[0]
    return "\n".join(f"{item.number}\t{h.score:.4f}\t{t}" for h, t in zip(hyps, texts,
                                                                         strict=True))


class _AttentionView:
    """Shows the chosen translation's cross-attention: a terminal heatmap and/or PNG files."""

    def __init__(self, trained: TrainedModel, options: TranslateOptions, single: bool):
        layer, head, show = options.layer, options.head, options.show_attention
        png, to_stderr = options.attention_png, options.json_out
        layers, heads = trained.config.model.dec_layers, trained.config.model.heads
        if not -layers <= layer < layers:
            raise AttncliError(f"--layer {layer}: the model has {layers} decoder layers "
                               f"(0..{layers - 1}, or -1 for the last)")
        if head is not None and not 0 <= head < heads:
            raise AttncliError(f"--head {head}: the model has {heads} heads (0..{heads - 1})")
        self.tokenizer, self.show, self.png, self.single = trained.tokenizer, show, png, single
        self.layer, self.head = layer % layers, head
        self.console = None
        if show:
            from rich.console import Console

            self.console = Console(stderr=to_stderr)

    @property
    def wanted(self) -> bool:
        return self.show or self.png is not None

    def __call__(self, item: _Input, src_ids: list[int], best: Hypothesis) -> None:
        weights = best.attention[self.layer]  # (heads, tgt_len, src_len)
        src = self.tokenizer.src_pieces(src_ids)
        tgt = [*self.tokenizer.tgt_pieces(best.tokens), "</s>"]
        which = "mean of heads" if self.head is None else f"head {self.head}"
        title = f"{item.label}: cross-attention, decoder layer {self.layer}"
        if self.console is not None:
            shown = weights.mean(0) if self.head is None else weights[self.head]  # (tgt, src)
            self._print_table(shown.tolist(), src, tgt, f"{title}, {which}")
        if self.png is not None:
            path = self.png if self.single else self.png.with_name(
                f"{self.png.stem}-{item.number}{self.png.suffix}")
            plot_attention(weights.numpy(), src, tgt, path=path, title=title, head=self.head)
            print(f"attention heatmap saved to {path}", file=sys.stderr)


    def _print_table(self, shown: list[list[float]], src: list[str], tgt: list[str],
                     title: str) -> None:
        """A pipe gets the table as wide as it needs; a terminal gets it in blocks of source
        columns that fit (squeezed to its width, rich cut labels short and dropped the last
        columns, `</s>` among them, without a word). Widths in terminal cells."""
        from rich.cells import cell_len  # a CJK character takes two cells, not one

        label = max(map(cell_len, tgt)) + 1
        widths = [max(cell_len(p), 3) + 1 for p in src]
        if not self.console.is_terminal:
            self.console.width = max(80, label + sum(widths))
        blocks, start, used = [], 0, label
        for i, width in enumerate(widths):
            if used + width > self.console.width and i > start:
                blocks.append(range(start, i))
                start, used = i, label
            used += width
        blocks.append(range(start, len(src)))
        for block in blocks:
            part = (f" (source pieces {block.start + 1}-{block.stop} of {len(src)})"
                    if len(blocks) > 1 else "")
            self.console.print(title + part, markup=False, highlight=False, soft_wrap=True)
            self.console.print(attention_table([row[block.start:block.stop] for row in shown],
                                                src[block.start:block.stop], tgt))


def _open_inputs(options: TranslateOptions, stack: contextlib.ExitStack
                 ) -> tuple[Iterator[_Input], int]:
    """The inputs and how many lines to translate together."""
    texts, input_file, blank_ok = options.texts, options.input_file, options.split
    if input_file is not None:
        if texts:
            raise AttncliError("give sentences as arguments or with --input, not both")
        if input_file.is_dir():
            raise AttncliError(f"--input {input_file}: is a folder; give a file")
        if not input_file.exists():  # a pipe, /dev/stdin or <(...) is read as a file is
            raise AttncliError(f"--input {input_file}: no such file")
        lines = stack.enter_context(input_file.open("rb"))
        return _from_lines(lines, f"{input_file} ", blank_ok), CHUNK_LINES
    if not texts or list(texts) == ["-"]:
        interactive = sys.stdin.isatty()
        return _from_lines(sys.stdin.buffer, "", blank_ok), 1 if interactive else CHUNK_LINES
    if len(texts) == 1:  # a lone bad argument: say so before loading the model
        (only,) = _from_arguments(texts, blank_ok)
        if only.problem:
            raise AttncliError(only.problem)
    return _from_arguments(texts, blank_ok), CHUNK_LINES


def _paragraphs(inputs: Iterable[_Input], language: str) -> Iterator[_Input]:
    """Hard-wrapped lines as paragraphs: the lines up to a blank one joined into one input
    (`data.sentences.join_wrapped`; a bad line makes its paragraph bad), each blank line
    passed on as it is. A paragraph is given on as soon as its blank line is read, so text
    typed at a terminal is translated at each blank line."""
    held: list[_Input] = []
    for item in inputs:
        if not item.blank:
            held.append(item)
            continue
        if held:
            yield _paragraph(held, language)
            held = []
        yield item
    if held:
        yield _paragraph(held, language)


def _paragraph(lines: list[_Input], language: str) -> _Input:
    first, last = lines[0], lines[-1]
    label = first.label if len(lines) == 1 else f"{first.label}-{last.number}"
    bad = next((line for line in lines if line.problem is not None), None)
    if bad is not None:
        return _Input(first.number, label, "", f"{bad.label}: {bad.problem}")
    return _Input(first.number, label, join_wrapped("\n".join(x.text for x in lines), language))


def _translate_chunk(translator: Translator, good: list[_Input], *, beam: int, nbest: int,
                     need_attention: bool) -> dict[int, tuple[list[int], list[Hypothesis]]]:
    """Source ids (after any cut, with a warning) and hypotheses of the good inputs, by input
    number. An input that leaves no subword once tokenized gets a ``problem`` instead (see
    `tokenizer.NO_TEXT`; `_check` finds most of them from the text already)."""

    def warn(i: int, length: int, kept: int) -> None:
        print(f"warning: {good[i].label}: {length} subwords, only the first {kept} are "
              "translated", file=sys.stderr)

    src_ids = translator.encode([item.text for item in good], warn)
    for item, ids in zip(good, src_ids, strict=True):
        if len(ids) == 1:  # EOS alone
            item.problem = NO_TEXT
    kept = [(item, ids) for item, ids in zip(good, src_ids, strict=True) if item.problem is None]
    hyps = translator.search([ids for _, ids in kept], beam=beam, nbest=nbest,
                             attention=need_attention) if kept else []
    return {item.number: (ids, h) for (item, ids), h in zip(kept, hyps, strict=True)}


def _failure_line(item: _Input, nbest: int, json_out: bool) -> str | None:
    """What stands in the output for an input that could not be translated, so that output
    line k stays input line k (numbered n-best lines need nothing)."""
    if json_out:
        return json.dumps({"line": item.number, "source": None, "error": item.problem})
    return "" if nbest == 1 else None


def _translate_and_write(translator: Translator, chunk: list[_Input], out: TextIO, *,
                         view: _AttentionView, options: TranslateOptions, beam: int) -> int:
    """Translate a chunk's good inputs, each whole, and write every input's lines in input
    order; returns how many inputs could not be translated (each said on stderr)."""
    nbest, json_out = options.nbest, options.json_out
    good = [item for item in chunk if item.problem is None and not item.blank]
    found = _translate_chunk(translator, good, beam=beam, nbest=nbest,
                             need_attention=view.wanted) if good else {}
    for item in chunk:
        if _written_untranslated(item, out, options):
            continue
        ids, hyps = found[item.number]
        hyp_texts = [translator.detokenize(h) for h in hyps]
        out.write(_format(item, hyps, hyp_texts, nbest=nbest, json_out=json_out) + "\n")
        if view.wanted:
            out.flush()
            view(item, ids, hyps[0])
    out.flush()
    return sum(item.problem is not None for item in chunk)


def _write_documents(translator: Translator, chunk: list[_Input], out: TextIO, *,
                     options: TranslateOptions, beam: int) -> int:
    """Translate a chunk's good inputs, each split into sentences (all of the chunk's in one
    batch), and write one line per input in input order; returns how many inputs could not
    be translated (each said on stderr)."""
    good = [item for item in chunk if item.problem is None and not item.blank]
    found = dict(zip((item.number for item in good),
                     translator.translate([item.text for item in good], beam=beam),
                     strict=True)) if good else {}
    for item in chunk:
        if _written_untranslated(item, out, options):
            continue
        done = found[item.number]
        if options.json_out:
            sentences = [{"source": s.source, "translation": s.text} for s in done.sentences]
            out.write(stdout_json({"line": item.number, "source": item.text,
                                   "hypotheses": [done.text],
                                   "scores": [round(done.score, 4)],
                                   "sentences": sentences}) + "\n")
        else:
            out.write(done.text + "\n")
    out.flush()
    return sum(item.problem is not None for item in chunk)


def _written_untranslated(item: _Input, out: TextIO, options: TranslateOptions) -> bool:
    """Whether the input was one not to translate, and its place in the output written: a bad
    input (said on stderr too), or a blank one when splitting (written as it is)."""
    if item.problem is not None:
        print(f"error: {item.label}: {item.problem}", file=sys.stderr)
        if (line := _failure_line(item, options.nbest, options.json_out)) is not None:
            out.write(line + "\n")
        return True
    if not item.blank:
        return False
    if options.json_out:
        out.write(stdout_json({"line": item.number, "source": item.text,
                               "hypotheses": [item.text], "scores": [0.0],
                               "sentences": []}) + "\n")
    elif options.nbest == 1:
        out.write(item.text + "\n")
    return True


class _SeveralSentencesNote:
    """Says once, when each line is translated whole although splitting is on (the n-best
    and attention views), that a line held several sentences."""

    def __init__(self, options: TranslateOptions, language: str):
        self.wanted = options.split and options.whole_lines
        self.language = language

    def __call__(self, chunk: list[_Input]) -> None:
        if not self.wanted:
            return
        for item in chunk:
            if item.problem is None and len(split_text(item.text, self.language).sentences) > 1:
                print(f"note: {item.label} holds several sentences; --nbest, --show-attention "
                      "and --attention-png translate each line whole, as one sentence",
                      file=sys.stderr)
                self.wanted = False
                return


def _check_outputs(output_file: Path | None, attention_png: Path | None) -> None:
    """Output names that could never be written, refused before the model loads."""
    for flag, path in (("--output", output_file), ("--attention-png", attention_png)):
        if path is not None and (problem := output_file_problem(path)):
            raise AttncliError(f"{flag} {path}: {problem}")


def _check_options(options: TranslateOptions) -> None:
    """Options that contradict each other, or outputs that could never be written: refused
    before the model loads."""
    wants_view = options.show_attention or options.attention_png
    if options.engine != "torch" and wants_view:
        raise AttncliError("--show-attention and --attention-png need --engine torch")
    if (options.layer != -1 or options.head is not None) and not wants_view:
        raise AttncliError("--layer and --head choose what --show-attention or --attention-png "
                           "show: give one of them")
    if options.paragraphs and not options.split:
        raise AttncliError("--paragraphs joins lines into paragraphs to split into sentences: "
                           "it cannot go with --no-split")
    _check_outputs(options.output_file, options.attention_png)


def _open_translator(options: TranslateOptions) -> Translator:
    """The run (the latest one unless --run), loaded to decode; says which checkpoint when the
    choice was left to attncli."""
    run_dir = options.run if options.run is not None else find_latest_run(Path("runs")).root
    set_threads(options.threads)
    translator = Translator(run_dir, options.checkpoint, options.device, options.engine,
                            exported=options.exported, no_repeat_ngram=options.no_repeat_ngram)
    if options.checkpoint == "auto":  # chosen for the user: say which
        print(f"{run_dir}: checkpoint {describe(translator.trained.checkpoint)}",
              file=sys.stderr)
    return translator


def translate_command(options: TranslateOptions) -> None:
    """`attncli translate`: print ``nbest`` translations per input line (see module doc)."""
    _check_options(options)
    texts, nbest = options.texts, options.nbest
    failed = total = 0
    with contextlib.ExitStack() as stack:
        inputs, chunk_size = _open_inputs(options, stack)
        translator = _open_translator(options)
        beam = options.beam or translator.beam
        if nbest > beam:
            raise AttncliError(f"--nbest {nbest} needs --beam {nbest} or more (beam is {beam})")
        if options.paragraphs:
            inputs = _paragraphs(inputs, translator.source_language)
        view = _AttentionView(translator.trained, options,
                              single=len(texts) == 1 and texts[0] != "-")
        note = _SeveralSentencesNote(options, translator.source_language)
        out = stack.enter_context(_output(options.output_file))
        try:
            for chunk in _chunks(inputs, chunk_size):
                total += len(chunk)
                if options.whole_lines:
                    note(chunk)
                    failed += _translate_and_write(translator, chunk, out, view=view,
                                                   options=options, beam=beam)
                else:
                    failed += _write_documents(translator, chunk, out, options=options,
                                               beam=beam)
        except BrokenPipeError:  # `... | head`: the reader is gone, nothing left to do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return
    if failed:
        left = " (their output lines are left empty)" if nbest == 1 and not options.json_out \
            else ""
        raise AttncliError(f"{failed} of {total} inputs could not be translated (see above)"
                           f"{left}")
