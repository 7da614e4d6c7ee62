"""One command that checks attncli's CUDA path on a machine with a GPU, unattended, in about
ten minutes, and prints one summary.

    python benchmarks/gpu_check.py [--out DIR] [--minutes 5]     (or: make gpu-check)

Steps, each a process of its own; a failed step is reported and the next one still runs:
1. the CUDA tests (`pytest -k cuda`, the ones CI skips);
2. `attncli bench --device cuda --json` with configs/base.yaml (tokens/s and MFU of the paper's
   base model, decoding speed);
3. a timed `configs/base.yaml` run on Multi30k (`train.max_minutes`, default 5) on the GPU,
   then `attncli eval` of it (beam 4, test BLEU and chrF);
4. when two GPUs are present, 150 updates of configs/base.yaml (accum_steps 2) in one process
   and then in two (`attncli train --nproc 2`: torchrun's launcher, one GPU each), and the
   ratio of their tokens/s: the same global batches, so the ratio is the 2-GPU scaling. While
   the two run, nvidia-smi is asked every few seconds which processes hold each GPU: each
   should hold one (a rank that touched GPU 0 before its own, or a launcher that created a
   CUDA context, shows as a second process there). Where nvidia-smi cannot see the processes
   (a container's own PID namespace) this is reported as not checked.

Needs Multi30k where attncli finds it (`$ATTNCLI_DATA_DIR/multi30k`) and attncli's
dependencies importable (`python -c "import attncli.cli"` is the first check). Exit status 0
only when every step that ran passed; on a machine without a GPU it says so and exits 1 having
checked nothing more. Everything lands in `--out` (default /tmp/attncli-gpu): logs,
bench.json, the run folder and summary.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WATCH_EVERY_S = 3


def step(name: str, cmd: list[str], log: Path, timeout_s: int,
         watch: Callable[[], None] | None = None) -> dict:
    """Run `cmd` (output to `log`), calling `watch` every few seconds while it runs; its outcome
    and seconds."""
    started = time.perf_counter()
    print(f"== {name}: {' '.join(cmd)}", flush=True)
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        code: int | str | None = None
        while code is None:
            try:
                code = process.wait(timeout=WATCH_EVERY_S)
            except subprocess.TimeoutExpired:
                if time.perf_counter() - started > timeout_s:
                    stop(process)
                    code = "timeout"
                elif watch is not None:
                    watch()
    seconds = round(time.perf_counter() - started, 1)
    ok = code == 0
    print(f"   {'ok' if ok else f'FAILED ({code})'} in {seconds} s; log {log}", flush=True)
    if not ok:
        print("   " + "\n   ".join(log.read_text(errors="replace").splitlines()[-15:]))
    return {"ok": ok, "exit": code, "seconds": seconds, "log": str(log)}


def stop(process: subprocess.Popen) -> None:
    """SIGTERM first: attncli's launcher passes it on to its training processes, which a
    SIGKILL to the launcher alone would leave running on the GPUs."""
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def attncli(words: list[str]) -> list[str]:
    """The command line running `attncli` with these words, in this Python."""
    return [sys.executable, "-m", "attncli", *words]


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def bench_figures(path: Path) -> dict:
    """tokens/s, MFU (and the peak it divides by: a MIG slice's is scaled) and peak memory of
    the training step from bench.json."""
    try:
        report = json.loads(path.read_text())
        suite = report["suites"]["train"]
        row = suite["rows"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return {}
    return {"device": report.get("device_name"), "train_tgt_tokens_per_s":
            round(row["tgt_tokens_per_s"]), "mfu": round(row["mfu"], 3),
            "mfu_peak": f"{suite['peak_tflops']:.0f} TFLOP/s, {suite['peak_source']}",
            "train_peak_mib": round(row["step"].get("peak_mem_bytes", 0) / 2**20)}


def eval_figures(run: Path) -> dict:
    from attncli.core.errors import AttncliError
    from attncli.evaluate import eval_reports

    try:
        scores = next(iter(eval_reports(run).values()))  # a mix: its first corpus's
    except (OSError, ValueError, StopIteration, AttncliError):
        return {}
    return {"test_bleu": round(scores["bleu"], 2), "test_chrf": round(scores["chrf"], 2),
            "decode_sentences_per_s": scores["sentences_per_s"]}


def training_figures(run: Path) -> dict:
    """Updates reached and the median logged training rate of the timed run."""
    try:
        events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    except (OSError, ValueError):
        return {}
    rates = sorted(e["tokens_per_s"] for e in events if e.get("event") == "train")
    steps = [e["step"] for e in events if "step" in e]
    return {"run_updates": max(steps, default=0),
            "run_tgt_tokens_per_s": rates[len(rates) // 2] if rates else None}


def processes_per_gpu() -> dict[str, int] | None:
    """How many processes hold a CUDA context on each GPU now (by PCI bus id), from
    nvidia-smi; None where it cannot be asked."""
    try:
        listed = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_bus_id,pid",
                                 "--format=csv,noheader"], capture_output=True, text=True,
                                timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    buses = [line.split(",")[0].strip() for line in listed.stdout.splitlines() if "," in line]
    return {bus: buses.count(bus) for bus in buses}


def two_gpu_scaling(out: Path, results: dict) -> dict:
    """The same 150 updates in one process and in two (`--nproc 2`, one GPU each), and the
    most processes seen on one GPU while the two ran."""
    short = ["configs/base.yaml", "--device", "cuda", "--runs-dir", str(out / "runs"), "--set",
             "train.max_steps=150", "--set", "train.accum_steps=2", "--set",
             "train.eval_every=1000000", "--set", "data.valid_limit=50", "--set",
             "train.log_every=25"]
    results["one_gpu"] = step("150 updates on one GPU", attncli(
        ["train", *short, "--name", "one-gpu"]), out / "one-gpu.log", 600)
    most: dict[str, int] = {}

    def count_processes() -> None:
        for bus, count in (processes_per_gpu() or {}).items():
            most[bus] = max(most.get(bus, 0), count)

    results["two_gpus"] = step("150 updates on two GPUs (--nproc 2)", attncli(
        ["train", *short, "--name", "two-gpus", "--nproc", "2"]), out / "two-gpus.log", 600,
        watch=count_processes)
    if most:  # nvidia-smi saw the ranks: one process per GPU, none extra on GPU 0
        results["one_process_per_gpu"] = {"ok": set(most.values()) == {1}, "seen": most}
    one = training_figures(out / "runs" / "one-gpu").get("run_tgt_tokens_per_s")
    two = training_figures(out / "runs" / "two-gpus").get("run_tgt_tokens_per_s")
    return {"one_gpu_tgt_tokens_per_s": one, "two_gpu_tgt_tokens_per_s": two,
            "two_gpu_scaling": round(two / one, 2) if one and two else None,
            "two_gpu_processes_per_gpu": most or "not visible to nvidia-smi"}


MARKER = ".attncli-gpu-check"  # in --out: a folder this script made, so it may empty it


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/attncli-gpu"),
                        help="where the logs, bench.json, run folders and summary.json go "
                        "(emptied first if this script made it; any other non-empty folder "
                        "is refused)")
    parser.add_argument("--minutes", type=float, default=5.0, help="training time of step 3")
    args = parser.parse_args()
    out = args.out
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        print(f"--out {out}: a folder this script did not make, not empty; name another "
              "(its contents would be deleted)", file=sys.stderr)
        return 2
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / MARKER).write_text("made by benchmarks/gpu_check.py: emptied by its next run\n")
    results = {"imports": step("imports", [sys.executable, "-c", "import attncli.cli"],
                               out / "imports.log", 120)}
    if not results["imports"]["ok"]:
        print("attncli cannot be imported: nothing more to check")
        return 1
    if gpu_count() == 0:
        print("no CUDA device on this machine: nothing more to check")
        return 1
    results["cuda_tests"] = step("CUDA tests", [sys.executable, "-m", "pytest", "-q", "-k",
                                                "cuda", "tests"], out / "tests.log", 300)
    results["bench"] = step("bench", attncli(
        ["bench", "--device", "cuda", "--config", "configs/base.yaml", "--json",
         str(out / "bench.json")]), out / "bench.log", 240)
    run = out / "runs" / "base"
    results["train"] = step("timed base.yaml run", attncli(
        ["train", "configs/base.yaml", "--device", "cuda", "--runs-dir", str(out / "runs"),
         "--name", "base", "--set", f"train.max_minutes={args.minutes}", "--set",
         "train.max_steps=100000", "--set", "train.eval_every=1000000", "--set",
         "data.valid_limit=200"]), out / "train.log", int(args.minutes * 60) + 240)
    results["eval"] = step("eval", attncli(["eval", str(run), "--device", "cuda"]),
                           out / "eval.log", 300)
    scaling = two_gpu_scaling(out, results) if gpu_count() >= 2 else {}
    summary = {**bench_figures(out / "bench.json"), **training_figures(run),
               **eval_figures(run), **scaling, "steps": results}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "steps"}, indent=1))
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
