"""SIGTERM while requests are queued and decoding: each accepted request is answered, the
process exits 0."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from serving import Server

pytest.importorskip("starlette")

# 16 different sentences: a request's repeated sentences would be decoded once
TEXTS = [f"{subject} {verb} the {thing}."
         for subject in ("The woman", "A child", "The worker", "A girl")
         for verb, thing in (("paints", "small boat in the park"), ("carries", "green tree"),
                             ("likes", "white bike at the beach"), ("holds", "big house"))]
REQUESTS = 12


def _busy_server(served_run, tmp_path) -> tuple[Server, list[threading.Thread], list[object]]:
    """A server with REQUESTS accepted, some queued and one decoding."""
    server = Server(served_run, "--batch-size", "16", "--max-texts", "16", "--max-beam", "8",
                    log_path=tmp_path / "server.log")
    statuses: list[object] = [None] * REQUESTS

    def send(i: int) -> None:
        try:
            statuses[i] = server.request("/v1/translate", {"text": TEXTS, "beam": 8}).status
        except OSError as err:
            statuses[i] = repr(err)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(REQUESTS)]
    for thread in threads:
        thread.start()
    deadline, health = time.monotonic() + 30, {}
    while time.monotonic() < deadline:
        health = server.request("/health").json
        accepted = health["queued"] + health["decoding"] + health["decoded"]
        if accepted == REQUESTS * len(TEXTS) and health["queued"] and health["decoding"]:
            return server, threads, statuses
        time.sleep(0.002)
    pytest.fail(f"never saw every request accepted with some queued: {health}")


def test_a_second_signal_stops_at_once(served_run, tmp_path):
    server, threads, statuses = _busy_server(served_run, tmp_path)
    server.process.send_signal(signal.SIGINT)
    time.sleep(0.1)  # two signals at once would reach Python's handler as one
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(10) == 130, server.log()
    for thread in threads:
        thread.join(60)
    assert statuses.count(200) < REQUESTS  # it did not wait for the queue


def test_sigterm_answers_the_queued_requests_then_exits_0(served_run, tmp_path):
    # one request a batch, so the later ones queue behind the one decoding
    server, threads, statuses = _busy_server(served_run, tmp_path)
    server.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(60)
    assert statuses == [200] * REQUESTS, server.log()
    assert server.stop() == 0, server.log()
    assert "Traceback" not in server.log()
