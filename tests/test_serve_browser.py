"""The page of `attncli serve` in a real browser: Debian's Chromium, headless, driven by Selenium.

The server asks for an API key, so the first test also shows that the page asks for it; the
browser keeps it for the session, as a person's tab would. These tests skip only where no
Chromium with its driver exists (CI installs them: .ci/run).
"""

from __future__ import annotations

import pytest
from serving import Server, chromium

pytest.importorskip("starlette")

KEY = "page-key"
SENTENCE = "The woman sees a red ball in the park."


@pytest.fixture(scope="module")
def server(served_run, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve-page") / "server.log"
    server = Server(served_run, "--api-key", KEY, log_path=log)
    yield server
    assert server.stop() == 0, server.log()


@pytest.fixture(scope="module")
def browser():
    driver, reason = chromium()
    if driver is None:
        pytest.skip(reason)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def _wait(browser, condition, seconds: float = 20):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, seconds).until(lambda _: condition())


def _by_id(browser, name: str):
    from selenium.webdriver.common.by import By

    return browser.find_element(By.ID, name)


def _cells(browser) -> list:
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.CSS_SELECTOR, "#heatmap td.cell")


def _api(server, text: str, **fields) -> dict:
    reply = server.request("/v1/translate", {"text": [text], "attention": True, **fields},
                           headers={"Authorization": f"Bearer {KEY}"})
    assert reply.status == 200, reply.body
    return reply.json["translations"][0]


def _output(browser) -> str:
    """The best translation as the page holds it (of the first sentence)."""
    from selenium.webdriver.common.by import By

    best = browser.find_elements(By.CSS_SELECTOR, "#output .best")
    return best[0].get_attribute("textContent") if best else ""


def test_type_translate_and_read_the_heatmap(server, browser):
    from selenium.webdriver.common.by import By

    browser.get(server.url + "/")
    _wait(browser, lambda: "step-40" in _by_id(browser, "model").text)
    assert _by_id(browser, "key-row").is_displayed()  # the page asks for the key
    _by_id(browser, "key").send_keys(KEY)
    _by_id(browser, "source").send_keys(SENTENCE)
    _by_id(browser, "translate").click()
    _wait(browser, lambda: _cells(browser))  # translated (an output may be empty)
    expected = _api(server, SENTENCE)
    assert _output(browser) == expected["hypotheses"][0]["text"]
    pieces, source = expected["hypotheses"][0]["pieces"], expected["source_pieces"]
    assert len(_cells(browser)) == len(pieces) * len(source)
    columns = browser.find_elements(By.CSS_SELECTOR, "#heatmap thead th.col")
    rows = browser.find_elements(By.CSS_SELECTOR, "#heatmap tbody th.row")
    assert [c.get_attribute("textContent") for c in columns] == source  # --show-attention's
    assert [r.get_attribute("textContent") for r in rows] == pieces  # labels
    last = expected["attention"]["cross"][-1]  # the last layer's mean over heads, by default
    mean = [sum(h[0][c] for h in last) / len(last) for c in range(len(source))]
    shown = [float(cell.get_attribute("data-weight")) for cell in _cells(browser)[:len(source)]]
    assert shown == pytest.approx(mean, abs=0.0011)


def test_switch_layer_head_and_kind(server, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    expected = _api(server, SENTENCE)
    Select(_by_id(browser, "layer")).select_by_value("0")
    Select(_by_id(browser, "head")).select_by_value("1")
    assert _by_id(browser, "caption").text.startswith("Layer 0, head 1.")
    row = [float(c.get_attribute("data-weight")) for c in _cells(browser)[:len(
        expected["source_pieces"])]]
    assert row == pytest.approx(expected["attention"]["cross"][0][1][0], abs=0.0006)
    ActionChains(browser).move_to_element(_cells(browser)[0]).perform()
    readout = _by_id(browser, "readout").text
    assert readout.startswith(f"{expected['hypotheses'][0]['pieces'][0]} → ") and "%" in readout
    browser.find_element(By.CSS_SELECTOR, ".tab[data-kind=encoder]").click()
    assert len(_cells(browser)) == len(expected["source_pieces"]) ** 2
    browser.find_element(By.CSS_SELECTOR, ".tab[data-kind=decoder]").click()
    assert len(_cells(browser)) == len(expected["hypotheses"][0]["pieces"]) ** 2


def test_a_deep_link_translates_on_load(server, browser):
    from urllib.parse import quote

    text = "A dog finds the old car."
    browser.get(f"{server.url}/?q={quote(text)}")
    _wait(browser, lambda: _cells(browser))
    assert _by_id(browser, "source").get_attribute("value") == text
    assert _output(browser) == _api(server, text)["hypotheses"][0]["text"]


def test_markup_in_a_link_is_shown_as_text_and_runs_nothing(server, browser):
    from urllib.parse import quote

    from selenium.webdriver.common.by import By

    text = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2"> a dog'
    browser.get(f"{server.url}/?q={quote(text)}")
    _wait(browser, lambda: _cells(browser))  # translated (an output may be empty)
    assert _by_id(browser, "source").get_attribute("value") == text
    assert browser.execute_script("return window.pwned === undefined")
    assert not browser.find_elements(By.TAG_NAME, "img")
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 1  # the page's own
    heads = [c.get_attribute("textContent") for c in
             browser.find_elements(By.CSS_SELECTOR, "#heatmap thead th.col")]
    assert heads == _api(server, text)["source_pieces"]  # labels are text, as sent


def test_two_typed_paragraphs_are_both_translated_and_kept_apart(server, browser):
    """The box goes as one text: the server splits it, the page shows its paragraphs as typed
    and offers each sentence's attention."""
    from selenium.webdriver.common.by import By

    text = "A dog runs in the park.\n\nTwo men play football."
    browser.get(server.url + "/")
    _wait(browser, lambda: "step-40" in _by_id(browser, "model").text)
    _by_id(browser, "source").clear()
    _by_id(browser, "source").send_keys(text)
    _by_id(browser, "translate").click()
    _wait(browser, lambda: _cells(browser) and "2 sentences" in _by_id(browser, "status").text)
    expected = _api(server, text)
    first, second = (s["hypotheses"][0]["text"] for s in expected["sentences"])
    assert _output(browser) == expected["hypotheses"][0]["text"] == f"{first}\n\n{second}"
    options = browser.find_elements(By.CSS_SELECTOR, "#sentence option")
    assert [o.get_attribute("textContent") for o in options] == [
        "1: A dog runs in the park.", "2: Two men play football."]
