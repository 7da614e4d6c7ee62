"""`attncli serve` under load: 1, 4 and 16 clients, each request one Multi30k test sentence,
against `attncli eval`'s decoding speed on the same sentences.

    ATTNCLI_DATA_DIR=../shared/data python benchmarks/serve_load.py runs/m30k \
        [--engine torch|ctranslate2] [--seconds 30] [--clients 1,4,16] [--beam 5]

For each engine asked: `attncli eval RUN --beam B --json` first, --eval-rounds times (the
median of their sentences/s, tokenizing and decoding, is the baseline); then one server
(`attncli serve RUN --port 0`, loopback only), warmed up, and for each client count a round of
`--seconds`: every client (a thread with one keep-alive connection) posts the test sentences in
turn to /v1/translate, one a request, until the time is up, and waits for its last answer. Per
round: sentences/s, latency p50/p95/p99, errors, the CPU cores the server and the load
generator kept busy (their CPU seconds over the round's), and the server's resident memory at
the start and at the end. Each round is bounded in time and in requests (--max-requests). Run
it on an otherwise idle machine: the table says which.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from serving import Server  # noqa: E402  (the tests' server process helper)


def machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return (f"{cpu}, {os.cpu_count()} cores; torch {torch.__version__} "
            f"(CPU capability {torch.backends.cpu.get_cpu_capability()}, "
            f"{torch.get_num_threads()} threads)")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds that process ``pid`` has used (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def eval_speed(run: Path, beam: int, engine: str) -> float:
    """Sentences/s that `attncli eval` reports for the test split (tokenizing and decoding)."""
    out = subprocess.run([sys.executable, "-m", "attncli", "eval", str(run), "--beam", str(beam),
                          "--json", "--engine", engine], capture_output=True, text=True,
                         check=True, cwd=REPO)
    return json.loads(out.stdout)["sentences_per_s"]


def test_sentences(run: Path) -> list[str]:
    from attncli.core.config_files import load_config
    from attncli.data.sources import load_split

    return load_split(load_config(run / "config.yaml").data, "test").src


class Round:
    """`clients` threads posting sentences for `seconds` (at most `max_requests` in all)."""

    def __init__(self, url: str, sentences: list[str], *, beam: int, clients: int,
                 seconds: float, max_requests: int):
        self.host, self.port = url.removeprefix("http://").split(":")
        self.sentences, self.beam, self.clients = sentences, beam, clients
        self.seconds, self.max_requests = seconds, max_requests
        self.lock = threading.Lock()
        self.next = 0
        self.latencies: list[float] = []
        self.errors = 0

    def _take(self) -> str | None:
        with self.lock:
            if self.next >= self.max_requests:
                return None
            self.next += 1
            return self.sentences[(self.next - 1) % len(self.sentences)]

    def _client(self, deadline: float) -> None:
        connection = http.client.HTTPConnection(self.host, int(self.port), timeout=120)
        while time.monotonic() < deadline and (sentence := self._take()) is not None:
            body = json.dumps({"text": [sentence], "beam": self.beam})
            started = time.perf_counter()
            try:
                connection.request("POST", "/v1/translate", body,
                                   {"Content-Type": "application/json"})
                reply = connection.getresponse()
                reply.read()
                ok = reply.status == 200
            except OSError:
                ok = False
                connection.close()
            with self.lock:
                if ok:
                    self.latencies.append(time.perf_counter() - started)
                else:
                    self.errors += 1
        connection.close()

    def run(self) -> dict:
        started = time.monotonic()
        threads = [threading.Thread(target=self._client, args=(started + self.seconds,))
                   for _ in range(self.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        ms = sorted(1000 * x for x in self.latencies)
        q = statistics.quantiles(ms, n=100) if len(ms) > 1 else ms * 99
        return {"clients": self.clients, "sentences": len(ms), "seconds": round(elapsed, 1),
                "sentences_per_s": round(len(ms) / elapsed, 1), "p50_ms": round(q[49]),
                "p95_ms": round(q[94]), "p99_ms": round(q[98]), "errors": self.errors}


def measure(run: Path, engine: str, args) -> dict:
    evals = [eval_speed(run, args.beam, engine) for _ in range(args.eval_rounds)]
    baseline = statistics.median(evals)  # one eval moved by up to 17% between runs
    sentences = test_sentences(run)
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(run, "--engine", engine, "--max-queue", "1024",
                        log_path=Path(tmp) / "server.log", threads=None)
        try:
            Round(server.url, sentences, beam=args.beam, clients=4, seconds=3,
                  max_requests=40).run()  # warm-up, not counted
            start_rss = rss_mib(server.process.pid)
            rounds = []
            for clients in args.clients:
                before = server.request("/health").json
                processes = {"server_cores": server.process.pid, "client_cores": os.getpid()}
                cpu_before = {name: cpu_seconds(pid) for name, pid in processes.items()}
                rounds.append(Round(server.url, sentences, beam=args.beam, clients=clients,
                                    seconds=args.seconds, max_requests=args.max_requests).run())
                after = server.request("/health").json
                for name, pid in processes.items():  # CPU cores each process kept busy
                    busy = cpu_seconds(pid) - cpu_before[name]
                    rounds[-1][name] = round(busy / rounds[-1]["seconds"], 2)
                batches = after["batches"] - before["batches"]
                rounds[-1]["mean_batch"] = round((after["decoded"] - before["decoded"])
                                                 / max(batches, 1), 1)
                rounds[-1]["rss_mib"] = round(rss_mib(server.process.pid))
                print(json.dumps(rounds[-1]), flush=True)
        finally:
            code = server.stop()
    return {"engine": engine, "eval_sentences_per_s": baseline, "eval_runs": evals,
            "start_rss_mib": round(start_rss),
            "rounds": rounds, "exit_code": code}


def table(result: dict) -> str:
    runs = ", ".join(map(str, result["eval_runs"]))
    lines = [f"{result['engine']}: `attncli eval` decodes {result['eval_sentences_per_s']} "
             f"sentences/s (median of {runs}); server RSS at start {result['start_rss_mib']} MiB",
             "| clients | sentences/s | vs eval | p50 ms | p95 ms | p99 ms | errors | mean batch "
             "| RSS MiB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["rounds"]:
        share = r["sentences_per_s"] / result["eval_sentences_per_s"]
        lines.append(f"| {r['clients']} | {r['sentences_per_s']} | {share:.0%} | {r['p50_ms']} "
                     f"| {r['p95_ms']} | {r['p99_ms']} | {r['errors']} | {r['mean_batch']} "
                     f"| {r['rss_mib']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--engine", action="append", choices=["torch", "ctranslate2"])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-requests", type=int, default=20_000)
    parser.add_argument("--eval-rounds", type=int, default=3, help="eval runs; the median counts")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    args.run = args.run.resolve()  # the server and eval run with the repository as their folder
    args.clients = [int(c) for c in args.clients.split(",")]
    if "ctranslate2" in (args.engine or []) and not (args.run / "ctranslate2").is_dir():
        subprocess.run([sys.executable, "-m", "attncli", "export", str(args.run)], check=True,
                       cwd=REPO)
    results = [measure(args.run, engine, args) for engine in args.engine or ["torch"]]
    print(f"\nmachine: {machine()}")
    for result in results:
        print("\n" + table(result))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
