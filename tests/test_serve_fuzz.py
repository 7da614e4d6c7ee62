"""schemathesis against a live `attncli serve`: every route of its /spec, valid and invalid
requests generated from the description, and not one answered with a 500, a hang or a dead
server; every refusal is a documented 4xx with a one-line JSON error (the spec's Error schema).

Loopback only, and with the queue and the wait far above what the fuzzer sends, so that no
request is refused for load (a 503 would hide what a request itself did to the server).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from serving import Server

pytest.importorskip("starlette")
pytest.importorskip("schemathesis")
pytest.importorskip("libretranslatepy")  # the dev extra; the language identifier comes with it
EXAMPLES = 100  # per operation and per mode (valid, invalid)
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance," \
         "response_schema_conformance"


@pytest.fixture(scope="module")
def server(served_run, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve-fuzz") / "server.log"
    server = Server(served_run, "--max-texts", "4", "--max-chars", "200", "--max-beam", "4",
                    "--max-queue", "100000", "--timeout", "120", log_path=log)
    yield server
    assert server.stop() == 0, server.log()
    assert "Traceback" not in server.log()


def _requests_by_operation(report: Path) -> Counter:
    """Requests sent per (method, path), from the run's NDJSON events."""
    sent: Counter = Counter()
    for line in report.read_text("utf-8").splitlines():
        event = json.loads(line)
        for interaction in event.get("ScenarioFinished", {}).get("recorder", {}).get(
                "interactions", {}).values():
            request = interaction["request"]
            sent[request["method"], urlsplit(request["uri"]).path] += 1
    return sent


def test_no_generated_request_breaks_the_server(server, tmp_path):
    report = tmp_path / "events.ndjson"
    out = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "run", server.url + "/spec",
         "--checks", CHECKS, "--mode", "all", "--max-examples", str(EXAMPLES),
         "--phases", "examples,coverage,fuzzing", "--request-timeout", "60", "--seed", "1",
         "--workers", "1", "--report", "ndjson", "--report-ndjson-path", str(report)],
        capture_output=True, text=True, timeout=900, cwd=tmp_path)  # its .schemathesis/ there
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "No issues found" in out.stdout, out.stdout[-3000:]
    sent = _requests_by_operation(report)
    # the POST routes take bodies: at least EXAMPLES requests each (the GET routes take no
    # input, so each has only a few distinct requests to send)
    for path in ("/translate", "/detect", "/v1/translate"):
        assert sent["POST", path] >= EXAMPLES, sent
    assert server.request("/health").json["status"] == "ok"  # alive after all of it
    print(f"schemathesis: {sum(sent.values())} requests: {dict(sent)}")
