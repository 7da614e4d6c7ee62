"""`attncli serve` as a real process on a free port, and HTTP requests to it (urllib only)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
URL_LINE = re.compile(r" at (http://\S+/) ")


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Server:
    """`python -m attncli serve RUN --port 0 ARGS` with its output in `log_path`."""

    def __init__(self, run: Path, *args: str, log_path: Path, start_timeout: float = 120,
                 threads: int | None = 1):
        """`threads`: torch's (OMP_NUM_THREADS) in the server; None leaves torch's default."""
        self.log_path = log_path
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        if threads is not None:
            env["OMP_NUM_THREADS"] = str(threads)
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "attncli", "serve", str(run), "--port", "0", *args],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        deadline = time.monotonic() + start_timeout
        while not (found := URL_LINE.search(self.log())):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise AssertionError(f"attncli serve did not start:\n{self.log()}")
            time.sleep(0.05)
        self.url = found.group(1).rstrip("/")

    def log(self) -> str:
        return self.log_path.read_text("utf-8", errors="replace")

    def request(self, path: str, body: Any = None, *, raw: bytes | None = None,
                headers: dict[str, str] | None = None, method: str | None = None,
                timeout: float = 60) -> Reply:
        """GET, or POST `body` as JSON (or the bytes `raw` as they are)."""
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        req = urllib.request.Request(self.url + path, data=data, headers=all_headers,
                                     method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as reply:
                return Reply(reply.status, dict(reply.headers), reply.read())
        except urllib.error.HTTPError as err:
            return Reply(err.code, dict(err.headers), err.read())

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then the exit code (killed, and a failure, past `timeout`)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"attncli serve did not stop:\n{self.log()}") from None


def chromium(width: int = 1280, height: int = 800):
    """A headless Chromium (Debian's) driven through its chromedriver by Selenium, and why not
    when there is none: (driver, "") or (None, reason)."""
    import shutil

    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None, "selenium is not installed (pip install 'attncli[dev]')"
    names = ("chromium", "chromium-browser", "google-chrome")
    browser = next((path for name in names if (path := shutil.which(name))), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        return None, ("no Chromium with chromedriver on this machine (Debian: apt-get install "
                      "chromium chromium-driver; .ci/run does it where it can)")
    options = webdriver.ChromeOptions()
    options.binary_location = browser  # given, so Selenium never looks for a browser to fetch
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--force-device-scale-factor=1",
                "--hide-scrollbars", "--lang=en-US"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=options), ""
