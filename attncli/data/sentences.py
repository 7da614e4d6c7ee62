"""A text as people write it → the sentences a model translates, and the layout to put them
back in.

attncli's models learn from single sentences: a paragraph given to them whole comes back with
sentences left out (docs/documents.md). So a text is taken apart into lines (every line break
kept), each line into its leading whitespace, its sentences (split in the *source* language) and
its trailing whitespace; once the sentences are translated, `Layout.rebuild` puts the text back
together around them, joining the sentences of a line the *target* language's way: nothing
between Chinese or Japanese sentences, one space between those of other languages.

The splitter is sentencex (Wikimedia's rule-based splitter: language-aware abbreviation lists,
nothing to download), with three fix-ups for what it gets wrong on our data; why it and not
another, and where it still fails: docs/sentence-splitting.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sentencex import get_sentence_boundaries

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
    found = [content[start:end].strip() for start, end in sentence_spans(content, language)]
    return [sentence for sentence in found if sentence] or [content]


Span = tuple[int, int]


def sentence_spans(text: str, language: str) -> list[Span]:
    """(start, end) of each sentence of `text` (each with the whitespace after it): sentencex's
    cuts, less those `_keep_together` rejects, plus those of `_MISSED_END`."""
    code = base_language(language)
    spans = [(b["start_index"], b["end_index"]) for b in get_sentence_boundaries(code, text)
             if text[b["start_index"]:b["end_index"]].strip()]
    return fixup_cuts(code, text, spans)


# Where sentencex is wrong on our data (docs/sentence-splitting.md): German ordinals and month
# abbreviations taken for sentence ends ("im 19. Jahrhundert", "am 3. Okt. 2020"); a speech tag
# cut from the quote before it ("“你好！”他说。"); everyday words its lists hold as abbreviations
# (Me. for Maine, Ill., No.; German mich., mag.), after which it missed "Help me. I am lost."
_DE_ORDINAL_BEFORE = re.compile(
    r"(?:(?:^|\s)(?:am|im|vom|zum|beim|ins|seit|der|die|das|den|dem|des|zur|ein|eine[mnrs]?|"
    r"(?:[dms]ein|ihr|unser|eu[e]?r)e?[mnrs]?|späten|frühen)|\d\.\s+(?:und|bis|oder))"
    r"\s+\d{1,3}\.$",
    re.IGNORECASE)
_DE_MONTH = re.compile(r"(?:Jan|Feb|Mär|Apr|Jun|Jul|Aug|Sep|Sept|Okt|Nov|Dez)\.$")
_ZH_SAY = re.compile(r"[说說道问問喊叫答]")
_CLOSERS, _OPENERS = set("\"'”’」』）)》"), set("\"'“‘「『（(《„")
_MISSED_END = {"en": re.compile(r"\b(?:me|ill|no)\.\s+(?=[A-Z])"),
               "de": re.compile(r"\b(?:mich|mag)\.\s+(?=[A-ZÄÖÜ])")}


def _keep_together(code: str, before: str, after: str) -> bool:
    """Whether the cut between two pieces (stripped) is wrong: a German ordinal or month
    abbreviation before it; or a closing quote after ! or ? before it and a speech tag after
    it (in Chinese a short piece with a verb of saying, elsewhere one in lower case)."""
    if not before or not after:
        return False
    if code == "de" and (_DE_ORDINAL_BEFORE.search(" " + before) or _DE_MONTH.search(before)):
        return True
    if not (len(before) > 1 and before[-1] in _CLOSERS and before[-2] in "!?！？"):
        return False
    if code == "zh":
        return len(after) <= 12 and after[0] not in _OPENERS and bool(_ZH_SAY.search(after))
    return after[0].islower()


def _added_cuts(code: str, text: str, spans: list[Span]) -> list[Span]:
    """The spans, each cut again after a `_MISSED_END` match inside it."""
    rule = _MISSED_END.get(code)
    if rule is None:
        return spans
    out: list[Span] = []
    for start, end in spans:
        for match in rule.finditer(text, start, end):
            out.append((start, match.end()))
            start = match.end()
        out.append((start, end))
    return out


def fixup_cuts(code: str, text: str, spans: list[Span]) -> list[Span]:
    """sentencex's spans of `text` in the base language `code`, with the cuts `_keep_together`
    rejects removed (their pieces merged) and those of `_added_cuts` added."""
    out: list[Span] = []
    for start, end in _added_cuts(code, text, spans):
        if out and _keep_together(code, text[out[-1][0]:out[-1][1]].strip(),
                                  text[start:end].strip()):
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def join_wrapped(text: str, language: str) -> str:
    """A paragraph's hard-wrapped lines as one line: each stripped, joined by a space, or by
    nothing for a language written without spaces (a line broken inside Chinese text)."""
    return sentence_joiner(language).join(part.strip() for part in text.split("\n")
                                          if part.strip())
