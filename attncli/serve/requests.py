"""What a client may ask, checked: request bodies become typed requests or one-line errors.

Two shapes come in. LibreTranslate's (``POST /translate``), so that its existing clients work:
``{"q": str | [str], "source": "en", "target": "de", "format": "text" | "html",
"alternatives": N, "api_key": ...}``, as JSON or as a form (libretranslatepy posts forms). And
attncli's own (``POST /v1/translate``): ``{"text": [str], "beam": int, "n_best": int,
"attention": bool, "format": "text" | "html", "source": "en", "target": "de"}`` (the pair is
needed only when the server serves several runs), where a misspelt field is an error that names
the right one, since a silently ignored ``nbest`` would look like a wrong answer.

Every problem is a `RequestError`: an HTTP status and one line for ``{"error": ...}``.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from attncli.core.text import base_language
from attncli.data.tokenizer import NO_TEXT, no_visible_text


class RequestError(Exception):
    """A request the server will not serve: `status` (4xx, or 503) and a one-line `message`."""

    def __init__(self, status: int, message: str, retry_after: int | None = None):
        # one line, whatever a client put in the fields a message quotes
        message = message.replace("\r", "\\r").replace("\n", "\\n")
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after


@dataclass(frozen=True)
class Limits:
    """What one request may hold (the serve command's --max-texts, --max-chars, --max-beam)."""

    max_texts: int = 64
    max_chars: int = 2000
    max_beam: int = 16

    @property
    def max_body(self) -> int:
        """Bytes a body may have: room for ``max_chars`` characters written as JSON escapes
        (up to 12 bytes each, a surrogate pair) plus the rest of the request."""
        return 12 * self.max_chars + 16_384


@dataclass
class TranslateRequest:
    """A checked request: what to translate and how."""

    texts: list[str]
    beam: int
    n_best: int
    attention: bool = False
    single: bool = False  # LibreTranslate's q was one string: answer with one string
    auto_source: bool = False  # LibreTranslate's source was "auto"
    api_key: str | None = None
    field: str = "q"  # the body's field that held the texts, for errors that name one
    html: bool = False  # "format": "html": the texts are HTML (serve/markup.py)

    def text_label(self, i: int) -> str:
        """How an error names text i: `q` for a string, `q[2]` in a list (as `_texts` does)."""
        return self.field if self.single else f"{self.field}[{i}]"


def parse_body(body: bytes, content_type: str) -> dict[str, Any]:
    """The fields of a JSON object body, or of a form (``application/x-www-form-urlencoded``).

    A body that starts with ``{`` is read as JSON whatever its content type: `curl -d` labels
    JSON as a form unless told otherwise.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RequestError(400, f"the body is not valid UTF-8 (byte {err.start + 1})") from None
    if content_type.split(";")[0].strip().lower() == "application/x-www-form-urlencoded" \
            and not text.lstrip().startswith("{"):
        try:
            form = parse_qs(text, errors="strict")
        except UnicodeDecodeError:
            raise RequestError(400, "the form is not valid UTF-8 once %-decoded") from None
        return {key: values[-1] for key, values in form.items()}
    if not text.strip():
        raise RequestError(400, "the body is empty: send a JSON object")
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as err:
        raise RequestError(400, f"invalid JSON: {err.msg} (line {err.lineno} column "
                                f"{err.colno})") from None
    except RecursionError:
        raise RequestError(400, "invalid JSON: nested too deeply") from None
    except ValueError as err:  # an integer of over 4,300 digits (Python's conversion limit)
        raise RequestError(400, f"invalid JSON: {str(err).split(';')[0]}") from None
    if not isinstance(fields, dict):
        raise RequestError(400, f"the body must be a JSON object, not {_type(fields)}")
    _refuse_lone_surrogates(fields)
    return fields


def _refuse_lone_surrogates(fields: dict[str, Any]) -> None:
    """JSON's ``\\ud800`` escapes decode to lone surrogates, which are not text: refused here,
    for every name and string value, as no answer (nor an error naming them) could be written
    in UTF-8."""
    for name, value in fields.items():
        values = value if isinstance(value, list) else [value]
        for text in [name, *values]:
            if isinstance(text, str) and not _encodable(text):
                where = name if _encodable(name) else "a field name"
                raise RequestError(400, f"{where}: not valid Unicode (a lone surrogate)")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def requested_pair(fields: dict[str, Any]) -> tuple[str | None, str | None]:
    """The request's `source` and `target` fields (None where left out), which choose the run
    when a server serves several."""
    source, target = (_optional_string(fields, key) for key in ("source", "target"))
    return source, target


def is_auto(source: str | None) -> bool:
    """LibreTranslate's `"source": "auto"`: detect the language of the text."""
    return source is not None and source.strip().lower() == "auto"


def texts_of(fields: dict[str, Any], field: str, limits: Limits) -> list[str]:
    """The texts of `field`, checked as a translation request's are (for /detect too)."""
    return _texts(fields.get(field), field, limits)


def _texts(value: Any, field: str, limits: Limits) -> list[str]:
    """The texts of `field` (a string or a list of strings), checked against the limits."""
    if value is None:
        raise RequestError(400, f"{field}: missing (the text to translate)")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise RequestError(400, f"{field}: must be a string or a list of strings, not "
                                f"{_type(value)}")
    if not texts:
        raise RequestError(400, f"{field}: the list is empty")
    if len(texts) > limits.max_texts:
        raise RequestError(400, f"{field}: {len(texts)} texts, at most {limits.max_texts} in "
                                f"one request")
    for number, text in enumerate(texts, 1):
        where = f"{field}" if isinstance(value, str) else f"{field}[{number - 1}]"
        if not text.strip():
            raise RequestError(400, f"{where}: empty text")
        if no_visible_text(text):
            raise RequestError(400, f"{where}: {NO_TEXT}")
        if "\x00" in text:  # as `attncli translate` refuses it: not text
            raise RequestError(400, f"{where}: a NUL character; send text")
    chars = sum(len(t) for t in texts)
    if chars > limits.max_chars:
        raise RequestError(400, f"{field}: {chars} characters, at most {limits.max_chars} in "
                                f"one request")
    return texts


def _integer(fields: dict[str, Any], name: str, default: int, *, low: int, high: int,
             strings: bool = False) -> int:
    """``fields[name]`` as an integer in [low, high]; a numeral string too where `strings`."""
    value = fields.get(name, default)
    if strings and isinstance(value, str) and (digits := value.strip()).isascii() \
            and digits.isdigit():
        value = digits
        if len(value) > 20:  # out of range whatever low and high are; int() may refuse it
            raise RequestError(400, f"{name}: {value[:12]}... ({len(value)} digits) is out of "
                                    f"range ({low} to {high})")
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(400, f"{name}: must be an integer, not {_type(value)}")
    if not low <= value <= high:
        shown = str(value) if abs(value) < 10**20 else "a number of over 20 digits"
        raise RequestError(400, f"{name}: {shown} is out of range ({low} to {high})")
    return value


def _optional_string(fields: dict[str, Any], name: str) -> str | None:
    value = fields.get(name)
    if value is not None and not isinstance(value, str):
        raise RequestError(400, f"{name}: must be a string, not {_type(value)}")
    return value


def libretranslate_request(fields: dict[str, Any], languages: tuple[str, str], beam: int,
                           limits: Limits) -> TranslateRequest:
    """LibreTranslate's ``/translate`` fields; `languages` is the model's (source, target)
    pair and `beam` the run's beam, widened when more alternatives are asked than it has."""
    texts = _texts(fields.get("q"), "q", limits)
    source, target = requested_pair(fields)
    if source is None or target is None:
        raise RequestError(400, f"{'source' if source is None else 'target'}: missing (this "
                                f"model translates {languages[0]} to {languages[1]})")
    auto = is_auto(source)
    if (not auto and base_language(source) != base_language(languages[0])) \
            or base_language(target) != base_language(languages[1]):
        raise RequestError(400, f"{source}->{target}: this model translates "
                                f"{languages[0]}->{languages[1]} only")
    alternatives = _integer(fields, "alternatives", 0, low=0, high=limits.max_beam - 1,
                            strings=True)
    return TranslateRequest(texts, max(beam, alternatives + 1), alternatives + 1,
                            single=isinstance(fields["q"], str), auto_source=auto,
                            api_key=_optional_string(fields, "api_key"),
                            html=_is_html(fields))


# The formats a text may come in: plain text, or HTML whose text is translated (serve/markup.py).
FORMATS = ("text", "html")


def _is_html(fields: dict[str, Any]) -> bool:
    fmt = _optional_string(fields, "format") or "text"
    if fmt not in FORMATS:
        raise RequestError(400, f"format: {fmt!r} is not supported (text or html)")
    return fmt == "html"


def _check_pair(source: str | None, target: str | None, languages: tuple[str, str]) -> None:
    """A pair asked of a run must be the run's own (None: left out)."""
    if (source is not None and base_language(source) != base_language(languages[0])) \
            or (target is not None and base_language(target) != base_language(languages[1])):
        raise RequestError(400, f"{source or languages[0]}->{target or languages[1]}: this "
                                f"model translates {languages[0]}->{languages[1]} only")


NATIVE_FIELDS = ("text", "beam", "n_best", "attention", "format", "source", "target",
                 "api_key")


def check_native_fields(fields: dict[str, Any]) -> None:
    """A misspelt field is an error that names the right one (a silently ignored ``nbest``
    would look like a wrong answer)."""
    for name in fields:
        if name not in NATIVE_FIELDS:
            close = difflib.get_close_matches(name, NATIVE_FIELDS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise RequestError(400, f"{name}: unknown field{hint}; the fields are "
                                    f"{', '.join(NATIVE_FIELDS)}")


def native_request(fields: dict[str, Any], beam: int, limits: Limits,
                   languages: tuple[str, str]) -> TranslateRequest:
    """attncli's ``/v1/translate`` fields; `beam` is the run's, the default; `source` and
    `target`, when given, must be the run's `languages`."""
    check_native_fields(fields)
    texts = _texts(fields.get("text"), "text", limits)
    _check_pair(*requested_pair(fields), languages)
    beam = _integer(fields, "beam", beam, low=1, high=max(limits.max_beam, beam))
    n_best = _integer(fields, "n_best", 1, low=1, high=beam)
    attention = fields.get("attention", False)
    if not isinstance(attention, bool):
        raise RequestError(400, f"attention: must be true or false, not {_type(attention)}")
    return TranslateRequest(texts, beam, n_best, attention,
                            single=isinstance(fields["text"], str),
                            api_key=_optional_string(fields, "api_key"), field="text",
                            html=_is_html(fields))
