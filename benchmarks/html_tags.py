"""How often a translated page's inline tags wrap the right words, and which HTML parser to use.

    python benchmarks/html_tags.py RUN [--json FILE]      # tag placement, with RUN's model
    /tmp/htmlp/bin/python benchmarks/html_tags.py --parsers   # the parser table

Tag placement (issue 55, item 5): `CASES` are hand-made English paragraphs with inline tags
around given words, each tag with the German words it should wrap (a few accepted variants:
inflections, synonyms). Each paragraph is parsed (attncli.serve.markup), its block translated
with attention by `attncli.Translator(RUN)`, each sentence's cross-attention turned into a
character alignment (`char_alignment`) by each candidate reduction of the attention, and the
tags placed (`place_runs`). A tag is right when the text it wraps, lower-cased, outer spaces
stripped, is one of its variants (also counted with edge punctuation stripped: "Freund.");
"reachable" tags are those whose variants occur in the translation at all (a wrong
translation leaves nothing to wrap). Candidates: each decoder layer's mean over heads, the
mean of all layers, each taken from the step that predicts the target piece (row i) or from
the next step, where the piece is the decoder's input (row i + 1); and two baselines: no
alignment (tags at the block's start or end) and the diagonal (target position = source
position scaled by the lengths). Figures: docs/html-translation.md.

Parsers (`--parsers`): which candidates are installed in this Python (`pip install
beautifulsoup4 html5lib selectolax lxml` into a venv of its own): whether each parses every
malformed case without an exception, whether it gives the source back byte for byte (the
standard library: the tokens' raw source joined, as markup.py does; the tree builders: their
serializer), the time to parse a 200 KB page (median of 7), its install size and licence.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import string
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# (html, [accepted German words for each tag, in the order the tags open])
CASES: list[tuple[str, list[list[str]]]] = [
    ("<p>I like <b>green</b> apples.</p>", [["grün", "grüne", "grünen"]]),
    ("<p>The <b>cat</b> is sleeping.</p>", [["katze", "die katze"]]),
    ("<p>My <i>brother</i> lives in Berlin.</p>", [["bruder"]]),
    ("<p>Where is the <b>station</b>?</p>", [["bahnhof", "station", "der bahnhof"]]),
    ("<p>I have <b>two</b> dogs.</p>", [["zwei"]]),
    ("<p>She bought a <b>red</b> car.</p>", [["rotes", "rot", "roten", "rote"]]),
    ("<p>Tom is my <b>friend</b>.</p>", [["freund"]]),
    ("<p>The <b>water</b> is cold.</p>", [["wasser", "das wasser"]]),
    ("<p>I am reading a <i>book</i>.</p>", [["buch"]]),
    ("<p>We will go <b>tomorrow</b>.</p>", [["morgen"]]),
    ("<p>This house is <b>very big</b>.</p>", [["sehr groß"]]),
    ("<p>I drink <b>coffee</b> every morning.</p>", [["kaffee"]]),
    ("<p>The <b>children</b> are playing outside.</p>", [["kinder", "die kinder"]]),
    ("<p>He has a <b>new</b> job.</p>", [["neue", "neuen", "neu", "neues"]]),
    ("<p>I can't find my <b>keys</b>.</p>", [["schlüssel"]]),
    ("<p>It is <b>raining</b> today.</p>", [["regnet"]]),
    ("<p>My mother is a <b>doctor</b>.</p>", [["ärztin", "arzt"]]),
    ("<p>I want to learn <b>German</b>.</p>", [["deutsch"]]),
    ("<p>The <b>book</b> is on the <i>table</i>.</p>", [["buch", "das buch"], ["tisch"]]),
    ("<p>Do you speak <b>French</b>?</p>", [["französisch"]]),
    ("<p>I <b>love</b> you.</p>", [["liebe"]]),
    ("<p>The <b>weather</b> is nice today.</p>", [["wetter", "das wetter"]]),
    ("<p>I need <b>money</b>.</p>", [["geld"]]),
    ("<p>She is <b>happy</b>.</p>", [["glücklich", "froh"]]),
    ("<p>He <b>runs</b> fast.</p>", [["läuft", "rennt"]]),
    ("<p>My <b>father</b> works in a <i>bank</i>.</p>", [["vater"], ["bank"]]),
    ('<p>Where is my <a href="/bag">bag</a>?</p>', [["tasche"]]),
    ('<p>The <span class="hl">dog</span> barked.</p>', [["hund", "der hund"]]),
    ("<p>I don't like <b>fish</b>.</p>", [["fisch"]]),
    ("<p>Open the <b>window</b>, please.</p>", [["fenster"]]),
    ("<p>This is a <b>good</b> idea.</p>", [["gute"]]),
    ("<p>I'm <b>tired</b>.</p>", [["müde"]]),
    ("<p>The <b>train</b> is late.</p>", [["zug", "der zug"]]),
    ("<p>We live in a <b>small</b> village.</p>", [["kleinen", "kleines", "klein"]]),
    ("<p>Tom is eating an <b>apple</b>.</p>", [["apfel"]]),
    ("<p>I have <b>three</b> <i>sisters</i>.</p>", [["drei"], ["schwestern"]]),
    ("<p>The <b>music</b> is too loud.</p>", [["musik", "die musik"]]),
    ("<p>Can you <b>help</b> me?</p>", [["helfen", "hilfst"]]),
    ("<p>The <em>sun</em> is shining.</p>", [["sonne", "die sonne"]]),
    ("<p>I like <b>green</b> apples.<br>They are <i>sweet</i>.</p>",
     [["grün", "grüne", "grünen"], ["süß"]]),
    ("<p>I like <b>very <i>green</i></b> apples.</p>",
     [["sehr grün", "sehr grüne", "sehr grünen"], ["grün", "grüne", "grünen"]]),
    ("<p>The <b>old</b> man has a <i>black</i> dog.</p>",
     [["alte"], ["schwarzen", "schwarzer", "schwarz"]]),
]


def load_markup() -> Any:
    """attncli/serve/markup.py by its path: it needs only the standard library, so the parser
    venvs need no attncli (nor torch)."""
    path = HERE.parent / "attncli" / "serve" / "markup.py"
    spec = importlib.util.spec_from_file_location("markup", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["markup"] = module
    spec.loader.exec_module(module)
    return module


def normal(text: str, punctuation: bool = True) -> str:
    """Lower case, spaces collapsed and stripped; edge punctuation too unless `punctuation`."""
    text = re.sub(r"\s+", " ", text).strip().lower()
    return text if punctuation else text.strip(string.punctuation + "„“”»«‚‘’ ")


def wrapped_texts(html_out: str, opens: list[str], closes: list[str]) -> list[str | None]:
    """The text each tag (in source order) wraps in the output; None if it is missing."""
    out: list[str | None] = []
    for open_tag, close_tag in zip(opens, closes, strict=True):
        at = html_out.find(open_tag)
        end = html_out.find(close_tag, at + len(open_tag)) if at >= 0 else -1
        inner = html_out[at + len(open_tag):end] if end >= 0 else None
        out.append(None if inner is None else re.sub(r"<[^>]*>", "", inner))
    return out


def reductions(layers: int) -> dict[str, Callable[[Any], Any]]:
    """name -> (layers, heads, tgt+1, src+1) tensor -> (tgt+1, src+1) matrix."""
    out: dict[str, Callable[[Any], Any]] = {}
    for shift in (0, 1):
        tag = "" if shift == 0 else ", next step"
        for layer in range(layers):
            out[f"layer {layer + 1}{tag}"] = (
                lambda a, layer=layer, shift=shift: shifted(a[layer].float().mean(0), shift))
        out[f"all layers{tag}"] = lambda a, shift=shift: shifted(a.float().mean((0, 1)), shift)
    return out


def shifted(matrix: Any, shift: int) -> Any:
    """Row i + shift for target piece i (the last row repeated to keep the shape)."""
    if shift == 0:
        return matrix
    import torch

    return torch.cat([matrix[shift:], matrix[-1:].expand(shift, -1)])


def diagonal(source: str, target: str) -> list[tuple[int, int]]:
    if not source or not target:
        return []
    return [(s, min(len(target) - 1, round(s * len(target) / len(source))))
            for s in range(len(source))]


def block_alignment(markup: Any, translator: Any, translation: Any, source: str, *,
                    reduce: Callable[[Any], Any]) -> list[tuple[int, int]]:
    tokenizer = translator.tokenizer
    parts = []
    for sentence in translation.sentences:
        src_pieces = tokenizer.src_pieces(tokenizer.encode_src([sentence.source])[0])
        tgt_pieces = tokenizer.tgt_pieces(sentence.tokens)
        pairs = markup.char_alignment(sentence.source, src_pieces, sentence.text, tgt_pieces,
                                      attention=reduce(sentence.attention))
        parts.append((sentence.source, sentence.text, pairs))
    return markup.join_alignments(source, translation.text, parts)


def tag_placement(run: str, json_out: Path | None) -> None:
    from attncli import Translator

    markup = load_markup()
    translator = Translator(run, device="cpu")
    docs = [markup.parse_html(html) for html, _ in CASES]
    texts = [doc.blocks[0].text for doc in docs]
    translations = translator.translate(texts, attention=True)
    layers = translations[0].sentences[0].attention.shape[0]
    methods: dict[str, Callable[..., list[tuple[int, int]]]] = {"no alignment": lambda *a: []}
    methods["diagonal"] = lambda tr, src: diagonal(src, tr.text)
    for name, reduce in reductions(layers).items():
        methods[name] = (lambda tr, src, reduce=reduce:
                         block_alignment(markup, translator, tr, src, reduce=reduce))
    results: dict[str, Any] = {"run": run, "checkpoint": translator.checkpoint, "methods": {}}
    for name, method in methods.items():
        right = loose = reachable_right = reachable = total = 0
        examples = []
        for (_, expected), doc, tr in zip(CASES, docs, translations, strict=True):
            block = doc.blocks[0]
            out = doc.rebuild([markup.BlockTranslation(tr.text, method(tr, block.text))])
            runs = [r for r in block.runs if r.close_tag]
            got = wrapped_texts(out, [r.open_tag for r in runs], [r.close_tag for r in runs])
            for words, wrapped in zip(expected, got, strict=True):
                ok = wrapped is not None and normal(wrapped) in words
                loose += wrapped is not None and normal(wrapped, punctuation=False) in words
                can = any(re.search(rf"\b{re.escape(w)}\b", tr.text.lower()) for w in words)
                total, right = total + 1, right + ok
                reachable, reachable_right = reachable + can, reachable_right + (ok and can)
            examples.append(out)
        results["methods"][name] = {"right": right, "loose": loose, "total": total,
                                    "reachable": reachable, "reachable_right": reachable_right,
                                    "examples": examples}
        print(f"{name:24s} right {right}/{total} ({right / total:.0%}); "
              f"of reachable {reachable_right}/{reachable} "
              f"({reachable_right / max(1, reachable):.0%}); "
              f"edge punctuation ignored {loose}/{total}")
    if json_out is not None:
        json_out.write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")


# -- the parser choice --------------------------------------------------------------------------

MALFORMED = [
    "<p>unclosed <b>bold</p><p>next",
    "<p>stray </b> end tag</p>",
    "<p>outer<p>inner</p></p>",
    '<a href="x?a=1&amp;b=2" title=\'it"s\' data-x=a&b>link</a>',
    "<p>a<!-- comment <b> --> b</p><!--unclosed comment",
    "<p>one<br>two<br/>three<BR  ></p>",
    "<p>&amp; &nbsp; &lt;x&gt; &copy &#233; &#x41; &bogus; AT&T</p>",
    "<script>if (a < b && c > d) x('</p>')</script><style>p>b{}</style>",
    "<P CLASS=x>Upper case</P><b><i>misnested</b></i>",
    "<!DOCTYPE html><html><head><title>t</title></head><body>text</body></html>",
    "<div><table><tr><td>cell<td>cell 2</table></div>text after",
    "< p>not a tag</ p> <> </> <!> <?php echo 1 ?> <![CDATA[x]]>",
    "<p>tail with a broken tag <b class=\"x",
]


def synthetic_page() -> str:
    row = ('<div class="card"><h2 id="t{i}">Title {i}</h2><p>Some <b>bold</b> and <a href="/'
           '{i}?a=1&amp;b=2">a link</a> &nbsp; text.<br>Second line.</p><!-- c {i} -->'
           '<script>var x{i} = "{i}";</script><ul><li>one</li><li><i>two</i></li></ul></div>\n')
    page, i = [], 0
    while sum(map(len, page)) < 200_000:
        page.append(row.format(i=i))
        i += 1
    return "<!DOCTYPE html><html><body>" + "".join(page) + "</body></html>"


def dist_size(name: str) -> tuple[float, str]:
    """MB on disk of the distribution and what it requires (not pip, setuptools), and its
    licence."""
    seen: set[str] = set()
    todo, total, licence = [name], 0, ""
    while todo:
        dist = metadata.distribution(todo.pop())
        if dist.metadata["Name"].lower() in seen:
            continue
        seen.add(dist.metadata["Name"].lower())
        if not licence:
            licence = (dist.metadata.get("License-Expression") or dist.metadata.get("License")
                       or "; ".join(c.split(" :: ")[-1] for c in dist.metadata.get_all(
                           "Classifier") or [] if c.startswith("License")))
        total += sum(f.size or 0 for f in dist.files or [])
        for req in dist.requires or []:
            if "extra ==" not in req:
                todo.append(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0])
    return total / 1e6, licence[:40]


def parser_candidates() -> dict[str, tuple[Callable[[str], Any], Callable[[Any], str], str]]:
    """name -> (parse, serialize, distribution) for the installed candidates."""
    markup = load_markup()
    out: dict[str, tuple[Callable[[str], Any], Callable[[Any], str], str]] = {
        "html.parser (stdlib tokens)": (markup._tokens, lambda t: "".join(r for _, r in t), "")}
    try:
        import bs4

        out["bs4 + html.parser"] = (lambda s: bs4.BeautifulSoup(s, "html.parser"), str,
                                    "beautifulsoup4")
    except ImportError:
        pass
    try:
        import html5lib

        out["html5lib"] = (html5lib.parse, lambda t: html5lib.serialize(t, tree="etree"),
                           "html5lib")
    except ImportError:
        pass
    try:
        from selectolax.lexbor import LexborHTMLParser

        out["selectolax (lexbor)"] = (LexborHTMLParser, lambda t: t.html or "", "selectolax")
    except ImportError:
        pass
    try:
        import lxml.html

        out["lxml.html"] = (lambda s: lxml.html.document_fromstring(s) if s.strip() else None,
                            lambda t: "" if t is None else lxml.html.tostring(
                                t, encoding="unicode"), "lxml")
    except ImportError:
        pass
    return out


def parser_table() -> None:
    page = synthetic_page()
    print("| parser | malformed cases parsed | byte-identical round trip | 200 KB page, ms |"
          " install MB | licence |")
    print("|---|---|---|---|---|---|")
    for name, (parse, serialize, dist) in parser_candidates().items():
        parsed = identical = 0
        for case in [*MALFORMED, page]:
            try:
                tree = parse(case)
            except Exception:
                continue
            parsed += 1
            identical += serialize(tree) == case
        times = []
        for _ in range(7):
            start = time.perf_counter()
            parse(page)
            times.append(time.perf_counter() - start)
        size, licence = dist_size(dist) if dist else (0.0, "PSF (stdlib)")
        n = len(MALFORMED) + 1
        print(f"| {name} | {parsed}/{n} | {identical}/{n} | "
              f"{statistics.median(times) * 1000:.0f} | {size:.1f} | {licence} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", help="a trained run folder (en->de)")
    parser.add_argument("--json", type=Path, help="write the figures and outputs here")
    parser.add_argument("--parsers", action="store_true", help="the parser table instead")
    args = parser.parse_args()
    if args.parsers:
        parser_table()
    elif args.run:
        tag_placement(args.run, args.json)
    else:
        parser.error("give a RUN folder, or --parsers")


if __name__ == "__main__":
    main()
