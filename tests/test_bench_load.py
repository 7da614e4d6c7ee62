"""`attncli bench` beside other work: what other processes take of the CPUs, the busy mark, the
thread settings (issue 63: a decoding figure four times too slow beside a training run, and
nothing in the output said why).

The share arithmetic is checked on fake /proc/stat readings, so its assertions hold on any
machine; the end-to-end runs use a real hog for "busy", and assert "alone" only when this
machine was itself measured quiet around the run.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from attncli.bench.command import _any_busy, bench_command, thread_settings
from attncli.bench.render import render_load, render_threads
from attncli.core.machine_load import (
    BUSY_CPUS,
    CpuCounters,
    LoadSampler,
    OthersLoad,
    SuiteLoad,
    others_load,
    parse_proc_stat,
    read_counters,
)

# user nice system idle iowait irq softirq steal guest guest_nice, in ticks
PROC_STAT = """\
cpu  1000 10 200 5000 300 20 30 40 500 0
cpu0 600 10 100 2000 100 10 10 20 250 0
cpu1 400 0 100 3000 200 10 20 20 250 0
intr 12345 0 0
ctxt 6789
"""


def counters(busy_s: float, own_s: float, wall_s: float, cpus: int = 2) -> CpuCounters:
    return CpuCounters(busy_s=busy_s, own_s=own_s, wall_s=wall_s, cpus=cpus)


# --- reading /proc/stat ---------------------------------------------------------------------


def test_busy_is_user_nice_system_irq_softirq_steal_and_never_idle_iowait_or_guest():
    busy, cpus = parse_proc_stat(PROC_STAT, None, ticks_per_s=100)
    assert busy == pytest.approx((1000 + 10 + 200 + 20 + 30 + 40) / 100)  # guest is in user
    assert cpus == 2  # the per-CPU lines counted


def test_only_the_cpus_this_process_may_run_on_are_counted():
    busy, cpus = parse_proc_stat(PROC_STAT, {1}, ticks_per_s=100)
    assert (busy, cpus) == (pytest.approx((400 + 100 + 10 + 20 + 20) / 100), 1)
    # a CPU of the mask missing from the file: the whole machine rather than a wrong subset
    assert parse_proc_stat(PROC_STAT, {1, 7}, ticks_per_s=100)[1] == 2


def test_an_unreadable_proc_stat_is_unknown_and_never_an_error(tmp_path):
    assert parse_proc_stat("intr 1 2 3\ncpu garbage here\n") is None
    assert parse_proc_stat("") is None
    missing = LoadSampler(proc_stat=tmp_path / "absent", usable=2)
    assert read_counters(tmp_path / "absent") is None
    assert missing.idle(0.01) is None
    missing.start()
    assert missing.stop() is None
    load = SuiteLoad(None, None)
    assert load.busy is None
    assert load.to_json() == {"before": None, "during": None, "busy": None}


def test_read_counters_converts_ticks_to_seconds(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(PROC_STAT)
    reading = read_counters(stat)
    assert reading is not None and reading.busy_s > 0 and reading.own_s > 0


# --- the share and the busy rule --------------------------------------------------------------


def test_others_share_is_machine_busy_less_own_over_interval_and_usable_cpus():
    # 2 s on 2 CPUs: the machine was busy 3.0 CPU-s, this process 1.0 of them
    load = others_load(counters(100.0, 10.0, 50.0), counters(103.0, 11.0, 52.0), usable=2)
    assert load.cpus == pytest.approx(1.0) and load.share == pytest.approx(0.5)
    assert load.busy


def test_a_machine_that_only_ran_this_process_is_not_busy():
    load = others_load(counters(100.0, 10.0, 50.0), counters(103.02, 13.0, 51.5), usable=2)
    assert load.cpus == pytest.approx(0.02 / 1.5) and not load.busy
    # own time read a tick ahead of the machine's: never a negative share
    ahead = others_load(counters(100.0, 10.0, 50.0), counters(101.0, 11.05, 51.0), usable=2)
    assert ahead.cpus == 0.0 and not ahead.busy


@pytest.mark.parametrize(("usable", "others", "busy"), [
    (2, 0.19, False), (2, 0.20, True),  # two CPUs: a tenth of them is the lower bound
    (64, 0.24, False), (64, BUSY_CPUS, True),  # many: a quarter of one CPU is
    (1, 0.09, False), (1, 0.10, True),
])
def test_busy_from_a_quarter_cpu_or_a_tenth_of_the_usable_cpus(usable, others, busy):
    load = others_load(counters(0.0, 0.0, 0.0, usable), counters(others, 0.0, 1.0, usable),
                       usable=usable)
    assert load.busy is busy


def test_work_that_fits_on_cpus_a_quota_leaves_spare_is_not_held_against_the_machine():
    """A container with a 2-CPU quota on 8 CPUs: 5 CPUs' worth of others leaves 3 idle, more
    than the 2 this process may use; 7 leave 1, so it loses one of its two."""
    spare = others_load(counters(0.0, 0.0, 0.0, 8), counters(5.0, 0.0, 1.0, 8), usable=2)
    assert spare.cpus == pytest.approx(5.0) and spare.share == 0.0 and not spare.busy
    crowded = others_load(counters(0.0, 0.0, 0.0, 8), counters(7.0, 0.0, 1.0, 8), usable=2)
    assert crowded.share == pytest.approx(0.5) and crowded.busy


def test_no_interval_is_unknown():
    assert others_load(counters(1.0, 0.0, 5.0), counters(2.0, 0.0, 5.0), usable=2) is None
    assert others_load(None, counters(2.0, 0.0, 5.0), usable=2) is None


def test_a_suite_is_busy_if_before_or_during_was_and_the_run_if_any_suite_was():
    quiet = OthersLoad(cpus=0.0, share=0.0, seconds=1.0, usable=2, counted=2)
    loud = OthersLoad(cpus=1.0, share=0.5, seconds=1.0, usable=2, counted=2)
    assert SuiteLoad(quiet, quiet).busy is False
    assert SuiteLoad(loud, quiet).busy is True and SuiteLoad(None, loud).busy is True
    assert SuiteLoad(quiet, None).busy is False
    record = SuiteLoad(loud, quiet).to_json()
    assert record["before"]["others_share"] == 0.5 and record["during"]["busy"] is False

    def suite(busy: bool | None) -> dict:
        return {"machine_load": {"busy": busy}}

    assert _any_busy([suite(False), suite(True)]) is True
    assert _any_busy([suite(False), suite(False)]) is False
    assert _any_busy([suite(False), suite(None)]) is None and _any_busy([]) is None


# --- what is printed ------------------------------------------------------------------------


def _text(renderables) -> str:
    console = Console(width=400, file=io.StringIO())
    for renderable in renderables:
        console.print(renderable)
    return console.file.getvalue()


def test_a_busy_suite_prints_a_warning_and_a_quiet_one_a_dim_line():
    loud = SuiteLoad(OthersLoad(cpus=1.0, share=0.5, seconds=0.5, usable=2, counted=2), None)
    warning = _text(render_load("infer", loud.to_json(), 2))
    assert warning.startswith("warning: the infer suite ran beside other work")
    assert "1.00 (50%) of the 2 usable CPUs before it" in warning
    assert "slower than this machine alone" in warning and "rerun it alone" in warning
    quiet = SuiteLoad(None, OthersLoad(cpus=0.0, share=0.0, seconds=0.5, usable=2, counted=2))
    line = _text(render_load("infer", quiet.to_json(), 2))
    assert "warning" not in line and line.strip().endswith("alone")
    assert "unknown" in _text(render_load("infer", SuiteLoad(None, None).to_json(), 2))


def test_thread_settings_name_torchs_pools_and_the_environment(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    threads = thread_settings()
    assert threads["torch_threads"] >= 1 and threads["torch_interop_threads"] >= 1
    assert threads["OMP_WAIT_POLICY"] == "passive" and threads["OMP_NUM_THREADS"] is None
    assert set(threads) >= {"GOMP_SPINCOUNT", "KMP_BLOCKTIME", "MKL_NUM_THREADS"}
    line = _text([render_threads(threads)])
    assert "OMP_WAIT_POLICY=passive" in line and "unset: OMP_NUM_THREADS" in line


# --- end to end: a short bench, alone and beside a hog -----------------------------------------

TINY_YAML = """\
model: {d_model: 32, heads: 4, enc_layers: 2, dec_layers: 2, ff_dim: 64, dropout: 0.0,
        max_positions: 128}
tokenizer: {vocab_size: 64}
train: {batch_tokens: 128, precision: fp32}
"""


def _short_bench(tmp_path: Path, capsys) -> tuple[dict, str]:
    """`attncli bench --suite infer` of a tiny model, one timed run: its JSON and its output."""
    config, report = tmp_path / "tiny.yaml", tmp_path / "bench.json"
    config.write_text(TINY_YAML)
    capsys.readouterr()
    bench_command("cpu", "infer", config=config, json_file=report, warmup=0, repeats=1)
    return json.loads(report.read_text()), capsys.readouterr().out


def _machine_was_busy() -> bool:
    load = LoadSampler().idle(0.5)
    return load is not None and load.busy


@pytest.mark.skipif(read_counters() is None, reason="no /proc/stat here")
def test_a_bench_run_alone_is_not_marked(tmp_path, capsys):
    busy_before = _machine_was_busy()
    report, out = _short_bench(tmp_path, capsys)
    busy_after = _machine_was_busy()
    load = report["suites"]["infer"]["machine_load"]
    assert set(load) == {"before", "during", "busy"} and load["during"]["seconds"] > 0
    assert report["threads"]["torch_threads"] >= 1 and "busy_rule" in report
    assert "threads: torch" in out
    if busy_before or busy_after:
        pytest.skip("this machine was busy with other work around the run")
    assert report["busy"] is False and load["busy"] is False  # its own threads are not others
    assert "warning" not in out


@pytest.mark.skipif(read_counters() is None, reason="no /proc/stat here")
def test_a_bench_run_beside_a_hog_warns_and_is_marked_busy(tmp_path, capsys):
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"])
            for _ in range(LoadSampler().usable)]
    try:
        time.sleep(0.3)  # the hogs' interpreters started and spinning
        report, out = _short_bench(tmp_path, capsys)
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()
    load = report["suites"]["infer"]["machine_load"]
    assert report["busy"] is True and load["busy"] is True
    assert load["before"]["busy"] and load["before"]["others_cpus"] >= 0.5
    assert "warning: the infer suite ran beside other work" in " ".join(out.split())
