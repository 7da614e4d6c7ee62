"""The stop trials of benchmarks/serve_stop_stress.py, shortened for CI: a server signalled
while loading, idle, decoding and mid-request, with a CPU hog per usable CPU beside it, stops
within its bounds each time (exit 0, no traceback, the request in flight answered)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import REPO

pytest.importorskip("starlette")


def test_every_moment_stops_within_its_bound_beside_cpu_hogs(served_run, tmp_path):
    trials = tmp_path / "trials.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "serve_stop_stress.py"), "--run",
         str(served_run), "--trials", "8", "--seed", "1", "--work", str(tmp_path),
         "--json", str(trials)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(trials.read_text())
    assert {(t["moment"], t["signal"]) for t in found} >= {
        ("idle", "SIGTERM"), ("decoding", "SIGTERM"), ("mid-request", "SIGTERM"),
        ("idle", "SIGINT"), ("decoding", "SIGINT"), ("mid-request", "SIGINT")}
    assert all(t["exit_code"] == 0 and not t["problems"] for t in found), done.stdout
