"""`attncli serve` as a real process over a tiny run: both APIs, equality with `attncli
translate`, attention, and every kind of bad input answered with one line, the server going on.

One server serves the whole module (starting one costs seconds of CPU): it runs with an API key
and one allowed origin, so requests send the key unless a test is about the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_cli
from serving import Server

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

KEY = "s3cret"
AUTH = {"Authorization": f"Bearer {KEY}"}
ALLOWED = "http://allowed.example"
SENTENCE = "The man sees a red ball."
LIMITS = ["--max-texts", "4", "--max-chars", "300", "--max-beam", "8"]


@pytest.fixture(scope="module")
def server(served_run, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve-api") / "server.log"
    server = Server(served_run, "--api-key", KEY, "--cors-origin", ALLOWED, *LIMITS, log_path=log)
    yield server
    assert server.stop() == 0, server.log()
    assert "Traceback" not in server.log()


def _post(server: Server, path: str, body: dict, **headers: str):
    reply = server.request(path, body, headers={**AUTH, **headers})
    assert reply.status == 200, reply.body
    return reply.json


def _cli_hypotheses(run: Path, text: str, *args: str) -> list[dict]:
    out = run_cli("translate", "--run", str(run), "--json", *args, text)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_health_model_and_languages(server, served_run):
    assert server.request("/health").json["status"] == "ok"
    model = server.request("/v1/model").json
    assert model["languages"] == {"source": "en", "target": "de"}
    assert model["engine"] == "torch" and model["device"] == "cpu" and model["attention"]
    assert model["checkpoint"] == "step-40" and isinstance(model["validation_bleu"], float)
    assert model["parameters"] > 10_000 and model["api_key_required"]
    assert model["layers"] == {"encoder": 2, "decoder": 2} and model["heads"] == 2
    assert server.request("/languages").json[0] == {"code": "en", "name": "English",
                                                    "targets": ["de"]}


def test_one_sentence_equals_attncli_translate(server, served_run):
    """The same sentence and settings: the same translation, n-best and scores."""
    cli = _cli_hypotheses(served_run, SENTENCE, "--beam", "3", "--nbest", "2")[0]
    lt = _post(server, "/translate", {"q": SENTENCE, "source": "en", "target": "de"})
    assert lt["translatedText"] == _cli_hypotheses(served_run, SENTENCE)[0]["hypotheses"][0]
    native = _post(server, "/v1/translate", {"text": [SENTENCE], "beam": 3, "n_best": 2})
    (only,) = native["translations"]
    assert [h["text"] for h in only["hypotheses"]] == cli["hypotheses"]
    assert [h["score"] for h in only["hypotheses"]] == cli["scores"]
    assert only["source_pieces"][-1] == "</s>" and only["hypotheses"][0]["pieces"][-1] == "</s>"


def test_a_list_answers_a_list_in_order(server):
    texts = [SENTENCE, "A dog holds the old car.", "The woman paints a small boat in the park."]
    answer = _post(server, "/translate", {"q": texts, "source": "en", "target": "de"})
    alone = [_post(server, "/translate", {"q": t, "source": "en", "target": "de"})
             ["translatedText"] for t in texts]
    assert answer["translatedText"] == alone
    native = _post(server, "/v1/translate", {"text": texts})["translations"]
    assert [s["hypotheses"][0]["text"] for s in native] == alone


def test_libretranslate_alternatives_auto_and_forms(server, served_run):
    answer = _post(server, "/translate", {"q": SENTENCE, "source": "auto", "target": "de",
                                          "alternatives": 2})
    cli = _cli_hypotheses(served_run, SENTENCE, "--nbest", "3")[0]["hypotheses"]
    assert [answer["translatedText"], *answer["alternatives"]] == cli
    assert answer["detectedLanguage"]["language"] == "en"
    form = f"q={SENTENCE.replace(' ', '+')}&source=en&target=de&api_key={KEY}".encode()
    reply = server.request("/translate", raw=form,
                           headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert reply.status == 200 and reply.json["translatedText"] == cli[0]


def test_attention_every_layer_and_head_without_changing_the_translation(server):
    plain = _post(server, "/v1/translate", {"text": [SENTENCE], "beam": 2})["translations"][0]
    shown = _post(server, "/v1/translate", {"text": [SENTENCE], "beam": 2, "attention": True}
                  )["translations"][0]
    assert shown["hypotheses"] == plain["hypotheses"]
    attention, pieces = shown["attention"], shown["hypotheses"][0]["pieces"]
    src, out = len(shown["source_pieces"]), len(pieces)
    assert attention["decoder_input"] == ["<s>", *pieces[:-1]]
    shapes = {"cross": (out, src), "encoder": (src, src), "decoder": (out, out)}
    for kind, (rows, cols) in shapes.items():
        layers = attention[kind]
        assert len(layers) == 2 and all(len(heads) == 2 for heads in layers), kind
        for head in (h for heads in layers for h in heads):
            assert len(head) == rows and all(len(row) == cols for row in head), kind
            assert all(abs(sum(row) - 1) < 0.01 for row in head), kind
    causal = attention["decoder"][0][0]
    assert all(w == 0 for i, row in enumerate(causal) for w in row[i + 1:])


def test_labels_are_the_ones_show_attention_prints(server, served_run):
    out = run_cli("translate", "--run", str(served_run), "--show-attention", SENTENCE)
    lines = [line.split() for line in out.stdout.splitlines()[2:]]
    shown = _post(server, "/v1/translate", {"text": [SENTENCE], "attention": True}
                  )["translations"][0]
    assert lines[0] == shown["source_pieces"]
    assert [line[0] for line in lines[1:]] == shown["hypotheses"][0]["pieces"]


def _one_line_error(reply, status: int, expected: str) -> None:
    assert reply.status == status, reply.body
    error = reply.json["error"]
    assert expected in error and "\n" not in error and "Traceback" not in error, error


BAD = {
    "invalid JSON": ("/translate", b'{"q": "hi",', 400, "invalid JSON"),
    "not an object": ("/v1/translate", b'["hi"]', 400, "must be a JSON object"),
    "empty body": ("/v1/translate", b"", 400, "empty"),
    "nested too deep": ("/v1/translate", b"[" * 12_000, 400, "nested too deeply"),
    "not UTF-8": ("/translate", b'{"q": "caf\xe9", "source": "en", "target": "de"}', 400,
                  "not valid UTF-8"),
    "lone surrogate": ("/v1/translate", b'{"text": ["\\ud800 a"]}', 400, "lone surrogate"),
    "q a number": ("/translate", {"q": 5, "source": "en", "target": "de"}, 400,
                   "must be a string or a list of strings"),
    "text of numbers": ("/v1/translate", {"text": [1, 2]}, 400, "list of strings"),
    "empty text": ("/translate", {"q": "  ", "source": "en", "target": "de"}, 400, "empty text"),
    "empty list": ("/v1/translate", {"text": []}, 400, "the list is empty"),
    "too many texts": ("/v1/translate", {"text": ["a b"] * 5}, 400, "at most 4"),
    "too many characters": ("/v1/translate", {"text": ["word " * 61]}, 400, "at most 300"),
    "body too big": ("/v1/translate", b"{" + b" " * 30_000 + b"}", 413, "over"),
    "beam a string": ("/v1/translate", {"text": ["hi"], "beam": "5"}, 400, "must be an integer"),
    "beam true": ("/v1/translate", {"text": ["hi"], "beam": True}, 400, "must be an integer"),
    "beam zero": ("/v1/translate", {"text": ["hi"], "beam": 0}, 400, "out of range"),
    "beam too wide": ("/v1/translate", {"text": ["hi"], "beam": 99}, 400, "out of range"),
    "n_best over beam": ("/v1/translate", {"text": ["hi"], "beam": 2, "n_best": 3}, 400,
                         "out of range (1 to 2)"),
    "attention not a bool": ("/v1/translate", {"text": ["hi"], "attention": "yes"}, 400,
                             "true or false"),
    "misspelt field": ("/v1/translate", {"text": ["hi"], "nbest": 2}, 400,
                       "did you mean n_best"),
    "alternatives too many": ("/translate", {"q": "hi", "source": "en", "target": "de",
                                             "alternatives": 50}, 400, "out of range"),
    "xml": ("/translate", {"q": "hi", "source": "en", "target": "de", "format": "xml"}, 400,
            "format: 'xml' is not supported (text or html)"),
    "html over the characters": ("/v1/translate", {"text": ["<p>" + "a " * 150 + "</p>"],
                                                    "format": "html"}, 400, "at most 300"),
    "another pair": ("/translate", {"q": "hi", "source": "fr", "target": "de"}, 400,
                     "translates en->de only"),
    "no target": ("/translate", {"q": "hi", "source": "en"}, 400, "target: missing"),
    # fields that errors name: a lone surrogate in them could not be written back in UTF-8
    "surrogate field name": ("/v1/translate", b'{"\\ud800": 1, "text": "x"}', 400,
                             "a field name: not valid Unicode"),
    "surrogate language": ("/translate", b'{"q": "hi", "source": "\\ud800", "target": "de"}',
                           400, "source: not valid Unicode"),
    "5,000-digit number": ("/v1/translate", b'{"text": "x", "beam": ' + b"7" * 5000 + b"}",
                           400, "invalid JSON: Exceeds the limit"),
    "alternatives a superscript": ("/translate", {"q": "hi", "source": "en", "target": "de",
                                                  "alternatives": "\u00b2"}, 400,
                                   "must be an integer"),
    "a NUL character": ("/v1/translate", {"text": ["a\u0000b"]}, 400, "a NUL character"),
    # no visible character: the model "translated" an empty source (or the invisible pieces)
    "a zero-width space": ("/translate", {"q": "\u200b", "source": "en", "target": "de"}, 400,
                           "q: only invisible or control characters, no text"),
    "control characters": ("/v1/translate", {"text": ["a b", "\u0001\u0002"]}, 400,
                           "text[1]: only invisible or control characters, no text"),
    "alternatives of 5,000 digits": ("/translate", {"q": "hi", "source": "en", "target": "de",
                                                    "alternatives": "9" * 5000}, 400,
                                     "(5000 digits) is out of range"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_input_is_one_line_and_the_server_goes_on(server, case):
    path, body, status, expected = BAD[case]
    before = server.log().count("\n")
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    _one_line_error(server.request(path, raw=raw, headers=AUTH), status, expected)
    logged = server.log().splitlines()[before:]
    assert len(logged) == 1 and f" {status} " in logged[0], logged  # the access log's line
    assert server.request("/health").status == 200


def test_the_api_key_is_asked_for(server):
    body = {"q": "hi", "source": "en", "target": "de"}
    _one_line_error(server.request("/translate", body), 403, "API key")
    _one_line_error(server.request("/translate", {**body, "api_key": "wrong"}), 403, "API key")
    assert server.request("/translate", {**body, "api_key": KEY}).status == 200
    _one_line_error(server.request("/v1/translate", {"text": ["hi"]},
                                   headers={"Authorization": "Bearer nope"}), 403, "API key")


def test_other_origins_are_refused_unless_named(server):
    body = {"text": ["hi"]}
    refused = server.request("/v1/translate", body, headers={**AUTH, "Origin": "http://evil.test"})
    _one_line_error(refused, 403, "cross-origin request from http://evil.test refused")
    allowed = server.request("/v1/translate", body, headers={**AUTH, "Origin": ALLOWED})
    assert allowed.status == 200
    assert allowed.headers["access-control-allow-origin"] == ALLOWED
    preflight = server.request("/v1/translate", method="OPTIONS", headers={
        "Origin": ALLOWED, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert preflight.status == 200
    refused = server.request("/v1/translate", method="OPTIONS", headers={
        "Origin": ALLOWED, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "x-foo"})
    _one_line_error(refused, 400, "preflight refused: Disallowed CORS headers")
    own = server.url  # the page's own requests carry the server's origin
    assert server.request("/v1/translate", body, headers={**AUTH, "Origin": own}).status == 200


def test_a_name_rebound_to_loopback_is_refused(server):
    """DNS rebinding: a page at rebind.example, its name pointed at 127.0.0.1, sends its own
    name as Host and its own origin, which passed the origin check."""
    port = server.url.rstrip("/").rsplit(":", 1)[1]
    site = f"rebind.example:{port}"
    refused = server.request("/v1/translate", {"text": ["hi"]},
                             headers={**AUTH, "Host": site, "Origin": f"http://{site}"})
    _one_line_error(refused, 403, "Host rebind.example refused: this server on loopback "
                                  "answers to 127.0.0.1, [::1], localhost only")
    local = server.request("/health", headers={"Host": f"localhost:{port}"})
    assert local.status == 200


def test_unknown_paths_and_methods_are_json(server):
    _one_line_error(server.request("/nope"), 404, "Not Found")
    _one_line_error(server.request("/translate"), 405, "Method Not Allowed")


def test_the_page_is_served_with_a_strict_policy(server):
    page = server.request("/")
    assert page.status == 200 and b'<script src="/static/app.js"' in page.body
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert server.request("/static/app.js").status == 200
    same_page = server.request("/static/index.html")  # the page again: with its policy too
    assert "frame-ancestors 'none'" in same_page.headers["content-security-policy"]


def test_a_text_of_paragraphs_keeps_them_through_libretranslates_client(server):
    from libretranslatepy import LibreTranslateAPI

    text = "A dog runs. Two men play.\n\nA cat sleeps."
    translated = LibreTranslateAPI(server.url + "/", api_key=KEY).translate(text, "en", "de")
    native = _post(server, "/v1/translate", {"text": [text]})["translations"][0]
    first, second, third = (s["hypotheses"][0]["text"] for s in native["sentences"])
    assert translated == native["hypotheses"][0]["text"] == f"{first} {second}\n\n{third}"
    assert [s["source"] for s in native["sentences"]] == ["A dog runs.", "Two men play.",
                                                          "A cat sleeps."]
    assert len(native["hypotheses"]) == 1 and "attention" not in native


def test_html_keeps_its_markup_and_leaves_scripts_as_they_are(server):
    page = "<p>Hello, <b>how are you</b>?</p><script>x()</script>"
    answer = _post(server, "/translate", {"q": page, "source": "en", "target": "de",
                                          "format": "html"})["translatedText"]
    assert answer.startswith("<p>") and answer.endswith("</p><script>x()</script>")
    assert answer.count("<b>") == answer.count("</b>") == 1
    native = _post(server, "/v1/translate", {"text": [page], "format": "html"})
    (one,) = native["translations"]
    assert one["hypotheses"][0]["text"] == answer and one["source"] == page
    assert [s["source"] for s in one["sentences"]] == ["Hello, how are you?"]
    assert all("attention" not in s for s in one["sentences"])  # taken to place tags only
