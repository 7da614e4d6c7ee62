"""How many updates a run will make, so that a budgeted learning rate (`lr_schedule`) reaches
its floor at the last one: from its step or epoch limit, and from the training clock for a time
limit.

A time-limited run cannot know its count at the start: the speed depends on the machine, the
data and whatever else runs beside it. So the plan is revised from the clock `max_minutes`
reads (validation and saving paused out of it): first after the slow first updates
(`FIRST_PLAN_AFTER`), then at every log step, each time as the updates done plus the time left
times the speed of the last `SPEED_WINDOW` updates. A revision never makes the rate jump (see
`lr_schedule.RatePlan.revised`), and a drift of the speed (another process starting beside the
run) moves the end with it. Every revision is kept in the plan, which state.json keeps, so a
resume after kill -9 goes on with the plan as it was saved (docs/runs-and-checkpoints.md).

With several processes rank 0's clock decides, and every process gets its total, so they all
train with the same rate at every update.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import replace

from attncli.core.config import TrainConfig
from attncli.core.errors import AttncliError
from attncli.training.distributed import World
from attncli.training.lr_schedule import RatePlan, from_record

# Updates after the start (or a resume) that are not timed: the first are slow (memory
# allocated, kernels chosen), and would make the plan too short.
UNTIMED_UPDATES = 10
# The first plan from the clock comes at the first log step at least this many timed updates in.
FIRST_PLAN_AFTER = 20
# The speed is measured over the last this many updates at most (a drift shows within them).
SPEED_WINDOW = 250
# The config keys a plan is made from: a resume with any of them changed plans afresh.
PLAN_KEYS = ("lr_schedule", "lr", "min_lr", "warmup_steps", "cooldown", "lr_plan", "max_steps",
             "max_epochs", "max_minutes", "accum_steps")


def step_limit(cfg: TrainConfig, batches_per_epoch: int) -> int | None:
    """The first of train.max_steps and max_epochs in updates (epochs of about
    `batches_per_epoch`), None without either."""
    by_epochs = (cfg.max_epochs * -(-batches_per_epoch // cfg.accum_steps)
                 if cfg.max_epochs is not None else None)
    return min((n for n in (cfg.max_steps, by_epochs) if n is not None), default=None)


def plan_basis(cfg: TrainConfig) -> dict:
    """What a plan was made from (`PLAN_KEYS`), kept beside it in state.json (as JSON reads it
    back, so that a resume compares like with like)."""
    return json.loads(json.dumps({key: getattr(cfg, key) for key in PLAN_KEYS}))


def fresh_plan(cfg: TrainConfig, limit: int | None) -> RatePlan:
    """The plan of a run from its start: a budgeted shape's last update is its step `limit`,
    unless a time limit cuts it shorter (then the clock revises it soon)."""
    plan = RatePlan(shape=cfg.lr_schedule, peak=cfg.lr, floor=cfg.min_lr,
                    warmup=cfg.warmup_steps, warmup_asked=cfg.warmup_steps,
                    cooldown=cfg.cooldown)
    if plan.budgeted and cfg.lr_plan is not None:  # a replay: its revisions, not the limit
        return _replayed(plan, cfg.lr_plan, 0)
    if not plan.budgeted or limit is None:
        return plan
    return plan.planned(0, limit, "step limit")


def _replayed(plan: RatePlan, revisions: list[tuple[int, int]], step: int) -> RatePlan:
    """`plan` with the replayed `revisions` of update `step` (at step 0: as a plan made at the
    start, else as the clock's revision was made)."""
    for at, total in revisions:
        if at == step == 0:
            plan = plan.planned(0, total, "replayed")
        elif at == step:
            plan = plan.revised(step, total, "replayed")
    return plan


class RatePlanner:
    """A run's `RatePlan`, kept from its start or resume to its end: the rate of each update,
    and the revisions a time limit asks for."""

    def __init__(self, cfg: TrainConfig, plan: RatePlan, *, limit: int | None, world: World):
        """`limit`: the step limit (`step_limit`), which no plan goes past."""
        self.cfg, self.plan, self.limit, self.world = cfg, plan, limit, world
        self.replay = cfg.lr_plan if plan.budgeted else None
        self.timed = plan.budgeted and cfg.max_minutes is not None and self.replay is None
        self.times: deque[tuple[int, float]] = deque()  # (update, training seconds) measured
        self.started_at: int | None = None

    def rate(self, step: int) -> float:
        return self.plan.rate(step)

    def record(self) -> dict:
        """state.json's `scheduler` entry: the plan and the settings it was made from."""
        return {**self.plan.record(), "basis": plan_basis(self.cfg)}

    def agreed_record(self) -> dict:
        """`record`, checked to be every process's (a collective): processes that trained with
        other rates would save a run that no single rate describes."""
        mine = self.record()
        if any(other != mine for other in self.world.gather(mine)):
            raise AttncliError("the training processes' learning-rate plans differ; the run is "
                               "not saved (its last checkpoint is intact)")
        return mine

    def after_update(self, step: int, seconds: float, *, log_step: bool) -> None:
        """Note the clock after update `step` (`seconds` of training); on a log step of a
        time-limited run, revise the plan from the speed (a replay: as `train.lr_plan` lists).
        Every process calls it at the same updates (a revision is agreed through rank 0)."""
        if self.replay is not None:
            self.plan = _replayed(self.plan, self.replay, step)
        if not self.timed:
            return
        if self.started_at is None:
            self.started_at = step
        if step - self.started_at == UNTIMED_UPDATES or (log_step and self.times):
            self.times.append((step, seconds))
        while len(self.times) > 2 and step - self.times[1][0] >= SPEED_WINDOW:
            self.times.popleft()
        first_step, first_seconds = self.times[0] if self.times else (step, seconds)
        if not log_step or step - first_step < FIRST_PLAN_AFTER:
            return
        speed = (step - first_step) / max(seconds - first_seconds, 1e-9)
        left = self.cfg.max_minutes * 60 - seconds
        total = self.world.from_primary(step + max(1, int(left * speed)))
        if self.limit is not None:
            total = min(total, self.limit)
        if total != self.plan.total:
            self.plan = self.plan.revised(step, total, "clock")


def resumed_plan(saved: dict | None, cfg: TrainConfig, *, step: int, seconds: float,
                 limit: int | None) -> tuple[RatePlan, str | None]:
    """The plan a resumed run goes on with, and the log line when it is a new one.

    The saved plan as it was when its settings (`PLAN_KEYS`) are unchanged: a resume goes on
    exactly. Otherwise (an extension, another shape or peak) a plan made afresh for the new
    settings, whose rate climbs back from the saved plan's at `step` over a warm-up's length
    (`RatePlan.rewarmed`); a time limit is first planned from the run's mean speed so far
    (`seconds` of training for `step` updates). inverse_sqrt needs no plan: it goes on as the
    run that never stopped, as it always did.
    """
    fresh = fresh_plan(cfg, limit)
    if saved is None or saved.get("basis") is None:  # saved before 0.7: inverse_sqrt
        old = RatePlan(shape="inverse_sqrt", peak=cfg.lr, warmup=cfg.warmup_steps)
        if saved is not None:
            old = from_record(saved)
    else:
        old = from_record(saved)
        if saved["basis"] == plan_basis(cfg):
            return old, None
    if not fresh.budgeted and not old.budgeted:
        return fresh, None
    if fresh.budgeted and cfg.max_minutes is not None and seconds > 0:
        by_clock = step + int((cfg.max_minutes * 60 - seconds) * step / seconds)
        total = min(by_clock, limit) if limit is not None else by_clock
        fresh = fresh.planned(step, max(total, step + 1), "mean speed so far")
    plan = fresh.rewarmed(step, old.rate(step))
    plan = replace(plan, revisions=[*old.revisions, *plan.revisions])
    return plan, (f"learning rate: {cfg.lr_schedule} planned afresh for the new settings from "
                  f"update {step}, the rate climbing back from {old.rate(step):.2e} over "
                  f"{plan.anchor.rejoin - step:,} updates ({plan.position(plan.anchor.rejoin)})")
