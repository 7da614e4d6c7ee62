"""training: `attncli train`, one job per module. Read `trainer.py` first: the loop that ties
the others.

Imports `core`, `data`, `model`, `decoding` (validation BLEU) and `runs`. Modules, in reading
order:

- `command.py`       `attncli train`: one process or one of several; exit codes for signals
- `preflight.py`     what `attncli train` checks before torch loads (torch-free)
- `resume_rules.py`  what a resume may change in a run's config; what validation scores with
- `parent.py`        `--init-from RUN` (fine-tuning): the parent checked, the child's config
                     made of CONFIG and the parent's model and tokenizer, parent.json (torch-free)
- `distributed.py`   several processes (torchrun): who writes, each one's share, agreed stops
- `prepare.py`       a run's data (tokenizer, token caches) and run folder, and the banner
- `parent_weights.py` a fine-tuned run's start: the parent's weights checked, then loaded
- `freezing.py`      `train.freeze`: parts of a fine-tuned model that get no updates
- `feed.py`          the updates in training order from a saved position, worker-fed
- `optim.py`         AdamW, and its settings again after a resume
- `lr_schedule.py`   `train.lr_schedule`: the rate of each update (inverse_sqrt, or a budgeted
                     shape that reaches its floor at a plan's last update)
- `lr_planning.py`   that plan: from the step limit, or revised from the clock for a time limit
- `step.py`          one update: forward, loss, backward, clip, step (skipped on the device
                     when the gradient is not finite)
- `figures.py`       the updates' loss and norm read from the device in groups; log lines
- `tensorboard.py`   the metrics (and `train.examples`) in TensorBoard, when asked
- `validate.py`      validation loss (no gradients) and greedy BLEU
- `checkpointing.py` the run's position and history; saving and resuming them with RNG
- `extension.py`     the rule that a resumed or extended run equals the uninterrupted one,
                     stated once, with the checks and notices of a resume
- `stops.py`         why a run stops (`StopReason`), signals turned into a stop between
                     updates, and the training clock
- `schedule.py`      what is due after an update (log, validate, save) and what a stop adds
- `averaging.py`     at the end, the mean of the last saves, kept if it validates better
- `trainer.py`       the loop: update, log, validate, save, stop
"""
