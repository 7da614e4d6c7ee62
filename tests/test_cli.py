"""The command line surface: commands, help, version, usage errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import SMALL, assert_one_line_error, run_cli

from attncli import __version__
from attncli.core.kernel_caches import IDEEP_CACHE_VARIABLE, KERNEL_CACHE_BOUNDS


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attncli", *args], capture_output=True,
                          text=True, timeout=600)


def test_help_lists_every_command():
    out = _cli("--help")
    assert out.returncode == 0
    for command in ("train", "eval", "translate", "bench", "average"):
        assert command in out.stdout


@pytest.mark.parametrize("command, option", [
    ("train", "--resume"), ("eval", "--checkpoint"), ("translate", "--checkpoint"),
    ("bench", "--suite"), ("average", "--last"), ("eval", "--no-repeat-ngram"),
    ("translate", "--no-repeat-ngram"),
])
def test_each_command_has_help_with_its_options(command, option):
    out = _cli(command, "--help")
    assert out.returncode == 0 and option in out.stdout


def test_version():
    out = _cli("--version")
    assert out.returncode == 0 and __version__ in out.stdout


@pytest.mark.parametrize("args, line", [
    (["train", "--bogus"], "error: No such option: --bogus (see attncli train -h)"),
    (["average", "runs/x", "--last", "1"],
     "error: Invalid value for '--last': Input should be greater than or equal to 2 (see "
     "attncli average -h)"),
    (["nocommand"], "error: No such command 'nocommand'. (see attncli -h)"),
])
def test_a_usage_error_is_one_line_with_exit_2(args, line):
    """The README promises one line for exit 2; click drew a box of five."""
    out = _cli(*args)  # as `python -m attncli`, which the help line then names
    said = out.stderr.replace("python -m attncli", "attncli").splitlines()
    assert out.returncode == 2 and said == [line] and out.stdout == ""


def test_a_command_alone_still_shows_its_help():
    out = _cli()
    assert out.returncode == 2 and "Usage: python -m attncli" in out.stdout
    assert "train" in out.stdout and "error" not in out.stderr



@pytest.mark.parametrize("args, code", [
    (["train", "missing.yaml"], 2), (["train", "--resume", "."], 2), (["--help"], 0),
    (["train", SMALL, "--init-from", "."], 2),  # the parent is checked torch-free too
])
def test_help_and_bad_train_input_answer_before_torch_loads(args, code, tmp_path):
    # Seconds of torch import before "config file not found" would be a poor answer.
    probe = ("import sys\nfrom attncli.cli import main\nsys.argv = ['attncli', *sys.argv[1:]]\n"
             "try:\n    main()\nexcept SystemExit as end:\n"
             "    print('exit', end.code, 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert out.stdout.splitlines()[-1] == f"exit {code} False"


@pytest.mark.parametrize("device, expected", [
    ("tpu", "--device tpu: expected auto, cpu, cuda or cuda:N"),
    ("cuda:1", "--device cuda:1: CUDA is not available"),
])
def test_a_device_this_machine_lacks_is_one_line(device, expected, data_dir, tmp_path):
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        expected = "--device cuda:1: this machine has" if torch.cuda.device_count() < 2 else ""
        if not expected:
            pytest.skip("this machine has a cuda:1")
    result = run_cli("train", SMALL, "--device", device, "--runs-dir", str(tmp_path),
                     data_dir=data_dir)
    assert_one_line_error(result, expected)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("user_setting", [None, "512"])
def test_kernel_cache_bound_is_set_before_torch_loads_and_a_users_own_wins(user_setting,
                                                                           tmp_path):
    # ideep reads its capacity once, at its first kernel: a bound set after torch loaded would
    # be silently ignored, and training's memory would grow as before (issue 42).
    probe = ("import os, sys\nfrom attncli.cli import main\nsys.argv = ['attncli', '--help']\n"
             "try:\n    main()\nexcept SystemExit:\n"
             f"    print(os.environ.get({IDEEP_CACHE_VARIABLE!r}), 'torch' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if k != IDEEP_CACHE_VARIABLE}
    if user_setting is not None:
        env[IDEEP_CACHE_VARIABLE] = user_setting
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path, env=env)
    expected = user_setting or KERNEL_CACHE_BOUNDS[IDEEP_CACHE_VARIABLE]
    assert out.stdout.splitlines()[-1] == f"{expected} False"
