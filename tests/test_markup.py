"""attncli.serve.markup: HTML read into blocks of text and rebuilt around their translations.

No model: translations are made up (upper-cased text, reordered words) with synthetic
alignments, so that what is tested is the markup kept and the tags placed.
"""

from __future__ import annotations

import random
import re
from html.parser import HTMLParser

import pytest

from attncli.serve.markup import (
    Block,
    BlockTranslation,
    TaggedRun,
    char_alignment,
    head_mean,
    join_alignments,
    parse_html,
    piece_spans,
    place_runs,
)


def identity(block: Block, text: str | None = None) -> BlockTranslation:
    """A translation of the same length, each character aligned to itself."""
    text = block.text.upper() if text is None else text
    return BlockTranslation(text, [(i, i) for i in range(len(block.text))])


def upper(source: str) -> str:
    document = parse_html(source)
    return document.rebuild([identity(b) for b in document.blocks])


def tags(html: str) -> list[str]:
    return re.findall(r"<[a-zA-Z/!?][^<>]*>", html)


class NestingChecker(HTMLParser):
    """Fails on an end tag that does not close the innermost open element."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag not in {"br", "img"}:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack}"
        self.stack.pop()


def well_formed(html: str) -> bool:
    checker = NestingChecker()
    checker.feed(html)
    checker.close()
    return not checker.stack


def test_acceptance_example() -> None:
    source = "<p>Hello, <b>how are you</b>?</p><script>x()</script>"
    document = parse_html(source)
    assert [b.text for b in document.blocks] == ["Hello, how are you?"]
    assert document.blocks[0].runs == (TaggedRun(7, 18, "<b>", "</b>"),)
    out = document.rebuild([BlockTranslation("Hallo, wie geht es dir?",
                                              [(0, 0), (7, 7), (11, 11), (15, 19)])])
    assert out == "<p>Hallo, <b>wie geht es dir</b>?</p><script>x()</script>"


def test_unchanged_text_gives_the_source_back_byte_for_byte() -> None:
    source = ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
              "<title>A &amp; B</title></head>\n<body class='x'>\n  <p>One &nbsp;<b id=\"a\">two"
              "</b>&#233;<br/>three</p><!-- note --></body></html>\n")
    document = parse_html(source)
    assert document.rebuild([BlockTranslation(b.text) for b in document.blocks]) == source


def test_markup_outside_the_text_is_byte_identical() -> None:
    source = ('<div  data-x="a&amp;b" ><p class=intro TITLE="Don\'t">Good <a href="/x?a=1&b=2"'
              ' target=_blank>morning</a></p>\n<!-- keep <b> me --></div >')
    out = upper(source)
    assert out == ('<div  data-x="a&amp;b" ><p class=intro TITLE="Don\'t">GOOD <a href="/x?a=1&b=2"'
                   ' target=_blank>MORNING</a></p>\n<!-- keep <b> me --></div >')


@pytest.mark.parametrize("kept", [
    "<script>if (a < b && c) { document.write('<p>hi</p>') }</script>",
    "<style>p > b { color: red }</style>",
    "<pre>  keep   <b>this</b>\n  as is</pre>",
    "<code>ls -l &amp;&amp; cd</code>",
    "<textarea name=t>Some text</textarea>",
    '<div translate="no">Brand <b>Name</b><p>Inner</p></div>',
    '<span class="x notranslate">Acme</span>',
])
def test_kept_elements_pass_through(kept: str) -> None:
    source = f"<body><p>Before</p>{kept}<p>After</p></body>"
    document = parse_html(source)
    assert [b.text for b in document.blocks] == ["Before", "After"]
    assert upper(source) == f"<body><p>BEFORE</p>{kept}<p>AFTER</p></body>"


def test_inline_kept_element_stays_whole_inside_its_sentence() -> None:
    source = "<p>Run <code>ls &lt;dir&gt;</code> now.</p>"
    document = parse_html(source)
    block = document.blocks[0]
    assert "ls" not in block.text
    assert block.runs[0].open_tag == "<code>ls &lt;dir&gt;</code>"
    assert "<code>ls &lt;dir&gt;</code>" in upper(source)


def test_entities_are_decoded_for_translation_and_escaped_back() -> None:
    source = "<p>Fish &amp; chips &lt;3 &nbsp;caf&eacute; &#x41;</p>"
    document = parse_html(source)
    assert document.blocks[0].text == "Fish & chips <3 \xa0café A"
    out = document.rebuild([BlockTranslation("Fisch & Pommes <3 <script>")])
    assert out == "<p>Fisch &amp; Pommes &lt;3 &lt;script&gt;</p>"


def test_block_elements_split_the_text() -> None:
    source = ("<html><head><title>Page</title></head><body>Loose text<div>In a div<p>para"
              "</div><ul><li>one<li>two</ul><table><tr><td>c1<td>c2</table><h2>Head</h2>"
              "<blockquote>quote</blockquote></body></html>")
    texts = [b.text for b in parse_html(source).blocks]
    assert texts == ["Page", "Loose text", "In a div", "para", "one", "two", "c1", "c2", "Head",
                     "quote"]


def test_whitespace_only_blocks_are_not_listed() -> None:
    source = "<div>\n  <p>Text</p>\n  <img src=x.png>\n</div>"
    document = parse_html(source)
    assert [b.text for b in document.blocks] == ["Text"]
    assert upper(source) == "<div>\n  <p>TEXT</p>\n  <img src=x.png>\n</div>"


def test_layout_whitespace_is_kept_when_the_translation_drops_it() -> None:
    document = parse_html("<li>\n    Hello <b>world</b>\n  </li>")
    block = document.blocks[0]
    assert block.text == "\n    Hello world\n  "
    out = document.rebuild([BlockTranslation("Hallo Welt", [(11, 6)])])
    assert out == "<li>\n    Hallo <b>Welt</b>\n  </li>"


def test_tags_follow_the_alignment_when_words_move() -> None:
    # "I like green apples." -> "Grüne Äpfel mag ich."
    document = parse_html("<p>I like <b>green</b> apples.</p>")
    target = "Grüne Äpfel mag ich."
    alignment = [(0, 16), (2, 12), (7, 0), (8, 1), (13, 6)]
    out = document.rebuild([BlockTranslation(target, alignment)])
    assert out == "<p><b>Grüne</b> Äpfel mag ich.</p>"


def test_partial_word_alignment_is_widened_to_the_whole_word() -> None:
    document = parse_html("<p>the <i>house</i> is red</p>")
    out = document.rebuild([BlockTranslation("das Haus ist rot", [(4, 5)])])
    assert out == "<p>das <i>Haus</i> ist rot</p>"


def test_unaligned_tags_go_to_the_block_start_or_end_and_are_never_lost() -> None:
    source = '<p><a href="/a">First</a> words then the <em>last</em> ones.</p>'
    document = parse_html(source)
    out = document.rebuild([BlockTranslation("Etwas ganz anderes.")])
    assert out == '<p><a href="/a"></a>Etwas ganz anderes.<em></em></p>'


def test_a_tag_around_the_whole_text_wraps_the_whole_translation() -> None:
    document = parse_html('<li> <a href="/">Home page</a> </li>')
    out = document.rebuild([BlockTranslation(" Startseite ")])
    assert out == '<li> <a href="/">Startseite</a> </li>'


def test_nested_tags_nest_in_the_output() -> None:
    source = "<p>I like <b>very <i>green</i></b> apples.</p>"
    document = parse_html(source)
    block = document.blocks[0]
    assert block.runs[1].parent == 0
    # "Ich mag sehr grüne Äpfel." with "green" aligned outside "very": clamped inside <b>
    target = "Ich mag sehr grüne Äpfel."
    out = document.rebuild([BlockTranslation(target, [(7, 8), (12, 13), (19, 19)])])
    assert out == "<p>Ich mag <b>sehr <i>grüne</i></b> Äpfel.</p>"
    wild = document.rebuild([BlockTranslation(target, [(7, 20), (12, 0)])])
    assert well_formed(wild) and sorted(tags(wild)) == sorted(tags(source))


def test_crossing_siblings_fall_back_and_stay_well_formed() -> None:
    document = parse_html("<p><b>red</b> and <i>blue</i> cars</p>")
    # both aligned to the same target word
    out = document.rebuild([BlockTranslation("rotblaue Autos", [(0, 0), (8, 4)])])
    assert out == "<p><b>rotblaue</b> Autos<i></i></p>"


def test_random_alignments_never_lose_tags_nor_cross_them() -> None:
    source = ("<p>A <b>b <i>c</i> d</b> e <a href=x>f <span>g</span></a> h<br>i "
              "<u>j</u> <!-- k --> l <em>m</em></p>")
    document = parse_html(source)
    block = document.blocks[0]
    rng = random.Random(55)
    for _ in range(300):
        target = " ".join(rng.choice(["x", "yy", "zzz"]) for _ in range(rng.randint(1, 12)))
        pairs = [(rng.randrange(len(block.text)), rng.randrange(len(target)))
                 for _ in range(rng.randint(0, 20))]
        out = document.rebuild([BlockTranslation(target, pairs)])
        assert sorted(tags(out)) == sorted(tags(source)), out
        assert well_formed(out), out
        assert re.sub(r"<[^>]*>", "", out) == target


def test_line_breaks_are_kept_and_placed() -> None:
    source = "<p>First line<br>second line<br/></p>"
    document = parse_html(source)
    block = document.blocks[0]
    assert block.text == "First line\nsecond line"
    assert [(r.start, r.open_tag) for r in block.runs] == [(10, "<br>"), (22, "<br/>")]
    target = "Erste Zeile\nzweite Zeile"
    out = document.rebuild([BlockTranslation(target, [(0, 0), (6, 6), (11, 12), (18, 19)])])
    assert out == "<p>Erste Zeile\n<br>zweite Zeile<br/></p>"
    assert parse_html("<p>a <br> b</p>").blocks[0].text == "a  b"


@pytest.mark.parametrize("source", [
    "<p>unclosed <b>bold</p><p>next",
    "<p>stray </b> end tag</p>",
    "<p>outer<p>inner</p></p>",
    "<p>a<!-- comment <b> --> b</p><!--unclosed comment",
    "<P CLASS=x>Upper case</P><b><i>misnested</b> text</i>",
    "< p>not a tag</ p> <> <!> <?php echo 1 ?> <![CDATA[x]]>",
    "<p>tail with a broken tag <b class=\"x",
    "<p>Text <b><i>deep <u>deeper",
    "</p></div>",
    "",
    "no tags at all & some &bogus; entities",
    "<code>never closed <p>still code?",
])
def test_malformed_html_never_raises_and_keeps_every_tag(source: str) -> None:
    document = parse_html(source)
    assert document.rebuild([BlockTranslation(b.text) for b in document.blocks]) == source
    out = upper(source)
    assert tags(out) == tags(source) or sorted(tags(out)) == sorted(tags(source))
    out = document.rebuild([BlockTranslation("xyz") for _ in document.blocks])
    assert sorted(tags(out)) == sorted(tags(source)) or "<!--" in source or "<!>" in source


def test_random_bytes_never_raise() -> None:
    rng = random.Random(5)
    alphabet = ["<", ">", "/", "p", "b", "a", " ", "=", '"', "'", "&", ";", "!", "-", "x",
                "script", "\n", "amp", "<br>", "<!--", "-->", "translate=no", "code"]
    for _ in range(500):
        source = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        document = parse_html(source)
        same = document.rebuild([BlockTranslation(b.text) for b in document.blocks])
        assert same == source
        document.rebuild([BlockTranslation("T", [(0, 0)]) for _ in document.blocks])


def test_rebuild_wants_one_translation_per_block() -> None:
    with pytest.raises(ValueError, match="1 translations for 2 blocks"):
        parse_html("<p>a</p><p>b</p>").rebuild([BlockTranslation("A")])


def test_piece_spans_follow_the_text() -> None:
    text = "Hello, how are you?"
    pieces = ["▁Hello", ",", "▁how", "▁are", "▁you", "?"]
    assert piece_spans(text, pieces) == [(0, 5), (5, 6), (7, 10), (11, 14), (15, 18), (18, 19)]
    assert piece_spans("ﬁne day", ["▁fine", "▁day"]) == [(0, 3), (4, 7)]  # normalized piece
    assert piece_spans("a b", ["▁", "a", "▁b", "</s>"])[:3] == [(0, 0), (0, 1), (2, 3)]


def test_char_alignment_takes_each_target_piece_to_its_argmax_source_piece() -> None:
    source, target = "green apples", "grüne Äpfel"
    src_pieces = ["▁green", "▁app", "les", "</s>"]
    tgt_pieces = ["▁grüne", "▁Äpfel"]
    attention = [[0.8, 0.1, 0.0, 0.1],  # grüne -> green
                 [0.1, 0.2, 0.6, 0.1],  # Äpfel -> les
                 [0.0, 0.0, 0.0, 1.0]]  # EOS row: ignored
    pairs = char_alignment(source, src_pieces, target, tgt_pieces, attention=attention)
    assert (0, 0) in pairs and (4, 4) in pairs and (9, 6) in pairs and (11, 10) in pairs
    assert not any(s < 6 and t >= 6 for s, t in pairs)
    assert not any(s >= 6 and t < 6 for s, t in pairs)


def test_char_alignment_places_tags_end_to_end() -> None:
    document = parse_html("<p>I like <b>green</b> apples.</p>")
    block = document.blocks[0]
    src_pieces = ["▁I", "▁like", "▁green", "▁apples", ".", "</s>"]
    target = "Ich mag grüne Äpfel."
    tgt_pieces = ["▁Ich", "▁mag", "▁grüne", "▁Äpfel", "."]
    attention = [[1 if j == i else 0 for j in range(6)] for i in range(6)]
    pairs = char_alignment(block.text, src_pieces, target, tgt_pieces, attention=attention)
    out = place_runs(block, BlockTranslation(target, pairs))
    assert out == "Ich mag <b>grüne</b> Äpfel."


def test_join_alignments_moves_each_sentence_to_its_place_in_the_block() -> None:
    source, target = "Hi. I like green.", "Hallo. Ich mag grün."
    parts = [("Hi.", "Hallo.", [(0, 0)]), ("I like green.", "Ich mag grün.", [(7, 8)])]
    assert join_alignments(source, target, parts) == [(0, 0), (11, 15)]


def test_head_mean_averages_the_heads_of_one_layer_or_all() -> None:
    attention = [[[[1.0, 0.0]], [[0.0, 1.0]]],  # layer 1: two heads, one row, two columns
                 [[[1.0, 0.0]], [[1.0, 0.0]]]]  # layer 2
    assert head_mean(attention, 0) == [[0.5, 0.5]]
    assert head_mean(attention, -1) == [[1.0, 0.0]]
    assert head_mean(attention, None) == [[0.75, 0.25]]


def test_an_unclosed_comment_runs_to_the_end_as_in_a_browser() -> None:
    source = "<p>Text</p><!-- never closed <b>bold</b> <p>more <![CDATA[x"
    document = parse_html(source)
    assert [b.text for b in document.blocks] == ["Text"]
    assert upper(source) == "<p>TEXT</p><!-- never closed <b>bold</b> <p>more <![CDATA[x"
    assert [b.text for b in parse_html("<p>a <![CDATA[x</p>").blocks] == ["a "]


def test_sentence_final_punctuation_stays_outside_a_tag_around_words() -> None:
    document = parse_html("<p>Tom is my <b>friend</b>.</p>")
    target = "Tom ist mein Freund."
    # the final "." attends to "friend", as a sentence's last piece often does
    out = document.rebuild([BlockTranslation(target, [(12, 13), (12, 19)])])
    assert out == "<p>Tom ist mein <b>Freund</b>.</p>"
    kept = parse_html("<p>Say <b>hello!</b></p>").rebuild(
        [BlockTranslation("Sag hallo!", [(4, 4), (9, 9)])])
    assert kept == "<p>Sag <b>hallo!</b></p>"
