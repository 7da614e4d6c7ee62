"""`attncli serve RUN_EN_DE RUN_EN_ZH RUN_DE_EN`: one server, three runs, each request routed by
its language pair, driven with LibreTranslate's own client (libretranslatepy) where it can be.

The en->zh run is a copy of the en->de one with its config's target renamed (the weights still
write German): it stands for a second model of the same source language, where only routing
tells the two apart by name. The de->en run is trained apart, so its answers differ for real.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import SMALL, run_cli, train
from serving import Server

pytest.importorskip("starlette")
SENTENCE = "The man sees a red ball."
GERMAN = "Wie geht es dir? Ich hoffe, es geht dir gut."


@pytest.fixture(scope="module")
def en_zh_run(served_run, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("pairs") / "tiny-en-zh"
    shutil.copytree(served_run, run)
    config = run / "config.yaml"
    text = config.read_text("utf-8")
    assert "tgt: de" in text
    config.write_text(text.replace("tgt: de", "tgt: zh", 1), "utf-8")
    return run


@pytest.fixture(scope="module")
def de_en_run(data_dir, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pairs-de-en")
    result = train(data_dir, root, SMALL, "--name", "tiny-de-en",
                   sets=["data.src=de", "data.tgt=en", "train.max_steps=30"])
    assert result.returncode == 0, result.stderr
    return root / "tiny-de-en"


@pytest.fixture(scope="module")
def server(served_run, en_zh_run, de_en_run, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve-runs") / "server.log"
    server = Server(served_run, str(en_zh_run), str(de_en_run), log_path=log)
    yield server
    assert server.stop() == 0, server.log()
    assert "Traceback" not in server.log()


def _cli(run: Path, text: str) -> str:
    out = run_cli("translate", "--run", str(run), text)
    assert out.returncode == 0, out.stderr
    return out.stdout.rstrip("\n")


def test_libretranslate_client_lists_routes_and_detects(server, served_run, en_zh_run,
                                                        de_en_run):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server.url + "/")
    targets = {language["code"]: language["targets"] for language in client.languages()}
    assert targets == {"en": ["de", "zh"], "de": ["en"], "zh": []}
    assert client.translate(SENTENCE, "en", "de") == _cli(served_run, SENTENCE)
    assert client.translate(SENTENCE, "en", "zh") == _cli(en_zh_run, SENTENCE)
    assert client.translate("Ein Mann", "de", "en") == _cli(de_en_run, "Ein Mann")
    (best, *_) = client.detect(GERMAN)
    assert best["language"] == "de" and 0 < best["confidence"] <= 100


def test_auto_routes_by_the_detected_language_or_names_it(server, de_en_run):
    answer = server.request("/translate", {"q": GERMAN, "source": "auto", "target": "en"})
    assert answer.status == 200, answer.body
    assert answer.json["translatedText"] == _cli(de_en_run, GERMAN)
    assert answer.json["detectedLanguage"]["language"] == "de"
    refused = server.request("/translate", {"q": "Wie geht es dir?", "source": "auto",
                                            "target": "zh"})
    assert refused.status == 400 and "German" in refused.json["error"]


def test_native_api_needs_the_pair_with_several_runs(server, en_zh_run):
    missing = server.request("/v1/translate", {"text": [SENTENCE]})
    assert missing.status == 400 and "source" in missing.json["error"]
    assert "en->de" in missing.json["error"] and "de->en" in missing.json["error"]
    routed = server.request("/v1/translate", {"text": [SENTENCE], "source": "en",
                                              "target": "zh"})
    assert routed.status == 200
    assert routed.json["translations"][0]["hypotheses"][0]["text"] == _cli(en_zh_run, SENTENCE)
    unserved = server.request("/translate", {"q": SENTENCE, "source": "zh", "target": "en"})
    assert unserved.status == 400 and "zh->en" in unserved.json["error"]


def test_model_describes_every_run(server):
    model = server.request("/v1/model").json
    pairs = [(run["languages"]["source"], run["languages"]["target"]) for run in model["runs"]]
    assert pairs == [("en", "de"), ("en", "zh"), ("de", "en")]
    assert model["limits"]["max_texts"] == 64 and model["api_key_required"] is False


def test_two_runs_with_one_pair_are_one_line_exit_2(served_run, tmp_path):
    twin = tmp_path / "twin"
    shutil.copytree(served_run, twin)
    out = run_cli("serve", str(served_run), str(twin), "--port", "0")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "both translate en->de" in out.stderr


def test_the_page_offers_every_pair_and_translates_with_the_chosen_one(server, de_en_run):
    """Chromium: the page's Languages chooser lists the three pairs; choosing de -> en sends
    the request to that run (its answer is the de->en run's, not the en->de one's)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
    from serving import chromium

    browser, reason = chromium()
    if browser is None:
        pytest.skip(reason)
    try:
        browser.get(server.url + "/")
        wait = WebDriverWait(browser, 30)
        wait.until(lambda b: b.find_element(By.ID, "pair-row").is_displayed())
        chooser = Select(browser.find_element(By.ID, "pair"))
        assert [o.text for o in chooser.options] == ["en → de", "en → zh", "de → en"]
        chooser.select_by_visible_text("de → en")
        assert browser.find_element(By.ID, "source-lang").text == "de"
        assert browser.find_element(By.ID, "target-lang").text == "en"
        browser.find_element(By.ID, "source").send_keys("Ein Mann")
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#output .best"))
        shown = browser.find_element(By.CSS_SELECTOR, "#output .best").get_attribute(
            "textContent")
        assert shown == _cli(de_en_run, "Ein Mann")
    finally:
        browser.quit()


def test_auto_on_a_short_text_takes_the_likeliest_served_language(server, served_run):
    """"Hello" leaves py3langid unsure (Breton first, at a few percent): the likeliest
    language a run here translates to the target is taken, not a refusal."""
    answer = server.request("/translate", {"q": "Hello", "source": "auto", "target": "de"})
    assert answer.status == 200, answer.body
    assert answer.json["detectedLanguage"]["language"] == "en"
    assert answer.json["translatedText"] == _cli(served_run, "Hello")


def test_errors_quoting_a_field_stay_one_line(server):
    reply = server.request("/translate", {"q": "hi", "source": "en\nfr", "target": "de"})
    assert reply.status == 400 and "\n" not in reply.json["error"]


def test_exported_with_several_runs_is_refused_before_loading(served_run, en_zh_run, tmp_path):
    out = run_cli("serve", str(served_run), str(en_zh_run), "--engine", "ctranslate2",
                  "--exported", str(tmp_path), "--port", "0")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "--exported" in out.stderr
