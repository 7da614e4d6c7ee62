"""`attncli serve`'s own mistakes to report in one line (exit 2): the extra not installed, a port
in use, limits that contradict each other."""

from __future__ import annotations

import socket
import sys

import pytest
from helpers import assert_one_line_error, run_cli


def test_without_the_extra_it_says_how_to_install_it(monkeypatch, served_run):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn now fails
    assert_one_line_error(run_cli("serve", str(served_run)), "pip install 'attncli[serve]'")


def test_a_queue_smaller_than_a_request_is_refused(served_run):
    result = run_cli("serve", str(served_run), "--max-texts", "10", "--max-queue", "5")
    assert_one_line_error(result, "--max-queue 5 is less than --max-texts 10")


@pytest.mark.parametrize(("args", "expected"), [
    (["--timeout", "inf"], "--timeout and --batch-wait must be finite"),
    (["--batch-wait", "inf"], "--timeout and --batch-wait must be finite"),
    (["--timeout", "2", "--batch-wait", "5000"], "--batch-wait 5000 ms is not shorter than"),
])
def test_timeouts_that_would_stall_the_server_are_refused(served_run, args, expected):
    """`--batch-wait inf` killed the decoding loop while the server went on taking requests;
    `--timeout inf` made /v1/model a 500."""
    assert_one_line_error(run_cli("serve", str(served_run), *args), expected)


def test_a_port_in_use_is_one_line(served_run):
    pytest.importorskip("uvicorn")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = run_cli("serve", str(served_run), "--port", port)
    assert_one_line_error(result, f"--host 127.0.0.1 --port {port}: cannot listen there")
