"""The README's pictures, taken with the headless Chromium the browser tests use (1280x800):
the page of `attncli serve` on an en-de and an en-zh run, and TensorBoard on a run's events.

    python benchmarks/screenshots.py --en-de runs/m30k --en-zh runs/enzh --tensorboard runs/m30k

Each picture comes from a deep link (/?q=...), so the page is exactly what a shared link shows.
Writes docs/images/serve-en-de.png, serve-en-zh.png and tensorboard.png (or --out). Chinese
needs a CJK font where the browser runs (Debian: fonts-noto-cjk).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from serving import Server, chromium  # noqa: E402  (the tests' helpers)

SENTENCES = {"en-de": "Two dogs are playing in the snow.",
             "en-zh": "Tom drinks coffee every morning."}


def _browser():
    driver, reason = chromium(1280, 800)
    if driver is None:
        raise SystemExit(reason)
    driver.get("about:blank")  # the window's frame is not the page: make the page 1280x800
    inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
    driver.set_window_size(1280 + 1280 - inner[0], 800 + 800 - inner[1])
    return driver


def _wait(seconds: float, ready) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit("the page did not get ready in time")
        time.sleep(0.2)


def page(run: Path, pair: str, out: Path) -> None:
    from selenium.webdriver.common.by import By

    with tempfile.TemporaryDirectory() as tmp:
        server = Server(run, log_path=Path(tmp) / "server.log", threads=None)
        browser = _browser()
        try:
            browser.get(f"{server.url}/?q={quote(SENTENCES[pair])}")
            _wait(60, lambda: browser.find_elements(By.CSS_SELECTOR, "#heatmap td.cell"))
            time.sleep(0.5)
            browser.save_screenshot(str(out / f"serve-{pair}.png"))
        finally:
            browser.quit()
            server.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tensorboard(run: Path, out: Path) -> None:
    from selenium.webdriver.common.by import By

    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir_spec",
                                f"{run.name}:{run / 'tensorboard'}", "--host", "127.0.0.1",
                                "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    browser = _browser()
    try:
        def up() -> bool:
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).status == 200
            except OSError:
                return False

        _wait(60, up)
        browser.get(f"http://127.0.0.1:{port}/#scalars")
        _wait(60, lambda: len(browser.find_elements(By.CSS_SELECTOR, "canvas, svg path")) > 3)
        time.sleep(3)  # the charts draw after their data arrives
        browser.save_screenshot(str(out / "tensorboard.png"))
    finally:
        browser.quit()
        process.terminate()
        process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--en-de", type=Path)
    parser.add_argument("--en-zh", type=Path)
    parser.add_argument("--tensorboard", type=Path, help="a run trained with train.tensorboard")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for pair, run in (("en-de", args.en_de), ("en-zh", args.en_zh)):
        if run is not None:
            page(run, pair, args.out)
            print(f"wrote {args.out / f'serve-{pair}.png'}")
    if args.tensorboard is not None:
        tensorboard(args.tensorboard, args.out)
        print(f"wrote {args.out / 'tensorboard.png'}")


if __name__ == "__main__":
    main()
