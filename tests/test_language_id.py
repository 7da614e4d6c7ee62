"""The server's language identifier (serve.language_id): the language of short sentences, best
first with confidences in percent, and nothing for a text with no language in it."""

from __future__ import annotations

import pytest

pytest.importorskip("py3langid")

from attncli.serve.language_id import detect_languages  # noqa: E402


@pytest.mark.parametrize(("text", "language"), [
    ("Wie geht es dir? Ich hoffe, es geht dir gut.", "de"),
    ("Where is the nearest train station?", "en"),
    ("我明天早上要去北京。", "zh"),
    ("請問洗手間在哪裡？", "zh"),  # traditional characters, and a variety the model names apart
])
def test_a_short_sentence_is_named_first_with_a_confidence(text, language):
    found = detect_languages(text)
    assert found[0][0] == language
    assert found[0][1] > 50


def test_confidences_are_percentages_best_first_and_at_most_limit():
    for limit in (1, 3, 5):
        found = detect_languages("Hello, how are you?", limit=limit)
        assert len(found) == limit
        confidences = [c for _, c in found]
        assert all(0 <= c <= 100 for c in confidences)
        assert confidences == sorted(confidences, reverse=True)
        assert len({code for code, _ in found}) == limit


def test_a_language_no_run_reads_is_named():
    assert detect_languages("Bonjour, comment allez-vous ?", limit=1)[0][0] == "fr"


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "12345", "!!! ???"])
def test_no_language_for_a_text_without_words(text):
    assert detect_languages(text) == []


def test_without_py3langid_the_error_says_how_to_install_it(monkeypatch):
    import sys

    from attncli.core.errors import AttncliError
    from attncli.serve import language_id

    monkeypatch.setattr(language_id, "_identifier", None)
    monkeypatch.setitem(sys.modules, "py3langid.langid", None)  # import fails
    with pytest.raises(AttncliError, match=r"pip install 'attncli\[serve\]'"):
        language_id.detect_languages("Hallo")
