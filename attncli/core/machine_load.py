"""What other processes take of the CPUs this process runs on, over an interval; torch-free.

Why: a CPU benchmark timed beside a training run reads several times slower, and nothing in its
figures says so (issue 63). The kernel counts every CPU's busy time (/proc/stat); this process
counts its own (all its threads); the difference, over the interval, is what the rest of the
machine took. It is expressed in CPUs' worth (1.0: one CPU kept busy all the time) and as a share
of the CPUs this process may use (`core.host.usable_cpus`: affinity and cgroup quota).

Only the CPUs this process may run on are counted (its affinity mask picks /proc/stat's per-CPU
lines), and where a cgroup quota lets it use fewer CPUs than its mask holds (a container's
`--cpus` on a big host), the others' work that fits on the CPUs it cannot use anyway is not
held against the machine. Where /proc/stat cannot be read (not Linux), every figure is None:
unknown, never a guess.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncli.core.host import usable_cpus

PROC_STAT = Path("/proc/stat")
# /proc/stat's fields after the name: user nice system idle iowait irq softirq steal (guest and
# guest_nice are already inside user and nice). Busy: all but idle and iowait. Steal is busy:
# another virtual machine ran on this one's CPU.
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
IDLE_WINDOW_S = 0.5

# The rule for "busy", applied before and during each suite to the CPUs' worth that others
# take from this process's usable CPUs. Either bound marks the run:
#  * BUSY_CPUS, a quarter of one CPU whatever the machine's size: torch's CPU kernels split work
#    over OpenMP threads and every parallel region waits for its slowest thread, so work that
#    keeps one CPU a quarter busy slows the whole region, not a quarter of it;
#  * BUSY_SHARE, a tenth of the usable CPUs: spread evenly, that is a tenth of the time, the size
#    of the differences the bench's tables are read for; on one or two CPUs it is the lower
#    bound of the two.
# An otherwise idle machine's daemons stay well under both.
BUSY_CPUS = 0.25
BUSY_SHARE = 0.10


def busy_rule(usable: int) -> str:
    """The busy rule in words, for the report and the docs."""
    return (f"other processes took >= {BUSY_CPUS} CPUs' worth or >= {BUSY_SHARE:.0%} of the "
            f"{usable} usable CPUs, before or during a suite")


@dataclass(frozen=True)
class CpuCounters:
    """One reading: busy CPU seconds of the counted CPUs, this process's CPU seconds, the
    monotonic clock, and how many CPUs were counted."""

    busy_s: float
    own_s: float
    wall_s: float
    cpus: int


def parse_proc_stat(text: str, cpu_ids: Collection[int] | None = None,
                    ticks_per_s: float = 100.0) -> tuple[float, int] | None:
    """(busy seconds, CPUs counted) from /proc/stat's text: the per-CPU lines of `cpu_ids` when
    every one of them is there, else the aggregate `cpu` line (all CPUs). None when neither
    can be read."""
    per_cpu: dict[int, list[int]] = {}
    aggregate: list[int] | None = None
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu"):
            continue
        try:
            fields = [int(word) for word in rest.split()]
        except ValueError:
            continue
        if len(fields) < 4:
            continue
        fields += [0] * (8 - len(fields))  # old kernels stop before iowait, irq or steal
        if name == "cpu":
            aggregate = fields
        elif name[3:].isdigit():
            per_cpu[int(name[3:])] = fields
    if cpu_ids and all(i in per_cpu for i in cpu_ids):
        rows, cpus = [per_cpu[i] for i in cpu_ids], len(cpu_ids)
    elif aggregate is not None:
        rows, cpus = [aggregate], len(per_cpu) or os.cpu_count() or 1
    else:
        return None
    return sum(row[i] for row in rows for i in BUSY_FIELDS) / ticks_per_s, cpus


def own_cpu_s() -> float:
    """This process's CPU seconds, every thread's. Children are left out: a child's time is
    added only when it is waited for, all of it at once, and the bench starts none."""
    times = os.times()
    return times.user + times.system


def _affinity() -> set[int] | None:
    try:
        return os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return None


def _ticks_per_s() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100.0


def read_counters(proc_stat: Path = PROC_STAT) -> CpuCounters | None:
    """The counters now; None where /proc/stat cannot be read."""
    try:
        text = proc_stat.read_text()
    except OSError:
        return None
    parsed = parse_proc_stat(text, _affinity(), _ticks_per_s())
    if parsed is None:
        return None
    busy_s, cpus = parsed
    return CpuCounters(busy_s=busy_s, own_s=own_cpu_s(), wall_s=time.monotonic(), cpus=cpus)


@dataclass(frozen=True)
class OthersLoad:
    """What other processes took over one interval: `cpus`, CPUs' worth on the `counted` CPUs
    (those this process may run on); `share`, the part of its `usable` CPUs they took (see the
    module doc: the same figure over `usable` unless a quota leaves some counted CPUs spare)."""

    cpus: float
    share: float
    seconds: float
    usable: int
    counted: int

    @property
    def contending_cpus(self) -> float:
        """CPUs' worth taken from the CPUs this process may use."""
        return self.share * self.usable

    @property
    def busy(self) -> bool:
        return self.contending_cpus >= BUSY_CPUS or self.share >= BUSY_SHARE

    def to_json(self) -> dict[str, Any]:
        return {"others_cpus": round(self.cpus, 3), "others_share": round(self.share, 3),
                "cpus_counted": self.counted, "seconds": round(self.seconds, 3),
                "busy": self.busy}


def others_load(before: CpuCounters | None, after: CpuCounters | None,
                usable: int) -> OthersLoad | None:
    """Others' load between two readings: (machine busy - own) / interval CPUs' worth, less
    what fits on the counted CPUs this process cannot use (quota below affinity), over
    `usable`. None when a reading is missing or no time passed."""
    if before is None or after is None or after.wall_s <= before.wall_s:
        return None
    seconds = after.wall_s - before.wall_s
    others = max(0.0, (after.busy_s - before.busy_s) - (after.own_s - before.own_s)) / seconds
    spare = max(0, after.cpus - usable)
    share = max(0.0, others - spare) / usable
    return OthersLoad(cpus=others, share=share, seconds=seconds, usable=usable,
                      counted=after.cpus)


@dataclass(frozen=True)
class SuiteLoad:
    """Others' load in the idle window before a suite and during it; busy if either was,
    None (unknown) if neither could be measured."""

    before: OthersLoad | None
    during: OthersLoad | None

    @property
    def busy(self) -> bool | None:
        known = [load for load in (self.before, self.during) if load is not None]
        return any(load.busy for load in known) if known else None

    def to_json(self) -> dict[str, Any]:
        return {"before": None if self.before is None else self.before.to_json(),
                "during": None if self.during is None else self.during.to_json(),
                "busy": self.busy}


class LoadSampler:
    """Measures others' load around a piece of work: `idle(window)` sleeps and measures (this
    process does nothing, so all it sees is others'), `start()` and `stop()` bracket the work."""

    def __init__(self, proc_stat: Path = PROC_STAT, usable: int | None = None) -> None:
        self.proc_stat = proc_stat
        self.usable = usable or usable_cpus()
        self._started: CpuCounters | None = None

    def idle(self, window_s: float = IDLE_WINDOW_S) -> OthersLoad | None:
        before = read_counters(self.proc_stat)
        if before is None or window_s <= 0:
            return None
        time.sleep(window_s)
        return others_load(before, read_counters(self.proc_stat), self.usable)

    def start(self) -> None:
        self._started = read_counters(self.proc_stat)

    def stop(self) -> OthersLoad | None:
        return others_load(self._started, read_counters(self.proc_stat), self.usable)
