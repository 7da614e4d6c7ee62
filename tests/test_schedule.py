"""The training schedule (`training.schedule.due`) and the stop reasons (`StopReason`): what is
due at each kind of step, and the text each reason prints. A change to either rule fails here
before it changes a run's logs, validations or saves."""

from __future__ import annotations

import json

import pytest

from attncli.core.config import TrainConfig
from attncli.training.resume_rules import limit_reached
from attncli.training.schedule import Due, due
from attncli.training.stops import StopReason

# log every 4, save every 10, validate (and save) every 30: steps 4, 10 and 30 have one job each
CFG = TrainConfig(log_every=4, eval_every=30, save_every=10)
LIMITS = (StopReason.MAX_STEPS, StopReason.MAX_EPOCHS, StopReason.MAX_MINUTES)


def _due(log=False, validate=False, save=False, end_validate=False, end_save=None,
         read=False) -> Due:
    return Due(log=log, validate=validate, save=save, end_validate=end_validate,
               end_save=end_save, read=read)


@pytest.mark.parametrize(("step", "expected"), [
    (7, _due()),                                            # nothing: figures stay on device
    (4, _due(log=True, read=True)),                         # a log line only
    (12, _due(log=True, read=True)),
    (10, _due(save=True, read=True)),                       # save_every: saved, not validated
    (30, _due(validate=True, save=True, read=True)),        # each validation is saved
    (60, _due(log=True, validate=True, save=True, read=True)),
])
def test_running_steps(step, expected):
    assert due(CFG, step) == expected
    assert due(CFG, step).checkpoint == (expected.validate or expected.save)


def test_without_save_every_only_validations_save():
    cfg = TrainConfig(log_every=4, eval_every=30)
    assert due(cfg, 10) == _due()
    assert due(cfg, 30) == _due(validate=True, save=True, read=True)


@pytest.mark.parametrize("limit", LIMITS)
def test_limit_between_scheduled_steps_validates_and_saves_off_schedule(limit):
    assert due(CFG, 7, limit) == _due(end_validate=True, end_save="off_schedule", read=True)
    # a log step keeps its line; the end adds none where there is none
    assert due(CFG, 4, limit) == _due(log=True, end_validate=True, end_save="off_schedule",
                                      read=True)


@pytest.mark.parametrize("limit", LIMITS)
def test_limit_on_scheduled_steps_is_on_schedule(limit):
    # a save_every step: the save is the schedule's, the end's validation is not
    assert due(CFG, 10, limit) == _due(save=True, end_validate=True, read=True)
    assert due(CFG, 30, limit) == _due(validate=True, save=True, read=True)


def test_patience_stops_on_its_scheduled_validation():
    assert due(CFG, 30, StopReason.PATIENCE) == _due(validate=True, save=True, read=True)
    assert StopReason.PATIENCE.completes


def test_signal_saves_between_as_interrupted_and_never_validates_off_schedule():
    assert due(CFG, 7, StopReason.SIGNAL) == _due(end_save="interrupted", read=True)
    assert due(CFG, 10, StopReason.SIGNAL) == _due(save=True, read=True)
    # a scheduled validation is still due (a resume starts after this update)
    assert due(CFG, 30, StopReason.SIGNAL) == _due(validate=True, save=True, read=True)
    assert not StopReason.SIGNAL.completes


def test_nonfinite_stop_reads_but_neither_validates_nor_saves_at_the_end():
    assert due(CFG, 7, StopReason.NONFINITE) == _due(read=True)
    assert not StopReason.NONFINITE.completes


def test_stop_reasons_print_as_before():
    """Log lines, error messages and train.KEY names print the reason's text, never
    `StopReason.X`: what train.log and the error messages said with the six strings."""
    texts = ["max_steps", "max_epochs", "max_minutes", "patience", "signal", "nonfinite"]
    assert [reason.value for reason in StopReason] == texts
    for reason, text in zip(StopReason, texts, strict=True):
        assert reason == text and str(reason) == text and f"({reason})" == f"({text})"
        assert json.dumps({"reason": reason}) == json.dumps({"reason": text})
    assert all(hasattr(TrainConfig(), reason.value) for reason in (*LIMITS,
                                                                   StopReason.PATIENCE))


def test_limit_reached_names_the_first_limit():
    cfg = TrainConfig(max_steps=10, max_epochs=2, max_minutes=1.0)
    assert limit_reached(cfg, 9, 1, 59.0) is None
    assert limit_reached(cfg, 10, 2, 60.0) is StopReason.MAX_STEPS
    assert limit_reached(cfg, 9, 2, 60.0) is StopReason.MAX_EPOCHS
    assert limit_reached(cfg, 9, 1, 60.0) is StopReason.MAX_MINUTES
