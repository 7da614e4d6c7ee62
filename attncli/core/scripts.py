"""Which writing system a language is written in, as Unicode character ranges: what the `script`
filter of a training corpus asks of each side (a Chinese side with no Chinese character is
not Chinese, whatever else it holds).

Kept in `core`, beside the language codes of `text.py`, because the config refuses a script
filter for a language this table does not know before any data is read, and the filter itself
(`data/filters.py`) applies it to every pair.
"""

from __future__ import annotations

import re

from attncli.core.text import base_language

# Character classes of the scripts, by Unicode block.
_LATIN = "A-Za-z\u00c0-\u024f\u1e00-\u1eff"
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_KANA = "\u3040-\u30ff\u31f0-\u31ff"
_HANGUL = "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"
_CYRILLIC = "\u0400-\u052f"
_GREEK = "\u0370-\u03ff\u1f00-\u1fff"
_ARABIC = "\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff\ufb50-\ufdff\ufe70-\ufeff"
_HEBREW = "\u0590-\u05ff"
_DEVANAGARI = "\u0900-\u097f"
_THAI = "\u0e00-\u0e7f"

_LATIN_LANGUAGES = (
    "af", "ca", "cs", "cy", "da", "de", "en", "eo", "es", "et", "eu", "fi", "fr", "ga", "gl",
    "hr", "hu", "id", "is", "it", "lt", "lv", "ms", "mt", "nl", "no", "nb", "nn", "pl", "pt",
    "ro", "sk", "sl", "sq", "sv", "sw", "tl", "tr", "vi",
)

# base language (text.base_language) -> (script name, character class)
LANGUAGE_SCRIPTS: dict[str, tuple[str, str]] = {
    **{lang: ("Latin", _LATIN) for lang in _LATIN_LANGUAGES},
    "zh": ("Han", _HAN),
    "ja": ("Japanese (kana or kanji)", _KANA + _HAN),
    "ko": ("Hangul", _HANGUL),
    **{lang: ("Cyrillic", _CYRILLIC) for lang in ("ru", "uk", "bg", "be", "sr", "mk", "kk")},
    "el": ("Greek", _GREEK),
    **{lang: ("Arabic", _ARABIC) for lang in ("ar", "fa", "ur")},
    "he": ("Hebrew", _HEBREW),
    **{lang: ("Devanagari", _DEVANAGARI) for lang in ("hi", "mr", "ne")},
    "th": ("Thai", _THAI),
}


def script_name(code: str) -> str | None:
    """The script `code` ('zh', 'zh-Hant', 'cmn', 'de') is written in, None when unknown."""
    known = LANGUAGE_SCRIPTS.get(base_language(code))
    return known[0] if known else None


def script_pattern(code: str) -> re.Pattern[str]:
    """A pattern that finds one character of `code`'s script (a known language only)."""
    return re.compile(f"[{LANGUAGE_SCRIPTS[base_language(code)][1]}]")
