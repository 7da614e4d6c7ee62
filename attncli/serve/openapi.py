"""GET /spec: the server's routes described in OpenAPI 3.0, as LibreTranslate publishes its own.

Written out here rather than derived from the handlers: the handlers read raw bodies (JSON or
a form, as LibreTranslate's clients send either) and check them in `requests.py`, so there are
no typed models to derive it from. The description holds what a client may send, with this
server's limits (--max-texts, --max-chars, --max-beam) and languages, and what comes back;
tests fuzz the live server from it (schemathesis), so a route added without its description
here goes unfuzzed: add both.
"""

from __future__ import annotations

from typing import Any

from attncli.serve.requests import FORMATS, Limits

_ERROR = {"type": "object", "required": ["error"],
          "properties": {"error": {"type": "string", "pattern": "^[^\\n]*$",
                                   "description": "one line"}}}
_JSON_ERROR = {"description": "refused, with the reason", "content": {
    "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_REFUSALS = {str(status): _JSON_ERROR for status in (400, 403, 408, 413, 499, 501, 503)}


def _texts(limits: Limits, description: str) -> dict[str, Any]:
    """A text or a list of texts, as `requests._texts` accepts them."""
    text = {"type": "string", "minLength": 1, "maxLength": limits.max_chars}
    return {"description": description, "oneOf": [
        text, {"type": "array", "items": text, "minItems": 1, "maxItems": limits.max_texts}]}


def _body(schema: dict[str, Any], form: bool) -> dict[str, Any]:
    content = {"application/json": {"schema": schema}}
    if form:  # LibreTranslate's clients (libretranslatepy) post forms
        content["application/x-www-form-urlencoded"] = {"schema": schema}
    return {"required": True, "content": content}


def _answer(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"200": {"description": description,
                    "content": {"application/json": {"schema": schema}}}, **_REFUSALS}


def _libretranslate(limits: Limits, sources: list[str], targets: list[str]) -> dict[str, Any]:
    request = {"type": "object", "required": ["q", "source", "target"], "properties": {
        "q": _texts(limits, "the text(s) to translate"),
        "source": {"type": "string", "enum": [*sources, "auto"],
                   "description": "the text's language, or auto (detected)"},
        "target": {"type": "string", "description": "a language code", "enum": targets},
        "format": {"type": "string", "enum": list(FORMATS)},
        "alternatives": {"type": "integer", "minimum": 0, "maximum": limits.max_beam - 1},
        "api_key": {"type": "string"}}}
    answer = {"type": "object", "required": ["translatedText"], "properties": {
        "translatedText": {"oneOf": [{"type": "string"},
                                     {"type": "array", "items": {"type": "string"}}]},
        "alternatives": {"type": "array"}, "detectedLanguage": {}}}
    return {"post": {"summary": "Translate (LibreTranslate's request and answer)",
                     "requestBody": _body(request, form=True),
                     "responses": _answer(answer, "the translations")}}


def _detect(limits: Limits) -> dict[str, Any]:
    request = {"type": "object", "required": ["q"], "properties": {
        "q": _texts(limits, "the text whose language is asked"), "api_key": {"type": "string"}}}
    answer = {"type": "array", "items": {"type": "object", "properties": {
        "confidence": {"type": "number", "minimum": 0, "maximum": 100},
        "language": {"type": "string"}}}}
    return {"post": {"summary": "Detect the language (LibreTranslate's request and answer)",
                     "requestBody": _body(request, form=True),
                     "responses": _answer(answer, "the likeliest languages, best first")}}


def _native(limits: Limits, sources: list[str], targets: list[str]) -> dict[str, Any]:
    request = {"type": "object", "required": ["text"], "additionalProperties": False,
               "properties": {
                   "text": _texts(limits, "the text(s) to translate"),
                   "beam": {"type": "integer", "minimum": 1, "maximum": limits.max_beam},
                   "n_best": {"type": "integer", "minimum": 1, "maximum": limits.max_beam},
                   "attention": {"type": "boolean"},
                   "format": {"type": "string", "enum": list(FORMATS)},
                   "source": {"type": "string", "enum": sources},
                   "target": {"type": "string", "enum": targets},
                   "api_key": {"type": "string"}}}
    answer = {"type": "object", "required": ["beam", "n_best", "translations"],
              "properties": {"beam": {"type": "integer"}, "n_best": {"type": "integer"},
                             "translations": {"type": "array"}}}
    return {"post": {"summary": "Translate with n-best scores, subword pieces and attention",
                     "requestBody": _body(request, form=False),
                     "responses": _answer(answer, "the translations")}}


def _get(summary: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"get": {"summary": summary, "responses": {
        "200": {"description": summary, "content": {"application/json": {"schema": schema}}},
        "403": _JSON_ERROR}}}


def openapi_spec(limits: Limits, *, sources: list[str], targets: list[str]) -> dict[str, Any]:
    """The OpenAPI 3.0 description of the server's API; `sources` and `targets`: the languages
    its runs translate from and to (a pair no run serves is still a 400)."""
    page = {"get": {"summary": "The page: translate and see the attention", "responses": {
        "200": {"description": "HTML", "content": {"text/html": {"schema": {"type": "string"}}}},
        "403": _JSON_ERROR}}}
    return {
        "openapi": "3.0.3",
        "info": {"title": "attncli serve", "version": "1",
                 "description": "LibreTranslate's /translate, /detect and /languages, and "
                                "attncli's /v1/translate (n-best, pieces, attention)"},
        "paths": {
            "/translate": _libretranslate(limits, sources, targets),
            "/detect": _detect(limits),
            "/languages": _get("The languages, each with the targets it translates to",
                               {"type": "array"}),
            "/v1/translate": _native(limits, sources, targets),
            "/v1/model": _get("The run(s) served and how", {"type": "object"}),
            "/health": _get("Liveness and the queue", {"type": "object"}),
            "/spec": _get("This description", {"type": "object"}),
            "/": page,
        },
        "components": {"schemas": {"Error": _ERROR}},
    }
