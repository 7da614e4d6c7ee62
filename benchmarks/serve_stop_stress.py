"""Stop trials: signal `attncli serve` at random moments on a busy machine, time each stop.

    python benchmarks/serve_stop_stress.py --run RUN [--trials 200] [--seed 0] [--json out.json]

Each trial starts `python -m attncli serve RUN --port 0` the way tests/test_serve_api.py's
fixture does (one torch thread, a free port), with a CPU hog per usable CPU running beside it
all along, and sends SIGTERM (SIGINT in the second of every four rounds of moments) at one of
four moments, taken in turn:

- loading: at a random instant between the process's start and its "serving" line;
- idle: a random instant up to 0.3 s after a request was answered;
- decoding: while /health says a batch of a 16-sentence, beam-8 request is decoding;
- mid-request: a client has sent a request's headers and half its body (and the server has
  read them: a /health request made the round trip since), and sends the rest a random
  instant up to 0.5 s after the signal. (A connection whose request the server has not read
  when the stop begins is closed, as any HTTP server closes idle connections when it stops.)

A trial passes when the process exits 0 within its bound (3 s from the signal when nothing is
in flight: loading, idle; the server's --timeout plus 3 s otherwise), its log has no traceback,
and the client in flight got an answer (200) or a refusal (503, or a connection refused). Prints
a Markdown table per moment (trials, failures, median and slowest stop) and exits 1 if any
trial failed. Train a RUN first, e.g. the tests' tiny run or
`attncli train configs/small.yaml --set train.max_steps=40 --name stop-trials`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from attncli.core.host import usable_cpus  # noqa: E402  (the repository's, not an installed one)

MOMENTS = ("loading", "idle", "decoding", "mid-request")
IDLE_BOUND_S = 3.0
REQUEST_TIMEOUT_S = 30.0  # `attncli serve --timeout`'s default, which the fixture keeps
URL_LINE = re.compile(r" at (http://\S+/) ")
TEXTS = [f"The {who} {does} the {what} near the old station."
         for who in ("woman", "child", "worker", "girl")
         for does, what in (("paints", "small boat"), ("carries", "green tree"),
                            ("likes", "white bike"), ("holds", "big house"))]


@dataclass
class Trial:
    moment: str
    signal: str
    stop_s: float | None = None  # signal to exit; None: did not stop within the bound + 30 s
    exit_code: int | None = None
    client: str = ""  # what the request in flight got: "200", "503", "refused", ...
    problems: list[str] = field(default_factory=list)


class Served:
    """One `attncli serve` process and its log."""

    def __init__(self, run: Path, log: Path):
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1",
               "OMP_NUM_THREADS": "1"}
        self.log_path = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "attncli", "serve", str(run), "--port", "0"],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        self.started = time.monotonic()
        self.url = ""

    def log(self) -> str:
        return self.log_path.read_text("utf-8", errors="replace")

    def wait_serving(self, limit_s: float = 180) -> None:
        while not (found := URL_LINE.search(self.log())):
            if self.process.poll() is not None or time.monotonic() - self.started > limit_s:
                raise RuntimeError(f"attncli serve did not start:\n{self.log()}")
            time.sleep(0.02)
        self.url = found.group(1).rstrip("/")

    def get(self, path: str, body: dict | None = None, timeout: float = 60) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()


def _outcome(call) -> str:
    """What a client got: the HTTP status, 'refused', or the error's name."""
    try:
        return str(call())
    except ConnectionRefusedError:
        return "refused"
    except (OSError, urllib.error.URLError) as err:
        reason = getattr(err, "reason", err)
        return "refused" if isinstance(reason, ConnectionRefusedError) else type(reason).__name__


def _in_background(call, outcome: list[str]) -> threading.Thread:
    thread = threading.Thread(target=lambda: outcome.append(_outcome(call)), daemon=True)
    thread.start()
    return thread


def _until_decoding(served: Served, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if json.loads(served.get("/health")[1]).get("decoding"):
            return
        time.sleep(0.002)
    raise RuntimeError("never saw a batch decoding")


def _half_sent(served: Served, rng: random.Random) -> tuple[socket.socket, bytes]:
    """A connection with a request's headers and half its body sent; the other half."""
    body = json.dumps({"text": TEXTS[:4]}).encode()
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    conn = socket.create_connection((host.strip("[]"), int(port)), timeout=60)
    head = (f"POST /v1/translate HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: "
            f"application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    half = rng.randint(1, len(body) - 1)
    conn.sendall(head + body[:half])
    served.get("/health")  # a round trip through the event loop: the headers have been read
    time.sleep(rng.uniform(0, 0.3))
    return conn, body[half:]


def _finish_half_sent(conn: socket.socket, rest: bytes, delay_s: float) -> str:
    time.sleep(delay_s)
    with conn:
        conn.sendall(rest)
        status_line = conn.makefile("rb").readline().decode("latin-1")
    return status_line.split()[1] if status_line else "closed"


def _prepare(moment: str, served: Served, rng: random.Random, outcome: list[str]):
    """Bring the server to `moment`; returns the client thread in flight (or None)."""
    if moment == "loading":
        time.sleep(rng.uniform(0, 2.5))
        return None
    served.wait_serving()
    if moment == "idle":
        served.get("/v1/translate", {"text": TEXTS[:1]})
        time.sleep(rng.uniform(0, 0.3))
        return None
    if moment == "decoding":
        thread = _in_background(
            lambda: served.get("/v1/translate", {"text": TEXTS, "beam": 8})[0], outcome)
        _until_decoding(served)
        return thread
    conn, rest = _half_sent(served, rng)
    return _in_background(lambda: _finish_half_sent(conn, rest, rng.uniform(0, 0.5)), outcome)


def _check(trial: Trial, served: Served, bound_s: float) -> None:
    if trial.stop_s is None or trial.stop_s > bound_s:
        trial.problems.append(f"stopped in {trial.stop_s} s, over {bound_s:g} s")
    if trial.exit_code != 0:
        trial.problems.append(f"exit code {trial.exit_code}")
    if "Traceback" in served.log():
        trial.problems.append("a traceback in the log")
    if trial.moment in ("decoding", "mid-request") and trial.client not in ("200", "503",
                                                                            "refused"):
        trial.problems.append(f"the request in flight got {trial.client!r}")


def run_trial(run: Path, moment: str, sig: signal.Signals, *, rng: random.Random,
              log: Path) -> Trial:
    """One server, one signal at `moment`; the trial's stop time and problems."""
    trial, outcome = Trial(moment, sig.name), []
    served = Served(run, log)
    try:
        client = _prepare(moment, served, rng, outcome)
        if moment == "loading" and URL_LINE.search(served.log()):
            trial.moment = "idle"  # it was already serving: an idle stop, bound and all
        signalled = time.monotonic()
        served.process.send_signal(sig)
        bound_s = IDLE_BOUND_S if client is None else REQUEST_TIMEOUT_S + IDLE_BOUND_S
        try:
            trial.exit_code = served.process.wait(bound_s + 30)
            trial.stop_s = round(time.monotonic() - signalled, 3)
        except subprocess.TimeoutExpired:
            served.process.kill()
        if client is not None:
            client.join(60)
            trial.client = outcome[0] if outcome else "no answer"
        _check(trial, served, bound_s)
    finally:
        if served.process.poll() is None:
            served.process.kill()
    return trial


def _table(trials: list[Trial]) -> str:
    rows = ["| moment | trials | failed | median stop (s) | slowest stop (s) |",
            "|---|---:|---:|---:|---:|"]
    for moment in MOMENTS:
        these = [t for t in trials if t.moment == moment]
        stops = [t.stop_s for t in these if t.stop_s is not None]
        if not these:
            continue
        failed = sum(bool(t.problems) for t in these)
        rows.append(f"| {moment} | {len(these)} | {failed} | "
                    f"{statistics.median(stops):.2f} | {max(stops):.2f} |" if stops else
                    f"| {moment} | {len(these)} | {failed} | - | - |")
    return "\n".join(rows)


def _hogs(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a trained run to serve")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hogs", type=int, default=None,
                        help="CPU hogs beside the server (default: one per usable CPU)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/serve-stop-trials"))
    parser.add_argument("--json", type=Path, default=None, help="write every trial here")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # ends the server and hogs too
    rng = random.Random(args.seed)
    hogs = _hogs(usable_cpus() if args.hogs is None else args.hogs)
    trials: list[Trial] = []
    try:
        for k in range(args.trials):
            sig = signal.SIGINT if (k // len(MOMENTS)) % 4 == 1 else signal.SIGTERM
            trial = run_trial(args.run, MOMENTS[k % len(MOMENTS)], sig, rng=rng,
                              log=args.work / f"trial-{k}.log")
            trials.append(trial)
            print(f"{k:4d} {trial.moment:12s} {trial.signal:8s} {trial.stop_s} s "
                  f"exit {trial.exit_code} client {trial.client or '-'} "
                  f"{'; '.join(trial.problems)}", flush=True)
    finally:
        for hog in hogs:
            hog.kill()
    if args.json:
        args.json.write_text(json.dumps([asdict(t) for t in trials], indent=1))
    print(_table(trials))
    return 1 if any(t.problems for t in trials) else 0


if __name__ == "__main__":
    sys.exit(main())
