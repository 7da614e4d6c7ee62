"""Kill trials: SIGKILL a training run again and again, resume it each time, compare the losses.

    python benchmarks/kill_trials.py [--kills 24] [--in-save 8] [--steps 400] [--seed 0]

1. A reference run trains a small config (multi30k.yaml shrunk: d_model 64, 2+2 layers, a
   Multi30k slice) for `--steps` updates without interruption, saving every 4 updates.
2. A trial run of the same config is killed `--kills` times and resumed with
   `attncli train --resume` after each kill. `--in-save` of the kills stop the process inside a
   checkpoint save, cycling through every phase of a save (through the test-only
   ATTNCLI_KILL_AT hook, see attncli/runs/checkpoints.py); the others come at a random moment while
   it trains.
3. After every kill the checkpoints that pointers.json names are loaded (weights, optimizer,
   state) as a resume would load them; after the last resume the trial's loss at every step is
   compared with the reference's.

Prints a Markdown table (the README's) and writes every kill to `--work`/kill_trials.json.
Needs the Multi30k folder in $ATTNCLI_DATA_DIR (or ../shared/data).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAVE_EVERY = 4
CONFIG = [
    "data.train_limit=3000", "data.valid_limit=32", "tokenizer.vocab_size=1000",
    "model.d_model=64", "model.heads=4", "model.enc_layers=2", "model.dec_layers=2",
    "model.ff_dim=128", "train.batch_tokens=1024", "train.warmup_steps=50",
    "train.log_every=1", "train.eval_every=40", f"train.save_every={SAVE_EVERY}",
    "train.max_epochs=1000",
]


def _command(run: Path, steps: int, fresh: bool) -> list[str]:
    head = ["train", str(REPO / "configs" / "multi30k.yaml"), "--runs-dir", str(run.parent),
            "--name", run.name] if fresh else ["train", "--resume", str(run)]
    sets = [*CONFIG, f"train.max_steps={steps}"] if fresh else [f"train.max_steps={steps}"]
    return [sys.executable, "-m", "attncli", *head, *(a for s in sets for a in ("--set", s))]


def _env(kill_at: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ATTNCLI_KILL_AT"}
    if "ATTNCLI_DATA_DIR" not in env:
        env["ATTNCLI_DATA_DIR"] = str(REPO.parent / "shared" / "data")
    if kill_at:
        env["ATTNCLI_KILL_AT"] = kill_at
    return env


def _losses(run: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if r["event"] == "train"]
    if len(steps) != len(set(steps)):
        raise SystemExit(f"{run}/metrics.jsonl logs a step twice")
    return {r["step"]: r["loss"] for r in records if r["event"] == "train"}


def _last_step(run: Path) -> int:
    pointers = run / "checkpoints" / "pointers.json"
    if not pointers.is_file():
        return 0
    return int(json.loads(pointers.read_text())["last"].removeprefix("step-"))


def _check_checkpoints(run: Path) -> list[str]:
    """Load what pointers.json names, as a resume would; returns the failures."""
    from attncli.core.config_files import load_config
    from attncli.core.errors import AttncliError
    from attncli.data.tokenizer import load_tokenizer
    from attncli.model.build import build_model, model_fingerprint
    from attncli.runs.checkpoints import load_checkpoint
    from attncli.runs.layout import RunPaths, checkpoint_dir
    from attncli.training.optim import make_optimizer

    paths = RunPaths(run)
    config = load_config(paths.config)
    tokenizer = load_tokenizer(paths.root, config.tokenizer.joint)
    failures = []
    for name in paths.read_pointers():
        model = build_model(config, tokenizer)
        try:
            load_checkpoint(checkpoint_dir(paths, name), model, make_optimizer(model, config.train),
                            model_fingerprint(config.model))
        except (AttncliError, RuntimeError, ValueError) as err:
            failures.append(f"{name}: {err}")
    return failures


def _kill_while_training(proc: subprocess.Popen, run: Path, rng: random.Random) -> bool:
    """SIGKILL `proc` at a random moment once it trains and a checkpoint exists; False if it
    ended first."""
    log = run / "train.log"
    start_size = log.stat().st_size if log.is_file() else 0
    while proc.poll() is None:
        if _last_step(run) and log.is_file() and "| loss" in log.read_text()[start_size:]:
            break
        time.sleep(0.05)
    time.sleep(rng.uniform(0.0, 4.0))
    if proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return True


def trial(work: Path, *, steps: int, kills: int, in_save: int, seed: int) -> dict:
    from attncli.runs.checkpoints import SAVE_PHASES

    rng = random.Random(seed)
    run = work / "trial"
    in_save_at = set(rng.sample(range(kills), in_save))
    events, phases = [], list(SAVE_PHASES)
    failed_resumes = failed_loads = 0
    while True:
        fresh, n = not run.exists(), len(events)
        last = _last_step(run)
        if not fresh and last >= steps:
            break  # a kill came after the final save: the run is complete, nothing to resume
        kill_at = None
        if n in in_save_at and n < kills:
            save_step = max(last, SAVE_EVERY) + SAVE_EVERY * rng.randint(1, 3)
            if save_step < steps:
                kill_at = f"{phases[sum(e['how'] == 'in save' for e in events) % len(phases)]}" \
                          f"@{save_step}"
        proc = subprocess.Popen(_command(run, steps, fresh), env=_env(kill_at),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if n >= kills:
            _, err = proc.communicate()
            if proc.returncode != 0:
                failed_resumes += 1
                print(f"final resume failed: {err.strip()[-300:]}", file=sys.stderr)
            break
        if kill_at:
            _, err = proc.communicate()
            killed = proc.returncode == -signal.SIGKILL
        else:
            killed = _kill_while_training(proc, run, rng)
            err = proc.stderr.read()
        if not killed:
            if proc.returncode != 0:
                failed_resumes += 1
                print(f"run ended with {proc.returncode}: {err.strip()[-300:]}", file=sys.stderr)
            break  # the run finished before the kill came
        failures = _check_checkpoints(run) if (run / "checkpoints").is_dir() else []
        failed_loads += len(failures)
        events.append({"kill": n + 1, "how": "in save" if kill_at else "while training",
                       "hook": kill_at, "resumed_from": last, "last_after": _last_step(run),
                       "leftovers": sorted(p.name for p in (run / "checkpoints").iterdir()
                                           if p.name.startswith(".")),
                       "load_failures": failures})
        print(f"kill {n + 1:>2}: {events[-1]['how']:<14} {kill_at or '':<14} "
              f"last checkpoint step-{events[-1]['last_after']}"
              f"{'  LOAD FAILED' if failures else ''}", flush=True)
    return {"events": events, "failed_resumes": failed_resumes, "failed_loads": failed_loads}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=24)
    parser.add_argument("--in-save", type=int, default=8)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("kill-trials"))
    args = parser.parse_args()
    if args.work.exists():
        raise SystemExit(f"{args.work} exists; remove it or pass another --work")
    args.work.mkdir(parents=True)
    started = time.perf_counter()
    reference = subprocess.run(_command(args.work / "reference", args.steps, fresh=True),
                               env=_env(), capture_output=True, text=True)
    if reference.returncode != 0:
        raise SystemExit(f"reference run failed: {reference.stderr.strip()[-500:]}")
    result = trial(args.work, steps=args.steps, kills=args.kills, in_save=args.in_save,
                   seed=args.seed)
    ref, got = _losses(args.work / "reference"), _losses(args.work / "trial")
    diffs = [abs(got[s] - ref[s]) for s in ref if s in got]
    report = {**result, "steps": args.steps, "steps_compared": len(diffs),
              "steps_missing": sorted(set(ref) - set(got)),
              "max_abs_loss_difference": max(diffs) if diffs else None,
              "seconds": round(time.perf_counter() - started, 1)}
    (args.work / "kill_trials.json").write_text(json.dumps(report, indent=1))
    _print_table(report)


def _print_table(report: dict) -> None:
    events = report["events"]
    how = Counter(e["how"] for e in events)
    phases = Counter(e["hook"].split("@")[0] for e in events if e["hook"])
    print("\n| kills | in a save (by phase) | while training | checkpoints that failed to load "
          "| failed resumes | steps compared | max abs loss difference |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print(f"| {len(events)} | {how['in save']} ({', '.join(f'{p} {c}' for p, c in phases.items())})"
          f" | {how['while training']} | {report['failed_loads']} | {report['failed_resumes']} | "
          f"{report['steps_compared']} of {report['steps']} | "
          f"{report['max_abs_loss_difference']:.2e} |")


if __name__ == "__main__":
    main()
