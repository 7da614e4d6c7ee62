"""What every layer knows of text: the special token ids, and language codes as configs and data
sets write them (the base language of a code, and whether a Chinese code asks for traditional
characters).

Kept free of attncli imports, and of sentencepiece and torch, because the config's checks,
batching, the model, the searches, the tokenizer's normalization, the BLEU tokenizer and the
script conversion all ask these questions; before this module, nine modules imported the
tokenizer only for its ids.
"""

from __future__ import annotations

# Special ids, fixed so that the model, batching, search and the tokenizer agree without asking
# (every SentencePiece model attncli trains or accepts has them; `data.tokenizer` checks).
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3

# ISO 639-3 (and -2) codes of Chinese, Japanese and Korean, which data sets use too (Tatoeba:
# cmn), mapped to the two-letter codes the rest of attncli asks about.
_CJK_CODES = {"cmn": "zh", "zho": "zh", "chi": "zh", "yue": "zh", "wuu": "zh", "lzh": "zh",
              "jpn": "ja", "kor": "ko"}

# English names of languages, for GET /languages (LibreTranslate's shape), Argos packages'
# metadata and model cards; other codes are named by themselves (`language_name`).
LANGUAGE_NAMES = {"ar": "Arabic", "cs": "Czech", "de": "German", "en": "English",
                  "es": "Spanish", "fr": "French", "it": "Italian", "ja": "Japanese",
                  "ko": "Korean", "nl": "Dutch", "pt": "Portuguese", "ru": "Russian",
                  "zh": "Chinese"}

# Subtags that mark a Chinese language code as written in traditional characters.
TRADITIONAL_SUBTAGS = {"hant", "tw", "hk", "mo"}


def base_language(code: str) -> str:
    """'zh-Hant' -> 'zh', 'pt_BR' -> 'pt', 'cmn' -> 'zh' (see _CJK_CODES)."""
    base = language_subtag(code)
    return _CJK_CODES.get(base, base)


def language_name(code: str) -> str:
    """'de' -> 'German', 'zh-Hant' -> 'Chinese'; a code without a known name is its own."""
    return LANGUAGE_NAMES.get(base_language(code), code)


def language_subtag(code: str) -> str:
    """The code's first subtag, as given: 'zh-Hant' -> 'zh', 'pt_BR' -> 'pt', 'cmn' -> 'cmn'."""
    return code.lower().replace("_", "-").split("-")[0]


def is_traditional(code: str) -> bool:
    """'zh-Hant', 'zh_TW', 'cmn-Hant-TW' -> True; 'zh', 'zh-Hans', 'cmn', 'de' -> False."""
    subtags = code.lower().replace("_", "-").split("-")
    return base_language(code) == "zh" and bool(TRADITIONAL_SUBTAGS & set(subtags[1:]))


def converted_sides(script: str | None, src: str, tgt: str) -> tuple[str, ...]:
    """The sides ('src', 'tgt') whose text `data.chinese_script` converts: those in Chinese
    that is not marked traditional (that script is what its user asked for)."""
    if script != "simplified":
        return ()
    return tuple(side for side, code in (("src", src), ("tgt", tgt))
                 if base_language(code) == "zh" and not is_traditional(code))
