"""`attncli bench`: run the asked suites, print their tables, write the JSON report."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.text import Text

from attncli import __version__
from attncli.bench.attention_suite import AttentionSizes, run_attention_suite
from attncli.bench.infer_suite import INFER_OUTPUT_LEN, run_infer_suite
from attncli.bench.peaks import device_peak
from attncli.bench.render import RENDERERS, render_load, render_threads
from attncli.bench.train_suite import SENTENCE_LENGTHS, run_train_suite
from attncli.core.config import Config
from attncli.core.config_files import load_config
from attncli.core.cpu_kind import CpuKind, detect_cpu_kind
from attncli.core.device import (
    allow_tf32,
    device_name,
    resolve_decode_precision,
    resolve_device,
    resolve_precision,
    set_threads,
)
from attncli.core.errors import AttncliError
from attncli.core.files import atomic_write_json, output_file_problem
from attncli.core.machine_load import IDLE_WINDOW_S, LoadSampler, SuiteLoad, busy_rule

SUITES = ("attention", "train", "infer")
# The settings that decide how many threads torch's CPU kernels run and how their idle threads
# wait (spin or sleep): what a CPU figure depends on besides the machine, reported with it.
THREAD_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME",
              "MKL_NUM_THREADS")
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@dataclass(frozen=True)
class BenchSizes:
    """What `run_bench` otherwise takes from the device: the attention suite's sizes, the
    infer suite's batch sizes, and the peak FLOP/s that MFU divides by (with its source); and
    the idle window in which other processes' load is measured before each suite.
    Tests pass tiny ones; one object, so that none of them is given by position."""

    attention_sizes: AttentionSizes | None = None
    infer_batch_sizes: Sequence[int] = (1, 64)
    peak: tuple[float, str] | None = None
    load_window_s: float = IDLE_WINDOW_S


def run_bench(
    device: torch.device,
    suites: Sequence[str],
    cfg: Config,
    *,
    warmup: int,
    repeats: int,
    console: Console | None = None,
    keep: Callable[[dict[str, Any]], None] | None = None,
    sizes: BenchSizes | None = None,
) -> dict[str, Any]:
    """Run ``suites`` and return the report (what --json writes); print tables if ``console``.
    ``keep(report)`` after each suite, before its tables: what was measured is written even if
    printing then fails (a closed pipe, a full disk). ``sizes``: see `BenchSizes` (default:
    the device's). Each suite also records what other processes took of the CPUs before and
    during it (`core.machine_load`), and the report is marked ``busy`` if any suite ran beside
    other work: such figures are not this machine's alone.
    """
    sizes = sizes or BenchSizes()
    precision = resolve_precision(cfg.train.precision, device)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    sampler = LoadSampler()
    report = _report_head(device, precision, dtype, warmup=warmup, repeats=repeats,
                          usable=sampler.usable)
    console = _shown(console, Text(
        f"attncli bench · {report['device_name']} ({device.type}, "
        f"{report['threads']['torch_threads']} threads) · torch {torch.__version__} · "
        f"{precision}{_kind_words(report['cpu_kind'])}", style="bold"))
    console = _shown(console, render_threads(report["threads"]))
    for suite in suites:
        if suite not in SUITES:
            raise AttncliError(f"--suite {suite}: expected one of {', '.join(SUITES)}, all")
        status = console.status(f"{suite} suite…") if console is not None else nullcontext()
        with status:
            before = sampler.idle(sizes.load_window_s)  # before the clock: not the suite's time
            start = time.perf_counter()
            sampler.start()
            result = _run_suite(suite, device, cfg, precision, warmup=warmup, repeats=repeats,
                                sizes=sizes)
            load = SuiteLoad(before, sampler.stop())
        result["wall_s"] = time.perf_counter() - start
        result["machine_load"] = load.to_json()
        report["suites"][suite] = result
        report["busy"] = _any_busy(report["suites"].values())
        if keep is not None:
            keep(report)
        for renderable in [*render_load(suite, result["machine_load"], sampler.usable),
                           *RENDERERS[suite](result, warmup, repeats)]:
            console = _shown(console, renderable)
    return report


def _run_suite(suite: str, device: torch.device, cfg: Config, precision: str, *, warmup: int,
               repeats: int, sizes: BenchSizes) -> dict[str, Any]:
    """One suite's result (plain data), run at the sizes `sizes` gives or the device's."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    if suite == "attention":
        return run_attention_suite(
            device, dtype, sizes.attention_sizes or AttentionSizes.for_device(device),
            warmup=warmup, repeats=repeats)
    if suite == "train":
        peak = sizes.peak or device_peak(device, precision, warmup=warmup, repeats=repeats)
        return run_train_suite(cfg, device, precision, warmup=warmup, repeats=repeats,
                               peak=peak)
    return run_infer_suite(
        cfg, device, resolve_decode_precision(cfg.train.precision, device),
        warmup=warmup, repeats=repeats, batch_sizes=sizes.infer_batch_sizes)


def _any_busy(results: Iterable[dict[str, Any]]) -> bool | None:
    """The run is busy if any suite was; not busy only if every suite was measured alone."""
    marks = [result["machine_load"]["busy"] for result in results]
    if any(mark is True for mark in marks):
        return True
    return False if marks and all(mark is False for mark in marks) else None


def thread_settings() -> dict[str, Any]:
    """The threads torch runs with and the environment settings that size OpenMP's and MKL's
    pools or decide whether their idle threads spin (None: unset). Beside other work these
    change a CPU figure several times over, so the report says which ones it ran with."""
    return {"torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
            **{name: os.environ.get(name) for name in THREAD_ENV}}


def _report_head(device: torch.device, precision: str, dtype: torch.dtype, *, warmup: int,
                 repeats: int, usable: int) -> dict[str, Any]:
    """What the report says of the machine and the settings, before any suite. `busy` stays
    None (unknown) until a suite has been measured."""
    return {
        "attncli": __version__, "torch": torch.__version__, "cuda": torch.version.cuda,
        "device": device.type, "device_name": device_name(device),
        "threads": thread_settings(), "precision": precision,
        "cpu_kind": detect_cpu_kind().record() if device.type == "cpu" else None,
        "dtype": str(dtype).removeprefix("torch."),
        "tf32": (torch.backends.cuda.matmul.allow_tf32 if device.type == "cuda" else None),
        "warmup": warmup, "repeats": repeats, "usable_cpus": usable,
        "busy_rule": busy_rule(usable), "busy": None, "suites": {},
    }


def _kind_words(kind: dict[str, Any] | None) -> str:
    """The CPU kind `precision: auto` decided from, for the report's first line."""
    return "" if kind is None else f" (CPU kind {CpuKind(**kind).describe()})"


def _shown(console: Console | None, renderable: Any) -> Console | None:
    """Print on `console`; the console, or None once printing failed (stdout's reader gone,
    its disk full): the suites go on and --json keeps their figures."""
    if console is None:
        return None
    try:
        console.print(renderable)
    except OSError:
        return None
    return console


def default_config_path(device: torch.device) -> Path:
    """configs/base.yaml (the paper's model) on CUDA, configs/small.yaml on CPU."""
    return CONFIGS / ("base.yaml" if device.type == "cuda" else "small.yaml")


def write_json(report: dict[str, Any], path: Path) -> None:
    atomic_write_json(path, report)


def _check_positions(cfg: Config, suites: Sequence[str]) -> None:
    """The train and infer suites' synthetic sentences must fit the model's positions."""
    longest = max(SENTENCE_LENGTHS[1], INFER_OUTPUT_LEN) + 1  # with EOS (BOS), a forced EOS
    needed = -(-longest // 8) * 8  # batch lengths rounded up to pad_multiple (at most 8)
    if {"train", "infer"} & set(suites) and cfg.model.max_positions < needed:
        raise AttncliError(f"model.max_positions={cfg.model.max_positions}: the train and infer "
                           f"suites time sentences of up to {SENTENCE_LENGTHS[1]} subwords, "
                           f"which need {needed} positions (--suite attention runs without)")


def bench_command(device: str, suite: str, *, config: Path | None, json_file: Path | None,
                  warmup: int, repeats: int) -> None:
    """`attncli bench`: resolve the device first (no CUDA -> one line, exit 2), then run."""
    dev = resolve_device(device)
    suites = SUITES if suite == "all" else (suite,)
    if json_file is not None and not json_file.parent.is_dir():
        raise AttncliError(f"--json {json_file}: folder {json_file.parent} does not exist")
    if json_file is not None and (problem := output_file_problem(json_file)):
        raise AttncliError(f"--json {json_file}: {problem}")
    config_file = config or default_config_path(dev)
    built_in = config is None and not config_file.is_file()
    # installed without the configs/ folder: the built-in defaults
    cfg = Config() if built_in else load_config(config_file)
    _check_positions(cfg, suites)
    set_threads(cfg.train.threads)
    allow_tf32(dev)  # as training does
    console = Console(width=None if sys.stdout.isatty() else 120)  # files/pipes: no folding
    said = "built-in defaults" if built_in else str(config_file)

    def keep(report: dict[str, Any]) -> None:
        if json_file is not None:
            write_json({**report, "config": said}, json_file)

    run_bench(dev, suites, cfg, warmup=warmup, repeats=repeats, console=console, keep=keep)
    if json_file is not None:
        console.print(f"wrote {json_file}")
