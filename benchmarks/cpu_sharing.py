"""Two attncli processes on one machine: each one's throughput alone and side by side, under
OpenMP wait settings and thread counts given as environments.

    ATTNCLI_DATA_DIR=../shared/data python benchmarks/cpu_sharing.py --run RUN \\
        --pairs FILE.jsonl [--env NAME:VAR=VALUE,VAR=VALUE ...] [--rounds 2] [--json out.json]

Workloads, each the real command:

- train: `attncli train configs/small.yaml` (a fresh run in a temporary folder, no validation
  or saving in the window), target tokens/s over the window, from its metrics.jsonl;
- eval: `attncli eval RUN --data FILE --beam 5 --json`, its sentences/s;
- serve: `attncli serve RUN` and one client sending FILE's sentences one request at a time,
  requests/s.

Cases: each workload alone, then train + serve, train + eval and eval + eval side by side. An
environment applies to both processes (`default:` is the empty one: attncli's own defaults).
Each case runs `--rounds` times, the environments alternating within a round; the table gives
each figure's median and its share of the same environment's alone figure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WINDOW_S = 30.0  # how long an alone train or serve case, or train + serve, is measured
WARM_STEPS = 20  # training updates before a window opens (start-up, first shapes)
TRAIN_SETS = ["train.max_steps=1000000", "train.log_every=1", "train.eval_every=1000000",
              "train.save_every=1000000", "train.max_minutes=60", "train.examples=[]"]


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    return {**env, "PYTHONPATH": str(REPO), **extra}


def _attncli(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "attncli", *args]


class Training:
    """`attncli train configs/small.yaml` in the background; tokens/s between two marks."""

    def __init__(self, env: dict[str, str], work: Path):
        self.run = work / "train"
        sets = [a for s in TRAIN_SETS for a in ("--set", s)]
        self.process = subprocess.Popen(
            _attncli(["train", "configs/small.yaml", "--runs-dir", str(work), "--name", "train",
                      *sets]), cwd=REPO, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)

    def events(self) -> list[dict]:
        try:
            lines = (self.run / "metrics.jsonl").read_text().splitlines()
        except OSError:
            return []
        return [e for e in map(json.loads, lines[:-1]) if e.get("event") == "train"]

    def warm(self) -> int:
        while len(self.events()) < WARM_STEPS:
            if self.process.poll() is not None:
                raise RuntimeError("the training stopped before its window")
            time.sleep(0.5)
        return len(self.events())

    def tokens_per_s(self, start: int) -> float:
        """Target tokens per training second from event `start` on."""
        events = self.events()[start - 1:]
        tokens = sum(e["tokens_per_s"] * (e["seconds"] - before["seconds"])
                     for before, e in zip(events, events[1:], strict=False))
        return tokens / (events[-1]["seconds"] - events[0]["seconds"])

    def stop(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def _eval(run: Path, pairs: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(_attncli(["eval", str(run), "--data", str(pairs), "--beam", "5",
                                      "--json"]), cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


def _eval_rate(process: subprocess.Popen) -> float:
    out, _ = process.communicate()
    if process.returncode:
        raise RuntimeError(f"attncli eval failed ({process.returncode})")
    return json.loads(out[out.index("{"):])["sentences_per_s"]


def _serve_rate(run: Path, sentences: list[str], env: dict[str, str], *, seconds: float,
                work: Path) -> float:
    """Requests/s of one client sending one sentence at a time for `seconds`."""
    log = work / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(_attncli(["serve", str(run), "--port", "0"]), cwd=REPO,
                                  env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        while " at http://" not in (text := log.read_text()):
            if server.poll() is not None:
                raise RuntimeError(text)
            time.sleep(0.1)
        url = text.split(" at ", 1)[1].split()[0].rstrip("/") + "/v1/translate"
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            body = json.dumps({"text": [sentences[done % len(sentences)]], "beam": 5}).encode()
            request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as reply:
                reply.read()
            done += 1
        return done / (time.perf_counter() - start)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)


def run_case(case: str, args, env: dict[str, str], sentences: list[str]) -> dict[str, float]:
    """One case's figures: {"train": tokens/s, "eval": sentences/s, "serve": requests/s, ...}."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if case == "eval":
            return {"eval": _eval_rate(_eval(args.run, args.pairs, env))}
        if case == "eval+eval":
            first, second = (_eval(args.run, args.pairs, env) for _ in range(2))
            return {"eval": _eval_rate(first), "eval (2nd)": _eval_rate(second)}
        if case == "serve":
            return {"serve": _serve_rate(args.run, sentences, env, seconds=WINDOW_S, work=work)}
        training = Training(env, work)
        try:
            start = training.warm()
            if case == "train":
                time.sleep(WINDOW_S)
                return {"train": training.tokens_per_s(start)}
            if case == "train+eval":
                rate = _eval_rate(_eval(args.run, args.pairs, env))
            else:
                rate = _serve_rate(args.run, sentences, env, seconds=WINDOW_S, work=work)
            return {"train": training.tokens_per_s(start), case.split("+")[1]: rate}
        finally:
            training.stop()


def _parse_env(text: str) -> tuple[str, dict[str, str]]:
    name, _, settings = text.partition(":")
    return name, dict(item.split("=", 1) for item in settings.split(",") if item)


def _table(results: dict[str, dict[str, list[dict]]]) -> str:
    lines = ["| environment | case | figure | median | of alone |", "|---|---|---|---:|---:|"]
    for env_name, cases in results.items():
        alone = {key: statistics.median(r[key] for r in cases[key.split(" ")[0]])
                 for key in ("train", "eval", "serve") if key in cases}
        for case, rounds in cases.items():
            for figure in rounds[0]:
                value = statistics.median(r[figure] for r in rounds)
                base = alone.get(figure.split(" ")[0])
                share = f"{100 * value / base:.0f}%" if base and "+" in case else ""
                lines.append(f"| {env_name} | {case} | {figure} | {value:,.1f} | {share} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--pairs", type=Path, required=True, help="JSONL pairs to decode")
    parser.add_argument("--env", action="append", default=[], help="NAME:VAR=VALUE,...")
    parser.add_argument("--cases", default="train,eval,serve,train+serve,train+eval,eval+eval")
    parser.add_argument("--src", default="en", help="the pairs' source language key")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    envs = dict(_parse_env(text) for text in (args.env or ["default:"]))
    sentences = [json.loads(line)[args.src] for line in args.pairs.read_text().splitlines()]
    results: dict[str, dict[str, list[dict]]] = {name: {} for name in envs}
    for round_ in range(args.rounds):
        for case in args.cases.split(","):
            for name, extra in envs.items():
                figures = run_case(case, args, _env(extra), sentences)
                results[name].setdefault(case, []).append(figures)
                print(f"round {round_} {name} {case}: {figures}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(_table(results))


if __name__ == "__main__":
    main()
