"""When training ends: the mean of the run's last saves as `checkpoints/averaged/`, kept only if
it validates better than the best checkpoint (`train.average_last`; 0 turns it off).

A mean of checkpoints is not always better than the best of them (early in a run the last
saves are far apart and their mean can be worse than each), so it is scored first, the way
validation scores while training: the first `data.valid_limit` val pairs, greedy BLEU at eval's
decoding precision and settings. Kept, it is what `eval`, `translate` and `export` use by
default; not kept, no averaged folder remains (an earlier one, now stale, is removed), and the
log line says why either way. Its scores go to its state.json and to metrics.jsonl (event
`averaged`).

Rank 0 alone does it (it writes; the step folders are on its disk), with a one-process
`Validator`; the other processes wait for it at the end of the run
(`World.wait_for_primary`). A run stopped by a signal is not averaged: it is meant to resume.
"""

from __future__ import annotations

from typing import Any

from attncli.runs.average import mean_weights, newest_steps, remove_averaged, write_averaged
from attncli.training.validate import score_weights


def average_at_end(trainer: Any) -> str:
    """Average the run's last `train.average_last` saves, score the mean, keep it or not; the
    log line saying which and why. `trainer` is the `Trainer` whose run just ended."""
    paths, state, wanted = trainer.paths, trainer.state, trainer.cfg.average_last
    steps = newest_steps(paths, wanted)
    if len(steps) < wanted:
        gone = " (the earlier one removed)" if remove_averaged(paths) else ""
        return (f"averaging: the run has {len(steps)} saved step folder(s), train.average_last "
                f"asks for {wanted}; no averaged checkpoint{gone}")
    mean, fingerprint = mean_weights(paths, steps)
    scores = score_weights(trainer, mean)
    kept = scores.bleu > state.best_bleu
    record = {"val_loss": round(scores.loss, 6), "val_bleu": round(scores.bleu, 3),
              "best_step": state.best_step, "best_val_bleu": round(state.best_bleu, 3)}
    said = (f"averaged steps {', '.join(map(str, steps))}: greedy val BLEU {scores.bleu:.2f}, "
            f"best {state.best_bleu:.2f} (step-{state.best_step})")
    if kept:  # the event is logged once the folder it speaks of exists
        folder = write_averaged(paths, mean, steps, fingerprint=fingerprint, record=record)
        said = f"{said}: better, kept as {folder} (eval and translate use it by default)"
    else:
        gone = " (the earlier one removed)" if remove_averaged(paths) else ""
        said = (f"{said}: not better, so no averaged checkpoint is kept{gone}; eval and "
                f"translate use best")
    trainer.metrics.write({"event": "averaged", "step": state.step, "steps": steps, **record,
                           "kept": kept})
    return said
