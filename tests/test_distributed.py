"""Training in two processes (torchrun, gloo on this CPU) is training in one, shared out.

Real processes throughout: `python -m torch.distributed.run` and `attncli train --nproc 2` in
subprocesses, the reference run in this process. fp32 and no dropout, so the two can be
compared update by update (the processes draw their own dropout masks).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    REPO,
    SMALL,
    assert_one_line_error,
    losses,
    metrics,
    pointers,
    resume,
    run_cli,
    train,
    train_args,
)

from attncli.core.errors import PEER_FAILED_EXIT

# 400 toy pairs in 21 batches: the epoch's last update has one batch for two processes, so the
# second trains on a zero-weight stand-in there.
SHARED = ["train.accum_steps=2", "model.dropout=0", "train.precision=fp32",
          "train.batch_tokens=300", "train.save_every=10"]


def _env(data_dir: Path) -> dict[str, str]:
    return {**os.environ, "ATTNCLI_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO),
            "OMP_NUM_THREADS": "1"}


def _two_processes(data_dir: Path, runs: Path, name: str, sets: list[str], *, torchrun=False,
                   wait=True):
    args = train_args(SMALL, "--name", name, runs=runs, sets=[*SHARED, *sets])
    if torchrun:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc_per_node", "2", "-m", "attncli", *args]
    else:
        command = [sys.executable, "-m", "attncli", *args, "--nproc", "2"]
    process = subprocess.Popen(command, env=_env(data_dir), cwd=REPO, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if not wait:
        return process
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return out


@pytest.fixture(scope="module")
def one_process(data_dir, tmp_path_factory) -> dict[int, float]:
    """The reference: 20 updates in this one process, accumulating 2 batches per update."""
    runs = tmp_path_factory.mktemp("one")
    result = train(data_dir, runs, SMALL, "--name", "one",
                   sets=[*SHARED, "train.max_steps=20"])
    assert result.returncode == 0, result.stderr
    return losses(runs / "one")


def _assert_same(found: dict[int, float], reference: dict[int, float], steps) -> None:
    for step in steps:
        assert found[step] == pytest.approx(reference[step], abs=1e-5), step


def test_torchrun_with_two_processes_trains_as_one_process(data_dir, tmp_path, one_process):
    out = _two_processes(data_dir, tmp_path, "two", ["train.max_steps=20"], torchrun=True)
    assert "2 processes share each update" in out
    assert int(re.search(r"(\d+) batches per epoch", out)[1]) % 2 == 1  # the stand-in is used
    run = tmp_path / "two"
    found = losses(run)  # fails on a step logged twice
    assert sorted(found) == list(range(1, 21))
    _assert_same(found, one_process, range(1, 21))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "pointers.json", "step-10", "step-20"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["two"]  # one run folder


def test_two_processes_resume_in_one(data_dir, tmp_path, one_process):
    _two_processes(data_dir, tmp_path, "half", ["train.max_steps=10"])
    run = tmp_path / "half"
    assert pointers(run)["last"] == "step-10"
    result = resume(data_dir, run, "train.max_steps=20")
    assert result.returncode == 0, result.stderr
    found = losses(run)
    assert sorted(found) == list(range(1, 21))
    _assert_same(found, one_process, range(1, 21))


def test_two_processes_follow_rank_0s_plan_of_a_time_limit(data_dir, tmp_path):
    """Each process's clock reads a little differently; rank 0's plans, and every save checks
    that each process holds that same plan (`RatePlanner.agreed_record`)."""
    out = _two_processes(data_dir, tmp_path, "timed", [
        "train.lr_schedule=linear", "train.max_minutes=0.1", "train.max_epochs=100000",
        "train.log_every=5", "train.warmup_steps=10", "train.eval_every=100000"])
    run = tmp_path / "timed"
    state = (run / "checkpoints" / pointers(run)["last"] / "state.json").read_text()
    assert '"clock"' in state and "stopped at step" in out and "of the plan)" in out


def _wait_for_step(run: Path, step: int, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        if (run / "metrics.jsonl").is_file() and max(losses(run), default=0) >= step:
            return
        time.sleep(0.2)
    raise AssertionError(f"no step {step} within {seconds} s")


def test_sigterm_to_the_launcher_saves_a_checkpoint_that_resumes(data_dir, tmp_path):
    process = _two_processes(data_dir, tmp_path, "term", ["train.max_steps=100000",
                                                          "train.save_every=1000",
                                                          "model.dropout=0.1"], wait=False)
    run = tmp_path / "term"
    _wait_for_step(run, 3, process)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    saved = int(pointers(run)["last"].removeprefix("step-"))
    assert saved >= 3 and (f"saved a checkpoint at step {saved}; resume with `attncli train "
                           f"--resume {run} --nproc 2`") in out
    assert [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("step-")] == [
        f"step-{saved}"]
    again = resume(data_dir, run, f"train.max_steps={saved + 2}")  # on one process
    assert again.returncode == 0, again.stderr
    assert max(losses(run)) == saved + 2
    assert ("this run saved with 2 training process(es) and resumes with 1: its losses will "
            "not follow an uninterrupted run's (resume with --nproc 2 for that)") in again.stdout


def _child_with_rank(parent: int, rank: int) -> int:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if ppid == parent and f"RANK={rank}".encode() in environ:
            return int(entry.name)
    raise AssertionError(f"no rank {rank} process under {parent}")


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_a_killed_rank_ends_the_job_with_one_line(data_dir, tmp_path):
    process = _two_processes(data_dir, tmp_path, "kill", ["train.max_steps=100000"], wait=False)
    _wait_for_step(tmp_path / "kill", 2, process)
    os.kill(_child_with_rank(process.pid, 1), signal.SIGKILL)
    killed = time.monotonic()
    _, err = process.communicate(timeout=120)
    assert time.monotonic() - killed < 60
    assert process.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "rank 1 of 2 was killed by SIGKILL" in lines[0], err


def test_two_processes_average_the_last_saves_once(data_dir, tmp_path):
    """train.average_last under two processes: rank 0 alone averages, scores and writes."""
    out = _two_processes(data_dir, tmp_path, "avg", ["train.max_steps=4", "train.save_every=2",
                                                     "train.average_last=2"])
    assert out.count("averaged steps 2, 4: greedy val BLEU") == 1
    (event,) = [r for r in metrics(tmp_path / "avg") if r["event"] == "averaged"]
    checkpoints = tmp_path / "avg" / "checkpoints"
    assert (checkpoints / "averaged").is_dir() == event["kept"]
    assert not list(checkpoints.glob(".tmp-*"))


def test_accum_steps_must_split_between_the_processes(data_dir, tmp_path):
    result = train(data_dir, tmp_path, SMALL, "--nproc", "2", sets=["train.accum_steps=3"])
    assert_one_line_error(result, "accum_steps must be a multiple of 2")
    assert not any(tmp_path.iterdir())  # no run folder


def test_a_resume_on_processes_that_cannot_share_its_updates_names_those_that_can(data_dir,
                                                                                 tmp_path):
    """The advice was to change accum_steps, which a resume refuses next."""
    run = tmp_path / "three"
    assert train(data_dir, tmp_path, SMALL, "--name", "three",
                 sets=["train.max_steps=2", "train.accum_steps=3"]).returncode == 0
    result = run_cli("train", "--resume", str(run), "--nproc", "2", "--set",
                     "train.max_steps=4", data_dir=data_dir)
    assert_one_line_error(result, "2 processes: this run's updates are train.accum_steps=3 "
                                  "batches, shared between the processes, and accum_steps "
                                  "cannot change when resuming; resume it with --nproc 1 or 3")


def test_bad_data_under_two_processes_is_one_line(tmp_path):
    """Rank 0 meets the missing data set, says it once, and the other process stops with it."""
    args = train_args(SMALL, "--nproc", "2", runs=tmp_path / "runs",
                      sets=["train.accum_steps=2", "data.dataset=nowhere"])
    result = subprocess.run([sys.executable, "-m", "attncli", *args], env=_env(tmp_path),
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "nowhere" in lines[0] and "Traceback" not in result.stderr


@pytest.mark.parametrize(("exits", "code", "line"), [
    # rank 0 said its error; the launcher's SIGTERM met rank 1 before its handler was installed
    ({0: 2, 1: -signal.SIGTERM}, 2, None),
    ({0: -signal.SIGTERM, 1: 1}, 1, None),
    # killed from outside: the others stopped with it, or were stopped by the launcher
    ({0: PEER_FAILED_EXIT, 1: -signal.SIGKILL}, 1, "rank 1 of 2 was killed by SIGKILL"),
    ({0: -signal.SIGTERM, 1: -signal.SIGKILL}, 1, "rank 1 of 2 was killed by SIGKILL"),
    ({0: PEER_FAILED_EXIT, 1: -signal.SIGTERM}, 1, "rank 1 of 2 was killed by SIGTERM"),
])
def test_the_launcher_names_the_failure_that_stopped_the_job(exits, code, line, capsys):
    from types import SimpleNamespace

    from attncli.training.distributed import _report_failure

    failures = {rank: SimpleNamespace(exitcode=exit_code, timestamp=100)
                for rank, exit_code in exits.items()}
    assert _report_failure(failures, 2) == code
    err = capsys.readouterr().err
    assert (line in err and len(err.splitlines()) == 1) if line else err == ""


def test_a_process_leaving_the_group_ignores_the_launchers_sigterm():
    """Else a rank that said its error and is leaving could die of the SIGTERM the launcher
    sends once a peer has exited, and be reported as killed instead."""
    from unittest import mock

    from attncli.training import distributed

    before = signal.getsignal(signal.SIGTERM)
    try:
        with mock.patch.object(distributed.dist, "is_initialized", return_value=True), \
                mock.patch.object(distributed.dist, "destroy_process_group") as destroy:
            distributed.stop(distributed.World(rank=0, size=2))
        destroy.assert_called_once()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)
