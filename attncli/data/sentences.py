"""A text as people write it → the sentences a model translates, and the layout to put them
back in.

attncli's models learn from single sentences: a paragraph given to them whole comes back with
sentences left out (docs/documents.md). So a text is taken apart into lines (every line break
kept), each line into its leading whitespace, its sentences (split in the *source* language) and
its trailing whitespace; once the sentences are translated, `Layout.rebuild` puts the text back
together around them, joining the sentences of a line the *target* language's way: nothing
between Chinese or Japanese sentences, one space between those of other languages.

The splitter is sentencex (Wikimedia's rule-based splitter, language-aware abbreviations, no
model to download); why it and not another: docs/sentence-splitting.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sentencex import segment

from attncli.core.text import base_language
from attncli.data.tokenizer import no_visible_text

# Languages written with no space between sentences.
UNSPACED_LANGUAGES = frozenset({"zh", "ja"})


def sentence_joiner(language: str) -> str:
    """What stands between two sentences of `language` on one line: '' for Chinese and
    Japanese, ' ' for the others."""
    return "" if base_language(language) in UNSPACED_LANGUAGES else " "


@dataclass(frozen=True)
class Line:
    """One line of a text: its leading whitespace, its sentences, its trailing whitespace
    (a blank line, or one of only invisible characters, has no sentences: `lead` is all of it)."""

    lead: str
    sentences: tuple[str, ...]
    trail: str = ""


@dataclass(frozen=True)
class Layout:
    """A text taken apart: its lines (they were joined by '\\n') and their sentences."""

    lines: tuple[Line, ...]

    @property
    def sentences(self) -> list[str]:
        """Every sentence of the text, in order."""
        return [sentence for line in self.lines for sentence in line.sentences]

    def rebuild(self, translated: Sequence[str], joiner: str) -> str:
        """The text with its sentences replaced, in order, by `translated`; the sentences of
        a line joined by `joiner` (see `sentence_joiner`), everything else as it was."""
        if len(translated) != len(self.sentences):
            raise ValueError(f"{len(translated)} translations for {len(self.sentences)} "
                             "sentences")
        parts, taken = [], 0
        for line in self.lines:
            count = len(line.sentences)
            parts.append(line.lead + joiner.join(translated[taken:taken + count]) + line.trail)
            taken += count
        return "\n".join(parts)


def split_text(text: str, language: str) -> Layout:
    """`text` taken apart into lines and sentences of `language` (see the module doc)."""
    return Layout(tuple(_split_line(line, language) for line in text.split("\n")))


def _split_line(line: str, language: str) -> Line:
    content = line.strip()
    if not content or no_visible_text(content):
        return Line(line, ())
    start = line.index(content[0])
    return Line(line[:start], tuple(split_sentences(content, language)),
                line[start + len(content):])


def split_sentences(content: str, language: str) -> list[str]:
    """The sentences of one line of `language` with no leading or trailing whitespace, in
    order, each stripped; the whitespace between them is dropped (the joiner replaces it)."""
    found: list[str] = []
    position = 0
    for piece in segment(base_language(language), content):
        piece = piece.strip()
        if not piece:
            continue
        at = content.find(piece, position)
        if at < 0:  # the splitter changed the text: keep the line whole rather than lose any
            return [content]
        if at > position and content[position:at].strip():  # text between pieces: keep it
            found.append(content[position:at].strip())
        found.append(piece)
        position = at + len(piece)
    if content[position:].strip():
        found.append(content[position:].strip())
    return found or [content]


def join_wrapped(text: str, language: str) -> str:
    """A paragraph's hard-wrapped lines as one line: each stripped, joined by a space, or by
    nothing for a language written without spaces (a line broken inside Chinese text)."""
    return sentence_joiner(language).join(part.strip() for part in text.split("\n")
                                          if part.strip())
