"""The learning rate at each update: `train.lr_schedule`'s shapes, and the plan a budgeted shape
follows.

- `inverse_sqrt` (the default): linear warm-up to `train.lr`, then lr * sqrt(warmup / step).
  It needs no plan: the rate depends on the update's number alone, whatever the run's limit.
- `linear`: linear warm-up, then a straight line down to `train.min_lr` at the plan's last
  update ("Budgeted Training", Li et al. 2020; "Straight to Zero", Bergsma et al. 2025).
- `wsd` (warm-up, stable, decay): linear warm-up, the peak held, then a straight line down to
  `train.min_lr` over the last `train.cooldown` share of the updates after warm-up.

A budgeted shape needs the run's last update, its *plan*: known at the start for a step or
epoch limit, estimated from the training speed for a time limit and revised as the speed drifts
(`lr_planning.py` decides when and how). A revision must not make the rate jump: it sets an
*anchor*, the update and rate it took over at, and the rate runs in a straight line from the
anchor to where the new plan's curve is at its `rejoin` update, then follows that curve. A
revision from the clock rejoins at the curve's next knot (the end of warm-up, the start of the
decay, the last update), so the rate keeps its shape; an extension (`--resume` with a raised
limit) re-warms: it rejoins after a warm-up's length of updates.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

SHAPES = ("inverse_sqrt", "linear", "wsd")
BUDGETED = ("linear", "wsd")
# A budgeted plan warms up over at most this share of its updates.
SHORT_BUDGET_WARMUP_SHARE = 0.25


def inverse_sqrt_lr(step: int, peak_lr: float, warmup: int) -> float:
    """Linear warm-up to `peak_lr` over `warmup` updates, then peak * sqrt(warmup / step)."""
    step = max(step, 1)
    if warmup and step < warmup:
        return peak_lr * step / warmup
    return peak_lr * math.sqrt(max(warmup, 1) / step)


def budget_warmup(warmup: int, total: int) -> int:
    """The warm-up of a plan of `total` updates: `warmup` as configured, but at most
    `SHORT_BUDGET_WARMUP_SHARE` of the plan, so that a short run (0.4's small.yaml made 1,813
    updates in 30 minutes of an AVX2 CPU, against a 1,000-update warm-up) does not spend most
    of its updates climbing to a peak it would leave at once. A share rather than a threshold:
    a plan one update longer never warms up twice as long."""
    return min(warmup, max(1, round(SHORT_BUDGET_WARMUP_SHARE * total)))


@dataclass(frozen=True)
class Anchor:
    """Where a revised plan took over: from (`step`, `rate`), a straight line to the plan's
    curve at `rejoin` (`rewarm`: a climb back after a resume with other settings, which the
    revisions during it keep)."""

    step: int
    rate: float
    rejoin: int
    rewarm: bool = False


@dataclass(frozen=True)
class RatePlan:
    """A run's learning rate, update by update (`rate`); state.json keeps it (`record`)."""

    shape: str                  # one of SHAPES
    peak: float                 # train.lr
    floor: float = 0.0          # train.min_lr: the rate at the last update (budgeted shapes)
    warmup: int = 0             # the warm-up in force (`budget_warmup` of the plan)
    warmup_asked: int = 0       # train.warmup_steps
    total: int | None = None    # the planned last update (None: inverse_sqrt, or not yet known)
    cooldown: float = 0.2       # wsd: the share of the updates after warm-up spent decaying
    anchor: Anchor | None = None
    # every plan the run followed: [the update it took over after, its last update, why]
    revisions: list = field(default_factory=list)

    @property
    def budgeted(self) -> bool:
        return self.shape in BUDGETED

    @property
    def decay_start(self) -> int:
        """The last update at the peak: the end of warm-up (linear), or where wsd's cool-down
        begins."""
        if self.shape != "wsd" or self.total is None:
            return self.warmup
        return max(self.warmup, self.total - round(self.cooldown * (self.total - self.warmup)))

    def knots(self) -> list[int]:
        """The updates where the curve changes its slope (warm-up's end, decay's start, the
        last update)."""
        points = {self.warmup, self.decay_start, *([self.total] if self.total else [])}
        return sorted(points)

    def curve(self, step: int) -> float:
        """The shape's rate at update `step` (from 1), anchor aside."""
        step = max(step, 1)
        if self.shape == "inverse_sqrt":
            return inverse_sqrt_lr(step, self.peak, self.warmup)
        if step < self.warmup:
            return self.peak * step / self.warmup
        if self.total is None or step <= self.decay_start:
            return self.peak  # a time-limited run before its first plan holds the peak
        if step >= self.total:
            return self.floor
        done = (step - self.decay_start) / (self.total - self.decay_start)
        return self.peak + (self.floor - self.peak) * done

    def rate(self, step: int) -> float:
        """The learning rate of update `step` (counted from 1)."""
        anchor = self.anchor
        if anchor is not None and anchor.step < step < anchor.rejoin:
            target = self.curve(anchor.rejoin)
            return anchor.rate + (target - anchor.rate) * ((step - anchor.step)
                                                           / (anchor.rejoin - anchor.step))
        return self.curve(step)

    def planned(self, step: int, total: int, why: str) -> RatePlan:
        """This plan with `total` as its last update, as if known from the start (the warm-up
        ruled for it, `budget_warmup`), made at update `step` for the reason `why`."""
        return replace(self, total=total, warmup=budget_warmup(self.warmup_asked, total),
                       revisions=[[step, total, why]])

    def revised(self, step: int, total: int, why: str) -> RatePlan:
        """The plan from update `step` on (the next update is `step + 1`) with `total` as its
        last update, the rate going on from this plan's at `step` to the new curve's next knot.
        A warm-up not yet over is ruled again for the new total (`budget_warmup`), unless the
        new rule's would be over already: then it ends where it was to end, at the peak."""
        total = max(total, step + 1)
        warmup = self.warmup
        if step < self.warmup and budget_warmup(self.warmup_asked, total) > step:
            warmup = budget_warmup(self.warmup_asked, total)
        new = replace(self, total=total, warmup=warmup, anchor=None,
                      revisions=[*self.revisions, [step, total, why]])
        rejoin = next((k for k in new.knots() if k > step), total)
        climbing = self.anchor is not None and self.anchor.rewarm and self.anchor.rejoin > step
        if climbing:
            rejoin = min(self.anchor.rejoin, total)
        return replace(new, anchor=Anchor(step, self.rate(step), rejoin, rewarm=climbing))

    def rewarmed(self, step: int, rate: float) -> RatePlan:
        """This plan (made afresh for a run resumed with other limits or schedule settings),
        taken over at `step` where the run's rate was `rate`: a straight line back to its curve
        over a warm-up's length of updates."""
        rejoin = step + max(1, self.warmup)
        if self.total is not None:
            rejoin = min(rejoin, max(self.total, step + 1))
        return replace(self, anchor=Anchor(step, rate, rejoin, rewarm=True))

    def position(self, step: int) -> str:
        """Where update `step` falls in the schedule, for the log: '2.1e-03 (70% of peak),
        decaying to 0.0e+00 at update 1,874 (planned)'."""
        rate = self.rate(step)
        text = f"lr {rate:.2e} ({rate / self.peak:.0%} of peak)"
        if self.shape == "inverse_sqrt":
            return text + (", warming up" if step < self.warmup else ", inverse square root")
        if self.total is None:
            return text + ", last update not planned yet"
        phase = ("warming up" if step < self.warmup else
                 "at the peak" if step <= self.decay_start else "decaying")
        return (f"{text}, {phase}, to {self.floor:.1e} at update {self.total:,} "
                f"({step / self.total:.0%} of the plan)")

    def record(self) -> dict:
        """state.json's `scheduler` entry (`from_record` reads it back)."""
        fields = asdict(self)
        return {"kind": fields.pop("shape"), "peak_lr": fields.pop("peak"),
                "warmup_steps": fields.pop("warmup"), **fields}


def from_record(record: dict) -> RatePlan:
    """A plan as state.json recorded it (saves before attncli 0.7: inverse_sqrt's three keys)."""
    anchor = record.get("anchor")
    return RatePlan(shape=record["kind"], peak=record["peak_lr"], warmup=record["warmup_steps"],
                    warmup_asked=record.get("warmup_asked", record["warmup_steps"]),
                    floor=record.get("floor", 0.0), total=record.get("total"),
                    cooldown=record.get("cooldown", 0.2),
                    anchor=Anchor(**anchor) if anchor else None,
                    revisions=[list(r) for r in record.get("revisions", [])])
