"""SIGTERM while requests are queued and decoding: each accepted request is answered, the
process exits 0."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from pathlib import Path

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


def _threads_taking_signals(pid: int) -> list[int]:
    """The process's threads other than the main one that do not block SIGTERM."""
    found = []
    for tid in map(int, os.listdir(f"/proc/{pid}/task")):
        status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        blocked = int(next(line.split()[1] for line in status.splitlines()
                           if line.startswith("SigBlk:")), 16)
        if tid != pid and not blocked >> (signal.SIGTERM - 1) & 1:
            found.append(tid)
    return found


def test_an_idle_server_stops_when_another_thread_takes_the_signal(served_run, tmp_path):
    """The hang of issue 63: a process-wide SIGTERM that a thread other than the main one takes
    (here sent to such a thread on purpose) while the main thread waits for work. The server
    must stop all the same, at once."""
    tgkill = getattr(ctypes.CDLL(None, use_errno=True), "tgkill", None)
    if tgkill is None or not Path("/proc/self/task").is_dir():
        pytest.skip("needs Linux with glibc's tgkill")
    server = Server(served_run, log_path=tmp_path / "server.log", threads=2)
    assert server.request("/v1/translate", {"text": TEXTS[:2]}).status == 200
    time.sleep(0.5)  # idle: the main thread waits on the queue
    others = _threads_taking_signals(server.process.pid)
    assert others, "no thread but the main one could take the signal"
    assert tgkill(server.process.pid, others[0], signal.SIGTERM) == 0
    assert server.process.wait(10) == 0, server.log()
    assert "Traceback" not in server.log()
