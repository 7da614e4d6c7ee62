"""`train.lr_schedule`: the budgeted shapes' rates, the short-budget warm-up, plans from the
clock, and whole runs that stop and resume with them (`training/lr_schedule.py`,
`training/lr_planning.py`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from helpers import SMALL, metrics, pointers, resume, train, train_args

from attncli.core.config import TrainConfig
from attncli.training.distributed import World
from attncli.training.lr_planning import RatePlanner, fresh_plan, resumed_plan
from attncli.training.lr_schedule import budget_warmup, from_record

PEAK = 0.003


def _plan(shape: str, steps: int, warmup: int = 100, **extra):
    cfg = TrainConfig(lr=PEAK, warmup_steps=warmup, lr_schedule=shape, max_steps=steps, **extra)
    return fresh_plan(cfg, steps)


def test_linear_is_at_its_peak_after_warmup_half_way_down_midway_and_at_its_floor_last():
    plan = _plan("linear", 1000, min_lr=0.0003)
    assert plan.rate(50) == pytest.approx(0.0015)       # half-way up the warm-up
    assert plan.rate(100) == pytest.approx(PEAK)         # the end of warm-up
    assert plan.rate(550) == pytest.approx(0.00165)      # half-way from 100 to 1000
    assert plan.rate(1000) == pytest.approx(0.0003)      # the last update: min_lr


def test_wsd_holds_its_peak_then_decays_over_its_cooldown():
    plan = _plan("wsd", 1100, cooldown=0.2)             # 1,000 updates after warm-up
    assert plan.rate(100) == plan.rate(500) == plan.rate(900) == pytest.approx(PEAK)
    assert plan.rate(1000) == pytest.approx(PEAK / 2)    # half-way through the last 200
    assert plan.rate(1100) == 0.0


def test_a_short_budget_warms_up_over_at_most_a_quarter_of_its_updates():
    assert budget_warmup(1000, 4000) == 1000             # four times the warm-up: as configured
    assert budget_warmup(1000, 3000) == 750
    assert budget_warmup(1000, 2001) == 500              # no step where the warm-up doubles
    assert budget_warmup(1000, 1813) == 453              # 0.4's small.yaml on an AVX2 CPU
    assert budget_warmup(0, 10) == 0
    plan = _plan("linear", 1813, warmup=1000)
    assert plan.warmup == 453 and plan.rate(453) == pytest.approx(PEAK)
    assert plan.rate(1813) == 0.0
    assert _plan("inverse_sqrt", 1813, warmup=1000).rate(1000) == pytest.approx(PEAK)


def test_a_revision_past_the_new_warmup_still_climbs_to_the_peak():
    plan = _plan("linear", 8000, warmup=1000)            # 1,000 updates of warm-up
    shorter = plan.revised(600, 2000, "clock")           # a quarter would be 500: passed
    assert shorter.warmup == 1000 and shorter.rate(1000) == pytest.approx(PEAK)
    assert shorter.rate(601) == pytest.approx(plan.rate(601))
    early = plan.revised(100, 2000, "clock")             # before 500: the new warm-up
    assert early.warmup == 500 and early.rate(500) == pytest.approx(PEAK)


def test_a_plan_goes_through_state_json_unchanged():
    cfg = TrainConfig(lr=PEAK, warmup_steps=100, lr_schedule="linear", max_minutes=1)
    plan = fresh_plan(cfg, None).revised(40, 900, "clock").revised(300, 880, "clock")
    again = from_record(json.loads(json.dumps(plan.record())))
    assert again == plan and [again.rate(s) for s in range(1, 900)] == [
        plan.rate(s) for s in range(1, 900)]


def _timed_run(planner: RatePlanner, seconds_per_update, limit_s: float) -> list[float]:
    """Drive `planner` as the training loop does, the clock advanced by
    `seconds_per_update(step)`; the rate of every update made before `limit_s`."""
    rates, seconds, step = [], 0.0, 0
    while seconds < limit_s:
        rates.append(planner.rate(step + 1))
        step += 1
        seconds += seconds_per_update(step)
        planner.after_update(step, seconds, log_step=step % 50 == 0)
    return rates


@pytest.mark.parametrize("shape", ["linear", "wsd"])
def test_a_time_limit_is_planned_from_the_speed_and_the_rate_ends_at_its_floor(shape):
    """The speed halves a third of the way in (a second process starts beside the run): the
    plan follows it, the rate never jumps, and it reaches its floor as the time runs out."""
    cfg = TrainConfig(lr=PEAK, warmup_steps=1000, lr_schedule=shape, max_minutes=30,
                      max_epochs=100)
    planner = RatePlanner(cfg, fresh_plan(cfg, 90_000), limit=90_000, world=World())
    rates = _timed_run(planner, lambda step: 2.0 if step < 10 else (0.5 if step < 1200 else 1.0),
                       30 * 60)
    assert 2300 < len(rates) < 2450
    assert 850 < planner.plan.warmup < 950 and max(rates) == pytest.approx(PEAK)  # ~3,580 planned
    assert rates[-1] < 0.02 * PEAK                         # at the floor when the time ran out
    steepest = max(abs(a - b) for a, b in zip(rates, rates[1:], strict=False))
    assert steepest < 0.01 * PEAK                          # no jump at any revision
    assert {why for _, _, why in planner.plan.revisions} == {"step limit", "clock"}


def test_a_timed_run_replayed_with_a_step_limit_and_its_plan_has_its_rates():
    timed = TrainConfig(lr=PEAK, warmup_steps=1000, lr_schedule="linear", max_minutes=20,
                        max_epochs=100)
    planner = RatePlanner(timed, fresh_plan(timed, 90_000), limit=90_000, world=World())
    rates = _timed_run(planner, lambda step: 0.4 + (step % 7) / 10, 20 * 60)
    assert len(planner.plan.revisions) > 10  # the speed wobbles: a revision at most log steps
    replay = timed.model_copy(update={
        "max_minutes": None, "max_steps": len(rates),
        "lr_plan": [(step, total) for step, total, _ in planner.plan.revisions]})
    again = RatePlanner(replay, fresh_plan(replay, len(rates)), limit=len(rates),
                        world=World())
    assert _timed_run(again, lambda step: 1.0, len(rates)) == rates
    plain = TrainConfig(lr=PEAK, warmup_steps=1000, lr_schedule="linear", max_steps=len(rates))
    assert [fresh_plan(plain, len(rates)).rate(s) for s in range(1, len(rates) + 1)] != rates


def test_a_short_timed_run_gets_the_short_budget_warmup_from_its_first_plan():
    cfg = TrainConfig(lr=PEAK, warmup_steps=1000, lr_schedule="linear", max_minutes=30)
    planner = RatePlanner(cfg, fresh_plan(cfg, None), limit=None, world=World())
    rates = _timed_run(planner, lambda step: 1.0, 30 * 60)
    assert planner.plan.warmup == budget_warmup(1000, 1800) == 450
    assert max(rates) == pytest.approx(PEAK) and rates.index(max(rates)) == 449
    assert rates[-1] < 0.01 * PEAK


def test_a_resume_with_the_same_settings_goes_on_with_the_saved_plan():
    cfg = TrainConfig(lr=PEAK, warmup_steps=100, lr_schedule="linear", max_minutes=10)
    planner = RatePlanner(cfg, fresh_plan(cfg, None).revised(40, 700, "clock"), limit=None,
                          world=World())
    saved = json.loads(json.dumps(planner.record()))
    plan, line = resumed_plan(saved, cfg, step=350, seconds=300.0, limit=None)
    assert plan == planner.plan and line is None


def test_an_extension_climbs_back_to_the_curve_of_the_longer_plan():
    short = TrainConfig(lr=PEAK, warmup_steps=100, lr_schedule="linear", max_steps=1000)
    saved = RatePlanner(short, fresh_plan(short, 1000), limit=1000, world=World()).record()
    longer = short.model_copy(update={"max_steps": 2000})
    plan, line = resumed_plan(saved, longer, step=1000, seconds=100.0, limit=2000)
    assert "climbing back" in line
    assert plan.rate(1100) == pytest.approx(fresh_plan(longer, 2000).rate(1100))
    assert plan.rate(1050) == pytest.approx(plan.rate(1100) / 2)  # from the floor it reached
    assert plan.rate(2000) == 0.0


def test_runs_saved_before_the_schedule_was_recorded_resume_with_inverse_sqrt():
    cfg = TrainConfig(lr=PEAK, warmup_steps=100, max_steps=1000)
    old = {"kind": "inverse_sqrt", "peak_lr": PEAK, "warmup_steps": 100}
    for saved in (old, None):
        plan, line = resumed_plan(saved, cfg, step=400, seconds=60.0, limit=1000)
        assert line is None and plan.rate(401) == pytest.approx(PEAK * (100 / 401) ** 0.5)


# --------------------------------------------------------------------------------------------
# Whole runs (the tiny config of helpers.TINY)
# --------------------------------------------------------------------------------------------


def _rates(run) -> dict[int, float]:
    return {r["step"]: r["lr"] for r in metrics(run) if r["event"] == "train"}


@pytest.mark.parametrize("shape", ["linear", "wsd"])
def test_a_run_cut_back_and_resumed_follows_the_uninterrupted_curve(data_dir, tmp_path, shape):
    """What a kill after the save of step 4 leaves, resumed with the same config: the same
    rates and losses as the run that was never stopped, down to its floor at step 8."""
    sets = [f"train.lr_schedule={shape}", "train.max_steps=8", "train.save_every=2",
            "train.warmup_steps=2", "train.keep_checkpoints=10", "train.cooldown=0.5"]
    result = train(data_dir, tmp_path, SMALL, "--name", "straight", sets=sets)
    assert result.returncode == 0, result.stderr
    straight = tmp_path / "straight"
    assert _rates(straight)[8] == 0.0 and max(_rates(straight).values()) == pytest.approx(0.001)
    run = tmp_path / "cut"
    shutil.copytree(straight, run)
    (run / "checkpoints" / "pointers.json").write_text(json.dumps({"last": "step-4"}))
    result = resume(data_dir, run)
    assert result.returncode == 0, result.stderr
    assert _rates(run) == _rates(straight)
    found = {r["step"]: r["loss"] for r in metrics(run) if r["event"] == "train"}
    expected = {r["step"]: r["loss"] for r in metrics(straight) if r["event"] == "train"}
    assert found == pytest.approx(expected, abs=1e-6)


def test_a_timed_runs_plan_survives_kill_9_and_resume(data_dir, tmp_path):
    from test_checkpoints import _subprocess_env

    from attncli.runs.checkpoints import KILL_AT_ENV

    sets = ["train.lr_schedule=linear", "train.max_minutes=0.15", "train.max_epochs=100000",
            "train.save_every=30", "train.eval_every=100000", "train.log_every=5",
            "train.warmup_steps=20"]
    args = train_args(SMALL, "--name", "timed", runs=tmp_path, sets=sets)
    killed = subprocess.run([sys.executable, "-m", "attncli", *args], capture_output=True,
                            text=True, timeout=600, cwd=tmp_path,
                            env=_subprocess_env(data_dir, **{KILL_AT_ENV: "pruned@60"}))
    assert killed.returncode == -9, killed.stderr
    run = tmp_path / "timed"
    assert pointers(run)["last"] == "step-60"
    saved = json.loads((run / "checkpoints" / "step-60" / "state.json").read_text())["scheduler"]
    assert [why for _, _, why in saved["revisions"]][-1] == "clock"
    result = resume(data_dir, run)
    assert result.returncode == 0, result.stderr
    plan = from_record(saved)
    assert _rates(run)[65] == pytest.approx(plan.rate(65))  # the saved plan, as it was
    last = json.loads((run / "checkpoints" / pointers(run)["last"] / "state.json").read_text())
    assert last["scheduler"]["revisions"][: len(saved["revisions"])] == saved["revisions"]
    assert "planned afresh" not in (run / "train.log").read_text()
