"""HTML in, HTML out: the text of each block to translate, and the page rebuilt around it.

The server's ``"format": "html"`` needs three things this module does, and nothing else.
`parse_html` reads a page as an HTML tokenizer does (the standard library's `html.parser`:
chosen by measurement, docs/html-translation.md) and lists the text of each block-level element
(`Block`: plain text, entities decoded, with the inline tags inside it as `TaggedRun` character
spans). `HtmlDocument.rebuild` puts translations back: every byte outside the translated text
stays as it was sent (attributes, comments, `<script>`, `<style>`, `<code>`, `<pre>`,
`<textarea>`, anything under ``translate="no"``), and each inline tag goes around the
translated words its source words are aligned to. `char_alignment` turns a sentence's
cross-attention into that character alignment, the way Bergamot places tags with Marian's
alignments. A tag is never dropped: with no usable alignment it goes to the block's start or
end, and nested tags are placed so that the output nests as the input did.
"""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

# Elements whose start or end ends the text before them: each holds blocks of its own.
BLOCK_TAGS = frozenset({
    "address", "article", "aside", "base", "blockquote", "body", "caption", "center", "col",
    "colgroup", "dd", "details", "dialog", "dir", "div", "dl", "dt", "fieldset", "figcaption",
    "figure", "footer", "form", "frameset", "h1", "h2", "h3", "h4", "h5", "h6", "head",
    "header", "hgroup", "hr", "html", "legend", "li", "link", "main", "menu", "meta", "nav",
    "noscript", "ol", "optgroup", "option", "p", "pre", "section", "summary", "table", "tbody",
    "td", "template", "tfoot", "th", "thead", "title", "tr", "ul",
})
# Elements whose content is never translated and is kept byte for byte.
SKIP_TAGS = frozenset({"script", "style", "code", "pre", "textarea"})
# Elements that never have content (HTML's void elements): no end tag to wait for.
VOID_TAGS = frozenset({
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
    "source", "track", "wbr",
})
_WORD = re.compile(r"\w", re.UNICODE)
# The decoder layer whose attention `head_mean` reads by default: the penultimate one put 33 of
# 48 tags around the right words, the last 24, all layers' mean 31 (docs/html-translation.md).
ALIGNMENT_LAYER: int | None = -2


@dataclass(frozen=True)
class TaggedRun:
    """An inline element inside a block: the span [start, end) of the block's text it wraps.

    `open_tag` and `close_tag` are the exact source text. A run with `close_tag == ""` and
    `start == end` is a point: a void tag (`<br>`, `<img>`), a comment, an element kept whole
    (an inline `<code>...</code>` or ``translate="no"`` element, its content included in
    `open_tag`), or a tag the source leaves unmatched (an unclosed `<b>`, a stray `</b>`).
    """

    start: int
    end: int
    open_tag: str
    close_tag: str
    parent: int | None = None  # index in Block.runs of the run that encloses this one


@dataclass(frozen=True)
class Block:
    """One block-level element's translatable text, and the inline tags inside it."""

    text: str
    runs: tuple[TaggedRun, ...]


@dataclass(frozen=True)
class BlockTranslation:
    """A block's translated plain text (escaped on output) and its character alignment:
    pairs (index in Block.text, index in text). Empty: tags go to the block's start or end."""

    text: str
    alignment: Sequence[tuple[int, int]] = ()


@dataclass
class _Event:
    """One token of the source: its kind, its source offset, and what kind of token it is."""

    kind: str  # start, end, startend, data, comment, other
    offset: int
    tag: str = ""
    attrs: list[tuple[str, str | None]] = field(default_factory=list)
    text: str = ""  # decoded text of a data token


class _Tokenizer(HTMLParser):
    """The standard library's tokenizer, recording each token with its source offset, so that
    any span of the source can be given back exactly as it was sent."""

    def __init__(self, source: str):
        super().__init__(convert_charrefs=True)
        self.events: list[_Event] = []
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", source)]

    def _offset(self) -> int:
        line, column = self.getpos()
        return self._line_starts[line - 1] + column

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.events.append(_Event("start", self._offset(), tag, attrs))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.events.append(_Event("startend", self._offset(), tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        self.events.append(_Event("end", self._offset(), tag))

    def handle_data(self, data: str) -> None:
        self.events.append(_Event("data", self._offset(), text=data))

    def handle_comment(self, data: str) -> None:
        self.events.append(_Event("comment", self._offset()))

    def handle_decl(self, decl: str) -> None:
        self.events.append(_Event("other", self._offset()))

    def handle_pi(self, data: str) -> None:
        self.events.append(_Event("other", self._offset()))

    def unknown_decl(self, data: str) -> None:
        self.events.append(_Event("other", self._offset()))


def _tokens(source: str) -> list[tuple[_Event, str]]:
    """Each token with its raw source text; the raw texts joined are the source, exactly."""
    tokenizer = _Tokenizer(source)
    try:
        tokenizer.feed(source)
        tokenizer.close()
    except Exception:  # never seen; a page the tokenizer cannot read is kept as it is
        return [(_Event("other", 0), source)] if source else []
    events = [e for e in tokenizer.events if 0 <= e.offset <= len(source)]
    if not events or events[0].offset > 0:
        events.insert(0, _Event("other", 0))
    for k, event in enumerate(events):
        # What the tokenizer could not finish it gives back as text; a browser reads a "<!--"
        # with no "-->" as a comment to the end of the page, and "<!x", "<?x", "</x" with no
        # ">" as a comment too: they are kept as sent, never translated.
        if event.kind == "data" and source.startswith(("<!", "<?", "</"), event.offset):
            event.kind = "comment"
            if source.startswith("<!--", event.offset):
                del events[k + 1:]
                break
    ends = [e.offset for e in events[1:]] + [len(source)]
    return [(e, source[e.offset:end]) for e, end in zip(events, ends, strict=True)]


def _no_translate(event: _Event) -> bool:
    """An element the page asks to keep: translate="no", or Google's class="notranslate"."""
    for name, value in event.attrs:
        value = (value or "").strip().lower()
        if name == "translate" and value == "no":
            return True
        if name == "class" and "notranslate" in value.split():
            return True
    return False


def _kept_whole(event: _Event) -> bool:
    return event.kind == "start" and event.tag not in VOID_TAGS and (
        event.tag in SKIP_TAGS or _no_translate(event))


def _skip_end(tokens: list[tuple[_Event, str]], i: int, inline: bool) -> int:
    """The index after the end of the element kept whole that starts at token i: its matching
    end tag, or (for an inline one left open) the next block-level tag, or the end."""
    tag, depth = tokens[i][0].tag, 0
    for j in range(i + 1, len(tokens)):
        event = tokens[j][0]
        if event.tag == tag and event.kind == "start":
            depth += 1
        elif event.tag == tag and event.kind == "end":
            if depth == 0:
                return j + 1
            depth -= 1
        elif inline and event.tag in BLOCK_TAGS and event.kind in ("start", "end"):
            return j
    return len(tokens)


def _segments(tokens: list[tuple[_Event, str]]) -> list[tuple[bool, list[tuple[_Event, str]]]]:
    """The tokens cut into (inline?, tokens) stretches: inline stretches may hold a block's text;
    the others (block-level tags, whole kept elements, doctypes) are passed through."""
    out: list[tuple[bool, list[tuple[_Event, str]]]] = []
    run: list[tuple[_Event, str]] = []
    i = 0
    while i < len(tokens):
        event, raw = tokens[i]
        boundary = event.kind == "other" or (
            event.kind in ("start", "end", "startend") and event.tag in BLOCK_TAGS)
        if _kept_whole(event):
            inline = event.tag not in BLOCK_TAGS
            j = _skip_end(tokens, i, inline)
            whole = "".join(r for _, r in tokens[i:j])
            if inline:  # one atom inside the text around it
                run.append((_Event("atom", event.offset), whole))
            else:
                out += [(True, run), (False, [(event, whole)])]
                run = []
            i = j
            continue
        if boundary:
            out += [(True, run), (False, [(event, raw)])]
            run = []
        else:
            run.append((event, raw))
        i += 1
    out.append((True, run))
    return [(inline, part) for inline, part in out if part]


def _block(tokens: list[tuple[_Event, str]]) -> Block | None:
    """The text and inline tags of an inline stretch; None when it has no visible text."""
    text: list[str] = []
    length = 0
    runs: list[dict[str, Any]] = []
    stack: list[int] = []  # indices in runs of the open inline elements

    def point(raw: str) -> None:
        runs.append({"start": length, "end": length, "open": raw, "close": "",
                     "parent": stack[-1] if stack else None})

    line_break = False  # after a <br> with no space around it: "one<br>two" is two words
    for event, raw in tokens:
        if event.kind == "data":
            if line_break and event.text and not event.text[0].isspace():
                text.append("\n")
                length += 1
            line_break = False
            text.append(event.text)
            length += len(event.text)
        elif event.kind == "start" and event.tag not in VOID_TAGS:
            point(raw)
            runs[-1]["tag"] = event.tag
            stack.append(len(runs) - 1)
        elif event.kind == "end" and any(runs[k].get("tag") == event.tag for k in stack):
            while True:  # close it; elements left open inside it stay points
                k = stack.pop()
                if runs[k]["tag"] == event.tag:
                    runs[k].update(end=length, close=raw)
                    break
        else:  # void and self-closed tags, comments, atoms, stray end tags
            if event.tag == "br" and event.kind != "end":
                line_break = line_break or not _ends_with_space(text)
            point(raw)
    plain = "".join(text)
    if not plain.strip():
        return None
    for r in runs:  # an element left open is a point: what it held belongs to its parent
        while r["parent"] is not None and not runs[r["parent"]]["close"]:
            r["parent"] = runs[r["parent"]]["parent"]
    return Block(plain, tuple(TaggedRun(r["start"], r["end"], open_tag=r["open"],
                                        close_tag=r["close"], parent=r["parent"])
                              for r in runs))


def _ends_with_space(parts: list[str]) -> bool:
    last = "".join(parts[-2:])
    return not last or last[-1].isspace()


class HtmlDocument:
    """A parsed page: `blocks` to translate, in order, and `rebuild` to put translations back.

    Blocks with no visible text are not listed and are kept as they are."""

    def __init__(self, parts: list[str | Block], raws: Sequence[str]):
        self._parts = parts
        self.blocks: list[Block] = [p for p in parts if isinstance(p, Block)]
        self._raws = list(raws)  # each block's source, kept when its text comes back unchanged

    def rebuild(self, translated: Sequence[BlockTranslation]) -> str:
        """The page with each block's text replaced by its translation, its inline tags placed
        by the alignment; every other byte as it was sent."""
        if len(translated) != len(self.blocks):
            raise ValueError(f"{len(translated)} translations for {len(self.blocks)} blocks")
        out: list[str] = []
        done = 0
        for part in self._parts:
            if isinstance(part, Block):
                out.append(self._raws[done] if translated[done].text == part.text
                           else place_runs(part, translated[done]))
                done += 1
            else:
                out.append(part)
        return "".join(out)


def parse_html(source: str) -> HtmlDocument:
    """Reads `source` as an HTML tokenizer does; never raises, whatever the markup."""
    parts: list[str | Block] = []
    raws: list[str] = []
    for inline, tokens in _segments(_tokens(source)):
        raw = "".join(r for _, r in tokens)
        block = _block(tokens) if inline else None
        if block is None:
            if parts and isinstance(parts[-1], str):
                parts[-1] += raw
            else:
                parts.append(raw)
        else:
            parts.append(block)
            raws.append(raw)
    return HtmlDocument(parts, raws)


# -- placing the tags ---------------------------------------------------------------------------


@dataclass
class _Placed:
    """A run's span in the translation, and the runs placed inside it."""

    run: TaggedRun
    order: int
    start: int
    end: int
    children: list[_Placed] = field(default_factory=list)


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def _word_span(target: str, lo: int, hi: int) -> tuple[int, int]:
    """[lo, hi) widened to whole words of the target (word characters on either side)."""
    while lo > 0 and _WORD.match(target[lo - 1]) and _WORD.match(target[lo]):
        lo -= 1
    while hi < len(target) and _WORD.match(target[hi]) and _WORD.match(target[hi - 1]):
        hi += 1
    return lo, hi


class _Aligner:
    """Looks up which target characters a block's source characters are aligned to."""

    def __init__(self, source: str, target: str, alignment: Sequence[tuple[int, int]]):
        self.source, self.target = source, target
        self.links: dict[int, list[int]] = {}
        for s, t in alignment:
            if 0 <= s < len(source) and 0 <= t < len(target) and not target[t].isspace():
                self.links.setdefault(int(s), []).append(int(t))
        self.aligned = sorted(self.links)  # the aligned source positions, for bisect
        core = target.strip()
        self.lo = len(target) - len(target.lstrip()) if core else 0
        self.hi = self.lo + len(core)
        src_core = source.strip()
        self.src_lo = len(source) - len(source.lstrip())
        self.src_hi = self.src_lo + len(src_core)

    def span(self, run: TaggedRun) -> tuple[int, int] | None:
        """The target words a source span is aligned to; None when none are."""
        if run.start <= self.src_lo and run.end >= self.src_hi:
            return self.lo, self.hi  # the whole text: the whole translation, aligned or not
        targets = [t for s in range(run.start, run.end) for t in self.links.get(s, ())]
        if not targets:
            return None
        words = [t for t in targets if _WORD.match(self.target[t])]
        wrapped = self.source[run.start:run.end]
        if words and all(_WORD.match(c) or c.isspace() for c in wrapped):
            # a sentence's last "." attends to the last word: "<b>Freund.</b>" would take it in
            targets = words
        return _word_span(self.target, min(targets), max(targets) + 1)

    def point(self, position: int) -> int | None:
        """Where a point at a source position goes: before the target word aligned to the
        nearest aligned source character after it, or after the one aligned to the nearest
        before it (whichever is nearer); None when nothing is aligned."""
        at = bisect.bisect_left(self.aligned, position)
        after = self.aligned[at] if at < len(self.aligned) else None
        before = self.aligned[at - 1] if at > 0 else None
        if after is not None and (before is None or after - position <= position - 1 - before):
            return _word_span(self.target, min(self.links[after]), min(self.links[after]) + 1)[0]
        if before is not None:
            return _word_span(self.target, max(self.links[before]),
                              max(self.links[before]) + 1)[1]
        return None

    def fallback(self, run: TaggedRun, lo: int, hi: int) -> int:
        """The start or end of [lo, hi): the start for runs in the source's first half."""
        middle = (self.src_lo + self.src_hi) / 2
        return lo if (run.start + run.end) / 2 <= middle else hi


def _fit(wanted: tuple[int, int] | None, run: TaggedRun, parent: _Placed,
         aligner: _Aligner) -> tuple[int, int]:
    """A run's span, clamped inside its parent and kept clear of its placed siblings, so that
    the output nests; the parent's start or end when nothing is left of it."""
    if wanted is not None and run.close_tag:
        lo, hi = max(wanted[0], parent.start), min(wanted[1], parent.end)
        for sibling in parent.children:
            if sibling.start == sibling.end or hi <= sibling.start or lo >= sibling.end:
                continue
            if lo < sibling.start:
                hi = sibling.start
            elif hi > sibling.end:
                lo = sibling.end
            else:
                lo = hi = -1
                break
        if lo < hi and aligner.target[lo:hi].strip():
            return lo, hi
    elif wanted is not None:  # a point
        at = min(max(wanted[0], parent.start), parent.end)
        for sibling in parent.children:
            if sibling.start < at < sibling.end:
                at = sibling.start if at - sibling.start <= sibling.end - at else sibling.end
        return at, at
    at = aligner.fallback(run, parent.start, parent.end)
    return at, at


def _emit(node: _Placed, target: str, out: list[str]) -> None:
    """The run's tags and the target text it wraps, its children nested inside it."""
    out.append(node.run.open_tag)
    cursor = node.start
    for child in sorted(node.children,
                        key=lambda c: (c.start, c.start != c.end, c.order)):
        at = max(child.start, cursor)
        out.append(_escape(target[cursor:at]))
        child.start, child.end = at, max(at, child.end)
        _emit(child, target, out)
        cursor = child.end
    out.append(_escape(target[cursor:max(cursor, node.end)]))
    out.append(node.run.close_tag)


def _keep_outer_space(source: str, translation: BlockTranslation) -> BlockTranslation:
    """The source's leading and trailing whitespace (layout: newlines, indentation) kept when
    the translation comes without it; the alignment shifted to match."""
    text = translation.text
    if not text.strip():
        return translation
    lead = source[:len(source) - len(source.lstrip())] if text == text.lstrip() else ""
    trail = source[len(source.rstrip()):] if text == text.rstrip() else ""
    if not lead and not trail:
        return translation
    return BlockTranslation(lead + text + trail,
                            [(s, t + len(lead)) for s, t in translation.alignment])


def place_runs(block: Block, translation: BlockTranslation) -> str:
    """The block's translation as HTML: escaped text, each inline tag placed around the words
    aligned to the words it wrapped (outer tags first, inner ones clamped inside them)."""
    translation = _keep_outer_space(block.text, translation)
    target = translation.text
    aligner = _Aligner(block.text, target, translation.alignment)
    root = _Placed(TaggedRun(0, len(block.text), "", ""), -1, 0, len(target))
    placed: list[_Placed] = []
    for order, run in enumerate(block.runs):  # parents come before their children
        parent = root if run.parent is None else placed[run.parent]
        wanted = aligner.span(run) if run.close_tag else _point_span(aligner, run)
        start, end = _fit(wanted, run, parent, aligner)
        node = _Placed(run, order, start, end)
        parent.children.append(node)
        placed.append(node)
    out: list[str] = []
    _emit(root, target, out)
    return "".join(out)


def _point_span(aligner: _Aligner, run: TaggedRun) -> tuple[int, int] | None:
    if run.start <= aligner.src_lo:
        return aligner.lo, aligner.lo
    if run.start >= aligner.src_hi:
        return aligner.hi, aligner.hi
    at = aligner.point(run.start)
    return None if at is None else (at, at)


# -- alignment from attention -------------------------------------------------------------------


def piece_spans(text: str, pieces: Sequence[str]) -> list[tuple[int, int]]:
    """Each SentencePiece piece's character span [start, end) in `text` ('▁' marks a word start
    and is no character of its own). Pieces the text does not hold verbatim (normalized
    characters, <unk>) take the next characters of their length, so that spans stay in order."""
    spans: list[tuple[int, int]] = []
    cursor = 0
    for piece in pieces:
        word = piece.replace("\u2581", "")
        while cursor < len(text) and text[cursor].isspace() and (piece.startswith("\u2581")
                                                                  or not word):
            cursor += 1
        if not word:
            spans.append((cursor, cursor))
            continue
        found = text.find(word, cursor)
        end = found + len(word)
        if found < 0 or text[cursor:found].strip():
            found = cursor
            while found < len(text) and text[found].isspace():
                found += 1
            end = found
            while end < min(found + len(word), len(text)) and not text[end].isspace():
                end += 1
        end = min(end, len(text))
        spans.append((min(found, end), end))
        cursor = end
    return spans


def _rows(attention: Any) -> list[list[float]]:
    """A 2-D attention (a tensor or nested lists) as lists of floats."""
    rows = attention.tolist() if hasattr(attention, "tolist") else attention
    return [[float(x) for x in row] for row in rows]


def head_mean(attention: Any, layer: int | None = ALIGNMENT_LAYER) -> list[list[float]]:
    """A translation's attention (decoder layers, heads, target + 1, source + 1; a tensor or
    nested lists) as the 2-D matrix `char_alignment` reads: the mean over heads of one decoder
    layer (None: of all layers). Which layer aligns best is measured in
    docs/html-translation.md; its figure is the default."""
    layers = attention.tolist() if hasattr(attention, "tolist") else attention
    chosen = layers if layer is None else [layers[layer]]
    heads = [head for one in chosen for head in one]
    return [[sum(h[i][j] for h in heads) / len(heads) for j in range(len(heads[0][i]))]
            for i in range(len(heads[0]))]


def char_alignment(source: str, source_pieces: Sequence[str], target: str,
                   target_pieces: Sequence[str], *, attention: Any) -> list[tuple[int, int]]:
    """A sentence's character alignment from its cross-attention.

    `attention`: (target pieces + 1 for EOS, source pieces + 1 for EOS), e.g. the mean over
    heads of a decoder layer (docs/html-translation.md measures which). Each target piece is
    aligned to the source piece it attends to most (EOS excluded), and each of its characters
    to each of that piece's characters: pairs (index in source, index in target)."""
    source_pieces = [p for p in source_pieces if p != "</s>"]
    rows = _rows(attention)[:len(target_pieces)]
    src_spans = piece_spans(source, source_pieces)
    tgt_spans = piece_spans(target, target_pieces)
    pairs: set[tuple[int, int]] = set()
    for (t0, t1), row in zip(tgt_spans, rows, strict=False):
        weights = row[:len(src_spans)]
        if t0 == t1 or not weights:
            continue
        s0, s1 = src_spans[max(range(len(weights)), key=weights.__getitem__)]
        pairs.update((s, t) for s in range(s0, s1) for t in range(t0, t1))
    return sorted(pairs)


def join_alignments(source: str, target: str,
                    sentences: Sequence[tuple[str, str, Sequence[tuple[int, int]]]]
                    ) -> list[tuple[int, int]]:
    """A block's alignment from its sentences' (source sentence, its translation, their
    alignment): each sentence found in order in the block's source and translated text, and
    its pairs moved by those offsets. A sentence not found verbatim adds no pairs."""
    pairs: list[tuple[int, int]] = []
    src_at = tgt_at = 0
    for src, tgt, alignment in sentences:
        s, t = source.find(src, src_at), target.find(tgt, tgt_at)
        if s < 0 or t < 0:
            continue
        pairs += [(a + s, b + t) for a, b in alignment]
        src_at, tgt_at = s + len(src), t + len(tgt)
    return pairs
